"""Demo 03's claims (lecture §4.2-§4.5), each with its tolerance.

The workload is the lecture's (600 chat requests, seed 0, prompts mean 512, outputs mean 256,
lognormal sigma 0.8; see servelab.workload for how sigma was chosen). Tolerances are set around
the lecture's figure where we reproduce it, and the docstring of each test says so where we do
not: the lecture's code is not published, and its tables were lost, so a match is "near".
"""

from __future__ import annotations

import pytest

from servelab import cli
from servelab import lecture
from servelab.demos import demo03

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep():
    return demo03.compute_sweep()


def test_idle_system(sweep):
    rows = {(p, lo): (ttft, tpot, e2e) for p, lo, ttft, tpot, e2e in demo03.compute_idle()}
    assert 6e-3 < rows[(128, 16)][0] < 7e-3  # "prefill 1..256 tokens about 6.1 ms"
    assert rows[(8192, 256)][0] == pytest.approx(0.2, abs=0.01)  # "prefill 8K about 0.2 s"
    for ttft, tpot, e2e in rows.values():
        assert 6.0e-3 < tpot < 6.6e-3  # TPOT nearly constant
    assert rows[(512, 2048)][2] > 12.0  # "2048 tokens take over 12 s"


def test_batch1_capacity_about_0_6_req_s_and_160_tok_s(sweep):
    c = demo03.batch1_claims(sweep)
    assert 0.55 <= c.capacity_req_s <= 0.68  # lecture: about 0.6 (ours 0.62)
    assert 155 <= c.capacity_tok_s <= 165  # lecture: about 160 (ours 162)
    assert 1.5 <= c.mean_service_s <= 1.7  # lecture: about 1.6 s of GPU per request


def test_batch1_tail_at_a_third_utilisation(sweep):
    """Lecture: P99 TTFT about 9 s at 36% utilisation. Ours: 8.5 s at 33% (rate 0.2)."""
    c = demo03.batch1_claims(sweep)
    assert 0.30 <= c.util_near_36 <= 0.42
    assert 6.5 <= c.p99_ttft_near_36 <= 11.5


def test_batch1_goodput_rises_then_falls_to_zero(sweep):
    """Lecture: goodput rises a little, then falls towards 0; at 0.6 req/s almost nothing is good.
    Its peak was 0.16 req/s; ours is 0.21 (at 0.3 req/s): the shape holds, the peak is higher."""
    c = demo03.batch1_claims(sweep)
    g = c.goodput
    best = g.index(c.max_goodput)
    assert 0 < best < len(g) - 1
    assert all(a <= b + 1e-12 for a, b in zip(g[:best], g[1:best + 1]))  # rises to the peak
    assert 0.14 <= c.max_goodput <= 0.24
    at06 = sweep.by_policy["batch 1"][sweep.rates.index(0.6)]
    assert at06.utilisation > 0.9 and at06.attainment < 0.1
    assert max(g[sweep.rates.index(0.8):]) < 0.01


def test_lecture_exercise_4_attainment_at_low_load(sweep):
    """Exercise 4(b): batch 1 attains 94% at 0.05 req/s and 89% at 0.1 req/s. Ours: 94%, 90%."""
    rows = sweep.by_policy["batch 1"]
    assert rows[0].attainment == pytest.approx(0.94, abs=0.02)
    assert rows[1].attainment == pytest.approx(0.89, abs=0.03)


def test_static_batching_throughput_3_6_9x_with_60_80_percent_seat_waste(sweep):
    """Lecture: about 3/6/9x batch 1 at overload, seat waste 60-80%. Ours: 3.0/6.2/8.4x and
    60/73/82% (B=128 a little above 80%: tolerance 0.58-0.85)."""
    c = demo03.static_claims(sweep)
    assert 2.6 <= c.speedup[8] <= 3.4
    assert 5.2 <= c.speedup[32] <= 7.0
    assert 7.6 <= c.speedup[128] <= 10.0
    for b in (8, 32, 128):
        assert 0.58 <= c.seat_waste[b] <= 0.85
        assert 6e-3 <= c.tpot_p50_s[b] <= 12e-3  # "TPOT still a few ms to 10 ms"
    assert c.seat_waste[8] < c.seat_waste[32] < c.seat_waste[128]  # the longest gets longer


def test_static_goodput_only_about_2x(sweep):
    """Lecture: goodput only about 2x (0.34 vs 0.16 req/s). Ours: 2.4x (0.49 vs 0.21): both peaks
    are higher than the lecture's, the ratio - far below the 8x throughput gain - holds."""
    c = demo03.static_claims(sweep)
    assert 1.6 <= c.goodput_ratio <= 3.0
    assert c.goodput_ratio < c.speedup[128] / 2.5
    assert 0.3 <= c.best_static_goodput <= 0.55


