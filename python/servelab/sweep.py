"""Sweeps: a grid of policies x parameters x arrival rates on the simulator (lecture §4.5).

Every point runs demo 03's chat workload (``n`` requests, ``seed``; the same requests at every
rate, only closer together) under one policy and summarises it against an SLO:

* ``batch1`` — batch 1 FCFS (no parameters);
* ``static`` — static batching; axes ``batch_size``, ``max_wait_s``, ``ride_along``;
* ``early_reject`` — batch 1 with early rejection on the SLO's TTFT (§5.3); axis
  ``estimator``: ``"mean"``, ``"oracle"`` or ``"sigma=0.5"`` (exercise 9's noisy predictor,
  noise seed 42);
* ``continuous`` — continuous batching on paged KV blocks (vLLM's defaults otherwise); axes
  ``max_num_seqs``, ``chunked_prefill``.

Points are independent, so they run on any :class:`concurrent.futures.Executor`: results are
put back in grid order, and each point is deterministic, so ``jobs=1`` and ``jobs=4`` give the
same table, bit for bit. On one machine ``jobs=N`` uses a process pool. To spread a big sweep
over a cluster, pass an executor of your own (neither Dask nor Ray is a dependency). With Dask,
``Client.get_executor()`` is a ``concurrent.futures.Executor`` running on the cluster's
workers (each needs servelab installed)::

    from dask.distributed import Client              # pip install "dask[distributed]"
    client = Client("tcp://scheduler:8786")
    result = sweep(grid, executor=client.get_executor())

Anything with ``submit(fn, *args)`` returning ``concurrent.futures.Future``-like objects works
the same way (a Ray-backed executor, an MPI pool ...).

>>> g = Grid(policies=("batch1", "static"), rates=(0.2, 0.5), batch_size=(8,))
>>> [p.label for p in g.points()]
['batch 1 @ 0.2', 'batch 1 @ 0.5', 'static B=8 @ 0.2', 'static B=8 @ 0.5']
>>> res = sweep(g, n=40)
>>> [round(r.attainment, 3) for r in res.rows]
[0.75, 0.475, 0.825, 0.7]
>>> Grid(policies=("fifo",), rates=(1.0,))
Traceback (most recent call last):
...
ValueError: policies must be among ['batch1', 'continuous', 'early_reject', 'static'], got 'fifo'
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import numbers
import os
import tempfile
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from servelab import metrics as mx
from servelab.admission import EarlyReject, NoisyPredictor
from servelab.hw_model import H100, LLAMA3_8B
from servelab.metrics import SLO
from servelab.serving_core import run_batch1, run_continuous_batching, run_static_batching
from servelab.workload import chat_requests

__all__ = ["Grid", "Point", "Row", "SweepResult", "sweep", "parse_rates", "POLICIES"]

# policy -> the parameter axes it takes
POLICIES: dict[str, tuple[str, ...]] = {
    "batch1": (),
    "early_reject": ("estimator",),
    "static": ("batch_size", "max_wait_s", "ride_along"),
    "continuous": ("max_num_seqs", "chunked_prefill"),
}
# continuous batching takes vLLM's defaults (serving_core.run_continuous_batching)
_DEFAULTS: dict[str, tuple[Any, ...]] = {"batch_size": (32,), "max_wait_s": (0.2,), "ride_along": (True,),
                                         "estimator": ("mean",), "max_num_seqs": (256,),
                                         "chunked_prefill": (False,)}


def _estimator(spec: str) -> Any:
    if spec in ("mean", "oracle"):
        return spec
    if isinstance(spec, str) and spec.startswith("sigma="):
        try:
            return NoisyPredictor(float(spec[len("sigma="):]))
        except ValueError as exc:
            raise ValueError(f"estimator {spec!r}: {exc}") from None
    raise ValueError(f"estimator must be 'mean', 'oracle' or 'sigma=<number>', got {spec!r}")


@dataclass(frozen=True)
class Point:
    """One grid point: a policy, its parameters (sorted ``(name, value)`` pairs), a rate."""

    policy: str
    params: tuple[tuple[str, Any], ...]
    rate: float

    @property
    def label(self) -> str:
        return f"{self.config} @ {self.rate:g}"

    @property
    def config(self) -> str:
        """The policy and its parameters, without the rate (one curve of a plot)."""
        p = dict(self.params)
        if self.policy == "static":
            extra = "" if p["ride_along"] else " no ride"
            wait = "" if p["max_wait_s"] == 0.2 else f" wait {p['max_wait_s']:g}s"
            return f"static B={p['batch_size']}{wait}{extra}"
        if self.policy == "early_reject":
            return f"batch 1, early reject ({p['estimator']})"
        if self.policy == "continuous":
            chunked = " chunked" if p["chunked_prefill"] else ""
            return f"continuous seqs={p['max_num_seqs']}{chunked}"
        return "batch 1"


def _check_values(name: str, values: Sequence[Any], ok: Callable[[Any], bool], what: str) -> tuple[Any, ...]:
    vals = tuple(values)
    if not vals:
        raise ValueError(f"{name} must not be empty")
    for v in vals:
        if not ok(v):
            raise ValueError(f"{name} must hold {what}, got {v!r}")
    return vals


def _positive(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, numbers.Real) and math.isfinite(float(v)) and float(v) > 0


@dataclass(frozen=True)
class Grid:
    """Policies x their parameter axes x arrival rates. An axis given for no chosen policy is an
    error (it would silently do nothing); an axis left out takes demo 03's value."""

    policies: Sequence[str]
    rates: Sequence[float]
    batch_size: Sequence[int] = _DEFAULTS["batch_size"]
    max_wait_s: Sequence[float] = _DEFAULTS["max_wait_s"]
    ride_along: Sequence[bool] = _DEFAULTS["ride_along"]
    estimator: Sequence[str] = _DEFAULTS["estimator"]
    max_num_seqs: Sequence[int] = _DEFAULTS["max_num_seqs"]
    chunked_prefill: Sequence[bool] = _DEFAULTS["chunked_prefill"]

    def __post_init__(self) -> None:
        pols = tuple(self.policies)
        if not pols:
            raise ValueError("policies must not be empty")
        for p in pols:
            if p not in POLICIES:
                raise ValueError(f"policies must be among {sorted(POLICIES)}, got {p!r}")
        object.__setattr__(self, "policies", tuple(dict.fromkeys(pols)))
        object.__setattr__(self, "rates", _check_values("rates", self.rates, _positive, "positive finite numbers"))
        checks: dict[str, tuple[Callable[[Any], bool], str]] = {
            "batch_size": (lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= 1,
                           "positive integers"),
            "max_wait_s": (lambda v: not isinstance(v, bool) and isinstance(v, numbers.Real)
                           and math.isfinite(float(v)) and float(v) >= 0, "finite numbers >= 0"),
            "ride_along": (lambda v: isinstance(v, bool), "True or False"),
            "estimator": (lambda v: _estimator(v) is not None, "'mean', 'oracle' or 'sigma=<number>'"),
            "max_num_seqs": (lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= 1,
                             "positive integers"),
            "chunked_prefill": (lambda v: isinstance(v, bool), "True or False"),
        }
        used = {axis for p in pols for axis in POLICIES[p]}
        for axis, (ok, what) in checks.items():
            values = _check_values(axis, getattr(self, axis), ok, what)
            if axis not in used and values != _DEFAULTS[axis]:
                raise ValueError(f"{axis} was given, but none of the policies {list(pols)} takes it")
            object.__setattr__(self, axis, values)

    def points(self) -> list[Point]:
        """Every point, in a fixed order: policy, then its parameters, then rate."""
        out: list[Point] = []
        for p in self.policies:
            axes = POLICIES[p]
            for combo in itertools.product(*(getattr(self, a) for a in axes)):
                params = tuple(sorted(zip(axes, combo)))
                out.extend(Point(p, params, float(r)) for r in self.rates)
        return out


