"""tiny_llm's model and caches: shapes, determinism, batching, caches, bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import hw_model, tiny_llm
from servelab.tiny_llm import SMALL, TINY, ContiguousKVCache, KVCache, TinyLLM
from assignment_strategies import batch_entries, prompts

RTOL, ATOL = 1e-4, 1e-5

MODEL = TinyLLM(TINY)


# ---- the model as the lecture describes it --------------------------------------------------

def test_tiny_is_about_120_thousand_parameters_and_matches_its_spec():
    assert MODEL.weights.param_count == TINY.param_count == 119_104
    assert TINY.spec.param_count == TINY.param_count
    assert TINY.spec.kv_bytes_per_token == TINY.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert TINY.spec.bytes_per_param == 4.0 and not TINY.spec.tie_embeddings
    assert TinyLLM(SMALL).weights.param_count == SMALL.param_count == SMALL.spec.param_count
    assert (SMALL.d_model, SMALL.n_layers) == (256, 4)


def test_hello_world_is_eleven_byte_tokens():
    assert len(tiny_llm.encode("hello world")) == 11
    assert tiny_llm.decode(tiny_llm.encode("hello world")) == "hello world"


def test_weights_are_float32_and_read_only():
    for a in MODEL.weights.arrays():
        assert a.dtype == np.float32 and not a.flags.writeable


def test_prefill_and_decode_are_the_same_forward():
    cache = KVCache(TINY)
    prompt = tiny_llm.encode("hello world")
    logits = tiny_llm.forward(prompt, cache)
    assert logits.shape == (256,) and logits.dtype == np.float32 and len(cache) == 11
    nxt = int(logits.argmax())
    step = tiny_llm.forward([nxt], cache)
    assert len(cache) == 12
    full = MODEL.forward(prompt + [nxt], None, all_logits=True)
    assert full.shape == (12, 256)
    np.testing.assert_allclose(full[-1], step, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(full[-2], logits, rtol=RTOL, atol=ATOL)


# ---- determinism ------------------------------------------------------------------------------

def test_same_seed_same_weights_and_tokens_bit_for_bit():
    a, b = TinyLLM(TINY), TinyLLM(TINY)
    for x, y in zip(a.weights.arrays(), b.weights.arrays()):
        assert np.array_equal(x, y)
    prompt = tiny_llm.encode("determinism")
    g1 = tiny_llm.generate(prompt, 20, model=a)
    g2 = tiny_llm.generate(prompt, 20, model=b)
    assert g1.tokens == g2.tokens
    assert np.array_equal(g1.logits, g2.logits)  # bit for bit, not merely close


@given(st.integers(1, 2**32))
def test_a_different_seed_gives_different_weights(seed):
    other = TinyLLM(dataclasses.replace(TINY, seed=seed))
    assert not np.array_equal(other.weights.embed, MODEL.weights.embed)
    assert not np.array_equal(other.weights.layers[0].wqkv, MODEL.weights.layers[0].wqkv)
    assert not np.array_equal(other.forward([1, 2, 3]), MODEL.forward([1, 2, 3]))


# ---- batching ---------------------------------------------------------------------------------

def _prefilled(model, context, has_cache):
    if not has_cache:
        return None
    cache = KVCache(model.config)
    if context:
        model.forward(context, cache)
    return cache


@given(st.lists(batch_entries, min_size=1, max_size=5), st.booleans())
def test_batched_ragged_forward_equals_each_sequence_alone(entries, all_logits):
    # a sequence without a cache starts at position 0, so its "context" is not used
    entries = [(ctx if has else [], new, has) for ctx, new, has in entries]
    batch_caches = [_prefilled(MODEL, ctx, has) for ctx, _, has in entries]
    batched = MODEL.forward_batch([new for _, new, _ in entries], batch_caches,
                                  all_logits=all_logits)
    batch_stats = MODEL.last_stats
    for (ctx, new, has), got, bcache in zip(entries, batched, batch_caches):
        cache = _prefilled(MODEL, ctx, has)
        alone = MODEL.forward(new, cache, all_logits=all_logits)
        assert got.shape == alone.shape
        np.testing.assert_allclose(got, alone, rtol=RTOL, atol=ATOL)
        assert np.array_equal(got.argmax(axis=-1), alone.argmax(axis=-1))
        if has:
            assert len(bcache) == len(cache) == len(ctx) + len(new)
            for layer in range(TINY.n_layers):
                np.testing.assert_allclose(bcache.keys(layer), cache.keys(layer), rtol=RTOL, atol=ATOL)
                np.testing.assert_allclose(bcache.values(layer), cache.values(layer), rtol=RTOL, atol=ATOL)
    # one forward: weights read once for the whole batch
    assert batch_stats.n_forwards == 1 and batch_stats.n_seqs == len(entries)
    assert batch_stats.weight_bytes == (TINY.param_count - TINY.embedding_params) * 4


def test_forward_batch_module_function_uses_the_caches_model():
    caches = [KVCache(SMALL), KVCache(SMALL)]
    out = tiny_llm.forward_batch([[1, 2], [3]], caches)
    assert [o.shape for o in out] == [(256,), (256,)]
    assert [len(c) for c in caches] == [2, 1]


# ---- caches -----------------------------------------------------------------------------------

@given(prompts(1, 64), st.integers(1, 8))
def test_growing_and_contiguous_caches_hold_the_same_kv(prompt, chunk):
    grow, cont = KVCache(TINY, initial_capacity=1), ContiguousKVCache(TINY)
    for i in range(0, len(prompt), chunk):
        a = MODEL.forward(prompt[i:i + chunk], grow)
        b = MODEL.forward(prompt[i:i + chunk], cont)
        assert np.array_equal(a, b)
    assert len(grow) == len(cont) == len(prompt)
    assert len(prompt) <= grow.capacity <= max(1, 2 * len(prompt))
    assert cont.capacity == cont.reserved_tokens == 256
    for layer in range(TINY.n_layers):
        assert np.array_equal(grow.keys(layer), cont.keys(layer))
        assert grow.keys(layer).shape == (TINY.n_kv_heads, len(prompt), TINY.d_head)


def test_contiguous_cache_reserves_max_len_up_front():
    cache = ContiguousKVCache(TINY, max_len=256)
    assert cache.nbytes == cache.reserved_bytes == 256 * TINY.kv_bytes_per_token
    MODEL.forward(list(range(30)), cache)
    assert cache.used_bytes == 30 * TINY.kv_bytes_per_token
    assert cache.utilisation == 30 / 256
    assert cache.nbytes == cache.reserved_bytes  # nothing more allocated


def test_truncate_then_recompute_gives_the_same_logits():
    cache = KVCache(TINY)
    MODEL.forward(list(range(20)), cache)
    first = MODEL.forward([7], cache)
    cache.truncate(20)
    assert len(cache) == 20
    assert np.array_equal(MODEL.forward([7], cache), first)


def test_a_cache_is_a_kv_cache_protocol():
    assert isinstance(KVCache(TINY), tiny_llm.KVCacheProtocol)
    assert isinstance(ContiguousKVCache(TINY), tiny_llm.KVCacheProtocol)


# ---- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [256, -1, 1000])
def test_token_outside_vocabulary(bad):
    with pytest.raises(ValueError, match=rf"token id {bad} at token_ids\[2\] is outside the vocabulary \[0, 256\)"):
        MODEL.forward([1, 2, bad, 3])


@pytest.mark.parametrize("bad, msg", [
    ([], r"token_ids must hold at least one token, got \[\]"),
    ([1.5], r"token_ids\[0\] must be an integer token id, got 1.5"),
    ([True], r"token_ids\[0\] must be an integer token id, got True"),
    ([[1, 2]], r"token_ids must be a one-dimensional sequence of token ids, got shape \(1, 2\)"),
    ("hi", r"token_ids must be a sequence of integer token ids, got 'hi'"),
    ([2**70], rf"token id {2**70} at token_ids\[0\] is outside the vocabulary"),
])
def test_bad_token_ids(bad, msg):
    with pytest.raises(ValueError, match=msg):
        MODEL.forward(bad)


def test_cache_overflow_past_max_len_raises_and_changes_nothing():
    cache = ContiguousKVCache(TINY, max_len=16)
    MODEL.forward(list(range(10)), cache)
    keys = cache.keys(0).copy()
    with pytest.raises(ValueError, match=r"cache overflow: 10 cached \+ 7 new tokens = 17 > max_len 16"):
        MODEL.forward(list(range(7)), cache)
    assert len(cache) == 10 and np.array_equal(cache.keys(0), keys)
    MODEL.forward(list(range(6)), cache)  # still usable, up to the brim
    assert len(cache) == 16

    grow = KVCache(TINY)
    MODEL.forward([0] * 256, grow)
    with pytest.raises(ValueError, match=r"256 cached \+ 1 new tokens = 257 > max_len 256"):
        MODEL.forward([0], grow)
    with pytest.raises(ValueError, match=r"token_ids holds 257 tokens, more than max_len 256"):
        MODEL.forward([0] * 257)


def test_a_failing_batch_leaves_every_cache_unchanged():
    ok, full = KVCache(TINY), ContiguousKVCache(TINY, max_len=4)
    MODEL.forward([1, 2, 3], full)
    with pytest.raises(ValueError, match=r"3 cached \+ 2 new tokens = 5 > max_len 4"):
        MODEL.forward_batch([[5, 6, 7], [8, 9]], [ok, full])
    assert len(ok) == 0 and len(full) == 3
    with pytest.raises(ValueError, match=r"token id 999 at token_ids\[1\]\[0\]"):
        MODEL.forward_batch([[5], [999]], [ok, None])
    assert len(ok) == 0
    MODEL.forward([4], full)  # the failed forward left no reservation behind
    assert len(full) == 4


def test_mismatched_cache_and_model_configs():
    with pytest.raises(ValueError, match=r"cache was built for another model: .*d_model=256 \(model has 64\)"):
        MODEL.forward([1], KVCache(SMALL))
    other_seed = KVCache(dataclasses.replace(TINY, seed=5))
    with pytest.raises(ValueError, match=r"seed=5 \(model has 0\)"):
        MODEL.forward([1], other_seed)
    with pytest.raises(ValueError, match=r"seed=5 \(model has 0\)"):
        tiny_llm.generate([1, 2], 3, model=MODEL, cache=other_seed)


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="batch must hold at least one sequence"):
        MODEL.forward_batch([], [])
    with pytest.raises(ValueError, match="got 2 sequences but 1 caches"):
        MODEL.forward_batch([[1], [2]], [None])
    cache = KVCache(TINY)
    with pytest.raises(ValueError, match="the same cache object appears twice"):
        MODEL.forward_batch([[1], [2]], [cache, cache])
    with pytest.raises(ValueError, match="cache must be a KV cache or None, got 'nope'"):
        MODEL.forward([1], "nope")
    with pytest.raises(ValueError, match=r"max_len must be an integer in \[1, 256\]"):
        ContiguousKVCache(TINY, max_len=0)
    with pytest.raises(ValueError, match="d_model must be a positive integer, got 0"):
        tiny_llm.ModelConfig(d_model=0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        tiny_llm.ModelConfig(seed=-1)
    with pytest.raises(ValueError, match="config must be a ModelConfig"):
        TinyLLM(hw_model.LLAMA3_8B)


# ---- against a naive re-implementation --------------------------------------------------------

def _naive_logits(model: TinyLLM, tokens: list[int]) -> np.ndarray:
    """The same Llama written token by token and head by head, in float64, with no cache and
    no batching: a check of RoPE, the GQA head mapping, SwiGLU and the norms."""
    cfg, w = model.config, model.weights
    f = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    half = cfg.d_head // 2
    inv_freq = cfg.rope_theta ** (-np.arange(half) / half)

    def norm(x, g):
        return x / np.sqrt(np.mean(x * x) + cfg.norm_eps) * f(g)

    def rope(vec, pos):  # rotate pairs (i, i + half) by pos * inv_freq[i]
        out = vec.copy()
        for i in range(half):
            c, s = np.cos(pos * inv_freq[i]), np.sin(pos * inv_freq[i])
            out[i], out[i + half] = vec[i] * c - vec[i + half] * s, vec[i] * s + vec[i + half] * c
        return out

    xs = [f(w.embed[t]) for t in tokens]
    group = cfg.n_heads // cfg.n_kv_heads
    for layer in w.layers:
        ks, vs, qs = [], [], []
        for pos, x in enumerate(xs):
            qkv = norm(x, layer.attn_norm) @ f(layer.wqkv)
            q, k, v = np.split(qkv, [cfg.q_dim, cfg.q_dim + cfg.kv_dim])
            qs.append([rope(q[h * cfg.d_head:(h + 1) * cfg.d_head], pos) for h in range(cfg.n_heads)])
            ks.append([rope(k[h * cfg.d_head:(h + 1) * cfg.d_head], pos) for h in range(cfg.n_kv_heads)])
            vs.append([v[h * cfg.d_head:(h + 1) * cfg.d_head] for h in range(cfg.n_kv_heads)])
        new_xs = []
        for pos, x in enumerate(xs):
            heads = []
            for h in range(cfg.n_heads):
                kv = h // group
                scores = np.array([qs[pos][h] @ ks[j][kv] for j in range(pos + 1)]) / np.sqrt(cfg.d_head)
                p = np.exp(scores - scores.max())
                p /= p.sum()
                heads.append(sum(p[j] * vs[j][kv] for j in range(pos + 1)))
            x = x + np.concatenate(heads) @ f(layer.wo)
            gu = norm(x, layer.mlp_norm) @ f(layer.w_gate_up)
            gate, up = gu[:cfg.d_ff], gu[cfg.d_ff:]
            new_xs.append(x + (gate / (1 + np.exp(-gate)) * up) @ f(layer.w_down))
        xs = new_xs
    return np.stack([norm(x, w.final_norm) @ f(w.lm_head) for x in xs])


@given(prompts(1, 12))
def test_forward_matches_a_naive_float64_implementation(prompt):
    expected = _naive_logits(MODEL, prompt)
    np.testing.assert_allclose(MODEL.forward(prompt, None, all_logits=True), expected,
                               rtol=1e-4, atol=1e-4)


@given(st.integers(1, 6), st.integers(1, 300), st.integers(0, 2**32 - 1), st.floats(1e-8, 1e-2))
def test_rms_norm_is_the_mean_square_of_np_mean_bit_for_bit(rows, width, seed, eps):
    # rms_norm computes the mean square without np.mean's wrapper (it cost more than the
    # arithmetic at the tiny model's sizes): every logit and token must stay what it was
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, width)) * rng.uniform(1e-3, 1e3)).astype(np.float32)
    gain = rng.standard_normal(width).astype(np.float32)
    want = x * (gain / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)))
    got = tiny_llm.model.rms_norm(x, gain, eps)
    assert got.dtype == want.dtype == np.float32
    assert got.tobytes() == want.tobytes()


def test_is_kv_cache_answers_as_the_protocol_does():
    # servelab's own layouts are answered from their type (the runtime protocol check cost a
    # tenth of a decode step); a layout of one's own still goes through the protocol
    from servelab.tiny_llm.cache import KVCacheProtocol, is_kv_cache
    from servelab.blocks import BlockAllocator
    from servelab.tiny_llm.paged import PagedKVCache, PagedKVPool

    alloc = BlockAllocator(4, 4)
    alloc.allocate(0, [1, 2, 3])
    paged = PagedKVCache(PagedKVPool(TINY, num_blocks=4, block_size=4), alloc, 0)
    for cache in (KVCache(TINY), ContiguousKVCache(TINY), paged):
        assert is_kv_cache(cache) and isinstance(cache, KVCacheProtocol)

    class Duck:  # a layout of one's own
        config, max_len = TINY, 8

        def __len__(self): return 0
        def reserve(self, n_new): pass
        def update(self, layer, k_new, v_new): return k_new, v_new
        def commit(self, n_new): pass
        def rollback(self): pass

    assert is_kv_cache(Duck()) and not is_kv_cache(object()) and not is_kv_cache([])
    del Duck.rollback
    assert not is_kv_cache(Duck())


@given(st.lists(st.one_of(st.integers(-3, 300), st.booleans(), st.just(2**70), st.floats(0, 3)), max_size=6))
def test_a_list_of_token_ids_is_checked_as_any_sequence_is(items):
    # a list of Python ints takes a one-pass path (an engine step's tokens); whatever the list
    # holds, it gives what a tuple of the same items, through the general path, gives
    def outcome(ids):
        try:
            arr = tiny_llm.model.as_token_ids(ids, 256)
            return arr.dtype, arr.tolist()
        except ValueError as exc:
            return str(exc)
    assert outcome(list(items)) == outcome(tuple(items))
