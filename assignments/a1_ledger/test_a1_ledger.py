"""Tests of assignment 1 (the ledger) against servelab's Rust core, the lecture's numbers, and
Hypothesis-generated models. Each failure names the input, the expected and the actual value."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

import ledger
from assignment_strategies import answer_bool, answer_float, models, plain
from servelab import hw_model as hw
from servelab.harness.calls import call_each, value
from servelab.hw_model import H100, LLAMA3_70B, LLAMA3_8B

NO_GQA = dataclasses.replace(LLAMA3_8B, n_kv_heads=32)

gpus = st.builds(hw.GpuSpec, name=st.just("random"), peak_flops=st.just(1e15), hbm_bandwidth=st.just(3e12),
                 memory_bytes=st.floats(1e9, 1e12))


def check(what, model, expected, actual):
    # the answer's type first: a bool is not a count, and 0 is not False
    if isinstance(expected, bool):
        actual = answer_bool(f"{what} of {model}", actual)
    else:
        actual = answer_float(f"{what} of {model}", actual)
    assert actual == expected, f"{what} of {model}: expected {expected!r}, got {actual!r}"


# ---- the lecture's numbers (exercises 1 and 3) ----------------------------------------------------
# Each lecture check comes with the same quantities on a generated neighbour of the lecture's
# model (other layer count and vocabulary): a table of the lecture's answers passes none of them.

neighbours = st.tuples(st.integers(1, 160), st.integers(1, 300_000))

# A test's calls into your code are made together (servelab.harness.calls.call_each: under the
# autograder, one message to your code's process instead of one per call), then checked in order.


def neighbour_calls(base, n_layers, vocab_size):
    """The lecture model with another layer count and vocabulary, and the calls asking about it."""
    model = dataclasses.replace(base, n_layers=n_layers, vocab_size=vocab_size)
    m = plain(model)
    return model, [(ledger.param_count, (m,)), (ledger.kv_bytes_per_token, (m,)),
                   (ledger.kv_capacity_tokens, (m, H100)), (ledger.max_batch, (m, H100, 1024)),
                   (ledger.fits, (m, H100))]


def check_neighbour(model, got):
    check("param_count", model, model.param_count, value(got[0]))
    check("kv_bytes_per_token", model, model.kv_bytes_per_token, value(got[1]))
    check("kv_capacity_tokens on H100", model, hw.kv_capacity_tokens(model, H100), value(got[2]))
    check("max_batch at 1024 on H100", model, hw.max_batch(model, H100, 1024), value(got[3]))
    check("fits on one H100", model, model.weight_bytes < H100.memory_bytes * 0.9, value(got[4]))


def billions(what, model, value):
    return answer_float(f"{what} of {model}", value) / 1e9


@given(neighbours)
def test_llama3_8b_numbers(neighbour):
    m = plain(LLAMA3_8B)
    model, calls = neighbour_calls(LLAMA3_8B, *neighbour)
    got = call_each([(ledger.param_count, (m,)), (ledger.kv_bytes_per_token, (m,)),
                     (ledger.kv_capacity_tokens, (m, H100)), (ledger.max_batch, (m, H100, 1024))] + calls)
    check("param_count", LLAMA3_8B, 8_030_261_248, value(got[0]))
    check("kv_bytes_per_token", LLAMA3_8B, 131072, value(got[1]))
    check("kv_capacity_tokens on H100", LLAMA3_8B, 426_784, value(got[2]))
    check("max_batch at 1024 on H100", LLAMA3_8B, 416, value(got[3]))
    check_neighbour(model, got[4:])


@given(neighbours)
def test_exercise1_llama3_70b(neighbour):
    m = plain(LLAMA3_70B)
    model, calls = neighbour_calls(LLAMA3_70B, *neighbour)
    got = call_each([(ledger.param_count, (m,)), (ledger.weight_bytes, (m,)), (ledger.kv_bytes_per_token, (m,)),
                     (ledger.fits, (m, H100)), (ledger.kv_capacity_tokens, (m, H100))] + calls)
    check("param_count (in billions, 2 decimals)", LLAMA3_70B, 70.55,
          round(billions("param_count", LLAMA3_70B, value(got[0])), 2))
    check("weight_bytes (GB)", LLAMA3_70B, 141.0, float(round(answer_float("weight_bytes", value(got[1])) / 1e9)))
    check("kv_bytes_per_token (320 KiB)", LLAMA3_70B, 327680, value(got[2]))
    check("fits on one H100", LLAMA3_70B, False, value(got[3]))
    check("kv_capacity_tokens on H100 (never negative)", LLAMA3_70B, 0, value(got[4]))
    check_neighbour(model, got[5:])


@given(neighbours)
def test_exercise3_no_gqa(neighbour):
    m = plain(NO_GQA)
    model, calls = neighbour_calls(NO_GQA, *neighbour)
    got = call_each([(ledger.kv_bytes_per_token, (m,)), (ledger.param_count, (m,)),
                     (ledger.kv_capacity_tokens, (m, H100)), (ledger.max_batch, (m, H100, 1024))] + calls)
    check("kv_bytes_per_token (512 KiB)", NO_GQA, 524288, value(got[0]))
    check("param_count (billions)", NO_GQA, 8.84, round(billions("param_count", NO_GQA, value(got[1])), 2))
    check("kv_capacity_tokens on H100", NO_GQA, 103_624, value(got[2]))
    check("max_batch at 1024 on H100", NO_GQA, 101, value(got[3]))
    check_neighbour(model, got[4:])


# ---- against the Rust core on random models ------------------------------------------------------

@given(models())
def test_param_count_matches_core(model):
    check("param_count", model, model.param_count, ledger.param_count(plain(model)))


@given(models())
def test_bytes_match_core(model):
    m = plain(model)
    got = call_each([(ledger.weight_bytes, (m,)), (ledger.kv_bytes_per_token, (m,))])
    check("weight_bytes", model, model.weight_bytes, value(got[0]))
    check("kv_bytes_per_token", model, model.kv_bytes_per_token, value(got[1]))


@given(models(), gpus, st.floats(0.05, 1.0), st.integers(1, 1 << 20))
def test_capacity_and_batch_match_core(model, gpu, mem_util, context_len):
    m = plain(model)
    got = call_each([(ledger.kv_capacity_tokens, (m, gpu, mem_util)), (ledger.max_batch, (m, gpu, context_len, mem_util)),
                     (ledger.fits, (m, gpu, mem_util))])
    check(f"kv_capacity_tokens(gpu={gpu}, mem_util={mem_util})", model,
          hw.kv_capacity_tokens(model, gpu, mem_util), value(got[0]))
    check(f"max_batch(context_len={context_len})", model,
          hw.max_batch(model, gpu, context_len, mem_util), value(got[1]))
    check(f"fits(gpu={gpu}, mem_util={mem_util})", model, model.weight_bytes < gpu.memory_bytes * mem_util,
          value(got[2]))
