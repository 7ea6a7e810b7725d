"""The lecture's reference answers to its ten exercises (§12), each beside servelab's figure.

One :class:`KeyRow` per number the reference answers print: the lecture's figure as printed,
servelab's, the tolerance within which they count as the same, and, where they differ, why.
Exercise 8 (reading the Orca paper) is written work: its row holds no number. The README's
table of differences comes from :func:`rows`, and so does the instructors' key.

>>> key = rows()
>>> sorted({r.exercise for r in key}) == list(range(1, 11))
True
>>> r = next(r for r in key if r.quantity == "P(at least one call above P99), n = 20")
>>> r.lecture, round(r.ours, 4), r.matches
(0.182, 0.1821, True)
>>> all(r.reason for r in key if r.matches is False)   # every miss says why
True
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from servelab import exercises as ex
from servelab import hw_model as hw
from servelab import lecture
from servelab.hw_model import A100_80GB, H100, LLAMA3_8B, LLAMA3_70B

__all__ = ["KeyRow", "rows", "UNPUBLISHED_LENGTHS"]

# Why demo 03's figures (exercises 4, 5) do not all match: the lecture's length spreads are
# not published; servelab's lognormal sigma = 0.8 was fitted to demo 03's own figures.
UNPUBLISHED_LENGTHS = ("the lecture's prompt/output length spreads are unpublished (servelab "
                       "fits lognormal sigma = 0.8 to demo 03's figures), so queueing figures "
                       "keep the lecture's direction, not its digits")


@dataclass(frozen=True)
class KeyRow:
    """One figure: ``lecture`` as the reference answer prints it (``None`` for written
    answers), ``ours`` from servelab, ``tolerance`` (absolute) within which they match."""

    exercise: int
    quantity: str
    lecture: float | None
    ours: float | int | bool | str
    tolerance: float | None = None
    reason: str = ""

    @property
    def matches(self) -> bool | None:
        """Whether ours is within ``tolerance`` of the lecture's (``None``: nothing to compare)."""
        if self.lecture is None or isinstance(self.ours, str):
            return None
        if isinstance(self.ours, bool):
            return bool(self.ours) == bool(self.lecture)
        return abs(float(self.ours) - self.lecture) <= (self.tolerance or 0.0)


def _first_compute_bound_prefill(gpu: hw.GpuSpec) -> int:
    n = 1
    while hw.step_cost(LLAMA3_8B, gpu, [(n, 0)]).bound != "compute":
        n += 1
    return n


def _ex1() -> list[KeyRow]:
    m = LLAMA3_70B
    return [
        KeyRow(1, "(a) Llama-3-70B parameters (billions)", 70.55, m.param_count / 1e9, 0.005),
        KeyRow(1, "(b) weight bytes, BF16 (GB)", 141.0, m.weight_bytes / 1e9, 0.5),
        KeyRow(1, "(c) KV bytes per token", 327680, m.kv_bytes_per_token, 0),
        KeyRow(1, "(d) fits on one 80 GB H100", False, hw.kv_capacity_tokens(m, H100) > 0),
        KeyRow(1, "(d) fewest H100s with tensor parallelism", 2, hw.fewest_cards(m, H100), 0),
        KeyRow(1, "(d) KV tokens left on 2 H100s (TP = 2)", None,
               hw.kv_capacity_tokens(m, H100, tp=2),
               reason="the lecture says only that two cards are needed"),
    ]


def _ex2() -> list[KeyRow]:
    a100 = hw.decode_step_cost(LLAMA3_8B, A100_80GB, 1, 512).time_s
    h100 = hw.decode_step_cost(LLAMA3_8B, H100, 1, 512).time_s
    return [
        KeyRow(2, "(a) A100 ridge point (FLOP/byte)", 153, A100_80GB.ridge_point, 0.5),
        KeyRow(2, "(b) first compute-bound prefill on A100 (tokens)", 145,
               _first_compute_bound_prefill(A100_80GB), 2,
               reason="the lecture ran 142 (memory-bound) and 145 (compute-bound) only"),
        KeyRow(2, "(c) A100 decode step, batch 1, context 512 (ms)", 9.74, a100 * 1e3, 0.005),
        KeyRow(2, "(c) A100 weight-read lower bound (ms)", 7.88,
               hw.weight_read_lower_bound_s(LLAMA3_8B, A100_80GB) * 1e3, 0.005),
        KeyRow(2, "(d) A100 / H100 decode time", 1.6, a100 / h100, 0.05),
    ]


