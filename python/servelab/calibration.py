"""Fitting the paper GPU's discounts to measured step times (lecture §0.6, §3.2, §8.3).

The roofline prices a step as ``max(C / compute, M / bandwidth) + K + overhead_s`` where ``C``
and ``M`` are the step's compute and memory seconds at full peak, ``K`` its all-reduce seconds
(tensor parallelism) and ``compute``, ``bandwidth``, ``overhead_s`` the three fields of
:class:`servelab.hw_model.Efficiency`. This module holds only the arithmetic of fitting those
three numbers to measurements, and the result types; :func:`servelab.hw_model.calibrate` prices
each measurement's step and calls :func:`fit`. It imports nothing of servelab but the argument
checks, so ``hw_model`` can use it without an import cycle.

The fit minimises the sum of squared *relative* errors, ``sum(((pred - measured) / measured)**2)``,
so a 5 ms decode step and a 400 ms prefill weigh the same. ``max`` makes the error piecewise in
``(compute, bandwidth)``, so those two are searched on a grid that is refined four times
(deterministic, no random start); for each grid point the best ``overhead_s`` is the closed
form of a one-variable least squares, clipped at zero.

>>> import numpy as np
>>> C, M = np.array([1e-3, 8e-3, 2e-3, 20e-3]), np.array([5e-3, 1e-3, 10e-3, 2e-3])
>>> K = np.zeros(4)                                   # one card: no all-reduce
>>> T = np.maximum(C / 0.5, M / 0.8) + 1e-3          # made from known discounts
>>> c, b, o = fit(C, M, K, T, start=(0.7, 0.8, 5e-4))
>>> round(c, 3), round(b, 3), round(o * 1e3, 3)
(0.5, 0.8, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["FIELDS", "fit", "predict", "mape", "leave_one_out", "CalibrationRow", "Calibration", "likely_cause"]

FIELDS = ("compute", "bandwidth", "overhead_s")
# the search box of the two fractions: below 1% of peak no real engine runs a step
_LO, _HI = 0.01, 1.0
_N = 61  # grid points a side


def predict(compute_s: np.ndarray, memory_s: np.ndarray, comm_s: np.ndarray,
            eff: tuple[float, float, float]) -> np.ndarray:
    """The roofline's step times for discounts ``eff = (compute, bandwidth, overhead_s)``."""
    c, b, o = eff
    return np.maximum(compute_s / c, memory_s / b) + comm_s + o


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute relative error, ``mean(|predicted - measured| / measured)``."""
    return float(np.mean(np.abs(np.asarray(predicted) - measured) / measured))


def _best_overhead(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For predictions without overhead ``p`` (grid points x rows), the overhead minimising the
    squared relative error of each grid point: ``sum((1 - p/t) / t) / sum(1/t**2)``, >= 0."""
    w = 1.0 / t
    return np.maximum(((1.0 - p * w) * w).sum(axis=-1) / (w * w).sum(), 0.0)


def fit(compute_s: np.ndarray, memory_s: np.ndarray, comm_s: np.ndarray, measured_s: np.ndarray,
        start: tuple[float, float, float], fields: Sequence[str] = FIELDS) -> tuple[float, float, float]:
    """The discounts ``(compute, bandwidth, overhead_s)`` that minimise the squared relative
    error over the rows; the fields not in ``fields`` stay at ``start``'s."""
    C, M, K, T = (np.asarray(a, dtype=np.float64) for a in (compute_s, memory_s, comm_s, measured_s))
    free = set(fields)
    c0, b0, o0 = start
    lo_c, hi_c, lo_b, hi_b = _LO, _HI, _LO, _HI
    best: tuple[float, float, float] = start
    for _ in range(5):  # a 61 x 61 grid, then four finer ones around the best point
        cs = np.linspace(lo_c, hi_c, _N) if "compute" in free else np.array([c0])
        bs = np.linspace(lo_b, hi_b, _N) if "bandwidth" in free else np.array([b0])
        cc, bb = np.meshgrid(cs, bs, indexing="ij")
        cc, bb = cc.ravel(), bb.ravel()
        p = np.maximum(C[None, :] / cc[:, None], M[None, :] / bb[:, None]) + K[None, :]
        o = _best_overhead(p, T) if "overhead_s" in free else np.full(len(cc), o0)
        err = (((p + o[:, None]) / T[None, :] - 1.0) ** 2).sum(axis=1)
        k = int(np.argmin(err))  # the first minimum: ties break the same way every run
        best = (float(cc[k]), float(bb[k]), float(o[k]))
        step_c = (hi_c - lo_c) / (_N - 1) * 2  # two grid steps either side: 15x finer each pass
        step_b = (hi_b - lo_b) / (_N - 1) * 2
        lo_c, hi_c = max(_LO, best[0] - step_c), min(_HI, best[0] + step_c)
        lo_b, hi_b = max(_LO, best[1] - step_b), min(_HI, best[1] + step_b)
    return best


