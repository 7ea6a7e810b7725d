"""Exercises 4, 5 and 9 of lecture 1 (§12), computed end to end on the simulator.

They rerun demo 03's and demo 04's settings (:mod:`servelab.lecture`) with one thing changed, as the lecture's reference
answers did ("the numbers are from running the code, modified as the exercise says"):

* :func:`exercise4` — the SLO's tightness changes the verdict: (a) the best goodput
  (definition 1) of batch 1 and static B = 32/128 under TTFT <= 1 s and <= 5 s; (b) goodput
  definition 2, the highest arrival rate on a 0.05-1.0 grid whose attainment stays >= 90%, for
  batch 1 and B = 32 under both SLOs;
* :func:`exercise5` — static batching where finished requests stop computing but their seats are
  not refilled (``ride_along=False``), at 16 req/s, B = 32 and 128: throughput, TTFT P50 and
  goodput, beside the ride-along baseline;
* :func:`exercise9` — the noisy length predictor in place of demo 04 part 3's mean estimate
  (:func:`admission_run` is that part's setting).

Every function returns plain dataclasses (the assignments and the golden answers read them) and
takes its settings as arguments with the lecture's values as defaults.

>>> e5 = exercise5(batch_sizes=(32,), n=120)
>>> r = e5[32]
>>> r.stop.throughput_tok_s > r.ride.throughput_tok_s   # stopping riders makes steps cheaper
True
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

from servelab import metrics as mx
from servelab import _checks, lecture
from servelab.admission import AdmissionReport, EarlyReject, Estimator, NoisyPredictor, admission_report
from servelab.metrics import SLO
from servelab.workload import Requests
from servelab.serving_core import SimResult, run_batch1, run_static_batching

__all__ = ["PolicyGoodput", "Exercise4", "RideVsStop", "exercise4", "exercise5", "exercise9",
           "admission_run", "EX4_SLOS", "EX4_DEF2_RATES"]

EX4_SLOS = (1.0, 5.0)  # TTFT objectives, seconds; TPOT <= 50 ms as in demo 03
EX4_DEF2_RATES = tuple(round(0.05 * k, 2) for k in range(1, 21))  # 0.05, 0.10, ..., 1.00


def _policy_label(policy: str | int) -> str:
    return "batch 1" if policy == "batch1" else f"static B={policy}"


def _simulate(policy: str | int, rate: float, n: int, seed: int, ride_along: bool = True) -> SimResult:
    reqs = lecture.chat_workload(rate, n, seed)
    if policy == "batch1":
        return run_batch1(reqs, lecture.MODEL, lecture.GPU)
    return run_static_batching(reqs, lecture.MODEL, lecture.GPU, int(policy), lecture.MAX_WAIT_S, ride_along)


def _simulate_at(policy: str | int, n: int, seed: int, rate: float) -> SimResult:
    return _simulate(policy, rate, n, seed)


def _check_policies(policies: Sequence[str | int]) -> list[str | int]:
    out: list[str | int] = []
    for p in policies:
        if isinstance(p, str) and p == "batch1":
            out.append(p)
        elif _checks.is_int(p) and p >= 1:
            out.append(int(p))
        else:
            raise ValueError(f"policies must hold 'batch1' or positive batch sizes, got {p!r}")
    return out


@dataclass(frozen=True)
class PolicyGoodput:
    """One policy under one SLO: goodput (definition 1) at each swept rate, its best, and
    definition 2 (the highest grid rate up to which attainment stays >= the target)."""

    policy: str
    ttft_s: float
    rates: tuple[float, ...]
    goodput: tuple[float, ...]
    best_goodput: float
    best_rate: float
    def2_rate: float  # 0.0 if even the lowest rate fails
    def2_attainment: float  # attainment at def2_rate (NaN if 0)
    def2_curve: tuple[tuple[float, float], ...]  # (rate, attainment) evaluated for definition 2


@dataclass(frozen=True)
class Exercise4:
    by_slo: dict[float, dict[str, PolicyGoodput]]  # ttft_s -> label -> result

    def ratio(self, ttft_s: float, policy: str) -> float:
        """Best goodput of ``policy`` over batch 1's, under TTFT <= ``ttft_s``."""
        rows = self.by_slo[ttft_s]
        return rows[policy].best_goodput / rows["batch 1"].best_goodput


