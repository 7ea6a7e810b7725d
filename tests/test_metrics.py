"""servelab.metrics on hand-made results."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servelab import metrics as m
from servelab import serving_core as sc
from servelab.hw_model import H100, LLAMA3_8B
from servelab.workload import Requests, chat_requests

SLO = m.SLO(1.0, 0.05)


def fake(arrival, first, finish, output_len, *, batch_id=None, rejected=None, busy=1.0, flops=0.0):
    n = len(arrival)
    reqs = Requests(arrival, [1] * n, output_len)
    return sc.SimResult(
        policy="static", params={"batch_size": 2, "max_wait_s": 0.2, "ride_along": True},
        requests=reqs, model=LLAMA3_8B, gpu=H100, efficiency=sc.DEFAULT_EFFICIENCY,
        start_s=np.array(first, dtype=float), first_token_s=np.array(first, dtype=float),
        finish_s=np.array(finish, dtype=float),
        rejected=np.zeros(n, bool) if rejected is None else np.array(rejected),
        batch_id=np.arange(n) if batch_id is None else np.array(batch_id),
        busy_s=busy, flops=flops, n_steps=1, peak_kv_tokens=0)


def test_latencies_attainment_goodput_by_hand():
    # r0: TTFT 0.5, TPOT (3.5-0.5)/(61-1)=0.05 -> good (both at the limit)
    # r1: TTFT 1.5 -> late;  r2: one token, TTFT 0.2 -> good, TPOT NaN
    # r3: TTFT 0.1, TPOT 0.06 -> too slow
    r = fake([0.0, 0.0, 1.0, 2.0], [0.5, 1.5, 1.2, 2.1], [3.5, 2.5, 1.2, 8.1], [61, 11, 1, 101], busy=4.05)
    assert m.ttft(r).tolist() == [0.5, 1.5, pytest.approx(0.2), pytest.approx(0.1)]
    t = m.tpot(r)
    assert t[0] == 0.05 and t[1] == 0.1 and math.isnan(t[2]) and t[3] == pytest.approx(0.06)
    assert m.e2e(r).tolist() == [3.5, 2.5, pytest.approx(0.2), pytest.approx(6.1)]
    assert m.meets_slo(r, SLO).tolist() == [True, False, True, False]
    assert m.attainment(r, SLO) == 0.5
    assert m.span_s(r) == 8.1
    assert m.goodput(r, SLO) == 2 / 8.1
    assert m.throughput_tok_s(r) == (61 + 11 + 1 + 101) / 8.1
    assert m.throughput_req_s(r) == 4 / 8.1
    assert m.utilisation(r) == 4.05 / 8.1
    assert m.percentiles(m.tpot(r)).p50 == pytest.approx(0.06)  # NaN left out
    assert m.attainment(r, m.SLO(ttft_s=2.0)) == 1.0  # TPOT unconstrained


def test_rejected_requests_count_as_missed_and_are_not_served():
    r = fake([0.0, 1.0], [0.1, math.nan], [0.12, math.nan], [2, 2], rejected=[False, True],
             batch_id=[0, -1])
    assert m.attainment(r, SLO) == 0.5
    assert m.throughput_req_s(r) == 1 / 1.0  # span runs to the last arrival (1.0)
    assert m.percentiles(m.ttft(r)).p99 == pytest.approx(0.1)


def test_seat_waste_cost_and_mfu():
    # batch 0 = {L=2, L=5}: 2 seats x 4 decode steps, 1 + 4 useful; batch 1 = {L=3}: no waste
    r = fake([0.0, 0.0, 0.0], [1.0, 1.0, 2.0], [1.5, 3.0, 3.6], [2, 5, 3], batch_id=[0, 0, 1],
             flops=989e12 * 0.36)
    assert m.seat_waste(r) == 1 - (1 + 4 + 2) / (2 * 4 + 1 * 2)
    assert m.cost_per_million_tokens(r, 3.0) == pytest.approx(3.0 / 3600 * 3.6 / 10 * 1e6)
    assert m.mfu(r) == pytest.approx(0.1)
    assert m.seat_waste(sc.run_batch1(chat_requests(n=50), LLAMA3_8B, H100)) == 0.0
    with pytest.raises(ValueError, match="usd_per_gpu_hour must be a finite number >= 0, got -1"):
        m.cost_per_million_tokens(r, -1)


def test_itl_comes_from_the_trace():
    reqs = Requests([0.0, 0.0], [16, 16], [3, 2])
    r = sc.run_static_batching(reqs, LLAMA3_8B, H100, 2, trace=True)
    itl = m.itl(r)
    assert len(itl) == 2 + 1  # gaps: 2 for r0, 1 for r1
    # ITL means per request are the TPOTs
    assert np.isclose(itl[[0, 2]].mean(), m.tpot(r)[0], rtol=1e-12)
    with pytest.raises(ValueError, match="trace=True"):
        m.itl(sc.run_batch1(reqs, LLAMA3_8B, H100))


@pytest.mark.parametrize("ttft, tpot, name, shown", [(0, 0.05, "ttft_s", "0"), (1.0, -1, "tpot_s", "-1"),
                                                   (math.nan, 1.0, "ttft_s", "nan"), (1.0, "x", "tpot_s", "'x'")])
def test_slo_must_be_positive(ttft, tpot, name, shown):
    with pytest.raises(ValueError, match=rf"^{name} must be a positive number \(math.inf for none\), got {shown}$"):
        m.SLO(ttft, tpot)


def test_goodput_definition_2_search():
    calls = []

    def simulate(rate):  # attainment 1.0 up to rate 0.3, then 0: a cliff at 0.3
        calls.append(rate)
        ok = rate <= 0.3
        return fake([0.0], [0.1 if ok else 5.0], [0.12 if ok else 5.02], [2])

    g = m.max_rate_at_attainment(simulate, SLO, rates=[0.1, 0.2, 0.4, 0.8], refine=6)
    assert g.bracketed and 0.3 - 0.2 / 64 <= g.rate <= 0.3
    assert calls[:3] == [0.1, 0.2, 0.4] and 0.8 not in calls  # stops at the first failure
    assert m.max_rate_at_attainment(simulate, SLO, rates=[0.5, 1.0]).rate == 0.0
    top = m.max_rate_at_attainment(simulate, SLO, rates=[0.1, 0.2])
    assert top.rate == 0.2 and not top.bracketed
    with pytest.raises(ValueError, match="rates must be positive, finite and increasing"):
        m.max_rate_at_attainment(simulate, SLO, rates=[0.2, 0.1])
    with pytest.raises(ValueError, match="target must be in"):
        m.max_rate_at_attainment(simulate, SLO, target=0)


def test_summary_of_a_real_run():
    r = sc.run_static_batching(chat_requests(n=200, rate=1.0), LLAMA3_8B, H100, 8)
    s = m.summarize(r, SLO)
    assert s.label == "static B=8" and s.n == 200 and s.n_rejected == 0
    assert 0 < s.utilisation <= 1 and 0 < s.mfu < 1 and 0 <= s.seat_waste < 1
    assert s.ttft.p50 <= s.ttft.p90 <= s.ttft.p99
