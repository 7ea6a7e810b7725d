"""The multi-card simulators (course project §8): data parallelism and prefill/decode
disaggregation. Properties: one replica is today's one-card simulator bit for bit; Rust equals
the pure-Python reference (``servelab.reference.parallel``) on random workloads; with an
instant link and free pools, disaggregation never gives a later first token than colocated
serving."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import _core, hw_model, metrics
from servelab import parallel_sim as ps
from servelab import serving_core as sc
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B
from servelab.reference import parallel as ref
from servelab.workload import Requests, chat_requests
from assignment_strategies import workloads

# Per-card pools from roomy to tight (preemption, rejections), as in test_sim_continuous.py.
card_params = st.fixed_dictionaries({
    "max_num_seqs": st.one_of(st.integers(1, 4), st.just(256)),
    "max_num_batched_tokens": st.one_of(st.integers(1, 64), st.sampled_from([512, 8192])),
    "block_size": st.sampled_from([1, 4, 16]),
    "num_blocks": st.one_of(st.integers(1, 40), st.just(400)),  # the reference pool is Python objects
    "chunked_prefill": st.booleans(),
})
routers = st.sampled_from(ps.ROUTERS)
small = workloads(max_n=10, max_prompt=64, max_output=30)


def assert_same_dict(rust: dict, py: dict) -> None:
    """Every key of the Rust dict equals the reference's: numpy columns bit for bit (NaN where
    NaN), totals exactly."""
    for k, v in rust.items():
        if v is None:
            continue
        if isinstance(v, np.ndarray):
            assert np.array_equal(v, py[k], equal_nan=True), (k, v, py[k])
        else:
            assert v == py[k], (k, v, py[k])


def rust_dp(reqs: Requests, n: int, router: str, p: dict) -> dict:
    return _core.sim_data_parallel((LLAMA3_8B, H100, DEFAULT_EFFICIENCY), reqs, dict(card=p, n_replicas=n, router=router))


def rust_pd(reqs: Requests, n_p: int, n_d: int, router: str, p: dict, bw: float, lat: float) -> dict:
    return _core.sim_disaggregated((LLAMA3_8B, H100, DEFAULT_EFFICIENCY), reqs,
                                  dict(card=p, n_prefill=n_p, n_decode=n_d, router=router, link=(bw, lat)))


@given(reqs=workloads(max_n=24, max_prompt=512, max_output=60), p=card_params, router=routers)
def test_one_replica_is_todays_simulator(reqs, p, router):
    one = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, **p)
    dp = ps.run_data_parallel(reqs, LLAMA3_8B, H100, 1, router=router, **p).overall
    for k in ("start_s", "first_token_s", "finish_s", "rejected", "batch_id", "reject_code", "n_preemptions"):
        assert np.array_equal(getattr(dp, k), getattr(one, k), equal_nan=True), k
    for k in ("busy_s", "flops", "n_steps", "peak_kv_tokens", "peak_kv_blocks"):
        assert getattr(dp, k) == getattr(one, k), k


@given(reqs=small, p=card_params, n=st.integers(1, 3), router=routers)
def test_data_parallel_equals_the_reference(reqs, p, n, router):
    py = ref.run_data_parallel(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, n_replicas=n, router=router, **p)
    assert_same_dict(rust_dp(reqs, n, router, p), py)


links = st.sampled_from([(math.inf, 0.0), (50e9, 5e-6), (1e8, 1e-3)])


@given(reqs=small, p=card_params, n_p=st.integers(1, 3), n_d=st.integers(1, 3), router=routers, link=links)
def test_disaggregation_equals_the_reference(reqs, p, n_p, n_d, router, link):
    py = ref.run_disaggregated(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, n_prefill=n_p, n_decode=n_d,
                               router=router, link_bandwidth=link[0], link_latency_s=link[1], **p)
    assert_same_dict(rust_pd(reqs, n_p, n_d, router, p, *link), py)


@given(reqs=workloads(max_n=20, max_prompt=2048, max_output=60), p=card_params,
       n=st.integers(1, 3), router=routers, n_d=st.integers(1, 3))
def test_free_pools_and_an_instant_link_never_delay_the_first_token(reqs, p, n, router, n_d):
    """"Free pools": every request has a prefill card of its own (``n_prefill`` = number of
    requests, round robin), whose budget takes its whole prompt in one step (no chunking), so
    its prefill starts at its arrival and runs alone. Then its first token comes after exactly
    one prefill priced alone, and colocated serving (any number of cards, any router, chunked or
    not) cannot do better: a request's prefill there runs in steps that start no earlier, each
    costing at least its chunk alone (a step's price grows with what it holds), and chunks
    together cost at least the whole prompt in one step (each repeats the weight reads and the
    0.5 ms overhead). The decode pool and the link only act after the first token."""
    colo = ps.run_data_parallel(reqs, LLAMA3_8B, H100, n, router=router, **p).overall
    free = dict(p, chunked_prefill=False, max_num_batched_tokens=1 << 20, max_num_seqs=256)
    pd = ps.run_disaggregated(reqs, LLAMA3_8B, H100, max(len(reqs), 1), n_d, link=hw_model.INSTANT_LINK,
                              **free).overall
    both = ~colo.rejected & ~pd.rejected
    assert (pd.first_token_s[both] <= colo.first_token_s[both]).all()
    # what the disaggregated first token is: one prefill, alone, from the arrival
    for i in np.flatnonzero(~pd.rejected):
        alone = hw_model.step_cost(LLAMA3_8B, H100, [(int(reqs.prompt_len[i]), 0)]).time_s
        assert pd.first_token_s[i] == reqs.arrival_s[i] + alone


def test_the_link_is_priced_by_kv_transfer_s():
    reqs = chat_requests(n=40, rate=4.0, seed=3)
    for link in (hw_model.NVLINK_H100, hw_model.NETWORK_400G, hw_model.INSTANT_LINK):
        r = ps.run_disaggregated(reqs, LLAMA3_8B, H100, 2, 2, link=link)
        for i in np.flatnonzero(~np.isnan(r.ready_s)):
            want = r.overall.first_token_s[i] + hw_model.kv_transfer_s(LLAMA3_8B, int(reqs.prompt_len[i]), link)
            assert r.ready_s[i] == want
        assert (r.decode_start_s[~np.isnan(r.ready_s)] >= r.ready_s[~np.isnan(r.ready_s)]).all()
    # a slower link only delays decoding: first tokens are the same, finishes no earlier
    fast = ps.run_disaggregated(reqs, LLAMA3_8B, H100, 2, 2, link=hw_model.INSTANT_LINK)
    slow = ps.run_disaggregated(reqs, LLAMA3_8B, H100, 2, 2, link=hw_model.Link("slow", 1e9, 1e-3))
    assert np.array_equal(fast.overall.first_token_s, slow.overall.first_token_s)
    assert (metrics.tpot(slow.overall)[reqs.output_len > 1] > metrics.tpot(fast.overall)[reqs.output_len > 1]).all()


def test_least_tokens_balances_a_skewed_workload():
    """One huge request then small ones: round robin keeps sending every other request behind
    the huge one; least-tokens sends them all to the other card, and its TTFT P99 is lower."""
    a = np.arange(21) * 0.01
    reqs = Requests(a, [6000] + [200] * 20, [400] + [50] * 20)
    rr = ps.run_data_parallel(reqs, LLAMA3_8B, H100, 2, router="round_robin")
    lt = ps.run_data_parallel(reqs, LLAMA3_8B, H100, 2, router="least_tokens")
    assert rr.card.tolist() == [0, 1] * 10 + [0]
    assert (lt.card[1:] == 1).all() and lt.card[0] == 0
    assert metrics.percentiles(metrics.ttft(lt.overall)).p99 < metrics.percentiles(metrics.ttft(rr.overall)).p99


def test_replicas_add_up_and_report_their_own_metrics():
    reqs = chat_requests(n=200, rate=8.0, seed=1)
    r = ps.run_data_parallel(reqs, LLAMA3_8B, H100, 3, router="least_tokens")
    parts = [r.replica(k) for k in range(3)]
    assert sum(len(p.requests) for p in parts) == len(reqs)
    assert r.overall.busy_s == pytest.approx(sum(p.busy_s for p in parts))
    assert r.overall.n_steps == sum(p.n_steps for p in parts)
    for k, part in enumerate(parts):
        np.testing.assert_array_equal(part.finish_s, r.overall.finish_s[r.card == k])
        assert 0 < metrics.utilisation(part) <= 1
    assert 0 < r.utilisation <= 1
    assert r.overall.label == "DP x3 (least_tokens)"


def test_bad_arguments_name_themselves():
    reqs = chat_requests(n=3, rate=1.0, seed=0)
    with pytest.raises(ValueError, match="router must be one of 'round_robin', 'least_tokens' without prefix caching.*got 'random'"):
        ps.run_data_parallel(reqs, LLAMA3_8B, H100, 2, router="random")
    with pytest.raises(ValueError, match="n_decode must be an integer in \\[1, 4096\\], got 0"):
        ps.run_disaggregated(reqs, LLAMA3_8B, H100, 1, 0)
    with pytest.raises(TypeError, match="link must be a servelab.hw_model.Link"):
        ps.run_disaggregated(reqs, LLAMA3_8B, H100, 1, 1, link=50e9)
    with pytest.raises(ValueError, match="replica\\(\\) is for data parallelism"):
        ps.run_disaggregated(reqs, LLAMA3_8B, H100, 1, 1).replica(0)
    with pytest.raises(ValueError, match="link_bandwidth must be a positive number"):
        rust_pd(reqs, 1, 1, "round_robin", dict(max_num_seqs=4, max_num_batched_tokens=64, block_size=4,
                                                num_blocks=16, chunked_prefill=False), math.nan, 0.0)
    with pytest.raises(ValueError, match="router must be 'round_robin', 'least_tokens' or 'prefix_affinity'"):
        rust_dp(reqs, 1, "x", dict(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, num_blocks=16,
                                   chunked_prefill=False))


@pytest.mark.parametrize("rate", [2.0, 24.0])
def test_least_tokens_equals_the_reference_across_busy_periods(rate):
    """Long enough for cards to go idle and fill again (the Rust router pauses each card at
    every arrival and resumes it; the reference replays it from the start every time)."""
    reqs = chat_requests(n=60, rate=rate, seed=5, prompt_mean=300, output_mean=60)
    p = dict(max_num_seqs=8, max_num_batched_tokens=2048, block_size=16, num_blocks=400, chunked_prefill=False)
    py = ref.run_data_parallel(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, n_replicas=3, router="least_tokens", **p)
    assert_same_dict(rust_dp(reqs, 3, "least_tokens", p), py)
    assert len(set(py["card"].tolist())) == 3
