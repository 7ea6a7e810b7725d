"""servelab.policies: a policy is one record plus one run function. A toy policy registered here
is swept from ``servelab sweep`` (its flag, its help, its checks) and from ``Grid`` with nothing
else changed. Cheap: a few 20-request points on the fast simulator (well under a second)."""

from __future__ import annotations

import json

import pytest

from servelab import cli, policies
from servelab import metrics as mx
from servelab import sweep as sw
from servelab.hw_model import H100, LLAMA3_8B
from servelab.policies import POSITIVE_INT, Axis, Job, Policy
from servelab.serving_core import SimResult, run_static_batching
from servelab.workload import chat_requests


def run_fixed(job: Job) -> SimResult:
    """Static batching that never waits: a batch starts with whoever is there."""
    return run_static_batching(job.requests, job.model, job.gpu, int(job.params["fixed_b"]), 0.0,
                               efficiency=job.efficiency)


TOY = Policy("fixed", run_fixed, lambda p: f"fixed B={p['fixed_b']}",
             axes=(Axis("fixed_b", (16,), POSITIVE_INT, "batch size"),))


@pytest.fixture
def toy():
    policies.register(TOY)
    try:
        yield TOY
    finally:
        policies.unregister("fixed")


def test_a_registered_policy_is_swept_from_the_command_line(toy, tmp_path, capsys):
    code = cli.main(["sweep", "--policy", "fixed", "batch1", "--fixed-b", "4", "64", "--rates", "0.5", "2",
                     "--n", "20", "--no-plots", "--format", "json", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "fixed B=4" in out and "fixed B=64" in out
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    assert [(r["policy"], r["config"], r["rate"]) for r in rows] == [
        ("fixed", "fixed B=4", 0.5), ("fixed", "fixed B=4", 2.0), ("fixed", "fixed B=64", 0.5),
        ("fixed", "fixed B=64", 2.0), ("batch1", "batch 1", 0.5), ("batch1", "batch 1", 2.0)]
    for r in rows[:4]:  # each row is the run function's result on demo 03's workload, nothing else
        want = mx.summarize(run_fixed(Job(chat_requests(20, r["rate"], 0), {"fixed_b": r["params"]["fixed_b"]},
                                          LLAMA3_8B, H100)), sw.SLO(1.0, 0.05))
        assert (r["attainment"], r["ttft_p99_s"], r["n"]) == (want.attainment, want.ttft.p99, want.n)
    assert rows[0]["ttft_p50_s"] != rows[2]["ttft_p50_s"]  # the axis reached the run function


def test_its_flag_has_help_and_its_check(toy, tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    assert "fixed: batch size (16 if not given)" in " ".join(capsys.readouterr().out.split())
    assert cli.main(["sweep", "--policy", "fixed", "--fixed-b", "0", "--out", str(tmp_path)]) == 2
    assert "argument --fixed-b: must be a positive integer, got '0'" in capsys.readouterr().err
    assert cli.main(["sweep", "--policy", "batch1", "--fixed-b", "8", "--out", str(tmp_path)]) == 2
    assert "--fixed-b applies to --policy fixed, which is not among --policy batch1" in capsys.readouterr().err


def test_the_grid_takes_its_axis_and_its_default(toy):
    g = sw.Grid(policies=("fixed",), rates=(1.0,))
    assert g.fixed_b == (16,) and [p.config for p in g.points()] == ["fixed B=16"]
    with pytest.raises(ValueError, match="fixed_b must hold positive integers, got 0"):
        sw.Grid(policies=("fixed",), rates=(1.0,), fixed_b=(0,))
    with pytest.raises(ValueError, match="fixed_b was given, but none of the policies"):
        sw.Grid(policies=("batch1",), rates=(1.0,), fixed_b=(8,))


def test_gone_once_unregistered():
    assert "fixed" not in sw.POLICIES
    with pytest.raises(TypeError, match="Grid got no such axis 'fixed_b'"):
        sw.Grid(policies=("batch1",), rates=(1.0,), fixed_b=(8,))


@pytest.mark.parametrize("bad, match", [
    (Policy("static", run_fixed, str), "policy 'static' is registered already"),
    (Policy("toy", run_fixed, str, (Axis("rates", (1,), POSITIVE_INT, "x"),)), "axis 'rates' of policy 'toy' is taken by the grid"),
    (Policy("toy", run_fixed, str, (Axis("batch_size", (8,), POSITIVE_INT, "x"),)),
     r"axis 'batch_size' of policy 'toy' is taken by \['static'\]"),
])
def test_a_clashing_record_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        policies.register(bad)
    assert "toy" not in policies.REGISTRY
