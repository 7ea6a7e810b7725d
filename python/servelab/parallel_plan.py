"""Choosing a parallel plan for decode on ``n`` cards (§8.1, milestone 1), on the paper GPU.

``n`` cards can serve as ``n / tp`` replicas (data parallelism) of a model split across ``tp``
cards each (tensor parallelism). Wider ``tp`` frees memory per card for KV cache (bigger
batches) and cuts each step's time, but pays all-reduces and leaves fewer replicas. For a
decode-heavy service with a TPOT objective, each replica runs the largest batch whose step
stays within the objective (a step emits one token per sequence, so the step time is the
TPOT), and the plan with the most tokens per second over all cards wins.

>>> from servelab.hw_model import H100, LLAMA3_70B, LLAMA3_8B
>>> p = best_decode_plan(LLAMA3_70B, H100, n_cards=8, context_len=1024, tpot_slo_s=0.05)
>>> (p.tp, p.dp, p.batch), round(p.throughput_tok_s)     # two replicas of TP = 4
((4, 2, 437), 26565)
>>> p = best_decode_plan(LLAMA3_8B, H100, n_cards=8, context_len=1024, tpot_slo_s=0.05)
>>> (p.tp, p.dp, p.batch), round(p.throughput_tok_s)     # TP = 2 doubles the KV room
((2, 4, 953), 133489)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab import _checks
from servelab import hw_model as hw

__all__ = ["Plan", "decode_plans", "best_decode_plan"]


@dataclass(frozen=True)
class Plan:
    """``dp`` replicas of ``tp`` cards each, each replica decoding ``batch`` sequences per
    step of ``step_s`` seconds; ``throughput_tok_s`` over all of them."""

    tp: int
    dp: int
    batch: int
    step_s: float
    throughput_tok_s: float


def _step_s(model: hw.ModelSpec, gpu: hw.GpuSpec, tp: int, batch: int, context_len: int) -> float:
    # ``batch`` decoding sequences as an (n, 2) array: a list of that many pairs costs numpy a
    # Python object each (batches here reach the hundreds of thousands)
    pairs = np.empty((batch, 2), dtype=np.int64)
    pairs[:, 0], pairs[:, 1] = 1, context_len
    return hw.step_cost(model, gpu, pairs, tp=tp).time_s


def decode_plans(model: hw.ModelSpec, gpu: hw.GpuSpec, n_cards: int, context_len: int,
                 tpot_slo_s: float, mem_util: float = 0.9) -> list[Plan]:
    """One plan per valid ``tp`` dividing ``n_cards`` whose replica holds the model and meets
    the objective with at least one sequence: the largest batch that fits in the KV cache and
    keeps the step within ``tpot_slo_s`` (step time grows with the batch: a bisection)."""
    n_cards = _checks.positive_int("n_cards", n_cards)
    tpot_slo_s = _checks.positive("tpot_slo_s", tpot_slo_s)  # seconds
    plans = []
    for tp in range(1, n_cards + 1):
        if n_cards % tp:
            continue
        try:
            hw.check_tp(model, gpu, tp)
        except ValueError:
            continue
        most = hw.max_batch(model, gpu, context_len, mem_util, tp=tp)
        if most < 1 or _step_s(model, gpu, tp, 1, context_len) > tpot_slo_s:
            continue
        lo, hi = 1, most  # lo meets the objective; find the largest batch that does
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _step_s(model, gpu, tp, mid, context_len) <= tpot_slo_s:
                lo = mid
            else:
                hi = mid - 1
        step = _step_s(model, gpu, tp, lo, context_len)
        dp = n_cards // tp
        plans.append(Plan(tp, dp, lo, step, dp * lo / step))
    return plans


def best_decode_plan(model: hw.ModelSpec, gpu: hw.GpuSpec, n_cards: int, context_len: int,
                     tpot_slo_s: float, mem_util: float = 0.9) -> Plan | None:
    """The plan with the most tokens per second (the narrower ``tp`` on a tie), or ``None``
    when no split of ``n_cards`` meets the objective."""
    plans = decode_plans(model, gpu, n_cards, context_len, tpot_slo_s, mem_util)
    return max(plans, key=lambda p: (p.throughput_tok_s, -p.tp)) if plans else None
