"""Predicted beside measured (lecture §8.3: how far the paper GPU's clock is from a real server):
one row per experiment, stage and metric, the error of each, the summary (mean absolute
percentage error per metric over the stages that were not overloaded), the JSON records and
the predicted-against-measured plot.

An *overloaded* stage (most requests failed: the client's timeout) is shown apart and never in
a summary: its measured successes are the few lucky requests of a saturated server whose
timed-out requests were cancelled (freeing the GPU), while the simulator keeps computing every
request; the numbers describe different populations, so their ratio is no error.

>>> rows = [Row("exp", 0, "Llama-2-7b-hf", False, "e2e_mean", 1.9, 2.0),
...         Row("exp", 0, "Llama-2-7b-hf", False, "ttft_mean", 0.03, 0.025)]
>>> [round(r.error, 3) for r in rows]
[-0.05, 0.2]
>>> {k: round(v, 3) for k, v in mape(rows).items()}
{'ttft_mean': 0.2, 'e2e_mean': 0.05}
>>> records(rows)[0]
{'experiment': 'exp', 'stage': 0, 'metric': 'e2e_mean', 'predicted': 1.9, 'measured': 2.0}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from servelab import _checks
from servelab.files import write_text_atomic
from servelab.validation.simulate import ExperimentPrediction
from servelab.validation.stats import METRIC_SOURCE, METRICS

__all__ = ["Row", "compare", "mape", "records", "write_json", "table_rows", "summary_rows", "write_plot",
           "OVERLOAD_NOTE"]

OVERLOAD_NOTE = ("overloaded: most requests failed (the client gave up after its timeout and the server "
                 "cancelled them); the measured successes are the lucky few of a saturated server, while the "
                 "simulator computes every request, so predicted and measured are not like for like")


@dataclass(frozen=True)
class Row:
    experiment: str
    stage: int
    model: str
    overloaded: bool
    metric: str
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        """``predicted / measured - 1`` (``nan`` when either is missing)."""
        if not (self.measured > 0 and math.isfinite(self.predicted)):
            return float("nan")
        return self.predicted / self.measured - 1.0


def compare(predictions: Sequence[ExperimentPrediction]) -> list[Row]:
    """The rows of every prediction: each stage's six metrics, predicted and measured."""
    out = []
    for p in predictions:
        e = p.experiment
        for s in p.stages:
            m = e.measured[s.index]
            for metric in METRICS:
                dist, stat = METRIC_SOURCE[metric]
                d = m.latency.get(dist)
                measured = float(d[stat]) if d and stat in d else float("nan")
                out.append(Row(e.name, s.index, e.server.model_name, e.overloaded(s.index), metric,
                               s.summary.metric(metric), measured))
    return out


def mape(rows: Sequence[Row], keep: Callable[[Row], bool] | None = None) -> dict[str, float]:
    """Mean absolute error per metric over the rows not overloaded (and kept by ``keep``)."""
    out = {}
    for metric in METRICS:
        errs = [abs(r.error) for r in rows if r.metric == metric and not r.overloaded
                and (keep is None or keep(r)) and math.isfinite(r.error)]
        if errs:
            out[metric] = sum(errs) / len(errs)
    return out


def records(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """``servelab validate --json``'s list: experiment (folder name), stage, metric, predicted
    and measured seconds."""
    return [{"experiment": r.experiment, "stage": r.stage, "metric": r.metric,
             "predicted": r.predicted if math.isfinite(r.predicted) else None,
             "measured": r.measured if math.isfinite(r.measured) else None} for r in rows]


def write_json(rows: Sequence[Row], path: str | Path) -> Path:
    """:func:`records` as JSON at ``path``, whole or not at all."""
    target = Path(_checks.instance("path", path, (str, Path), "a file path"))
    return write_text_atomic(target, json.dumps(records(rows), indent=1) + "\n")


def _ms(v: float) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v * 1e3:,.1f}" if v < 1 else f"{v:,.2f} s"


