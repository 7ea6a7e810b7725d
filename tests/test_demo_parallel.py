"""Demo parallel's claims, on the numbers it prints: tensor parallelism trades memory time for
all-reduce time; data parallelism's goodput grows with replicas; disaggregation wins with long
prompts under a tight TPOT and loses when the KV transfer dominates over a network; the demo runs
from the CLI and writes its plots."""

from __future__ import annotations

import io

from rich.console import Console

from servelab import cli
from servelab.demos import demo_parallel as dp


def test_tp_memory_time_shrinks_while_all_reduces_grow():
    rows = dp.compute_tp()
    assert [r.t for r in rows] == list(dp.TP_DEGREES)
    assert rows[0].comm_ms == 0 and rows[0].kv_room_tokens <= 0  # 70B does not fit one H100
    assert rows[1].kv_room_tokens == 8827  # exercise 1(d): two H100s, 8,827 tokens of KV room
    for a, b in zip(rows, rows[1:]):
        assert b.memory_ms < a.memory_ms and b.comm_ms > a.comm_ms and b.step_ms < a.step_ms


def test_data_parallel_goodput_grows_with_replicas():
    rows = dp.compute_dp(per_card=150)
    for router in ("round_robin", "least_tokens"):
        rates = [r.max_rate[router] for r in rows]
        assert rates == sorted(rates) and rates[-1] >= 4 * rates[0] > 0


def test_prefix_affinity_computes_less_than_round_robin():
    got = dp.compute_affinity(n=30)
    (rr, rr_cached), (pa, pa_cached) = got["round_robin"], got["prefix_affinity"]
    assert pa < rr and pa_cached > rr_cached


def test_disaggregation_wins_with_long_prompts_and_tight_tpot_and_loses_when_transfer_bound():
    cells = dp.compute_map(n=200)
    v = {(w, s, link): (colo, rate) for w, s, link, colo, _, rate in dp.verdicts(cells)}
    colo, disagg = v[("long 4096/128", "tight TPOT", "NVLink")]
    assert disagg > colo
    colo, disagg = v[("long 4096/4", "tight TPOT", "400G")]
    assert disagg < colo  # 512 MiB of KV over 50 GB/s is 10.7 ms, spread over 3 decode tokens
    colo, disagg = v[("chat 512/256", "lecture", "NVLink")]
    assert disagg <= colo  # short prompts and a loose TPOT: nothing to win


def test_at_small_load_a_split_only_costs():
    small = dp.compute_small_load(n=200)
    assert small.split_tpot_ms > small.colo_tpot_ms


def test_the_demo_runs_from_the_cli(tmp_path, monkeypatch):
    # the same code on fewer requests, so the test stays cheap
    monkeypatch.setattr(dp, "DP_REQUESTS_PER_CARD", 100)
    monkeypatch.setattr(dp, "MAP_REQUESTS", 100)
    out = io.StringIO()
    monkeypatch.setattr(cli, "Console", lambda: Console(file=out, width=140))
    assert cli.main(["demo", "parallel", "--out", str(tmp_path)]) == 0
    text = out.getvalue()
    for name in ("demo_parallel_tp.png", "demo_parallel_dp.png", "demo_parallel_disagg.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "7.4x" in text and "12.6x" in text and "Where disaggregation wins" in text
    assert "prefix-affinity routing computes" in text
