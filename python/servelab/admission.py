"""Admission control by early rejection (lecture §5.3-§5.5), and how to judge it.

Clockwork rejects a request at its arrival when it predicts the request will miss its SLO,
instead of queueing it, computing it and missing anyway. For an LLM served at batch 1 the
controller knows each prompt (so each prefill time) but not the output length, so it needs an
**estimator** of output lengths:

* :class:`MeanLength` — everyone gets the same guess, the mean (§5.5's "按平均长度估计");
* :class:`Oracle` — the true length (what Clockwork has for a CNN: §5.5's "神谕");
* :class:`NoisyPredictor` — ``true * exp(eps)``, ``eps ~ N(0, sigma^2)``, seeded (exercise 9);
* :class:`PredictedLengths` — any lengths you computed yourself.

Each turns a workload into one predicted length per request (rounded to a whole token, at
least 1), drawn here in Python with numpy and handed to the Rust simulator and to the
pure-Python reference alike, so both see identical numbers. The rule itself (lay out the
predicted future step by step, admit when the predicted TTFT meets the SLO) is documented in
``rust/src/sim/admission.rs``; with the oracle it is exact: every admitted request is on time.

:func:`admission_report` counts what happened (§5.5's table): attainment over all requests,
**accepted but late** (share of admitted requests whose TTFT missed the SLO) and **false
rejections** (share of rejected requests that would have met it; §5.5: "被拒绝的请求里，其实
它自己能按时完成的比例"). "Would have met" is decided exactly: the first-token time the request
would have had if admitted at its arrival, given the requests actually admitted before it. At
batch 1 FCFS admitting it changes nothing ahead of it, so this is what re-simulating the run
with that request admitted gives for it.

>>> from servelab.hw_model import LLAMA3_8B, H100
>>> from servelab.serving_core import run_batch1
>>> from servelab.workload import Requests
>>> reqs = Requests([0.0, 0.0, 0.0], [10, 10, 10], [100, 100, 100])
>>> r = run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(1.0, "oracle"))
>>> r.rejected.tolist()                  # the third would start after 1.2 s
[False, False, True]
>>> admission_report(r, 1.0)
AdmissionReport(n=3, accepted=2, on_time=2, accepted_late=0, rejected=1, false_rejections=0)
>>> EarlyReject(0.0, "mean")
Traceback (most recent call last):
...
ValueError: slo_ttft_s must be a positive finite number, got 0.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from servelab import _checks
from servelab.workload import MAX_REQUEST_TOKENS, Requests

__all__ = [
    "Estimator",
    "MeanLength",
    "Oracle",
    "NoisyPredictor",
    "PredictedLengths",
    "EarlyReject",
    "AdmissionReport",
    "admission_report",
    "ESTIMATORS",
]


def _round_lengths(name: str, x: np.ndarray) -> np.ndarray:
    """Predicted lengths as whole tokens in ``[1, MAX_REQUEST_TOKENS]`` (numpy's rint: halves to
    even). NaN or infinite predictions are errors."""
    x = np.asarray(x, dtype=np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] must be a finite number, got {float(x[i])!r}")
    return np.clip(np.rint(x), 1, MAX_REQUEST_TOKENS).astype(np.int64)


def _requests(requests: object) -> Requests:
    return _checks.instance("requests", requests, Requests, "a servelab.workload.Requests")


@runtime_checkable
class Estimator(Protocol):
    """Anything with ``predict(requests) -> one predicted output length per request``."""

    def predict(self, requests: Requests) -> np.ndarray: ...


@dataclass(frozen=True)
class MeanLength:
    """Every request is predicted to produce ``mean`` tokens; ``mean=None`` takes the
    workload's mean output length (the controller knows the distribution, not the request).

    >>> MeanLength().predict(Requests([0.0, 1.0], [5, 5], [100, 301])).tolist()
    [200, 200]
    """

    mean: float | None = None

    def __post_init__(self) -> None:
        if self.mean is not None and (not _checks.is_real(self.mean)
                                      or not (math.isfinite(self.mean) and self.mean > 0)):
            raise ValueError(f"mean must be a positive finite number or None, got {self.mean!r}")

    def predict(self, requests: Requests) -> np.ndarray:
        n = len(_requests(requests))
        mean = float(requests.output_len.mean()) if self.mean is None and n else (self.mean or 1.0)
        return _round_lengths("predicted_len", np.full(n, mean))


@dataclass(frozen=True)
class Oracle:
    """The true output length (a perfect predictor)."""

    def predict(self, requests: Requests) -> np.ndarray:
        return _requests(requests).output_len.copy()


@dataclass(frozen=True)
class NoisyPredictor:
    """Exercise 9: ``true * exp(eps)``, ``eps ~ N(0, sigma^2)`` drawn from
    ``numpy.random.default_rng(seed)`` (one draw per request, in order), then rounded.
    ``sigma = 0`` is the oracle; ``sigma = 1`` is often off by a factor of 2-3.

    >>> NoisyPredictor(0.0).predict(Requests([0.0], [5], [77])).tolist()
    [77]
    >>> NoisyPredictor(-0.1)
    Traceback (most recent call last):
    ...
    ValueError: sigma must be a finite number >= 0, got -0.1
    """

    sigma: float
    seed: int = 42

    def __post_init__(self) -> None:
        _checks.non_negative("sigma", self.sigma)
        _checks.count("seed", self.seed)

    def predict(self, requests: Requests) -> np.ndarray:
        eps = np.random.default_rng(int(self.seed)).normal(0.0, float(self.sigma), len(_requests(requests)))
        return _round_lengths("predicted_len", requests.output_len * np.exp(eps))


@dataclass(frozen=True, eq=False)
class PredictedLengths:
    """Lengths you predicted yourself, one per request (rounded to whole tokens, at least 1)."""

    values: Sequence[float] | np.ndarray

    def predict(self, requests: Requests) -> np.ndarray:
        n = len(_requests(requests))
        try:
            x = np.asarray(self.values, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            raise TypeError(f"values must be one predicted length per request, got {self.values!r:.80}") from None
        if x.shape != (n,):
            raise ValueError(f"values must hold one length per request ({n}), got shape {x.shape}")
        return _round_lengths("values", x)


ESTIMATORS = {"mean": MeanLength, "oracle": Oracle}


@dataclass(frozen=True)
class EarlyReject:
    """Early rejection on predicted TTFT (§5.3): ``run_batch1(..., admission=EarlyReject(2.0,
    "mean"))``. ``estimator`` is ``"mean"``, ``"oracle"`` or an :class:`Estimator`.

    >>> EarlyReject(2.0, "median")
    Traceback (most recent call last):
    ...
    ValueError: estimator must be 'mean', 'oracle' or an Estimator (with predict(requests)), got 'median'
    """

    slo_ttft_s: float
    estimator: Estimator | str = "mean"
    _estimator: Estimator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "slo_ttft_s", _checks.positive("slo_ttft_s", self.slo_ttft_s))
        e = self.estimator
        if isinstance(e, str) and e in ESTIMATORS:
            e = ESTIMATORS[e]()
        if isinstance(e, str) or not isinstance(e, Estimator):
            raise ValueError("estimator must be 'mean', 'oracle' or an Estimator (with predict(requests)), "
                             f"got {self.estimator!r}")
        object.__setattr__(self, "_estimator", e)

    def predicted_len(self, requests: Requests) -> np.ndarray:
        """One predicted output length per request (int64, each in ``[1, MAX_REQUEST_TOKENS]``)."""
        pred = np.ascontiguousarray(self._estimator.predict(_requests(requests)))
        if pred.shape != (len(requests),):
            raise ValueError(f"the estimator must predict one length per request ({len(requests)}), "
                             f"got shape {pred.shape}")
        return _round_lengths("predicted_len", pred)

    @property
    def label(self) -> str:
        e = self.estimator if isinstance(self.estimator, str) else type(self.estimator).__name__
        return f"early reject ({e})"


@dataclass(frozen=True)
class AdmissionReport:
    """What admission control did to a run, under an SLO on TTFT (§5.5's table)."""

    n: int
    accepted: int
    on_time: int  # accepted and TTFT <= SLO
    accepted_late: int  # accepted and TTFT > SLO
    rejected: int
    false_rejections: int  # rejected, but would have met the SLO

    @property
    def attainment(self) -> float:
        """On-time requests / all requests (rejected ones missed)."""
        return self.on_time / self.n if self.n else math.nan

    @property
    def rejected_share(self) -> float:
        return self.rejected / self.n if self.n else math.nan

    @property
    def late_share_of_accepted(self) -> float:
        return self.accepted_late / self.accepted if self.accepted else 0.0

    @property
    def false_rejection_share(self) -> float:
        """False rejections / rejected requests (0 when nothing was rejected)."""
        return self.false_rejections / self.rejected if self.rejected else 0.0


@runtime_checkable
class RunColumns(Protocol):
    """What :func:`admission_report` reads of a run: a :class:`servelab.serving_core.SimResult`
    has it all. (A protocol, not that class: the simulator imports this module for
    :class:`EarlyReject`, and the arrow runs one way.)"""

    # read-only members: a frozen SimResult's fields satisfy them
    @property
    def requests(self) -> Requests: ...
    @property
    def rejected(self) -> np.ndarray: ...
    @property
    def first_token_s(self) -> np.ndarray: ...
    @property
    def would_first_token_s(self) -> np.ndarray | None: ...


def admission_report(result: RunColumns, slo_ttft_s: float) -> AdmissionReport:
    """Counts on-time, accepted-but-late and falsely rejected requests of a batch-1 run (with or
    without admission control), judging TTFT only against ``slo_ttft_s``."""
    _checks.instance("result", result, RunColumns, "a servelab.serving_core.SimResult")
    if not _checks.real("slo_ttft_s", slo_ttft_s, finite=False) > 0:
        raise ValueError(f"slo_ttft_s must be a positive number, got {slo_ttft_s!r}")
    a = result.requests.arrival_s
    rejected = result.rejected
    with np.errstate(invalid="ignore"):
        on_time = ~rejected & (result.first_token_s - a <= slo_ttft_s)
        would = result.would_first_token_s
        if would is None:
            if rejected.any():
                raise ValueError("the result has rejected requests but no would_first_token_s")
            false_rej = np.zeros(len(a), dtype=bool)
        else:
            false_rej = rejected & (would - a <= slo_ttft_s)
    n_acc = int((~rejected).sum())
    return AdmissionReport(n=len(a), accepted=n_acc, on_time=int(on_time.sum()),
                           accepted_late=n_acc - int(on_time.sum()), rejected=int(rejected.sum()),
                           false_rejections=int(false_rej.sum()))