def leave_one_out(compute_s: np.ndarray, memory_s: np.ndarray, comm_s: np.ndarray, measured_s: np.ndarray,
                  start: tuple[float, float, float], fields: Sequence[str] = FIELDS) -> np.ndarray:
    """Each row's prediction by a fit to all the other rows (NaN for a table of one row):
    the error a fit makes on a measurement it has not seen."""
    n = len(measured_s)
    out = np.full(n, np.nan)
    if n < 2:
        return out
    for i in range(n):
        keep = np.arange(n) != i
        eff = fit(compute_s[keep], memory_s[keep], comm_s[keep], measured_s[keep], start, fields)
        out[i] = predict(compute_s[i:i + 1], memory_s[i:i + 1], comm_s[i:i + 1], eff)[0]
    return out


@dataclass(frozen=True)
class CalibrationRow:
    """One measurement against the paper GPU: its time, the prediction before the fit (the
    starting discounts), after it, and by a fit that left this row out."""

    label: str
    source: str
    measured_s: float
    before_s: float
    after_s: float
    loo_s: float
    bound: str  # "compute" or "memory", under the fitted discounts
    comm_share: float  # the all-reduces' share of the fitted prediction
    tp: int
    n_tokens: int
    n_seqs: int

    @property
    def error_before(self) -> float:
        """Signed relative error before the fit: ``(before - measured) / measured``."""
        return (self.before_s - self.measured_s) / self.measured_s

    @property
    def error_after(self) -> float:
        return (self.after_s - self.measured_s) / self.measured_s

    @property
    def error_loo(self) -> float:
        return (self.loo_s - self.measured_s) / self.measured_s


def likely_cause(row: CalibrationRow) -> str:
    """A plain-words guess at what the roofline leaves out for ``row`` (lecture §8.3): read
    from the sign of the error, the bound, the batch and the all-reduce share."""
    slow = row.error_after < 0  # the real card took longer than the paper one
    prefill = row.n_tokens > row.n_seqs
    if row.tp > 1 and slow and row.comm_share > 0.1:
        return ("all-reduce at small batch: latency per hop and synchronisation across cards cost more "
                "than the ring over the NVLink figure")
    if row.tp > 1 and not slow:
        return ("tensor parallelism: the cards overlap the all-reduces with compute, or the per-card "
                "kernels run faster than the one-card fit says")
    if row.bound == "compute" or prefill:
        return ("kernel efficiency: large GEMMs and attention reach a different fraction of peak than "
                "the flat compute discount (tile shapes, attention at long context, FP8 kernels)")
    if row.n_seqs == 1:
        return ("achieved bandwidth and launch gaps at batch 1: small GEMV kernels and per-layer "
                "launch overhead " + ("eat more" if slow else "eat less") + " of the step than the flat discounts")
    return ("attention over a large KV cache: reading many sequences' KV runs at a different fraction "
            "of HBM bandwidth than streaming the weights")


@dataclass(frozen=True)
class Calibration:
    """The result of :func:`servelab.hw_model.calibrate`: the fitted ``efficiency`` (an
    :class:`~servelab.hw_model.Efficiency`), the one it started from, the fields it fitted, one
    :class:`CalibrationRow` per measurement, and three mean absolute relative errors: before
    the fit, after it, and leave-one-out (each row predicted by a fit to the others: the honest
    number, since a fit always flatters the rows it saw)."""

    efficiency: Any
    start: Any
    fit: tuple[str, ...]
    rows: tuple[CalibrationRow, ...]

    @property
    def mape_before(self) -> float:
        return float(np.mean([abs(r.error_before) for r in self.rows]))

    @property
    def mape_after(self) -> float:
        return float(np.mean([abs(r.error_after) for r in self.rows]))

    @property
    def loo_mape(self) -> float:
        """Leave-one-out mean absolute relative error (NaN with a single measurement)."""
        return float(np.mean([abs(r.error_loo) for r in self.rows]))

    def worst(self, n: int = 3) -> list[CalibrationRow]:
        """The ``n`` rows with the largest error after the fit, largest first."""
        return sorted(self.rows, key=lambda r: -abs(r.error_after))[:n]

    def table(self) -> str:
        """Every row's measured and predicted milliseconds and errors, as plain text."""
        lines = [f"{'measurement':44} {'measured':>9} {'before':>9} {'after':>9} {'err before':>10} "
                 f"{'err after':>9} {'LOO':>7}"]
        for r in self.rows:
            lines.append(f"{r.label[:44]:44} {r.measured_s * 1e3:8.2f}m {r.before_s * 1e3:8.2f}m "
                         f"{r.after_s * 1e3:8.2f}m {r.error_before:+10.1%} {r.error_after:+9.1%} "
                         f"{r.error_loo:+7.1%}")
        e = self.efficiency
        lines.append(f"fitted: compute {e.compute:.3f}, bandwidth {e.bandwidth:.3f}, overhead "
                     f"{e.overhead_s * 1e3:.3f} ms; mean error {self.mape_before:.1%} before, "
                     f"{self.mape_after:.1%} after, {self.loo_mape:.1%} leave-one-out")
        return "\n".join(lines)
