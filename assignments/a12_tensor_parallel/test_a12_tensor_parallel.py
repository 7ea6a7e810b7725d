"""Tests of assignment 12 (tensor parallelism), against servelab.tiny_llm: your shards against
``TensorParallelLLM``'s devices on random shapes and splits, your layer against the unsharded
layer, and greedy tokens of the real model run through your layer (§6.5: the same tokens)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tp_layer as mine
from assignment_strategies import answer_array, assert_close, prompts
from servelab import tiny_llm
from servelab.tiny_llm import TINY, ModelConfig
from servelab.tiny_llm.model import attention_partial, mlp_partial, rms_norm, rope_tables
from servelab.tiny_llm.tensor_parallel import TensorParallelLLM


@st.composite
def splits(draw):
    """A small model and a split that works: t divides n_heads and d_ff, and t and n_kv_heads
    divide one another (both ways are drawn: whole K/V heads per device, and replicated ones)."""
    n_kv = draw(st.sampled_from([1, 2, 4]))
    group = draw(st.sampled_from([1, 2, 3]))
    n_heads = n_kv * group
    t = draw(st.sampled_from([d for d in range(1, n_heads + 1)
                              if n_heads % d == 0 and (n_kv % d == 0 or d % n_kv == 0)]))
    config = ModelConfig(name="a12", vocab_size=32, d_model=draw(st.sampled_from([4, 8, 12])),
                         n_layers=1, n_heads=n_heads, n_kv_heads=n_kv,
                         d_head=draw(st.sampled_from([2, 4, 6])), d_ff=t * draw(st.integers(1, 4)),
                         max_len=16, seed=draw(st.integers(0, 2**16)))
    return config, t


def _layer(model, i: int = 0) -> dict:
    w = model.weights.layers[i]
    return {f.name: getattr(w, f.name) for f in dataclasses.fields(w)}


def _same(got, want, what: str) -> None:
    got = answer_array(what, got, want.shape, kinds="f")
    assert np.array_equal(got, want), f"{what}: wrong columns or rows (max |diff| " \
                                      f"{np.abs(got - want).max()})"


@given(splits())
def test_shard_attention_gives_each_device_its_heads(split):
    config, t = split
    model = TensorParallelLLM(config, t)
    w = model.weights.layers[0]
    got = mine.shard_attention(w.wqkv, w.wo, config.n_heads, config.n_kv_heads, config.d_head, t)
    assert len(got) == t, f"expected {t} shards, got {len(got)}"
    for s, (wqkv, wo) in enumerate(got):
        dev = model.devices[s][0]
        where = f"device {s} of t={t} ({config.n_heads} heads, {config.n_kv_heads} K/V heads)"
        _same(wqkv, dev.wqkv, f"{where}: wqkv")
        _same(wo, dev.wo, f"{where}: wo")


@given(splits())
def test_shard_mlp_gives_each_device_its_hidden_units(split):
    config, t = split
    model = TensorParallelLLM(config, t)
    w = model.weights.layers[0]
    got = mine.shard_mlp(w.w_gate_up, w.w_down, t)
    assert len(got) == t, f"expected {t} shards, got {len(got)}"
    for s, (gate_up, down) in enumerate(got):
        dev = model.devices[s][0]
        _same(gate_up, dev.w_gate_up, f"device {s} of t={t} (d_ff={config.d_ff}): w_gate_up")
        _same(down, dev.w_down, f"device {s} of t={t} (d_ff={config.d_ff}): w_down")


@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_all_reduce_sums_every_partial(t, n, d, seed):
    rng = np.random.default_rng(seed)
    partials = [rng.standard_normal((n, d), dtype=np.float32) for _ in range(t)]
    want = np.sum(partials, axis=0)
    assert_close(f"all_reduce of {t} partials", want, mine.all_reduce(partials), rtol=1e-5, atol=1e-5)


@given(splits(), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_tp_layer_equals_the_unsharded_layer(split, n, seed):
    config, t = split
    model = tiny_llm.TinyLLM(config)
    layer = _layer(model)
    x = np.random.default_rng(seed).standard_normal((n, config.d_model), dtype=np.float32)
    cos, sin = (a[:n] for a in rope_tables(config))
    offsets = np.array([0, n])

    def no_cache(i, k, v):
        return k, v
    want = x + attention_partial(rms_norm(x, layer["attn_norm"], config.norm_eps), layer["wqkv"],
                                 layer["wo"], config.n_heads, config.n_kv_heads, config.d_head,
                                 cos, sin, offsets, [0], no_cache)
    want = want + mlp_partial(rms_norm(want, layer["mlp_norm"], config.norm_eps),
                              layer["w_gate_up"], layer["w_down"])
    got = mine.tp_layer(x, layer, config.n_heads, config.n_kv_heads, config.d_head, t,
                        config.norm_eps)
    assert_close(f"tp_layer with t={t} on {n} tokens, against the unsharded layer", want, got,
                 rtol=1e-4, atol=1e-5)


@settings(max_examples=8)  # each example runs the whole model once per generated token
@given(prompts(1, 12), st.sampled_from([2, 4]),
       st.integers(1, 6))
def test_greedy_tokens_through_your_layer_equal_the_model(prompt, t, n_new):
    model = tiny_llm.model_for(TINY)
    w = model.weights
    layers = [_layer(model, i) for i in range(TINY.n_layers)]
    seq, tokens = list(prompt), []
    for _ in range(n_new):  # no cache: the whole sequence each step
        x = w.embed[seq]
        for layer in layers:
            x = answer_array("tp_layer", mine.tp_layer(x, layer, TINY.n_heads, TINY.n_kv_heads,
                                                       TINY.d_head, t, TINY.norm_eps),
                             (len(seq), TINY.d_model), kinds="f").astype(np.float32)
        logits = rms_norm(x[-1:], w.final_norm, TINY.norm_eps) @ w.lm_head
        tokens.append(int(logits[0].argmax()))
        seq.append(tokens[-1])
    want = tiny_llm.generate(prompt, n_new).tokens
    assert tokens == want, f"prompt {prompt}, t={t}: tokens {tokens}, the model gives {want}"