def exercise4(slos: Sequence[float] = EX4_SLOS, policies: Sequence[str | int] = ("batch1", 32, 128),
              def2_policies: Sequence[str | int] = ("batch1", 32), rates: Sequence[float] = lecture.RATES,
              def2_rates: Sequence[float] = EX4_DEF2_RATES, target: float = 0.9,
              n: int = lecture.N_REQUESTS, seed: int = lecture.SEED) -> Exercise4:
    """Exercise 4 (see the module docs). ``rates`` is demo 03's sweep (definition 1);
    ``def2_rates`` the 0.05-1.0 grid of the reference answer (definition 2, no bisection: the
    answer is a grid rate, as the lecture's was)."""
    pols = _check_policies(policies)
    d2 = _check_policies(def2_policies)
    by_slo: dict[float, dict[str, PolicyGoodput]] = {}
    for ttft_s in slos:
        slo = SLO(ttft_s, lecture.LECTURE_SLO.tpot_s)
        rows = {}
        for p in dict.fromkeys([*pols, *d2]):  # each policy once, in order
            g = tuple(mx.goodput(_simulate(p, r, n, seed), slo) for r in rates) if p in pols else ()
            best = int(max(range(len(g)), key=g.__getitem__)) if g else -1
            if p in d2:
                s = mx.max_rate_at_attainment(functools.partial(_simulate_at, p, n, seed), slo, target,
                                              rates=def2_rates, refine=0)
                att = dict(s.evaluated).get(s.rate, math.nan)
                d2_rate, d2_att, curve = s.rate, att, tuple(s.evaluated)
            else:
                d2_rate, d2_att, curve = math.nan, math.nan, ()
            rows[_policy_label(p)] = PolicyGoodput(
                _policy_label(p), float(ttft_s), tuple(rates) if g else (), g,
                g[best] if g else math.nan, float(rates[best]) if g else math.nan, d2_rate, d2_att, curve)
        by_slo[float(ttft_s)] = rows
    return Exercise4(by_slo)


@dataclass(frozen=True)
class RideVsStop:
    batch_size: int
    ride: mx.Summary  # ride_along=True (demo 03)
    stop: mx.Summary  # ride_along=False (exercise 5)


def exercise5(rate: float = lecture.OVERLOAD_RATE, batch_sizes: Sequence[int] = (32, 128),
              n: int = lecture.N_REQUESTS, seed: int = lecture.SEED,
              slo: SLO = lecture.LECTURE_SLO) -> dict[int, RideVsStop]:
    """Exercise 5: static batching at ``rate`` with and without riders, per batch size."""
    out = {}
    for b in _check_policies(batch_sizes):
        if b == "batch1":
            raise ValueError(f"batch_sizes must hold positive integers, got {b!r}")
        ride, stop = (mx.summarize(_simulate(b, rate, n, seed, ride_along=flag), slo) for flag in (True, False))
        out[int(b)] = RideVsStop(int(b), ride, stop)
    return out


def admission_run(estimator: Estimator | str | None, requests: Requests | None = None,
                  slo_ttft_s: float = lecture.LLM_SLO_TTFT_S) -> AdmissionReport:
    """Demo 04 part 3 (§5.5): batch 1 on the lecture's model and GPU, early rejection with
    ``estimator`` (``None`` accepts everything), on ``requests`` (default
    :func:`servelab.lecture.admission_workload`)."""
    reqs = lecture.admission_workload() if requests is None else requests
    adm = None if estimator is None else EarlyReject(slo_ttft_s, estimator)
    return admission_report(run_batch1(reqs, lecture.MODEL, lecture.GPU, admission=adm), slo_ttft_s)


def exercise9(sigmas: Sequence[float] = lecture.SIGMAS, seed: int = lecture.NOISE_SEED) -> dict[float, AdmissionReport]:
    """Exercise 9: demo 04 part 3 with the predictor ``true * exp(eps)`` (sigma 0 is the
    oracle), one row per sigma."""
    return {float(s): admission_run(NoisyPredictor(s, seed)) for s in sigmas}
