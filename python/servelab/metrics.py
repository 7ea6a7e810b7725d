"""How to judge a serving system (lecture §4): latency, throughput, cost, SLOs and goodput.

Everything here reads a :class:`servelab.serving_core.SimResult`. Each definition (§4.1-§4.4)
is written once, beside the function that computes it: :func:`ttft`, :func:`tpot`, :func:`itl`,
:func:`e2e`, :func:`percentiles`, :func:`span_s` (which throughput, goodput and cost divide by),
:func:`utilisation`, :func:`meets_slo` and :func:`attainment`, :func:`goodput` (definition 1)
and :func:`max_rate_at_attainment` (definition 2), :func:`seat_waste`,
:func:`cost_per_million_tokens`, :func:`mfu`.

>>> from servelab.hw_model import LLAMA3_8B, H100
>>> from servelab.serving_core import run_batch1
>>> from servelab.workload import Requests
>>> r = run_batch1(Requests([0.0, 0.0], [512, 512], [101, 101]), LLAMA3_8B, H100)
>>> [round(x, 3) for x in ttft(r).tolist()]       # the second waits for the first
[0.011, 0.635]
>>> round(float(np.nanmean(tpot(r))) * 1e3, 2)     # ms per output token
6.13
>>> attainment(r, SLO(ttft_s=0.5, tpot_s=0.05))
0.5
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from servelab import _checks
from servelab.serving_core import SimResult

_F = TypeVar("_F", bound=Callable[..., Any])


def _reads_result(f: _F) -> _F:
    """Checks that a metric's first argument ``r`` is a SimResult (a TypeError naming ``r``,
    not an AttributeError from deep inside)."""
    @functools.wraps(f)
    def checked(r: object, *args: Any, **kwargs: Any) -> Any:
        _checks.instance("r", r, SimResult, "a servelab.serving_core.SimResult")
        return f(r, *args, **kwargs)
    return checked  # type: ignore[return-value]

__all__ = [
    "SLO",
    "Percentiles",
    "Summary",
    "GoodputSearch",
    "ttft",
    "tpot",
    "itl",
    "e2e",
    "percentiles",
    "span_s",
    "throughput_tok_s",
    "throughput_req_s",
    "utilisation",
    "meets_slo",
    "attainment",
    "goodput",
    "seat_waste",
    "cost_per_million_tokens",
    "mfu",
    "summarize",
    "max_rate_at_attainment",
]


@dataclass(frozen=True)
class SLO:
    """A per-request service-level objective (§4.3): TTFT <= ``ttft_s`` and TPOT <= ``tpot_s``.
    ``math.inf`` leaves one unconstrained; zero, negative or NaN raise ``ValueError``.

    >>> SLO(1.0, 0.05)
    SLO(ttft_s=1.0, tpot_s=0.05)
    >>> SLO(ttft_s=0.0, tpot_s=0.05)
    Traceback (most recent call last):
    ...
    ValueError: ttft_s must be a positive number (math.inf for none), got 0.0
    """

    ttft_s: float
    tpot_s: float = math.inf

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            v = getattr(self, name)
            if not _checks.is_real(v) or not float(v) > 0:
                raise ValueError(f"{name} must be a positive number (math.inf for none), got {v!r}")
            object.__setattr__(self, name, float(v))


@dataclass(frozen=True)
class Percentiles:
    """P50/P90/P99 and mean of a sample (NaN when the sample is empty)."""

    p50: float
    p90: float
    p99: float
    mean: float


def _served(r: SimResult) -> np.ndarray:
    return ~r.rejected


@_reads_result
def ttft(r: SimResult) -> np.ndarray:
    """Per request: first token - arrival (NaN if rejected)."""
    return r.first_token_s - r.requests.arrival_s


@_reads_result
def tpot(r: SimResult) -> np.ndarray:
    """Per request: (finish - first token) / (L_o - 1), the mean gap between output tokens; NaN
    if rejected or ``L_o = 1`` (no gap: left out of percentiles, meets any TPOT objective)."""
    lo = r.requests.output_len
    gaps = (lo - 1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(lo > 1, (r.finish_s - r.first_token_s) / gaps, np.nan)


@_reads_result
def e2e(r: SimResult) -> np.ndarray:
    """Per request: finish - arrival (NaN if rejected)."""
    return r.finish_s - r.requests.arrival_s


@_reads_result
def itl(r: SimResult) -> np.ndarray:
    """Every inter-token gap of every served request, from the step trace (``trace=True``): in
    batch 1 and static batching a decoding request gets a token in every step, so each decode
    step contributes its duration once per request that produced a real token in it."""
    if r.trace is None:
        raise ValueError("itl needs the step trace: run the simulation with trace=True")
    return np.repeat(r.trace.step_s, r.trace.n_decode)


def percentiles(x: np.ndarray) -> Percentiles:
    """P50/P90/P99/mean of the non-NaN values of ``x`` (numpy's linear interpolation; the
    per-request metrics are NaN for rejected requests, so those drop out).

    >>> percentiles(np.arange(101.0))
    Percentiles(p50=50.0, p90=90.0, p99=99.0, mean=50.0)
    """
    raw = x
    try:
        x = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"x must be an array of numbers, got {x!r:.80}") from None
    if x.ndim > 1:
        raise ValueError(f"x must be one-dimensional, got shape {x.shape}")
    if np.iscomplexobj(raw):
        raise TypeError(f"x must hold real numbers, got complex values {raw!r:.80}")
    x = x[~np.isnan(x)]
    if not len(x):
        return Percentiles(math.nan, math.nan, math.nan, math.nan)
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return Percentiles(float(p50), float(p90), float(p99), float(x.mean()))


@_reads_result
def span_s(r: SimResult) -> float:
    """First arrival to the last finish (or last arrival, if later); 0 for no requests."""
    a = r.requests.arrival_s
    if not len(a):
        return 0.0
    end = max(float(np.nanmax(r.finish_s, initial=0.0)), float(a[-1]))
    return end - float(a[0])


def _per_span(x: float, r: SimResult) -> float:
    s = span_s(r)
    return x / s if s > 0 else 0.0


@_reads_result
def throughput_tok_s(r: SimResult) -> float:
    """Output tokens of served requests per second of span."""
    return _per_span(float(r.requests.output_len[_served(r)].sum()), r)


@_reads_result
def throughput_req_s(r: SimResult) -> float:
    """Served requests per second of span."""
    return _per_span(float(_served(r).sum()), r)


@_reads_result
def utilisation(r: SimResult) -> float:
    """Share of the span the GPU spent computing steps."""
    return _per_span(r.busy_s, r)


@_reads_result
def meets_slo(r: SimResult, slo: SLO) -> np.ndarray:
    """Per request: served, TTFT <= slo.ttft_s, and TPOT <= slo.tpot_s (or ``L_o = 1``)."""
    if not isinstance(slo, SLO):
        raise TypeError(f"slo must be a servelab.metrics.SLO, got {slo!r}")
    t = tpot(r)
    with np.errstate(invalid="ignore"):
        ok_tpot = np.isnan(t) | (t <= slo.tpot_s)
        return _served(r) & (ttft(r) <= slo.ttft_s) & ok_tpot


@_reads_result
def attainment(r: SimResult, slo: SLO) -> float:
    """Share of all requests that meet the SLO (rejected ones do not); NaN with no requests."""
    good = meets_slo(r, slo)
    return float(good.mean()) if len(good) else math.nan


@_reads_result
def goodput(r: SimResult, slo: SLO) -> float:
    """Goodput, definition 1 (§4.4): requests meeting the SLO per second of span."""
    return _per_span(float(meets_slo(r, slo).sum()), r)


@_reads_result
def seat_waste(r: SimResult) -> float:
    """Static batching: of the decode seat-steps of every batch (members x (longest L_o - 1)),
    the share producing no real token (riders, or empty seats with ``ride_along=False``); 0 for
    batch 1.

    >>> from servelab.hw_model import LLAMA3_8B, H100
    >>> from servelab.serving_core import run_static_batching
    >>> from servelab.workload import Requests
    >>> s = run_static_batching(Requests([0.0] * 2, [8, 8], [2, 5]), LLAMA3_8B, H100, batch_size=2)
    >>> seat_waste(s)   # 2 seats x 4 decode steps, 1 + 4 useful
    0.375
    """
    served = _served(r)
    batch, lo = r.batch_id[served], r.requests.output_len[served]
    if not len(batch):
        return 0.0
    _, inverse, members = np.unique(batch, return_inverse=True, return_counts=True)
    longest = np.zeros(len(members), dtype=np.int64)
    np.maximum.at(longest, inverse, lo)
    seats = float((members * (longest - 1)).sum())
    return 1.0 - float((lo - 1).sum()) / seats if seats > 0 else 0.0


@_reads_result
def cost_per_million_tokens(r: SimResult, usd_per_gpu_hour: float = 3.0) -> float:
    """Dollars per million output tokens, the GPU billed for the whole span (§4.2):
    $/GPU-hour x span / output tokens (padding is not output)."""
    if not (math.isfinite(_checks.real("usd_per_gpu_hour", usd_per_gpu_hour, finite=False))
            and usd_per_gpu_hour >= 0):
        raise ValueError(f"usd_per_gpu_hour must be a finite number >= 0, got {usd_per_gpu_hour!r}")
    tok = throughput_tok_s(r)
    return usd_per_gpu_hour / 3600.0 / tok * 1e6 if tok > 0 else math.inf


@_reads_result
def mfu(r: SimResult) -> float:
    """Model FLOPs utilisation over the span: FLOPs / (span x peak FLOP/s)."""
    return _per_span(r.flops / r.gpu.peak_flops, r)


@dataclass(frozen=True)
class Summary:
    """Every metric of one run (what demo 03's tables print)."""

    label: str
    n: int
    n_rejected: int
    span_s: float
    ttft: Percentiles
    tpot: Percentiles
    e2e: Percentiles
    throughput_tok_s: float
    throughput_req_s: float
    utilisation: float
    attainment: float
    goodput_req_s: float
    seat_waste: float
    cost_per_million_tokens: float
    mfu: float


@_reads_result
def summarize(r: SimResult, slo: SLO, usd_per_gpu_hour: float = 3.0) -> Summary:
    return Summary(
        label=r.label, n=len(r.requests), n_rejected=int(r.rejected.sum()), span_s=span_s(r),
        ttft=percentiles(ttft(r)), tpot=percentiles(tpot(r)), e2e=percentiles(e2e(r)),
        throughput_tok_s=throughput_tok_s(r), throughput_req_s=throughput_req_s(r),
        utilisation=utilisation(r), attainment=attainment(r, slo), goodput_req_s=goodput(r, slo),
        seat_waste=seat_waste(r), cost_per_million_tokens=cost_per_million_tokens(r, usd_per_gpu_hour),
        mfu=mfu(r))


@dataclass(frozen=True)
class GoodputSearch:
    """Goodput definition 2: ``rate`` is the highest arrival rate found whose attainment is
    >= ``target``; ``evaluated`` lists every ``(rate, attainment)`` simulated, in order.
    ``bracketed`` is False when even the highest rate of the grid passed (then ``rate`` is only
    a lower bound) or the lowest failed (then ``rate`` is 0)."""

    rate: float
    target: float
    evaluated: list[tuple[float, float]]
    bracketed: bool


def max_rate_at_attainment(simulate: Callable[[float], SimResult], slo: SLO, target: float = 0.9,
                           rates: Sequence[float] = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0),
                           refine: int = 5) -> GoodputSearch:
    """Goodput definition 2 (§4.4): the highest arrival rate whose SLO attainment stays >=
    ``target``, by search. ``simulate(rate)`` runs one policy on the workload at that rate (use
    the same seed at every rate, as :func:`servelab.workload.chat_requests` does, so the rates
    differ only in load).

    The search scans ``rates`` upwards to the first rate that fails, then bisects ``refine``
    times between it and the last rate that passed. Attainment is not strictly monotone in the
    rate (one long request can land anywhere), so the answer is "sustained up to the first
    failure", not "any rate that happens to pass".

    >>> from servelab.hw_model import LLAMA3_8B, H100
    >>> from servelab.serving_core import run_batch1
    >>> from servelab.workload import chat_requests
    >>> g = max_rate_at_attainment(lambda rate: run_batch1(chat_requests(rate=rate), LLAMA3_8B, H100),
    ...                            SLO(1.0, 0.05))
    >>> round(g.rate, 3), g.bracketed
    (0.089, True)
    """
    if not callable(simulate):
        raise TypeError(f"simulate must be a function rate -> SimResult, got {simulate!r:.80}")
    _checks.instance("slo", slo, SLO, "a servelab.metrics.SLO")
    if not _checks.is_real(target) or not 0 < target <= 1:
        raise ValueError(f"target must be in (0, 1], got {target!r}")
    try:
        grid = [_checks.real("rates[i]", x) for x in rates]
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"rates must be positive, finite and increasing: {exc}") from None
    if not grid or any(not (math.isfinite(x) and x > 0) for x in grid) or sorted(grid) != grid:
        raise ValueError(f"rates must be positive, finite and increasing, got {list(rates)!r}")
    if not _checks.is_int(refine) or refine < 0:
        raise ValueError(f"refine must be a non-negative integer, got {refine!r}")
    evaluated: list[tuple[float, float]] = []

    def passes(rate: float) -> bool:
        result = simulate(rate)
        if not isinstance(result, SimResult):
            raise TypeError(f"simulate must return a SimResult, got {result!r:.80} for rate {rate!r}")
        a = attainment(result, slo)
        evaluated.append((rate, a))
        return a >= target

    lo = None
    for rate in grid:
        if passes(rate):
            lo = rate
            continue
        if lo is None:
            return GoodputSearch(0.0, float(target), evaluated, False)
        hi = rate
        for _ in range(int(refine)):
            mid = (lo + hi) / 2
            if passes(mid):
                lo = mid
            else:
                hi = mid
        return GoodputSearch(lo, float(target), evaluated, True)
    return GoodputSearch(grid[-1], float(target), evaluated, False)