def _ex3() -> list[KeyRow]:
    m = dataclasses.replace(LLAMA3_8B, n_kv_heads=32)
    return [
        KeyRow(3, "no GQA: KV per token (KiB)", 512, m.kv_bytes_per_token / 1024, 0),
        KeyRow(3, "no GQA: parameters (billions)", 8.84, m.param_count / 1e9, 0.005),
        KeyRow(3, "no GQA: KV capacity on H100 (tokens)", 103624, hw.kv_capacity_tokens(m, H100), 0),
        KeyRow(3, "no GQA: max batch at context 1024", 101, hw.max_batch(m, H100, 1024), 0),
        KeyRow(3, "no GQA: decode step, batch 32, context 1024 (ms)", 13.12,
               hw.decode_step_cost(m, H100, 32, 1024).time_s * 1e3, 0.005),
        KeyRow(3, "GQA: decode step, batch 32, context 1024 (ms)", 7.70,
               hw.decode_step_cost(LLAMA3_8B, H100, 32, 1024).time_s * 1e3, 0.005),
    ]


def _ex4() -> list[KeyRow]:
    e4 = ex.exercise4()
    one, five = e4.by_slo[1.0], e4.by_slo[5.0]
    return [
        KeyRow(4, "(a) TTFT <= 5 s: batch 1 best goodput (req/s)", 0.29,
               five["batch 1"].best_goodput, 0.03, UNPUBLISHED_LENGTHS),
        KeyRow(4, "(a) TTFT <= 5 s: static B = 32 best goodput (req/s)", 1.8,
               five["static B=32"].best_goodput, 0.2, UNPUBLISHED_LENGTHS),
        KeyRow(4, "(a) TTFT <= 5 s: static B = 128 best goodput (req/s)", 1.8,
               five["static B=128"].best_goodput, 0.2, UNPUBLISHED_LENGTHS),
        KeyRow(4, "(a) TTFT <= 5 s: B = 32 over batch 1", 6.0, e4.ratio(5.0, "static B=32"), 0.5,
               UNPUBLISHED_LENGTHS),
        KeyRow(4, "(a) TTFT <= 1 s: B = 32 over batch 1", 2.0, e4.ratio(1.0, "static B=32"), 0.5,
               UNPUBLISHED_LENGTHS),
        KeyRow(4, "(b) TTFT <= 1 s: batch 1 attainment at 0.05 req/s", 0.94,
               dict(one["batch 1"].def2_curve)[0.05], 0.01),
        KeyRow(4, "(b) TTFT <= 1 s: batch 1 attainment at 0.1 req/s", 0.89,
               dict(one["batch 1"].def2_curve)[0.1], 0.01),
        KeyRow(4, "(b) TTFT <= 5 s: batch 1 highest rate at >= 90% (req/s)", 0.25,
               five["batch 1"].def2_rate, 0.025, UNPUBLISHED_LENGTHS),
        KeyRow(4, "(b) TTFT <= 5 s: B = 32 highest rate at >= 90% (req/s)", 0.8,
               five["static B=32"].def2_rate, 0.05,
               "ours still attains 92% at 1.0 req/s, the top of the grid; " + UNPUBLISHED_LENGTHS),
    ]


def _ex5() -> list[KeyRow]:
    e5 = ex.exercise5()
    out = []
    for b, ride_tok, stop_tok, ride_p50, stop_p50, ride_gp, stop_gp in (
            (32, 956, 1160, 67.8, 53.2, 0.022, 0.027), (128, 1475, 2468, 26.8, 11.9, 0.068, 0.129)):
        r = e5[b]
        out += [
            KeyRow(5, f"B = {b}: throughput gain from stopping riders", stop_tok / ride_tok,
                   r.stop.throughput_tok_s / r.ride.throughput_tok_s, 0.05),
            KeyRow(5, f"B = {b}: TTFT P50 riding (s)", ride_p50, r.ride.ttft.p50, 0.1 * ride_p50,
                   UNPUBLISHED_LENGTHS),
            KeyRow(5, f"B = {b}: TTFT P50 stopping (s)", stop_p50, r.stop.ttft.p50, 0.1 * stop_p50,
                   UNPUBLISHED_LENGTHS),
            KeyRow(5, f"B = {b}: goodput stopping (req/s, TTFT <= 1 s)", stop_gp,
                   r.stop.goodput_req_s, 0.1 * stop_gp, UNPUBLISHED_LENGTHS),
        ]
    return out


