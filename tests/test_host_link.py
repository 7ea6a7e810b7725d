"""Moving KV between the GPU and host memory on the paper GPU (§8, milestone 4b groundwork):
the presets carry their PCIe figure, zero tokens cost nothing, the price is linear in tokens and
in KV bytes per token, and bad input is refused with the argument's name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import hw_model as hw
from servelab.hw_model import A100_80GB, H100, H200, LLAMA3_8B, LLAMA3_70B

GPUS = st.sampled_from([H100, H200, A100_80GB])
MODELS = st.sampled_from([LLAMA3_8B, LLAMA3_70B])
TOKENS = st.integers(0, 1 << 30)


def test_presets_carry_the_datasheet_pcie_figure_each_way():
    # H100/H200 SXM datasheets: PCIe Gen5 128 GB/s in total; A100 80GB SXM: PCIe Gen4 64 GB/s
    assert H100.host_link_bandwidth == H200.host_link_bandwidth == 64e9
    assert A100_80GB.host_link_bandwidth == 32e9
    # a spec built without the field has no host link; the transfer then names the problem
    bare = hw.GpuSpec("bare", peak_flops=1e12, hbm_bandwidth=1e12, memory_bytes=1e9)
    assert bare.host_link_bandwidth == 0.0
    with pytest.raises(ValueError, match="bare has host_link_bandwidth 0"):
        hw.kv_host_transfer_s(LLAMA3_8B, bare, 16)


@given(MODELS, GPUS)
def test_zero_tokens_cost_zero(model, gpu):
    assert hw.kv_host_transfer_s(model, gpu, 0) == 0.0


@given(MODELS, GPUS, TOKENS, TOKENS)
def test_price_is_linear_in_tokens(model, gpu, a, b):
    t = lambda n: hw.kv_host_transfer_s(model, gpu, n)  # noqa: E731
    assert t(a + b) == pytest.approx(t(a) + t(b), rel=1e-12, abs=0.0)
    assert t(max(a, b)) >= t(min(a, b)) >= 0.0


@given(MODELS, GPUS, st.integers(1, 1 << 20))
def test_price_is_the_kv_bytes_over_the_link(model, gpu, n):
    want = n * model.kv_bytes_per_token / gpu.host_link_bandwidth
    assert hw.kv_host_transfer_s(model, gpu, n) == pytest.approx(want, rel=1e-12)
    # no GQA: four times the KV per token, four times the transfer (exercise 3's model)
    wide = dataclasses.replace(model, n_kv_heads=model.n_heads)
    ratio = model.n_heads // model.n_kv_heads
    assert hw.kv_host_transfer_s(wide, gpu, n) == pytest.approx(ratio * want, rel=1e-12)


def test_one_block_of_llama3_8b_over_pcie_gen5():
    # 16 tokens x 128 KiB = 2 MiB over 64 GB/s: about 33 us, cheaper than recomputing it
    assert hw.kv_host_transfer_s(LLAMA3_8B, H100, 16) == pytest.approx(16 * 131072 / 64e9)
    assert hw.kv_host_transfer_s(LLAMA3_8B, H100, np.int64(16)) == hw.kv_host_transfer_s(LLAMA3_8B, H100, 16)


@pytest.mark.parametrize("n_tokens,error,message", [
    (-1, ValueError, "n_tokens must be a non-negative integer, got -1"),
    (1.5, TypeError, "n_tokens must be an integer"),
    (True, TypeError, "n_tokens must be an integer"),
    ("16", TypeError, "n_tokens must be an integer"),
])
def test_bad_token_counts_are_refused(n_tokens, error, message):
    with pytest.raises(error, match=message):
        hw.kv_host_transfer_s(LLAMA3_8B, H100, n_tokens)


def test_bad_specs_are_refused():
    with pytest.raises(TypeError, match="model must be a servelab.hw_model.ModelSpec"):
        hw.kv_host_transfer_s(H100, H100, 1)
    with pytest.raises(TypeError, match="gpu must be a servelab.hw_model.GpuSpec"):
        hw.kv_host_transfer_s(LLAMA3_8B, "H100", 1)


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), True, "64GB/s"])
def test_bad_host_link_fields_are_refused(value):
    with pytest.raises(ValueError, match="host_link_bandwidth must be a non-negative finite number"):
        dataclasses.replace(H100, host_link_bandwidth=value)
