"""Tensor parallelism on the paper GPU (§8.1): one card is today's price exactly, each card does
its share, the all-reduce term is zero on one card and grows as the ring formula says, and
exercise 1(d)'s answer, two H100s for Llama-3-70B, comes out of the library."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import hw_model as hw
from servelab.hw_model import A100_80GB, H100, LLAMA3_8B, LLAMA3_70B

batches = st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 32768)), min_size=1,
                   max_size=64)
models = st.sampled_from([LLAMA3_8B, LLAMA3_70B])
splits = st.sampled_from([2, 4, 8])


@given(batches, models)
def test_one_card_is_todays_price_exactly(batch, model):
    assert hw.step_cost(model, H100, batch, tp=1) == hw.step_cost(model, H100, batch)
    assert hw.kv_capacity_tokens(model, H100, tp=1) == hw.kv_capacity_tokens(model, H100)
    assert hw.max_batch(model, H100, 1024, tp=1) == hw.max_batch(model, H100, 1024)


@given(batches, models, splits)
def test_each_card_does_its_share(batch, model, tp):
    whole = hw.step_cost(model, H100, batch)
    split = hw.step_cost(model, H100, batch, tp=tp)
    assert split.flops == pytest.approx(whole.flops / tp)
    assert split.kv_bytes == pytest.approx(whole.kv_bytes / min(tp, model.n_kv_heads))
    rows = whole.n_tokens * model.d_model * model.bytes_per_param  # embedding rows: replicated
    assert split.weight_bytes == pytest.approx((whole.weight_bytes - rows) / tp + rows)
    assert (split.tp, split.n_tokens, split.n_seqs) == (tp, whole.n_tokens, whole.n_seqs)
    roofline = max(split.compute_s, split.memory_s) + hw.DEFAULT_EFFICIENCY.overhead_s
    assert split.time_s == pytest.approx(roofline + split.comm_s)
    assert split.comm_s > 0 and whole.comm_s == 0


@given(st.floats(1.0, 1e10), st.sampled_from([H100, A100_80GB]))
def test_the_allreduce_grows_as_the_ring_formula(n_bytes, gpu):
    assert hw.allreduce_s(gpu, 1, n_bytes) == 0.0
    times = [hw.allreduce_s(gpu, tp, n_bytes) for tp in (2, 4, 8)]
    assert times == sorted(times)
    for tp, t in zip((2, 4, 8), times):
        assert t == pytest.approx(2 * (tp - 1) / tp * n_bytes / gpu.link_bandwidth
                                  + 2 * (tp - 1) * gpu.link_latency_s)


def test_the_comm_term_is_two_allreduces_per_layer():
    s = hw.step_cost(LLAMA3_70B, H100, [(1, 1024)] * 32, tp=4)
    activations = 32 * LLAMA3_70B.d_model * 2  # 32 tokens x d_model, BF16
    assert s.comm_s == pytest.approx(2 * 80 * hw.allreduce_s(H100, 4, activations))


def test_tp_cuts_a_memory_bound_decode_step():
    one = hw.step_cost(LLAMA3_8B, H100, [(1, 1024)] * 16)
    two = hw.step_cost(LLAMA3_8B, H100, [(1, 1024)] * 16, tp=2)
    assert one.bound == two.bound == "memory"
    assert two.memory_s == pytest.approx(one.memory_s / 2, rel=1e-4)  # but the embedding rows
    assert two.time_s < one.time_s  # half the bytes per card, more than the all-reduces cost


def test_exercise_1d_two_h100s_hold_llama3_70b():
    assert hw.kv_capacity_tokens(LLAMA3_70B, H100) == 0
    left = hw.H100.memory_bytes * 0.9 - LLAMA3_70B.weight_bytes / 2  # per card
    per_token = LLAMA3_70B.kv_bytes_per_token / 2  # 8 KV heads: 4 on each card
    assert hw.kv_capacity_tokens(LLAMA3_70B, H100, tp=2) == int(left // per_token) == 8827
    assert hw.max_batch(LLAMA3_70B, H100, 1024, tp=2) == 8
    assert hw.fewest_cards(LLAMA3_70B, H100) == 2
    assert hw.fewest_cards(LLAMA3_8B, H100) == 1
    assert hw.fewest_cards(LLAMA3_70B, H100, context_len=8192 * 16) == 4


def test_kv_heads_are_replicated_past_n_kv_heads():
    model = dataclasses.replace(LLAMA3_8B, n_heads=32, n_kv_heads=2)
    s4 = hw.step_cost(model, H100, [(1, 4096)], tp=4)
    s2 = hw.step_cost(model, H100, [(1, 4096)], tp=2)
    assert s4.kv_bytes == s2.kv_bytes  # each card keeps one whole KV head either way
    assert hw.kv_capacity_tokens(model, H100, tp=4) < 2 * hw.kv_capacity_tokens(model, H100, tp=2)


@pytest.mark.parametrize("model,gpu,tp,message", [
    (LLAMA3_8B, H100, 3, "tp=3 must divide n_heads=32"),
    (LLAMA3_8B, H100, 0, "tp must be a positive integer"),
    (LLAMA3_8B, H100, True, "tp must be a positive integer"),
    (LLAMA3_8B, H100, 2.0, "tp must be a positive integer"),
    (dataclasses.replace(LLAMA3_8B, d_ff=14337), H100, 2, "tp=2 must divide d_ff=14337"),
    (dataclasses.replace(LLAMA3_8B, n_heads=48, n_kv_heads=8, d_ff=14400), H100, 6,
     "tp=6 and n_kv_heads=8: one must divide the other"),
    (LLAMA3_8B, dataclasses.replace(H100, link_bandwidth=0.0), 2, "has link_bandwidth 0"),
])
def test_splits_that_cannot_work_are_refused(model, gpu, tp, message):
    for call in (lambda: hw.step_cost(model, gpu, [(1, 10)], tp=tp),
                 lambda: hw.kv_capacity_tokens(model, gpu, tp=tp),
                 lambda: hw.max_batch(model, gpu, 10, tp=tp)):
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.parametrize("field,value", [("link_bandwidth", -1.0), ("link_latency_s", float("nan")),
                                         ("link_bandwidth", True), ("link_latency_s", "2us")])
def test_bad_link_fields_are_refused(field, value):
    with pytest.raises(ValueError, match=f"{field} must be a non-negative finite number"):
        dataclasses.replace(H100, **{field: value})
