"""Bad input to hw_model raises ValueError naming the argument and its value; nothing panics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from servelab import hw_model as hw
from servelab.hw_model import H100, LLAMA3_8B


@pytest.mark.parametrize("field,value", [
    ("n_layers", 0), ("d_model", -1), ("n_heads", 0), ("n_kv_heads", -8), ("d_head", 0), ("d_ff", 0),
    ("vocab_size", -5), ("bytes_per_param", 0.0), ("n_layers", 2**70),
])
def test_bad_model_field_named_in_error(field, value):
    with pytest.raises(ValueError) as info:
        dataclasses.replace(LLAMA3_8B, **{field: value})
    assert field in str(info.value) and str(value) in str(info.value)


def test_heads_not_a_multiple_of_kv_heads():
    with pytest.raises(ValueError, match="n_heads=32 and n_kv_heads=5"):
        dataclasses.replace(LLAMA3_8B, n_kv_heads=5)


def test_no_gqa_variant_is_valid():
    assert dataclasses.replace(LLAMA3_8B, n_kv_heads=32).kv_bytes_per_token == 4 * LLAMA3_8B.kv_bytes_per_token


@pytest.mark.parametrize("field,value", [("peak_flops", -1.0), ("hbm_bandwidth", 0.0),
                                         ("memory_bytes", float("inf"))])
def test_bad_gpu_field_named_in_error(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(H100, **{field: value})


@pytest.mark.parametrize("batch,needle", [
    ([], "empty batch"),
    ([(1, 0), (0, 5)], "batch[1].new_tokens"),
    ([(-4, 0)], "got -4"),
    ([(1, -1)], "batch[0].context_len"),
    ([(1.5, 0)], "batch[0].new_tokens must be an integer, got 1.5"),
    ([(1, 0, 3)], "batch[0] must be a pair"),
    ([7], "batch[0] must be a pair"),
    ([(2**64, 0)], "batch[0].new_tokens must fit in a signed 64-bit integer"),
])
def test_bad_batch(batch, needle):
    with pytest.raises(ValueError) as info:
        hw.step_cost(LLAMA3_8B, H100, batch)
    assert needle in str(info.value)


@pytest.mark.parametrize("mem_util", [0.0, -0.1, 1.5, float("nan")])
def test_bad_mem_util(mem_util):
    with pytest.raises(ValueError, match="mem_util"):
        hw.kv_capacity_tokens(LLAMA3_8B, H100, mem_util)
    with pytest.raises(ValueError, match="mem_util"):
        hw.max_batch(LLAMA3_8B, H100, 1024, mem_util)


def test_mem_util_one_is_allowed():
    assert hw.kv_capacity_tokens(LLAMA3_8B, H100, 1.0) > hw.kv_capacity_tokens(LLAMA3_8B, H100, 0.9)


@pytest.mark.parametrize("call,needle", [
    (lambda: hw.decode_step_cost(LLAMA3_8B, H100, 0, 1024), "batch_size must be a positive integer, got 0"),
    (lambda: hw.prefill_cost(LLAMA3_8B, H100, -3), "prompt_len must be a positive integer, got -3"),
    (lambda: hw.max_batch(LLAMA3_8B, H100, 0), "context_len must be an integer in [1,"),
    (lambda: hw.decode_step_costs(LLAMA3_8B, H100, [1, 2], [10]), "same length"),
    (lambda: hw.decode_step_costs(LLAMA3_8B, H100, [1.5], [10]), "batch_size must hold integers"),
    (lambda: hw.decode_step_costs(LLAMA3_8B, H100, [[1]], [10]), "batch_size must be one-dimensional"),
    (lambda: hw.decode_step_costs(LLAMA3_8B, H100, [0], [10]), "step 0: batch_size"),
    (lambda: hw.step_cost_many(LLAMA3_8B, H100, [1], [0], [0, 2]), "offsets must"),
    (lambda: hw.step_cost_many(LLAMA3_8B, H100, [1, 1], [0, 0], [0, 2, 1, 2]), "step 1 must hold"),
    (lambda: hw.step_cost_many(LLAMA3_8B, H100, [1, -1], [0, 0], [0, 2]), "new_tokens/context_len[1]"),
])
def test_bad_vector_and_helper_arguments(call, needle):
    with pytest.raises(ValueError) as info:
        call()
    assert needle in str(info.value)


def test_non_contiguous_arrays_are_accepted():
    b = np.arange(1, 21)[::2]
    c = hw.decode_step_costs(LLAMA3_8B, H100, b, np.full(10, 512)[::1])
    assert len(c) == 10 and np.all(np.diff(c.time_s) > 0)


def test_empty_sweep_gives_empty_columns():
    c = hw.decode_step_costs(LLAMA3_8B, H100, np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    assert len(c) == 0