def _ex6() -> list[KeyRow]:
    per_call = 1.0 - 0.9 ** (1 / 20)
    return [
        KeyRow(6, "P(at least one call above P99), n = 20", 0.182, 1.0 - 0.99 ** 20, 0.0005),
        KeyRow(6, "per-call tail probability for <= 10% (%)", 0.525, per_call * 100, 0.0005),
        KeyRow(6, "per-call design percentile", 99.5, 100 * (1.0 - per_call), 0.03),
    ]


def _ex7() -> list[KeyRow]:
    prefill = hw.prefill_cost(LLAMA3_8B, H100, 2048).time_s / 2048
    out = [KeyRow(7, "prefill of 2048 tokens, per token (us)", 21.2, prefill * 1e6, 0.05)]
    for b, lecture, tol in ((1, 6150.0, 5.0), (64, 145.0, 1.0), (256, 74.0, 1.0)):
        per_token = hw.decode_step_cost(LLAMA3_8B, H100, b, 1024).time_s / b
        out.append(KeyRow(7, f"decode per token, batch {b}, context 1024 (us)", lecture,
                          per_token * 1e6, tol))
    return out


def _ex8() -> list[KeyRow]:
    return [KeyRow(8, "Orca paper card (the five Cs, problem, gap, insight)", None,
                   "written: notebook nb08_orca_card, graded by hand against its rubric")]


def _ex9() -> list[KeyRow]:
    e9 = ex.exercise9()
    return [KeyRow(9, f"oracle (sigma = 0): requests on time of {lecture.LLM_N}", 489, e9[0.0].on_time, 1,
                   "one request lands on the other side of the 2 s SLO in our workload"),
            KeyRow(9, "sigma = 1.0: attainment close to the mean estimate's (~70%)", 0.70,
                   e9[1.0].on_time / e9[1.0].n, 0.05, UNPUBLISHED_LENGTHS),
            KeyRow(9, "attainment falls as sigma grows", True,
                   all(e9[a].on_time >= e9[b].on_time
                       for a, b in zip(sorted(e9), sorted(e9)[1:])))]


def _ex10() -> list[KeyRow]:
    from servelab.tiny_llm import TINY, model_for
    model = model_for(TINY)
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(0, 256, 12)) for _ in range(16)]
    alone = model.forward(prompts[0])
    batched = model.forward_batch(prompts)[0]
    # how many bits change depends on the BLAS build, so the key records only what must hold
    return [KeyRow(10, "tiny_llm logits alone vs in a batch of 16 agree within 1e-5", True,
                   bool(np.allclose(alone, batched, rtol=0, atol=1e-5)),
                   reason="the lecture explains why the last bits differ (split-K, float "
                          "non-associativity) and prints no figure"),
            KeyRow(10, "greedy token unchanged by batching", True,
                   int(alone.argmax()) == int(batched.argmax()))]


@lru_cache(maxsize=1)
def _all_rows() -> tuple[KeyRow, ...]:
    out: list[KeyRow] = []
    for part in (_ex1, _ex2, _ex3, _ex4, _ex5, _ex6, _ex7, _ex8, _ex9, _ex10):
        out += part()
    for r in out:
        if r.matches is False and not r.reason:
            raise AssertionError(f"exercise {r.exercise}, {r.quantity}: ours {r.ours} misses "
                                 f"the lecture's {r.lecture} with no reason given")
        if isinstance(r.ours, float) and not math.isfinite(r.ours):
            raise AssertionError(f"exercise {r.exercise}, {r.quantity}: not finite ({r.ours})")
    return tuple(out)


def rows() -> list[KeyRow]:
    """Every row, exercises 1 to 10 in order (computed once per process: a few seconds)."""
    return list(_all_rows())