def test_static_ttft_at_1_req_s(sweep):
    """Lecture: at 1 req/s TTFT P50 over 1.5 s, about a third attained. Ours: P50 1.3 s, 41-42%
    attained: over the 1 s SLO but not by as much (the lecture's batching rule may wait longer)."""
    c = demo03.static_claims(sweep)
    for b in (8, 32, 128):
        assert 1.0 < c.ttft_p50_at_1[b] < 2.0
        assert 0.25 <= c.attainment_at_1[b] <= 0.5


def test_exercise_5_numbers_are_near(sweep):
    """Exercise 5 at 16 req/s: B=32 956 -> 1160 tok/s, B=128 1475 -> 2468 tok/s when riders stop
    computing. Ours: 1002 -> 1203 and 1361 -> 2243 (within 10%)."""
    c = demo03.static_claims(sweep)
    thr = {b: sweep.overload[demo03.label(b)].throughput_tok_s for b in (32, 128)}
    assert thr[32] == pytest.approx(956, rel=0.1) and c.no_ride_tok_s[32] == pytest.approx(1160, rel=0.1)
    assert thr[128] == pytest.approx(1475, rel=0.1) and c.no_ride_tok_s[128] == pytest.approx(2468, rel=0.1)
    assert c.no_ride_ttft_p50[128] < sweep.overload["static B=128"].ttft.p50


def test_cost_per_million_tokens(sweep):
    """Lecture: $5.14 at batch 1 down to $0.07 at the ideal bound, over 70x."""
    cost = demo03.compute_cost(sweep)
    assert cost["batch 1"] == pytest.approx(5.14, abs=0.1)
    assert cost["ideal (B=128, no waste)"] == pytest.approx(0.07, abs=0.006)
    assert cost["batch 1"] / cost["ideal (B=128, no waste)"] > 70
    assert cost["batch 1"] > cost["static B=8"] > cost["static B=32"] > cost["static B=128"]


def test_azure_trace_replay():
    conv = demo03.compute_trace("conv")
    assert conv["batch 1"].utilisation > 0.99  # 5.5 req/s against 0.6 req/s of capacity
    assert conv["static B=128"].attainment > conv["batch 1"].attainment
    assert all(s.n == 19366 for s in conv.values())


def test_continuous_batching_beats_static_on_goodput(sweep):
    """Part 6, which the lecture only promises: on the same requests under the same SLO
    (TTFT <= 1 s, TPOT <= 50 ms), continuous batching's goodput beats every static batch size
    at every swept rate from 1 req/s on, and its best is over 10x static batching's best
    (ours: about 45x, 22 req/s at rate 48 against 0.49). Below its capacity it meets the SLO
    for every request: no request waits for a batch to fill or to drain."""
    c = demo03.compute_continuous(sweep)
    for k, rate in enumerate(sweep.rates):
        best_static = max(sweep.by_policy[demo03.label(b)][k].goodput_req_s for b in lecture.BATCH_SIZES)
        if rate >= 1.0:
            assert c.by_rate[k].goodput_req_s > best_static, rate
        assert c.by_rate[k].attainment >= 0.99, rate  # up to 4 req/s
    assert c.goodput_ratio > 10
    assert c.max_goodput_rate > lecture.OVERLOAD_RATE  # its knee lies past static's overload
    assert c.overload.attainment > 0.99 and c.preemptions_at_overload == 0


def test_cli_prints_every_part_and_writes_plots(tmp_path, capsys):
    assert cli.main(["demo", "03", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for part in ("1. An idle system", "2. Batch 1", "3. Static batching", "4. Cost per million",
                 "5a. Azure conv trace", "5b. Azure code trace", "Exercise 5 preview", "(lecture:",
                 "6. Continuous batching beside static batching"):
        assert part in out, part
    for name in ("demo03_ttft_vs_rate.png", "demo03_goodput_vs_rate.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name


def test_figures_that_miss_the_lecture_are_marked(sweep):
    """a figure outside its tolerance says so, with the reason; one within does not."""
    from rich.console import Console
    console = Console(width=400, record=True)
    demo03.part3_static(console, sweep)
    demo03.part2_batch1(console, sweep)
    lines = console.export_text().splitlines()
    best_static = next(line for line in lines if "best static" in line)
    assert "(lecture 0.34 req/s: MISSES; length spreads unpublished" in best_static
    ttft = next(line for line in lines if "TTFT P50 1.27 s" in line)
    assert "(lecture over 1.50 s: MISSES" in ttft
    p99 = next(line for line in lines if "P99 TTFT" in line)  # read at 0.22 req/s, as the lecture
    assert "at 0.22 req/s" in p99 and "MISSES" not in p99
    assert "MISSES" not in next(line for line in lines if "B=32: riding" in line)