@dataclass(frozen=True)
class Row:
    """One point's summary (what the table, the CSV and the JSON hold)."""

    policy: str
    config: str
    rate: float
    n: int
    rejected: int
    attainment: float
    goodput_req_s: float
    throughput_tok_s: float
    throughput_req_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    utilisation: float
    seat_waste: float
    params: dict[str, Any] = field(default_factory=dict)


def run_point(point: Point, n: int, seed: int, slo: SLO) -> Row:
    """Simulates one point (a top-level function, so process pools can pickle it)."""
    reqs = chat_requests(n, point.rate, seed)
    p = dict(point.params)
    if point.policy == "static":
        r = run_static_batching(reqs, LLAMA3_8B, H100, int(p["batch_size"]), float(p["max_wait_s"]),
                                bool(p["ride_along"]))
    elif point.policy == "continuous":
        r = run_continuous_batching(reqs, LLAMA3_8B, H100, max_num_seqs=int(p["max_num_seqs"]),
                                    chunked_prefill=bool(p["chunked_prefill"]))
    elif point.policy == "early_reject":
        r = run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(slo.ttft_s, _estimator(p["estimator"])))
    else:
        r = run_batch1(reqs, LLAMA3_8B, H100)
    s = mx.summarize(r, slo)
    return Row(point.policy, point.config, point.rate, s.n, s.n_rejected, s.attainment, s.goodput_req_s,
               s.throughput_tok_s, s.throughput_req_s, s.ttft.p50, s.ttft.p99, s.tpot.p50, s.utilisation,
               s.seat_waste, p)


