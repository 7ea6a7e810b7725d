"""Every number of SPEC.md §2's table, reproduced by ``hw_model`` to the digits the lecture
prints (§2.4, §3.1-§3.5, exercises 1, 2, 3, 7). One test per number, so that a failure says
which of the lecture's claims broke.
"""

import dataclasses

from servelab import hw_model as hw
from servelab.hw_model import A100_80GB, H100, LLAMA3_70B, LLAMA3_8B

KiB = 1024
NO_GQA = dataclasses.replace(LLAMA3_8B, n_kv_heads=32)


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)


def us(seconds: float) -> float:
    return round(seconds * 1e6, 1)


def decode(model, gpu, batch, ctx):
    return hw.decode_step_cost(model, gpu, batch, ctx)


# ---- ledgers (§2.4, exercise 1) ---------------------------------------------------------------

def test_llama3_8b_params_8_03_billion():
    assert round(LLAMA3_8B.param_count / 1e9, 2) == 8.03


def test_llama3_8b_weights_16_06_gb():
    assert round(LLAMA3_8B.weight_bytes / 1e9, 2) == 16.06


def test_llama3_70b_params_70_55_billion():
    assert round(LLAMA3_70B.param_count / 1e9, 2) == 70.55


def test_llama3_70b_weights_141_gb():
    assert round(LLAMA3_70B.weight_bytes / 1e9) == 141


def test_llama3_70b_kv_320_kib_per_token():
    assert LLAMA3_70B.kv_bytes_per_token == 320 * KiB == 327680


def test_llama3_70b_does_not_fit_one_h100():
    assert hw.kv_capacity_tokens(LLAMA3_70B, H100) == 0


def test_llama3_8b_kv_128_kib_per_token():
    assert LLAMA3_8B.kv_bytes_per_token == 131072 == 128 * KiB


# ---- GPUs (§3.1) -------------------------------------------------------------------------------

def test_ridge_point_h100_295():
    assert round(H100.ridge_point) == 295


def test_ridge_point_a100_153():
    assert round(A100_80GB.ridge_point) == 153


# ---- decode at batch 1 (§3.3, exercise 2) ------------------------------------------------------

def test_decode_b1_ctx512_h100_6_13_ms():
    assert ms(decode(LLAMA3_8B, H100, 1, 512).time_s) == 6.13


def test_decode_b1_ctx512_a100_9_74_ms():
    assert ms(decode(LLAMA3_8B, A100_80GB, 1, 512).time_s) == 9.74


def test_decode_b1_ctx1024_h100_6_15_ms():
    assert ms(decode(LLAMA3_8B, H100, 1, 1024).time_s) == 6.15


def test_weight_read_lower_bound_h100_4_8_ms():
    assert round(hw.weight_read_lower_bound_s(LLAMA3_8B, H100) * 1e3, 1) == 4.8


def test_weight_read_lower_bound_a100_7_88_ms():
    assert ms(hw.weight_read_lower_bound_s(LLAMA3_8B, A100_80GB)) == 7.88


def test_a100_vs_h100_decode_ratio_is_bandwidth_ratio():
    # exercise 2d: a memory-bound step scales with 1 / bandwidth (the overhead blurs it slightly)
    ratio = (decode(LLAMA3_8B, A100_80GB, 1, 512).memory_s / decode(LLAMA3_8B, H100, 1, 512).memory_s)
    assert abs(ratio - H100.hbm_bandwidth / A100_80GB.hbm_bandwidth) < 1e-12


# ---- prefill (§3.3) ------------------------------------------------------------------------------

def test_prefill_1_to_256_tokens_about_6_1_ms():
    for n in (1, 2, 16, 64, 128, 256):
        assert round(hw.prefill_cost(LLAMA3_8B, H100, n).time_s * 1e3, 1) == 6.1, n


def test_prefill_per_token_2048_is_21_2_us():
    assert us(hw.prefill_cost(LLAMA3_8B, H100, 2048).time_s / 2048) == 21.2


def test_prefill_per_token_32k_about_33_us():
    assert round(hw.prefill_cost(LLAMA3_8B, H100, 32768).time_s / 32768 * 1e6) == 33


def test_prefill_8k_about_0_2_s():
    assert round(hw.prefill_cost(LLAMA3_8B, H100, 8192).time_s, 1) == 0.2


def test_prefill_32k_about_1_s():
    assert round(hw.prefill_cost(LLAMA3_8B, H100, 32768).time_s) == 1


def test_a100_prefill_memory_bound_at_142_compute_bound_at_145():
    assert hw.prefill_cost(LLAMA3_8B, A100_80GB, 142).bound == "memory"
    assert hw.prefill_cost(LLAMA3_8B, A100_80GB, 145).bound == "compute"


# ---- decode batching (§3.4, exercise 7) ----------------------------------------------------------

def test_decode_batch64_vs_1_step_6_to_9_ms_and_throughput_x42():
    b1, b64 = decode(LLAMA3_8B, H100, 1, 1024), decode(LLAMA3_8B, H100, 64, 1024)
    assert round(b1.time_s * 1e3) == 6 and int(b64.time_s * 1e3) == 9
    assert round((64 / b64.time_s) / (1 / b1.time_s)) == 42


def test_decode_per_token_batch64_about_145_us():
    assert round(decode(LLAMA3_8B, H100, 64, 1024).time_s / 64 * 1e6) == 145


def test_decode_per_token_batch256_about_74_us():
    assert round(decode(LLAMA3_8B, H100, 256, 1024).time_s / 256 * 1e6) == 74


def test_batch256_kv_share_70_percent():
    s = decode(LLAMA3_8B, H100, 256, 1024)
    assert round(s.kv_bytes / s.bytes_moved * 100) == 70


def test_batch256_mfu_21_percent():
    assert round(decode(LLAMA3_8B, H100, 256, 1024).mfu * 100) == 21


def test_batch1_mfu_0_3_percent():
    assert round(decode(LLAMA3_8B, H100, 1, 1024).mfu * 100, 1) == 0.3


# ---- KV memory (§3.5, exercise 3) ----------------------------------------------------------------

def test_kv_capacity_h100_426784_tokens():
    assert hw.kv_capacity_tokens(LLAMA3_8B, H100) == 426_784


def test_max_batch_h100_ctx1024_is_416_and_512_does_not_fit():
    assert hw.max_batch(LLAMA3_8B, H100, 1024) == 416 < 512


def test_no_gqa_kv_512_kib_per_token():
    assert NO_GQA.kv_bytes_per_token == 512 * KiB


def test_no_gqa_params_8_84_billion():
    assert round(NO_GQA.param_count / 1e9, 2) == 8.84


def test_no_gqa_capacity_103624_tokens():
    assert hw.kv_capacity_tokens(NO_GQA, H100) == 103_624


def test_no_gqa_max_batch_101():
    assert hw.max_batch(NO_GQA, H100, 1024) == 101


def test_no_gqa_vs_gqa_batch32_13_12_vs_7_70_ms():
    assert ms(decode(NO_GQA, H100, 32, 1024).time_s) == 13.12
    assert ms(decode(LLAMA3_8B, H100, 32, 1024).time_s) == 7.70


def test_context_sweep_max_throughput_falls_about_64x():
    def best(ctx):
        b = hw.max_batch(LLAMA3_8B, H100, ctx)
        return b / decode(LLAMA3_8B, H100, b, ctx).time_s
    assert round(best(512) / best(32768)) == 64