def _pct(e: float) -> str:
    return "-" if not math.isfinite(e) else f"{e * 100:+.0f}%"


def table_rows(rows: Sequence[Row]) -> list[list[str]]:
    """One line per experiment and stage: for each metric ``predicted / measured (error)``
    (milliseconds below a second)."""
    out: list[list[str]] = []
    keyed: dict[tuple[str, int], dict[str, Row]] = {}
    for r in rows:
        keyed.setdefault((r.experiment, r.stage), {})[r.metric] = r
    for (exp, stage), by in keyed.items():
        flag = " (overloaded)" if next(iter(by.values())).overloaded else ""
        cells = [f"{exp}{flag}", str(stage)]
        for metric in METRICS:
            row = by.get(metric)
            cells.append("-" if row is None else f"{_ms(row.predicted)} / {_ms(row.measured)} ({_pct(row.error)})")
        out.append(cells)
    return out


def summary_rows(rows: Sequence[Row], models: Sequence[str]) -> list[list[str]]:
    """The mean absolute error per metric over non-overloaded stages: all, then per model."""
    groups: list[tuple[str, Callable[[Row], bool] | None]] = [("all models", None)]
    groups += [(m, (lambda r, m=m: r.model == m)) for m in models]  # type: ignore[misc]
    out = []
    for name, keep in groups:
        errs = mape(rows, keep)
        n = len({(r.experiment, r.stage) for r in rows if not r.overloaded and (keep is None or keep(r))})
        out.append([name, str(n)] + [_pct(errs[m]).lstrip("+") if m in errs else "-" for m in METRICS])
    return out


def write_plot(rows: Sequence[Row], path: str | Path, title: str) -> Path | None:
    """Predicted against measured, log-log, one point per stage and metric (marker by metric),
    the diagonal drawn; overloaded stages in grey. ``None`` (nothing written) when no point is
    finite."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [r for r in rows if r.measured > 0 and math.isfinite(r.predicted) and r.predicted > 0]
    if not pts:
        return None
    target = Path(_checks.instance("path", path, (str, Path), "a file path"))
    fig, ax = plt.subplots(figsize=(7.5, 7))
    markers = dict(zip(METRICS, "os^vDP"))
    for i, metric in enumerate(METRICS):
        ok = [r for r in pts if r.metric == metric and not r.overloaded]
        if ok:
            ax.scatter([r.measured for r in ok], [r.predicted for r in ok], marker=markers[metric],
                       facecolors="none", edgecolors=f"C{i}", label=metric, linewidths=1.4)
    over = [r for r in pts if r.overloaded]
    if over:
        ax.scatter([r.measured for r in over], [r.predicted for r in over], marker="x", color="0.6",
                   label="overloaded stage (not like for like)")
    lo = min(min(r.measured for r in pts), min(r.predicted for r in pts)) / 1.5
    hi = max(max(r.measured for r in pts), max(r.predicted for r in pts)) * 1.5
    ax.plot([lo, hi], [lo, hi], color="k", linewidth=1, label="predicted = measured")
    ax.plot([lo, hi], [lo * 1.1, hi * 1.1], color="k", linewidth=0.6, linestyle=":", label="±10%")
    ax.plot([lo, hi], [lo / 1.1, hi / 1.1], color="k", linewidth=0.6, linestyle=":")
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")  # 0.01, 10: plain decimals, never 10^-2
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured on vLLM / H100 (s)")
    ax.set_ylabel("predicted by servelab (s)")
    errs = mape(rows)
    fact = ", ".join(f"{m} {errs[m] * 100:.0f}%" for m in ("ttft_mean", "itl_mean", "e2e_mean") if m in errs)
    ax.set_title(f"{title}\nmean abs. error (stages not overloaded): {fact}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    tmp.replace(target)
    return target