@dataclass(frozen=True)
class SweepResult:
    grid: Grid
    n: int
    seed: int
    slo: SLO
    rows: list[Row]

    def curves(self) -> dict[str, list[Row]]:
        """Rows grouped by configuration (one curve per policy + parameters), in grid order."""
        out: dict[str, list[Row]] = {}
        for r in self.rows:
            out.setdefault(r.config, []).append(r)
        return out

    def to_csv(self) -> str:
        buf = io.StringIO()
        names = [f for f in Row.__dataclass_fields__ if f != "params"]
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(names)
        for r in self.rows:
            w.writerow([repr(v) if isinstance(v, float) else v for v in (getattr(r, k) for k in names)])
        return buf.getvalue()

    def to_json(self) -> str:
        def clean(v: Any) -> Any:  # JSON has no NaN or infinity
            return None if isinstance(v, float) and not math.isfinite(v) else v

        doc = {"n": self.n, "seed": self.seed, "slo": {"ttft_s": self.slo.ttft_s, "tpot_s": clean(self.slo.tpot_s)},
               "rows": [{k: clean(v) for k, v in asdict(r).items()} for r in self.rows]}
        return json.dumps(doc, indent=1, sort_keys=True)

    def write(self, out_dir: Path, formats: Sequence[str] = ("csv", "json"), plots: bool = True) -> list[Path]:
        """Writes ``sweep.csv`` / ``sweep.json`` (atomically: a crash never leaves half a file)
        and, with ``plots``, ``sweep_ttft_vs_rate.png`` and ``sweep_goodput_vs_rate.png``."""
        out_dir = Path(out_dir)
        bad = [f for f in formats if f not in ("csv", "json")]
        if bad:
            raise ValueError(f"formats must be among ['csv', 'json'], got {bad}")
        written = [_write_atomic(out_dir / f"sweep.{f}", self.to_csv() if f == "csv" else self.to_json())
                   for f in formats]
        if plots:
            from servelab import plots as pl

            rates = list(self.grid.rates)
            curves = self.curves()
            written.append(pl.ttft_vs_rate(out_dir / "sweep_ttft_vs_rate.png", rates,
                                           {k: (np.array([r.ttft_p50_s for r in v]), np.array([r.ttft_p99_s for r in v]))
                                            for k, v in curves.items()}, self.slo.ttft_s))
            written.append(pl.goodput_vs_rate(out_dir / "sweep_goodput_vs_rate.png", rates,
                                              {k: np.array([r.goodput_req_s for r in v]) for k, v in curves.items()},
                                              {k: np.array([r.throughput_req_s for r in v]) for k, v in curves.items()}))
        return written


