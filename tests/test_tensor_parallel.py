"""Tensor parallelism on tiny_llm (§8.1): the same tokens as the unsharded model (§6.5), logits
within float32 rounding, a fixed-order reduction that is bit-identical for every split, and
clear errors for splits that cannot work."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.tiny_llm import SMALL, TINY, KVCache, TinyLLM, generate
from servelab.tiny_llm.tensor_parallel import (ShardedKVCache, TensorParallelLLM, check_split,
                                               device_heads, fixed_order_sum, ring_allreduce)
from assignment_strategies import prompts

RTOL, ATOL = 1e-4, 1e-5
BASE = {c.name: TinyLLM(c) for c in (TINY, SMALL)}
SPLITS = [(TINY, t) for t in (1, 2, 4)] + [(SMALL, t) for t in (2, 8)]
MODELS = {(c.name, t, r): TensorParallelLLM(c, t, r)
          for c, t in SPLITS + [(TINY, 1), (SMALL, 1)] for r in ("ring", "fixed")}
tiny_splits = st.sampled_from([1, 2, 4])


@given(prompt=prompts(1, 40), t=tiny_splits, reduction=st.sampled_from(["ring", "fixed"]),
       n_new=st.integers(1, 12))
def test_greedy_tokens_equal_the_unsharded_model(prompt, t, reduction, n_new):
    want = generate(prompt, n_new, model=BASE[TINY.name])
    got = generate(prompt, n_new, model=MODELS[TINY.name, t, reduction])
    assert got.tokens == want.tokens
    np.testing.assert_allclose(got.logits, want.logits, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("config,t", SPLITS, ids=lambda v: getattr(v, "name", v))
def test_every_split_of_both_presets_generates_the_same_tokens(config, t):
    prompt = list(b"tensor parallel serving keeps the tokens")
    want = generate(prompt, 24, model=BASE[config.name]).tokens
    for reduction in ("ring", "fixed"):
        assert generate(prompt, 24, model=MODELS[config.name, t, reduction]).tokens == want


@given(prompt=prompts(1, 40))
def test_one_device_in_ring_order_is_the_unsharded_model_bit_for_bit(prompt):
    got = MODELS[TINY.name, 1, "ring"].forward(prompt, None, all_logits=True)
    want = BASE[TINY.name].forward(prompt, None, all_logits=True)
    assert np.array_equal(got, want)


def test_the_ring_order_changes_the_last_bits():
    # Exercise 10 in another guise: same maths, another order of float additions.
    prompt = list(b"hello world")
    want = BASE[TINY.name].forward(prompt, all_logits=True)
    got = MODELS[TINY.name, 2, "ring"].forward(prompt, all_logits=True)
    assert not np.array_equal(got, want)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@st.composite
def ragged_batches(draw):
    """(cached prefix, new tokens, has a cache) per sequence, 1-3 sequences."""
    return draw(st.lists(st.tuples(prompts(0, 20), prompts(1, 12), st.booleans()),
                         min_size=1, max_size=3))


def _run_batch(model, batch):
    caches = []
    for cached, _, has_cache in batch:
        cache = model.new_cache() if has_cache or cached else None
        if cached:
            model.forward(cached, cache)
        caches.append(cache)
    return model.forward_batch([new for _, new, _ in batch], caches, all_logits=True)


@given(batch=ragged_batches(), t=st.sampled_from([2, 4]))
def test_the_fixed_order_is_bit_identical_for_every_split(batch, t):
    want = _run_batch(MODELS[TINY.name, 1, "fixed"], batch)
    got = _run_batch(MODELS[TINY.name, t, "fixed"], batch)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


@given(batch=ragged_batches(), t=tiny_splits)
def test_batched_forward_on_sharded_caches_matches_the_unsharded_model(batch, t):
    want = _run_batch(BASE[TINY.name], batch)
    got = _run_batch(MODELS[TINY.name, t, "ring"], batch)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_the_fixed_order_bits_hold_on_the_wider_preset():
    prompt = list(b"the same bits on one, two or eight devices")
    want = MODELS[SMALL.name, 1, "fixed"].forward(prompt, all_logits=True)
    for t in (2, 8):
        assert np.array_equal(MODELS[SMALL.name, t, "fixed"].forward(prompt, all_logits=True),
                              want)


# ---- the split itself -------------------------------------------------------------------

def test_devices_hold_disjoint_shares_that_add_up_to_the_layer():
    layer = BASE[TINY.name].weights.layers[0]
    matmul_bytes = sum(a.nbytes for a in (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down))
    norms = layer.attn_norm.nbytes + layer.mlp_norm.nbytes
    two = MODELS[TINY.name, 2, "ring"]  # t = n_kv_heads: every head exactly once
    assert sum(d[0].nbytes() for d in two.devices) == matmul_bytes + 2 * norms
    four = MODELS[TINY.name, 4, "ring"]  # t > n_kv_heads: each KV head on 2 devices
    kv_bytes = 2 * layer.wqkv.shape[0] * TINY.kv_dim * 4
    assert sum(d[0].nbytes() for d in four.devices) == matmul_bytes + kv_bytes + 4 * norms


def test_replicated_kv_heads_cost_cache_memory():
    prompt = list(b"hello world")
    plain = KVCache(TINY)
    BASE[TINY.name].forward(prompt, plain)
    for t, factor in ((2, 1), (4, 2)):  # 2 KV heads: replicated twice on 4 devices
        cache = MODELS[TINY.name, t, "ring"].new_cache()
        MODELS[TINY.name, t, "ring"].forward(prompt, cache)
        assert cache.used_bytes == factor * plain.used_bytes
        assert [len(d) for d in cache.devices] == [len(prompt)] * t


def test_device_heads_follow_the_gqa_groups():
    assert [device_heads(TINY, 2, s) for s in range(2)] == [(range(0, 2), range(0, 1)),
                                                          (range(2, 4), range(1, 2))]
    assert [device_heads(TINY, 4, s)[1] for s in range(4)] == [range(0, 1)] * 2 + [range(1, 2)] * 2
    assert device_heads(SMALL, 2, 1) == (range(4, 8), range(2, 4))


def test_comm_stats_count_two_allreduces_per_layer():
    model = MODELS[TINY.name, 2, "ring"]
    model.forward(list(b"abc"))
    assert model.last_comm.n_allreduce == 2 * TINY.n_layers
    assert model.last_comm.tensor_bytes == 3 * TINY.d_model * 4 and model.last_comm.partials == 2
    fixed = MODELS[TINY.name, 2, "fixed"]
    fixed.forward(list(b"abc"))
    assert fixed.last_comm.partials == TINY.n_heads  # one partial per unit: the price of order
    one = MODELS[TINY.name, 1, "ring"]
    one.forward(list(b"abc"))
    assert one.last_comm.n_allreduce == 0


def test_ring_allreduce_starts_each_chunk_at_another_device():
    # 1e8 + 1 - 1e8 is 0 in float32 but 1e8 - 1e8 + 1 is 1: the order shows in the bits
    big, one = np.float32(1e8), np.float32(1.0)
    parts = [np.full((1, 3), v, np.float32) for v in (big, one, -big)]
    # chunk 0 sums devices 1, 2, 0; chunk 1: 2, 0, 1; chunk 2: 0, 1, 2
    assert ring_allreduce(parts).tolist() == [[0.0, 1.0, 0.0]]
    assert fixed_order_sum(parts).tolist() == [[0.0, 0.0, 0.0]]
    assert ring_allreduce(parts[:1]).tolist() == parts[0].tolist()


# ---- bad splits and bad caches ----------------------------------------------------------

@pytest.mark.parametrize("config,t,message", [
    (TINY, 3, "t=3 must divide n_heads=4"),
    (TINY, 0, "t must be a positive integer"),
    (TINY, True, "t must be a positive integer"),
    (TINY, 2.0, "t must be a positive integer"),
    (dataclasses.replace(TINY, d_ff=162), 4, "t=4 must divide d_ff=162"),
    (dataclasses.replace(TINY, n_heads=12, n_kv_heads=4, d_ff=120), 6,
     "t=6 and n_kv_heads=4: one must divide the other"),
])
def test_splits_that_cannot_work_are_refused(config, t, message):
    with pytest.raises(ValueError, match=message):
        check_split(config, t)
    with pytest.raises(ValueError, match=message):
        TensorParallelLLM(config, t)


def test_bad_reduction_and_fixed_order_needs_whole_blocks():
    with pytest.raises(ValueError, match="reduction must be one of"):
        TensorParallelLLM(TINY, 2, "tree")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="d_ff=162 must be a multiple"):
        TensorParallelLLM(dataclasses.replace(TINY, d_ff=162), 2, "fixed")


def test_a_plain_cache_is_refused_and_left_unchanged():
    model = MODELS[TINY.name, 2, "ring"]
    plain = KVCache(TINY)
    with pytest.raises(ValueError, match="needs caches from its new_cache"):
        model.forward(list(b"abc"), plain)
    assert len(plain) == 0
    other = ShardedKVCache(TINY, 4)
    with pytest.raises(ValueError, match="needs caches from its new_cache"):
        model.forward(list(b"abc"), other)
    assert len(other) == 0 and all(len(d) == 0 for d in other.devices)
    with pytest.raises(TypeError, match="per device"):
        other.update(0, np.zeros((2, 1, 16), np.float32), np.zeros((2, 1, 16), np.float32))
