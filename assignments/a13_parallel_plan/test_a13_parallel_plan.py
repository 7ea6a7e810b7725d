"""Tests of assignment 13 (tensor parallelism on the paper GPU), against servelab: the ring
all-reduce, KV capacity and the decode step with ``tp`` cards (``hw_model``), and the best
TP x DP plan for a node (``parallel_plan``), on generated models, GPUs and objectives."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given, settings
from hypothesis import strategies as st

import plan as mine
from servelab import hw_model as hw
from servelab.parallel_plan import best_decode_plan

GPUS = [hw.H100, hw.A100_80GB, hw.H200]


@st.composite
def models(draw):
    base = draw(st.sampled_from([hw.LLAMA3_8B, hw.LLAMA3_70B]))
    n_heads = draw(st.sampled_from([base.n_heads, 48]))  # 48 heads: splits by 3 and 6 exist
    n_kv = draw(st.sampled_from([k for k in (1, 2, 3, 4, 6, 8) if n_heads % k == 0]))
    return dataclasses.replace(base, n_heads=n_heads, n_kv_heads=n_kv,
                               n_layers=draw(st.integers(1, base.n_layers)),
                               d_ff=draw(st.sampled_from([base.d_ff, base.d_ff + 8, 3 * 4096])))


def _valid(model, tp):
    try:
        hw.check_tp(model, hw.H100, tp)
        return True
    except ValueError:
        return False


@given(models(), st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 5, 64]))
def test_valid_tp_follows_the_split_rules(model, tp):
    assert bool(mine.valid_tp(model, tp)) == _valid(model, tp), \
        f"tp={tp}, n_heads={model.n_heads}, n_kv_heads={model.n_kv_heads}, d_ff={model.d_ff}"


@given(st.sampled_from(GPUS), st.sampled_from([1, 2, 4, 8, 16]), st.floats(1.0, 1e10))
def test_allreduce_matches_core(gpu, tp, n_bytes):
    want = hw.allreduce_s(gpu, tp, n_bytes)
    got = mine.allreduce_s(gpu.link_bandwidth, gpu.link_latency_s, tp, n_bytes)
    assert math.isclose(got, want, rel_tol=1e-12, abs_tol=0), f"tp={tp}, {n_bytes:.4g} B: {got} != {want}"


@given(models(), st.sampled_from(GPUS), st.sampled_from([1, 2, 4, 8, 16]), st.floats(0.5, 0.95))
def test_kv_capacity_with_tp_matches_core(model, gpu, tp, mem_util):
    if not _valid(model, tp):
        return
    want = hw.kv_capacity_tokens(model, gpu, mem_util, tp=tp)
    got = mine.kv_capacity_tokens(gpu.memory_bytes, mem_util, model.weight_bytes,
                                  model.kv_bytes_per_token, model.n_kv_heads, tp)
    assert got == want, f"{model} on {tp} x {gpu.name}: expected {want} tokens, got {got}"


@given(models(), st.sampled_from(GPUS), st.sampled_from([1, 2, 4, 8]), st.integers(1, 512),
       st.integers(0, 32768))
def test_tp_decode_step_matches_core(model, gpu, tp, batch, context_len):
    if not _valid(model, tp):
        return
    want = hw.step_cost(model, gpu, [(1, context_len)] * batch, tp=tp).time_s
    got = mine.tp_decode_step_s(hw.price_constants(model, gpu), model, gpu, tp, batch, context_len)
    assert math.isclose(got, want, rel_tol=1e-9), \
        f"batch {batch} at context {context_len} on tp={tp}: expected {want * 1e3:.6f} ms, got {got * 1e3:.6f} ms"


@settings(max_examples=25)  # each example prices a few hundred steps on each side
@given(models(), st.sampled_from(GPUS), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([256, 1024, 4096]), st.floats(0.01, 0.2))
def test_best_plan_matches_core(model, gpu, n_cards, context_len, tpot_slo_s):
    want = best_decode_plan(model, gpu, n_cards, context_len, tpot_slo_s)
    got = mine.best_decode_plan(hw.price_constants(model, gpu), model, gpu, model.weight_bytes,
                                n_cards, context_len, tpot_slo_s, 0.9)
    want = None if want is None else (want.tp, want.dp, want.batch)
    got = None if got is None else tuple(int(x) for x in got)
    assert got == want, f"{n_cards} x {gpu.name}, context {context_len}, TPOT <= " \
                        f"{tpot_slo_s * 1e3:.1f} ms: expected (tp, dp, batch) = {want}, got {got}"


def test_exercise_1d_and_a_node_of_eight_h100s():
    m, gpu = hw.LLAMA3_70B, hw.H100
    c = hw.price_constants(m, gpu)
    assert mine.kv_capacity_tokens(gpu.memory_bytes, 0.9, m.weight_bytes, m.kv_bytes_per_token,
                                   m.n_kv_heads, 1) == 0, "exercise 1(d): 70B does not fit one H100"
    two = mine.kv_capacity_tokens(gpu.memory_bytes, 0.9, m.weight_bytes, m.kv_bytes_per_token,
                                  m.n_kv_heads, 2)
    assert two == hw.kv_capacity_tokens(m, gpu, tp=2) > 0, "it fits on two"
    assert tuple(mine.best_decode_plan(c, m, gpu, m.weight_bytes, 8, 1024, 0.05, 0.9)) == (4, 2, 437)