def _write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def sweep(grid: Grid, *, n: int = 600, seed: int = 0, slo: SLO = SLO(1.0, 0.05), jobs: int = 1,
          executor: Executor | None = None, progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Runs every point of ``grid``. ``executor`` (any ``concurrent.futures.Executor``) runs the
    points; without one, ``jobs=1`` runs them here and ``jobs>1`` in a local process pool.
    ``progress(done, total)`` is called after each point. Rows come back in grid order."""
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a servelab.sweep.Grid, got {grid!r}")
    for name, v, lo in (("n", n, 0), ("seed", seed, 0), ("jobs", jobs, 1)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if not isinstance(slo, SLO):
        raise TypeError(f"slo must be a servelab.metrics.SLO, got {slo!r}")
    points = grid.points()
    rows: list[Row | None] = [None] * len(points)
    own = executor is None and jobs > 1
    ex = ProcessPoolExecutor(max_workers=int(jobs)) if own else executor
    try:
        if ex is None:
            for k, pt in enumerate(points):
                rows[k] = run_point(pt, int(n), int(seed), slo)
                if progress:
                    progress(k + 1, len(points))
        else:
            from concurrent.futures import as_completed

            futures = {ex.submit(run_point, pt, int(n), int(seed), slo): k for k, pt in enumerate(points)}
            for done, fut in enumerate(as_completed(futures), 1):
                rows[futures[fut]] = fut.result()
                if progress:
                    progress(done, len(points))
    finally:
        if own and ex is not None:
            ex.shutdown()
    return SweepResult(grid, int(n), int(seed), slo, [r for r in rows if r is not None])


def parse_rates(specs: Sequence[str]) -> tuple[float, ...]:
    """Rates from the command line: numbers, or ``start:stop:step`` ranges (stop included).

    >>> parse_rates(["0.1", "0.2:0.5:0.1", "2"])
    (0.1, 0.2, 0.3, 0.4, 0.5, 2.0)
    """
    out: list[float] = []
    for s in specs:
        parts = s.split(":")
        try:
            nums = [float(x) for x in parts]
        except ValueError:
            raise ValueError(f"rates must be numbers or start:stop:step, got {s!r}") from None
        if len(nums) == 1:
            out.append(nums[0])
        elif len(nums) == 3 and nums[2] > 0 and nums[1] >= nums[0]:
            k = int(math.floor((nums[1] - nums[0]) / nums[2] + 1e-9))
            out.extend(round(nums[0] + i * nums[2], 10) for i in range(k + 1))
        else:
            raise ValueError(f"rates must be numbers or start:stop:step with step > 0, got {s!r}")
    return tuple(out)


def table(result: SweepResult) -> Any:
    """The result as a rich table (one row per point)."""
    from rich.table import Table

    t = Table(title=f"Sweep: {result.n} chat requests (seed {result.seed}), SLO TTFT <= {result.slo.ttft_s:g} s, "
                    f"TPOT <= {result.slo.tpot_s * 1e3:g} ms", title_justify="left")
    for c in ("policy", "rate", "attain", "goodput", "tok/s", "TTFT P50 s", "TTFT P99 s", "util", "rejected"):
        if c == "policy":
            t.add_column(c, min_width=14, overflow="fold")
        else:
            t.add_column(c, justify="right")
    for r in result.rows:
        t.add_row(r.config, f"{r.rate:g}", f"{r.attainment:.1%}", f"{r.goodput_req_s:.3f}",
                  f"{r.throughput_tok_s:.0f}", f"{r.ttft_p50_s:.2f}", f"{r.ttft_p99_s:.2f}",
                  f"{r.utilisation:.0%}", str(r.rejected))
    return t
