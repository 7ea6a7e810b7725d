"""Sweeps: a grid of policies x parameters x arrival rates on the simulator (lecture §4.5).

Every point runs demo 03's chat workload (``n`` requests, ``seed``; the same requests at every
rate, only closer together) under one policy and summarises it against an SLO:

* ``batch1`` — batch 1 FCFS (no parameters);
* ``static`` — static batching; axes ``batch_size``, ``max_wait_s``, ``ride_along``;
* ``early_reject`` — batch 1 with early rejection on the SLO's TTFT (§5.3); axis
  ``estimator``: ``"mean"``, ``"oracle"`` or ``"sigma=0.5"`` (exercise 9's noisy predictor,
  noise seed 42);
* ``continuous`` — continuous batching on paged KV blocks (vLLM's defaults otherwise); axes
  ``max_num_seqs``, ``chunked_prefill``;
* ``prefix`` — continuous batching on a chat service's workload instead
  (:func:`servelab.workload.chat_sessions`: ``n`` single-turn requests, each opening with a
  1024-token system prompt, one of 4 shared ones with probability ``shared_fraction``, else its
  own); axes ``prefix_caching`` (§3.5) and ``shared_fraction``;
* ``tiered`` — prefix caching on multi-turn conversations (``chat_sessions`` with
  ``TIERED_TURNS_MEAN`` turns on average) in a GPU pool of ``TIERED_GPU_BLOCKS`` blocks, small
  enough that evictions happen; axes ``host_blocks`` (the host tier's size, §8 milestone 4b)
  and ``host_policy`` (``"lru"``, ``"hits"``);
* ``speculative`` — continuous batching (vLLM's defaults) with speculative decoding (§8,
  milestone 4a; :class:`servelab.serving_core.Speculation`, a Llama-3.2-1B draft priced on the
  same GPU); axes ``spec_k`` (guesses per step, 0: plain decoding) and ``acceptance`` (the
  chance each guess is kept).

Each policy is one record of :mod:`servelab.policies` (its axes with their defaults and checks,
its label, its workload, its run function); the grid, its checks and the labels come from
there, so a policy registered there is swept like these.

Prefix rows fill ``cached_share``: prompt tokens served from a cache (GPU or host) over all
prompt tokens (None for the other policies).

The model and GPU are demo 03's (Llama-3-8B on an H100) unless ``Grid(model=..., gpu=...)``
names another: a :mod:`servelab.hw_model` preset (``"LLAMA3_70B"``, ``"A100_80GB"``), a spec, or
a TOML/JSON spec file (:mod:`servelab.spec_files`). ``Grid(efficiency=...)`` prices every step
with other discounts than the lecture's, e.g. ``hw_model.calibrate(measurements).efficiency``
fitted to a real card (``servelab sweep --calibration FILE``); ``sweep.json`` records them.

Points are independent, so they run on any :class:`concurrent.futures.Executor`, or on a Dask
``distributed.Client``: rows come back in grid order, and each point is deterministic, so
``jobs=1``, ``jobs=4`` and a cluster give the same table, bit for bit. On one machine ``jobs=N``
uses a process pool. To spread a big sweep over a cluster, pass the client (every worker needs
servelab installed; neither Dask nor Ray is a dependency: ``pip install "servelab[cluster]"``)::

    from distributed import Client
    client = Client("tcp://scheduler:8786")
    result = sweep(grid, executor=client)

Anything with ``submit(fn, *args)`` returning futures with ``.result()`` works the same way (a
Ray-backed executor, an MPI pool ...): see the README's "Sweeps on a cluster".

>>> g = Grid(policies=("batch1", "static"), rates=(0.2, 0.5), batch_size=(8,))
>>> [p.label for p in g.points()]
['batch 1 @ 0.2', 'batch 1 @ 0.5', 'static B=8 @ 0.2', 'static B=8 @ 0.5']
>>> res = sweep(g, n=40)
>>> [round(r.attainment, 3) for r in res.rows]
[0.75, 0.475, 0.825, 0.7]
>>> Grid(policies=("batch1",), rates=(0.5,), gpu="A100_80GB").gpu.name
'A100-80GB'
>>> Grid(policies=("batch1",), rates=(0.5,), model="LLAMA3_70B")
Traceback (most recent call last):
...
ValueError: model Llama-3-70B does not fit gpu H100-SXM: its weights (141.1 GB) leave no room for a KV cache in 90% of 80 GB
>>> Grid(policies=("fifo",), rates=(1.0,))
Traceback (most recent call last):
...
ValueError: policies must be among ['batch1', 'continuous', 'early_reject', 'prefix', 'speculative', 'static', 'tiered'], got 'fifo'

The host tier on multi-turn conversations (hit rate and TTFT against its size):

>>> t = sweep(Grid(policies=("tiered",), rates=(1.0,), host_blocks=(0, 8000)), n=60)
>>> [(r.config, round(r.cached_share, 2)) for r in t.rows]
[('host tier 0 blocks lru', 0.68), ('host tier 8000 blocks lru', 0.92)]
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from servelab import _checks, lecture
from servelab.files import write_text_atomic
from servelab import metrics as mx
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B, Efficiency, GpuSpec, ModelSpec, kv_capacity_tokens
from servelab.metrics import SLO
from servelab.policies import REGISTRY, TIERED_GPU_BLOCKS, TIERED_TURNS_MEAN, Job, Policy
from servelab.policies import estimator as _estimator
from servelab.policies import axes as policies_axes
from servelab.spec_files import resolve_gpu, resolve_model

__all__ = ["Grid", "Point", "Row", "SweepResult", "sweep", "parse_rates", "POLICIES", "MAX_POINTS"]

# The most points one sweep (or one --rates range) may have. A grid is counted before it is
# built, so a typo such as 0.001:1e6:0.001 (a billion rates) is refused at once, not after
# minutes of building a list; sweep(max_points=None) lifts the bound for a cluster.
MAX_POINTS = 10_000

# every policy, by name: its record (servelab.policies) gives its axes, label, workload and run
POLICIES: dict[str, Policy] = REGISTRY


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
        return POLICIES[self.policy].label(dict(self.params))


def _finite_at_least(lo: float, open_: bool = False) -> Callable[[Any], bool]:
    """A real number, finite and >= ``lo`` (> ``lo`` when ``open_``)."""
    return lambda v: _checks.is_real(v) and math.isfinite(float(v)) and (float(v) > lo if open_ else float(v) >= lo)


def _check_values(name: str, values: Sequence[Any], ok: Callable[[Any], bool], what: str) -> tuple[Any, ...]:
    vals = tuple(values)
    if not vals:
        raise ValueError(f"{name} must not be empty")
    for v in vals:
        if not ok(v):
            raise ValueError(f"{name} must hold {what}, got {v!r}")
    return tuple(v.item() if isinstance(v, np.generic) else v for v in vals)  # numpy's as Python's


@dataclass(frozen=True, init=False)
class Grid:
    """Policies x their parameter axes x arrival rates, on one model and GPU. Each policy's
    axes are keyword arguments, named and checked by its record (:mod:`servelab.policies`) and
    read back as attributes (``grid.batch_size``). An axis given for no chosen policy is an
    error (it would silently do nothing); an axis left out takes its record's default.
    ``model`` and ``gpu`` take a spec, a preset name or a spec file (:mod:`servelab.spec_files`)
    and are stored as specs."""

    policies: tuple[str, ...]
    rates: tuple[float, ...]
    axes: tuple[tuple[str, tuple[Any, ...]], ...]  # (axis, its values) for every registered axis
    model: ModelSpec
    gpu: GpuSpec
    efficiency: Efficiency  # the roofline's discounts (a calibration's, lecture §8.3)

    def __init__(self, policies: Sequence[str], rates: Sequence[float], *,
                 model: ModelSpec | str | os.PathLike[str] = LLAMA3_8B, gpu: GpuSpec | str | os.PathLike[str] = H100,
                 efficiency: Efficiency = DEFAULT_EFFICIENCY, **axes: Sequence[Any]) -> None:
        _checks.instance("efficiency", efficiency, Efficiency, "a servelab.hw_model.Efficiency")
        model_, gpu_ = resolve_model(model), resolve_gpu(gpu)
        if kv_capacity_tokens(model_, gpu_) <= 0:
            raise ValueError(f"model {model_.name} does not fit gpu {gpu_.name}: its weights "
                             f"({model_.weight_bytes / 1e9:.1f} GB) leave no room for a KV cache in "
                             f"90% of {gpu_.memory_bytes / 1e9:g} GB")
        pols = tuple(policies)
        if not pols:
            raise ValueError("policies must not be empty")
        for p in pols:
            if not isinstance(p, str) or p not in POLICIES:
                raise ValueError(f"policies must be among {sorted(POLICIES)}, got {p!r}")
        known = policies_axes()
        unknown = sorted(set(axes) - set(known))
        if unknown:
            raise TypeError(f"Grid got no such axis {unknown[0]!r}; the policies' axes are {list(known)}")
        rates_ = _check_values("rates", rates, _finite_at_least(0.0, open_=True), "positive finite numbers")
        used = {a.name for p in pols for a in POLICIES[p].axes}
        values: list[tuple[str, tuple[Any, ...]]] = []
        for name, (axis, _) in known.items():
            given = axes.get(name, axis.default)
            vals = _check_values(name, given, axis.kind.test, axis.kind.many)
            if name not in used and vals != tuple(axis.default):
                raise ValueError(f"{name} was given, but none of the policies {list(pols)} takes it")
            values.append((name, vals))
        for field_, v in (("policies", tuple(dict.fromkeys(pols))), ("rates", rates_), ("axes", tuple(values)),
                          ("model", model_), ("gpu", gpu_), ("efficiency", efficiency)):
            object.__setattr__(self, field_, v)

    def __getattr__(self, name: str) -> tuple[Any, ...]:
        for axis, vals in self.__dict__.get("axes", ()):  # .get: a half-unpickled grid has none yet
            if axis == name:
                return vals
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __len__(self) -> int:
        """How many points :meth:`points` would make (counted without making them)."""
        return len(self.rates) * sum(math.prod(len(getattr(self, a.name)) for a in POLICIES[p].axes)
                                     for p in self.policies)

    @property
    def model_spec(self) -> ModelSpec:
        """``model``, resolved (the field holds the spec after construction)."""
        return resolve_model(self.model)

    @property
    def gpu_spec(self) -> GpuSpec:
        """``gpu``, resolved."""
        return resolve_gpu(self.gpu)

    def points(self) -> list[Point]:
        """Every point, in a fixed order: policy, then its parameters, then rate."""
        out: list[Point] = []
        for p in self.policies:
            axes = [a.name for a in POLICIES[p].axes]
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
    cached_share: float | None = None


def run_point(point: Point, n: int, seed: int, slo: SLO, model: ModelSpec = LLAMA3_8B,
              gpu: GpuSpec = H100, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> Row:
    """Simulates one point (a top-level function, so process pools and clusters can pickle it)."""
    policy = POLICIES[point.policy]
    p = dict(point.params)
    reqs, shared = policy.workload(n, point.rate, seed, p)
    r = policy.run(Job(reqs, p, model, gpu, efficiency, slo, seed, shared))
    return _row(point, r, slo, p)


def _row(point: Point, r: Any, slo: SLO, p: dict[str, Any]) -> Row:
    s = mx.summarize(r, slo)
    cached = None if r.cached_tokens is None else float(r.cached_tokens.sum() / r.requests.prompt_len.sum())
    return Row(point.policy, point.config, point.rate, s.n, s.n_rejected, s.attainment, s.goodput_req_s,
               s.throughput_tok_s, s.throughput_req_s, s.ttft.p50, s.ttft.p99, s.tpot.p50, s.utilisation,
               s.seat_waste, p, cached)


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

    def heading(self) -> str:
        """What the sweep ran, for titles: model, GPU, workload, SLO."""
        tpot = "" if not math.isfinite(self.slo.tpot_s) else f", TPOT <= {self.slo.tpot_s * 1e3:g} ms"
        e = self.grid.efficiency
        eff = "" if e == DEFAULT_EFFICIENCY else (f" (discounts: compute {e.compute:.2f}, bandwidth "
                                                  f"{e.bandwidth:.2f}, overhead {e.overhead_s * 1e3:.2f} ms)")
        return (f"Sweep: {self.grid.model_spec.name} on {self.grid.gpu_spec.name}{eff}, {self.n} chat requests "
                f"(seed {self.seed}) per point, {len(self.rows)} points; SLO TTFT <= {self.slo.ttft_s:g} s{tpot}")

    def write_plots(self, out_dir: Path) -> list[Path]:
        """``sweep_ttft_vs_rate.png`` and ``sweep_goodput_vs_rate.png`` (:mod:`servelab.plots`);
        a plot with no finite value to show is not written."""
        from servelab import plots as pl

        def curve(rows: list[Row], field: str) -> tuple[np.ndarray, np.ndarray]:
            return np.array([r.rate for r in rows]), np.array([getattr(r, field) for r in rows], dtype=float)

        c = self.curves()
        out = [pl.ttft_vs_rate(Path(out_dir) / "sweep_ttft_vs_rate.png",
                               {k: curve(v, "ttft_p50_s") for k, v in c.items()},
                               {k: curve(v, "ttft_p99_s") for k, v in c.items()}, self.slo.ttft_s, self.heading()),
               pl.goodput_vs_rate(Path(out_dir) / "sweep_goodput_vs_rate.png",
                                  {k: curve(v, "goodput_req_s") for k, v in c.items()},
                                  {k: curve(v, "throughput_req_s") for k, v in c.items()}, self.heading())]
        return [p for p in out if p is not None]

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
               "model": asdict(self.grid.model_spec), "gpu": asdict(self.grid.gpu_spec),
               "efficiency": asdict(self.grid.efficiency),
               "rows": [{k: clean(v) for k, v in asdict(r).items()} for r in self.rows]}
        return json.dumps(doc, indent=1, sort_keys=True)

    def write(self, out_dir: Path, formats: Sequence[str] = ("csv", "json"), plots: bool = True) -> list[Path]:
        """Writes ``sweep.csv`` / ``sweep.json`` (atomically: a crash never leaves half a file)
        and, with ``plots``, ``sweep_ttft_vs_rate.png`` and ``sweep_goodput_vs_rate.png``."""
        out_dir = Path(out_dir)
        bad = [f for f in formats if f not in ("csv", "json")]
        if bad:
            raise ValueError(f"formats must be among ['csv', 'json'], got {bad}")
        written = [write_text_atomic(out_dir / f"sweep.{f}", self.to_csv() if f == "csv" else self.to_json())
                   for f in formats]
        if plots:
            written += self.write_plots(out_dir)
        return written


def _check_executor(executor: Any) -> None:
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TypeError("executor must be a concurrent.futures.Executor or a Dask distributed.Client "
                        f"(anything with submit(fn, *args)), got {executor!r}")


def sweep(grid: Grid, *, n: int = lecture.N_REQUESTS, seed: int = lecture.SEED, slo: SLO = lecture.LECTURE_SLO, jobs: int = 1,
          executor: Any = None, progress: Callable[[int, int], None] | None = None,
          max_points: int | None = MAX_POINTS) -> SweepResult:
    """Runs every point of ``grid``. ``executor`` runs the points: any
    ``concurrent.futures.Executor``, a Dask ``distributed.Client``, or anything whose
    ``submit(fn, *args)`` returns futures with ``.result()``. Without one, ``jobs=1`` runs them
    here and ``jobs>1`` in a local process pool. ``progress(done, total)`` is called after each
    point. Rows come back in grid order (submission order), whatever order points finish in.
    A grid of more than ``max_points`` points is refused before anything runs."""
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a servelab.sweep.Grid, got {grid!r}")
    for name, v, lo in (("n", n, 1), ("seed", seed, 0), ("jobs", jobs, 1)):
        if not _checks.is_int(v) or v < lo:
            raise ValueError(f"{name} must be {_checks.int_wording(lo, None)}, got {v!r}")
    if not isinstance(slo, SLO):
        raise TypeError(f"slo must be a servelab.metrics.SLO, got {slo!r}")
    _check_executor(executor)
    if max_points is not None and len(grid) > max_points:
        raise ValueError(f"the grid has {len(grid):,} points, more than max_points={max_points:,}")
    points = grid.points()
    args = (int(n), int(seed), slo, grid.model_spec, grid.gpu_spec, grid.efficiency)
    rows: list[Row | None] = [None] * len(points)
    own = executor is None and jobs > 1
    ex = ProcessPoolExecutor(max_workers=int(jobs)) if own else executor
    try:
        if ex is None:
            for k, pt in enumerate(points):
                rows[k] = run_point(pt, *args)
                if progress:
                    progress(k + 1, len(points))
        else:
            _run_on(ex, points, args, rows, progress)
    finally:
        if own and ex is not None:
            ex.shutdown()
    return SweepResult(grid, int(n), int(seed), slo, [r for r in rows if r is not None])


def _run_on(ex: Any, points: list[Point], args: tuple[Any, ...], rows: list[Row | None],
            progress: Callable[[int, int], None] | None) -> None:
    """Submits every point, then fills ``rows`` in submission order. Standard futures are
    collected as they finish (the progress bar moves at the pace of the fastest); other
    futures (Dask's, which ``concurrent.futures.as_completed`` cannot wait on) one by one, in
    order. A failed point cancels the rest and raises."""
    futures = [ex.submit(run_point, pt, *args) for pt in points]
    try:
        if all(isinstance(f, Future) for f in futures):
            index = {id(f): k for k, f in enumerate(futures)}
            for done, fut in enumerate(as_completed(futures), 1):
                rows[index[id(fut)]] = fut.result()
                if progress:
                    progress(done, len(points))
        else:
            for k, fut in enumerate(futures):
                rows[k] = fut.result()
                if progress:
                    progress(k + 1, len(points))
    except BaseException:
        for fut in futures:
            cancel = getattr(fut, "cancel", None)  # a minimal future may have none
            if callable(cancel):
                cancel()
        raise


def _range_count(start: float, stop: float, step: float) -> int:
    # a stop that float division lands just under (0.3 / 0.1 = 2.9999...) still counts
    return int(math.floor((stop - start) / step + 1e-6)) + 1


def parse_rates(specs: Sequence[str], limit: int | None = MAX_POINTS) -> tuple[float, ...]:
    """Rates from the command line: numbers, or ``start:stop:step`` ranges (stop included).
    More than ``limit`` rates in all is refused, counted before any range is expanded.

    >>> parse_rates(["0.1", "0.2:0.5:0.1", "2"])
    (0.1, 0.2, 0.3, 0.4, 0.5, 2.0)
    >>> parse_rates(["0.001:1e6:0.001"])
    Traceback (most recent call last):
    ...
    ValueError: rates 0.001:1e6:0.001 make 1,000,000,000 rates, more than the limit of 10,000
    """
    parsed: list[list[float]] = []
    for s in specs:
        try:
            nums = [float(x) for x in str(s).split(":")]
        except ValueError:
            raise ValueError(f"rates must be numbers or start:stop:step, got {s!r}") from None
        if not all(math.isfinite(x) for x in nums) or not (
                len(nums) == 1 or (len(nums) == 3 and nums[2] > 0 and nums[1] >= nums[0])):
            raise ValueError(f"rates must be numbers or start:stop:step with step > 0 and stop >= start, "
                             f"got {s!r}")
        if nums[0] <= 0:
            raise ValueError(f"rates must be > 0 (requests/s), got {s!r}")
        parsed.append(nums)
    count = sum(1 if len(p) == 1 else _range_count(*p) for p in parsed)
    if limit is not None and count > limit:
        raise ValueError(f"rates {' '.join(map(str, specs))} make {count:,} rates, more than the limit of {limit:,}")
    out: list[float] = []
    for nums in parsed:
        if len(nums) == 1:
            out.append(nums[0])
        else:
            out.extend(round(nums[0] + i * nums[2], 10) for i in range(_range_count(*nums)))
    return tuple(out)


def table(result: SweepResult) -> Any:
    """The result as a rich table (one row per point)."""
    from rich.table import Table

    t = Table(title=result.heading(), title_justify="left")
    for c in ("policy", "rate", "attain", "goodput", "tok/s", "TTFT P50 s", "TTFT P99 s", "util", "rejected"):
        if c == "policy":
            t.add_column(c, overflow="fold")
        else:
            t.add_column(c, justify="right")
    for r in result.rows:
        t.add_row(r.config, f"{r.rate:g}", f"{r.attainment:.1%}", f"{r.goodput_req_s:.3f}",
                  f"{r.throughput_tok_s:.0f}", f"{r.ttft_p50_s:.2f}", f"{r.ttft_p99_s:.2f}",
                  f"{r.utilisation:.0%}", str(r.rejected))
    return t
