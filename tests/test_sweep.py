"""servelab.sweep and ``servelab sweep``: the grid, determinism across executors, outputs, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import Executor, Future, ThreadPoolExecutor

import pytest

from servelab import cli, lecture
from servelab import sweep as sw
from servelab.demos import demo03
from servelab import metrics as mx
from servelab.hw_model import H100, LLAMA3_8B
from servelab.engine.speculative import LLAMA32_1B
from servelab.serving_core import Speculation, run_continuous_batching
from servelab.workload import chat_requests, chat_sessions

GRID = sw.Grid(policies=("batch1", "static", "early_reject"), rates=(0.2, 0.6), batch_size=(4, 16),
               ride_along=(True, False), estimator=("mean", "sigma=0.5"))


def test_grid_points_in_order():
    pts = GRID.points()
    assert len(pts) == 2 + 2 * 2 * 2 + 2 * 2
    assert [p.rate for p in pts[:2]] == [0.2, 0.6]
    assert pts[2].config == "static B=4" and pts[4].config == "static B=4 no ride"
    assert pts[-1].config == "batch 1, early reject (sigma=0.5)"


def test_jobs_1_and_2_and_any_executor_give_identical_results():
    one = sw.sweep(GRID, n=60, jobs=1)
    two = sw.sweep(GRID, n=60, jobs=2)
    with ThreadPoolExecutor(3) as pool:
        three = sw.sweep(GRID, n=60, executor=pool)
    assert one.rows == two.rows == three.rows
    assert one.to_csv() == two.to_csv() and one.to_json() == three.to_json()


class _Eager(Executor):
    """Runs each point at submission and hands back a finished future: ``as_completed`` then
    yields them in set order, not grid order, which the sweep must undo."""

    def submit(self, fn, /, *args, **kwargs):
        f: Future = Future()
        f.set_result(fn(*args, **kwargs))
        return f


def test_rows_come_back_in_grid_order_whatever_the_completion_order():
    want = sw.sweep(GRID, n=30)
    got = sw.sweep(GRID, n=30, executor=_Eager())
    assert [r.config for r in got.rows] == [p.config for p in GRID.points()]
    assert got.rows == want.rows


def test_a_point_is_what_demo03_computes():
    res = sw.sweep(sw.Grid(policies=("static",), rates=(1.0,), batch_size=(32,)), n=600)
    want = mx.summarize(demo03.simulate(32, demo03.workload(1.0)), lecture.LECTURE_SLO)
    row = res.rows[0]
    assert (row.attainment, row.goodput_req_s, row.ttft_p99_s) == (want.attainment, want.goodput_req_s,
                                                                    want.ttft.p99)


def test_a_continuous_point_is_run_continuous_batching():
    grid = sw.Grid(policies=("continuous",), rates=(2.0,), max_num_seqs=(4, 64), chunked_prefill=(False, True))
    assert [p.config for p in grid.points()] == ["continuous seqs=4", "continuous seqs=4 chunked",
                                                 "continuous seqs=64", "continuous seqs=64 chunked"]
    res = sw.sweep(grid, n=200)
    reqs = chat_requests(200, 2.0, 0)
    for point, row in zip(grid.points(), res.rows):
        p = dict(point.params)
        want = mx.summarize(run_continuous_batching(reqs, LLAMA3_8B, H100, max_num_seqs=p["max_num_seqs"],
                                                    chunked_prefill=p["chunked_prefill"]), sw.SLO(1.0, 0.05))
        assert (row.attainment, row.goodput_req_s, row.ttft_p99_s) == (want.attainment, want.goodput_req_s,
                                                                        want.ttft.p99), point
    # 4 seats at 2 req/s queue up; 64 do not: the axis really reaches the simulator
    assert res.rows[0].ttft_p99_s > res.rows[2].ttft_p99_s


def test_a_prefix_point_is_run_continuous_batching_on_chat_sessions():
    grid = sw.Grid(policies=("prefix",), rates=(24.0,), shared_fraction=(0.0, 1.0))
    assert [p.config for p in grid.points()] == ["shared 0, no cache", "shared 1, no cache",
                                                 "shared 0, cache", "shared 1, cache"]
    res = sw.sweep(grid, n=150)
    for point, row in zip(grid.points(), res.rows):
        p = dict(point.params)
        reqs, sp = chat_sessions(150, 24.0, 0, shared_fraction=p["shared_fraction"])
        want = mx.summarize(run_continuous_batching(reqs, LLAMA3_8B, H100, prefix_caching=p["prefix_caching"],
                                                    shared_prefixes=sp), sw.SLO(1.0, 0.05))
        assert (row.ttft_p50_s, row.throughput_tok_s) == (want.ttft.p50, want.throughput_tok_s), point
    off, on = res.rows[1], res.rows[3]  # a shared system prompt, without and with the cache
    assert on.ttft_p50_s < 0.5 * off.ttft_p50_s
    assert res.rows[0].ttft_p50_s == res.rows[2].ttft_p50_s  # nothing shared: nothing to gain


def test_a_speculative_point_is_continuous_batching_with_speculation():
    grid = sw.Grid(policies=("speculative",), rates=(4.0,), spec_k=(0, 4), acceptance=(0.3, 0.9))
    assert [p.config for p in grid.points()] == ["speculative k=0 a=0.3", "speculative k=0 a=0.9",
                                                 "speculative k=4 a=0.3", "speculative k=4 a=0.9"]
    res = sw.sweep(grid, n=60)
    plain = sw.sweep(sw.Grid(policies=("continuous",), rates=(4.0,)), n=60).rows[0]
    assert res.rows[0].tpot_p50_s == res.rows[1].tpot_p50_s == plain.tpot_p50_s  # k = 0: plain
    # the better the draft, the faster each token; a poor one at k = 4 costs more than it saves
    assert res.rows[3].tpot_p50_s < plain.tpot_p50_s < res.rows[2].tpot_p50_s
    for point, row in zip(grid.points()[2:], res.rows[2:]):
        p = dict(point.params)
        want = mx.summarize(run_continuous_batching(
            chat_requests(60, 4.0, 0), LLAMA3_8B, H100,
            speculative=Speculation(p["spec_k"], LLAMA32_1B, p["acceptance"], 0)), sw.SLO(1.0, 0.05))
        assert row.tpot_p50_s == want.tpot.p50, point


def test_progress_is_reported():
    seen = []
    sw.sweep(sw.Grid(policies=("batch1",), rates=(0.1, 0.2, 0.3)), n=10, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize("kwargs, match", [
    ({"policies": ("fifo",)}, "policies must be among .* got 'fifo'"),
    ({"policies": ()}, "policies must not be empty"),
    ({"rates": ()}, "rates must not be empty"),
    ({"rates": (0.5, -1.0)}, r"rates must hold positive finite numbers, got -1.0"),
    ({"rates": (float("nan"),)}, "rates must hold positive finite numbers, got nan"),
    ({"batch_size": (0,)}, "batch_size must hold positive integers, got 0"),
    ({"max_wait_s": (-0.1,)}, r"max_wait_s must hold finite numbers >= 0, got -0.1"),
    ({"ride_along": ("yes",)}, "ride_along must hold True or False, got 'yes'"),
    ({"policies": ("early_reject",), "estimator": ("median",)}, "estimator must be 'mean', 'oracle' or 'sigma=<number>', got 'median'"),
    ({"policies": ("early_reject",), "estimator": ("sigma=-1",)}, "sigma must be a finite number >= 0, got -1.0"),
    ({"policies": ("batch1",), "batch_size": (8,)}, "batch_size was given, but none of the policies"),
    ({"policies": ("continuous",), "max_num_seqs": (0,)}, "max_num_seqs must hold positive integers, got 0"),
    ({"policies": ("continuous",), "chunked_prefill": (1,)}, "chunked_prefill must hold True or False, got 1"),
    ({"policies": ("static",), "max_num_seqs": (8,)}, "max_num_seqs was given, but none of the policies"),
    ({"policies": ("prefix",), "shared_fraction": (1.5,)}, r"shared_fraction must hold numbers in \[0, 1\], got 1.5"),
    ({"policies": ("prefix",), "prefix_caching": ("on",)}, "prefix_caching must hold True or False, got 'on'"),
    ({"policies": ("continuous",), "shared_fraction": (0.5,)}, "shared_fraction was given, but none of the policies"),
    ({"batch_size": (True,)}, "batch_size must hold positive integers, got True"),
    ({"policies": ("speculative",), "spec_k": (65,)}, r"spec_k must hold integers in \[0, 64\], got 65"),
    ({"policies": ("speculative",), "acceptance": (True,)}, r"acceptance must hold numbers in \[0, 1\], got True"),
    ({"policies": ("tiered",), "host_blocks": ((1 << 24) + 1,)},
     r"host_blocks must hold integers in \[0, 16777216\], got 16777217"),
    ({"policies": ("tiered",), "host_policy": ("fifo",)}, "host_policy must hold 'lru' or 'hits', got 'fifo'"),
])
def test_bad_grids_name_the_value(kwargs, match):
    args = {"policies": ("batch1", "static"), "rates": (0.5,), **kwargs}
    with pytest.raises(ValueError, match=match):
        sw.Grid(**args)


def test_bad_sweep_arguments():
    g = sw.Grid(policies=("batch1",), rates=(0.5,))
    with pytest.raises(ValueError, match="jobs must be a positive integer, got 0"):
        sw.sweep(g, jobs=0)
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        sw.sweep(g, n=0)  # no requests: every summary would be NaN
    with pytest.raises(ValueError, match="rates must be numbers or start:stop:step"):
        sw.parse_rates(["0.1:x"])
    with pytest.raises(ValueError, match="step > 0"):
        sw.parse_rates(["1:0.5:0.1"])


def test_cli_writes_table_csv_json_and_plots(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = cli.main(["sweep", "--policy", "batch1", "static", "--batch-size", "8", "--rates", "0.2:0.4:0.2",
                     "--n", "40", "--jobs", "2", "--out", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "static B=8" in text and "wrote" in text
    names = sorted(p.name for p in out.iterdir())
    assert names == ["sweep.csv", "sweep.json", "sweep_goodput_vs_rate.png", "sweep_ttft_vs_rate.png"]
    doc = json.loads((out / "sweep.json").read_text())
    assert [r["rate"] for r in doc["rows"]] == [0.2, 0.4, 0.2, 0.4]
    lines = (out / "sweep.csv").read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("policy,config,rate")
    umask = os.umask(0)
    os.umask(umask)
    for name in ("sweep.csv", "sweep.json"):  # outputs hold no secret: the usual permissions
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


def test_cli_bad_arguments_exit_2(tmp_path, capsys):
    assert cli.main(["sweep", "--policy", "batch1", "--batch-size", "8", "--out", str(tmp_path)]) == 2
    assert "--batch-size applies to --policy static" in capsys.readouterr().err
    assert cli.main(["sweep", "--rates", "0", "--out", str(tmp_path)]) == 2
    assert "--rates must be > 0" in capsys.readouterr().err


class _Deferred:
    """A future that is not a ``concurrent.futures.Future`` (as Dask's and Ray's are not)."""

    def __init__(self, fn, args):
        self._fn, self._args = fn, args

    def result(self):
        return self._fn(*self._args)

    def cancel(self):
        return True


class _DeferredExecutor:
    """Anything with ``submit``: runs each point when its result is asked for."""

    def submit(self, fn, *args):
        return _Deferred(fn, args)


def test_any_submit_executor_gives_rows_in_submission_order():
    seen = []
    got = sw.sweep(GRID, n=30, executor=_DeferredExecutor(), progress=lambda d, t: seen.append(d))
    assert got.rows == sw.sweep(GRID, n=30).rows
    assert seen == list(range(1, len(GRID) + 1))


def test_a_bad_executor_is_named():
    with pytest.raises(TypeError, match="executor must be a concurrent.futures.Executor or a Dask distributed.Client"):
        sw.sweep(GRID, executor=object())


def _distributed():
    try:
        import distributed
    except ImportError:
        # `make test` installs the `cluster` extra and sets this: there, a missing Dask fails
        if os.environ.get("SERVELAB_REQUIRE_CLUSTER"):
            raise
        pytest.skip("distributed is not installed (pip install 'servelab[cluster]'; make test installs it)")
    return distributed


# the cluster's part, in a process of its own: the sweeps through a Dask client and through its
# executor, their CSVs and the progress seen; then the process ends without Dask's own shutdown
# (LocalCluster.close waited for ever once, on a loaded 2-core machine: Dask's teardown, not
# the sweep, and nothing here is about it)
CLUSTER_SWEEP = """
import json, os
import distributed
from servelab import sweep as sw
grid = sw.Grid(policies=("batch1", "static", "continuous"), rates=(0.2, 2.0), batch_size=(8, 32))
seen = []
cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)
client = distributed.Client(cluster)
remote = sw.sweep(grid, n=60, executor=client, progress=lambda d, t: seen.append(d))
via_executor = sw.sweep(grid, n=60, executor=client.get_executor())
print(json.dumps({"remote": remote.to_csv(), "via_executor": via_executor.to_csv(), "seen": seen}), flush=True)
os._exit(0)
"""


def test_a_sweep_on_a_dask_local_cluster_equals_the_local_run():
    _distributed()
    grid = sw.Grid(policies=("batch1", "static", "continuous"), rates=(0.2, 2.0), batch_size=(8, 32))
    local = sw.sweep(grid, n=60)
    run = subprocess.run([sys.executable, "-c", CLUSTER_SWEEP], capture_output=True, text=True,
                         timeout=600)  # a bound against a hang only
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["remote"] == got["via_executor"] == local.to_csv()
    assert got["seen"] == list(range(1, len(grid) + 1))


def test_len_counts_points_without_making_them():
    for grid in (GRID, sw.Grid(policies=("continuous",), rates=(1.0, 2.0, 3.0), max_num_seqs=(4, 8),
                               chunked_prefill=(False, True))):
        assert len(grid) == len(grid.points())
    big = sw.Grid(policies=("static",), rates=tuple(range(1, 101)), batch_size=tuple(range(1, 101)),
                  max_wait_s=(0.0, 0.1))
    assert len(big) == 20_000
    with pytest.raises(ValueError, match="the grid has 20,000 points, more than max_points=10,000"):
        sw.sweep(big)
