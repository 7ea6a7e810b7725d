"""Tests of assignment 1 (the ledger) against servelab's Rust core, the lecture's numbers, and
Hypothesis-generated models. Each failure names the input, the expected and the actual value."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

import ledger
from assignment_strategies import answer_bool, answer_float, models, plain
from servelab import hw_model as hw
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


def check_neighbour(base, n_layers, vocab_size):
    model = dataclasses.replace(base, n_layers=n_layers, vocab_size=vocab_size)
    check("param_count", model, model.param_count, ledger.param_count(plain(model)))
    check("kv_bytes_per_token", model, model.kv_bytes_per_token, ledger.kv_bytes_per_token(plain(model)))
    check("kv_capacity_tokens on H100", model, hw.kv_capacity_tokens(model, H100),
          ledger.kv_capacity_tokens(plain(model), H100))
    check("max_batch at 1024 on H100", model, hw.max_batch(model, H100, 1024), ledger.max_batch(plain(model), H100, 1024))
    check("fits on one H100", model, model.weight_bytes < H100.memory_bytes * 0.9, ledger.fits(plain(model), H100))


def billions(what, model, value):
    return answer_float(f"{what} of {model}", value) / 1e9


@given(neighbours)
def test_llama3_8b_numbers(neighbour):
    check("param_count", LLAMA3_8B, 8_030_261_248, ledger.param_count(plain(LLAMA3_8B)))
    check("kv_bytes_per_token", LLAMA3_8B, 131072, ledger.kv_bytes_per_token(plain(LLAMA3_8B)))
    check("kv_capacity_tokens on H100", LLAMA3_8B, 426_784, ledger.kv_capacity_tokens(plain(LLAMA3_8B), H100))
    check("max_batch at 1024 on H100", LLAMA3_8B, 416, ledger.max_batch(plain(LLAMA3_8B), H100, 1024))
    check_neighbour(LLAMA3_8B, *neighbour)


@given(neighbours)
def test_exercise1_llama3_70b(neighbour):
    check("param_count (in billions, 2 decimals)", LLAMA3_70B, 70.55,
          round(billions("param_count", LLAMA3_70B, ledger.param_count(plain(LLAMA3_70B))), 2))
    check("weight_bytes (GB)", LLAMA3_70B, 141.0,
          float(round(answer_float("weight_bytes", ledger.weight_bytes(plain(LLAMA3_70B))) / 1e9)))
    check("kv_bytes_per_token (320 KiB)", LLAMA3_70B, 327680, ledger.kv_bytes_per_token(plain(LLAMA3_70B)))
    check("fits on one H100", LLAMA3_70B, False, ledger.fits(plain(LLAMA3_70B), H100))
    check("kv_capacity_tokens on H100 (never negative)", LLAMA3_70B, 0, ledger.kv_capacity_tokens(plain(LLAMA3_70B), H100))
    check_neighbour(LLAMA3_70B, *neighbour)


@given(neighbours)
def test_exercise3_no_gqa(neighbour):
    check("kv_bytes_per_token (512 KiB)", NO_GQA, 524288, ledger.kv_bytes_per_token(plain(NO_GQA)))
    check("param_count (billions)", NO_GQA, 8.84, round(billions("param_count", NO_GQA, ledger.param_count(plain(NO_GQA))), 2))
    check("kv_capacity_tokens on H100", NO_GQA, 103_624, ledger.kv_capacity_tokens(plain(NO_GQA), H100))
    check("max_batch at 1024 on H100", NO_GQA, 101, ledger.max_batch(plain(NO_GQA), H100, 1024))
    check_neighbour(NO_GQA, *neighbour)


# ---- against the Rust core on random models ------------------------------------------------------

@given(models())
def test_param_count_matches_core(model):
    check("param_count", model, model.param_count, ledger.param_count(plain(model)))


@given(models())
def test_bytes_match_core(model):
    check("weight_bytes", model, model.weight_bytes, ledger.weight_bytes(plain(model)))
    check("kv_bytes_per_token", model, model.kv_bytes_per_token, ledger.kv_bytes_per_token(plain(model)))


@given(models(), gpus, st.floats(0.05, 1.0), st.integers(1, 1 << 20))
def test_capacity_and_batch_match_core(model, gpu, mem_util, context_len):
    check(f"kv_capacity_tokens(gpu={gpu}, mem_util={mem_util})", model,
          hw.kv_capacity_tokens(model, gpu, mem_util), ledger.kv_capacity_tokens(plain(model), gpu, mem_util))
    check(f"max_batch(context_len={context_len})", model,
          hw.max_batch(model, gpu, context_len, mem_util), ledger.max_batch(plain(model), gpu, context_len, mem_util))
    check(f"fits(gpu={gpu}, mem_util={mem_util})", model, model.weight_bytes < gpu.memory_bytes * mem_util,
          ledger.fits(plain(model), gpu, mem_util))
