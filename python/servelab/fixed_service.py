"""A CNN-era model server (lecture §5.1-§5.4, demo 04 part 2): every request is one forward
pass that takes exactly ``service_s`` (Clockwork's premise: a DNN inference of a fixed shape is
deterministic, §5.2), served one at a time, first come first served, in Rust
(``rust/src/sim/fixed_service.rs``).

With ``slo_s`` the server rejects early (§5.3): a request arriving at ``now`` would finish at
``max(free, now) + service_s``, known exactly, so it is admitted only if that meets the SLO on
completion latency. Every admitted request is then on time.

>>> r = run_fixed_service([0.0, 0.0, 0.0, 0.0], service_s=0.01, slo_s=0.025)
>>> r.rejected.tolist(), r.finish_s[:2].tolist()
([False, False, True, True], [0.01, 0.02])
>>> r.attainment()
0.5
>>> run_fixed_service([0.0], service_s=0.0)
Traceback (most recent call last):
...
ValueError: service_s must be a positive finite number, got 0.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from servelab import _checks, _core
from servelab.workload import MAX_REQUESTS, piecewise_poisson_arrivals

__all__ = ["FixedServiceResult", "run_fixed_service", "burst_arrivals"]


@dataclass(frozen=True, eq=False)
class FixedServiceResult:
    """Per request: ``start_s``, ``finish_s`` (NaN if rejected), ``rejected``; ``busy_s`` is the
    time the GPU computed. ``slo_s`` is the admission SLO (None: everything accepted)."""

    arrival_s: np.ndarray
    service_s: float
    slo_s: float | None
    start_s: np.ndarray
    finish_s: np.ndarray
    rejected: np.ndarray
    busy_s: float

    @property
    def latency_s(self) -> np.ndarray:
        """Completion latency, finish - arrival (NaN if rejected)."""
        return self.finish_s - self.arrival_s

    def on_time(self, slo_s: float | None = None) -> np.ndarray:
        """Per request: admitted and finished within ``slo_s`` (default: the admission SLO)."""
        slo = self.slo_s if slo_s is None else _checks.positive("slo_s", slo_s)
        if slo is None:
            raise ValueError("slo_s is needed: this run had no admission SLO")
        with np.errstate(invalid="ignore"):
            return ~self.rejected & (self.latency_s <= slo)

    def attainment(self, slo_s: float | None = None) -> float:
        """Share of all requests finished within the SLO (rejected ones missed it)."""
        ok = self.on_time(slo_s)
        return float(ok.mean()) if len(ok) else math.nan

    def wasted_busy_share(self, slo_s: float | None = None) -> float:
        """Share of the GPU's busy time spent on requests that finished late (§5.4: "GPU 三分之一
        的时间花在注定超时的请求上")."""
        late = ~self.rejected & ~self.on_time(slo_s)
        return float(late.sum()) * self.service_s / self.busy_s if self.busy_s > 0 else 0.0


def run_fixed_service(arrival_s: Sequence[float] | np.ndarray, service_s: float = 0.01,
                      slo_s: float | None = None) -> FixedServiceResult:
    """Serves requests arriving at ``arrival_s`` (sorted, finite, >= 0), ``service_s`` each,
    FCFS; with ``slo_s``, rejects at arrival every request that would finish late."""
    try:
        raw = np.asarray(arrival_s)
        a = np.array(raw, dtype=np.float64) if raw.dtype.kind in "iuf" or raw.size == 0 else None
    except (TypeError, ValueError, OverflowError):
        a = None
    if a is None:
        raise TypeError(f"arrival_s must be a 1-D array of times, got {arrival_s!r:.80}") from None
    if a.ndim != 1:
        raise ValueError(f"arrival_s must be one-dimensional, got shape {a.shape}")
    service = _checks.positive("service_s", service_s)
    slo = None if slo_s is None else _checks.positive("slo_s", slo_s)
    d: dict[str, Any] = _core.sim_fixed_service(a, service, slo)
    a.flags.writeable = False
    return FixedServiceResult(a, service, slo, d["start_s"], d["finish_s"], d["rejected"], float(d["busy_s"]))


def burst_arrivals(base_rate: float = 60.0, burst_rate: float = 200.0, burst_s: tuple[float, float] = (10.0, 12.0),
                   duration_s: float = 30.0, seed: int = 0) -> np.ndarray:
    """Demo 04 part 2's load: Poisson at ``base_rate`` req/s with ``burst_rate`` during
    ``burst_s``, for ``duration_s`` seconds.

    >>> t = burst_arrivals(seed=1)
    >>> 1900 < len(t) < 2250, bool(t[-1] < 30.0)
    (True, True)
    """
    try:
        lo, hi = (_checks.real("burst_s", t) for t in burst_s)
    except (TypeError, ValueError):
        raise ValueError(f"burst_s must be a pair (start, end) of seconds, got {burst_s!r:.80}") from None
    duration_s = _checks.positive("duration_s", duration_s)
    if not 0 < lo < hi < duration_s:
        raise ValueError(f"burst_s must lie inside (0, duration_s={duration_s!r}), got {burst_s!r}")
    base, burst = _checks.non_negative("base_rate", base_rate), _checks.non_negative("burst_rate", burst_rate)
    expected = base * (duration_s - (hi - lo)) + burst * (hi - lo)
    if not expected <= MAX_REQUESTS / 2:
        raise ValueError(f"base_rate={base_rate!r}, burst_rate={burst_rate!r}, burst_s={burst_s!r} and "
                         f"duration_s={duration_s!r} expect {expected:.4g} arrivals, more than "
                         f"{MAX_REQUESTS // 2}")
    return piecewise_poisson_arrivals([0.0, lo, hi, duration_s], [base_rate, burst_rate, base_rate], seed)
