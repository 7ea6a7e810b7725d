"""Tests of assignment 2 (the roofline) against servelab's Rust core and the lecture's numbers.
Each failure names the input, the expected and the actual value."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

import roofline
from assignment_strategies import batches, efficiencies, gpus, models, plain
from servelab import hw_model as hw
from servelab.hw_model import A100_80GB, DEFAULT_EFFICIENCY, H100, LLAMA3_8B

EFF = DEFAULT_EFFICIENCY
FIELDS = ("flops", "bytes_moved", "compute_s", "memory_s", "time_s")


def close(what, args, expected, actual, rel=1e-9):
    assert math.isclose(actual, expected, rel_tol=rel), f"{what}{args}: expected {expected!r}, got {actual!r}"


def student_step(model, gpu, batch, eff=EFF):
    return roofline.step_cost(plain(model), plain(gpu), list(batch), plain(eff))


# ---- against the Rust core on random models, GPUs and batches ------------------------------------

@given(models(), gpus, efficiencies, batches)
def test_step_cost_matches_core(model, gpu, eff, batch):
    got = student_step(model, gpu, batch, eff)
    want = hw.step_cost(model, gpu, batch, eff)
    for f in FIELDS:
        close(f"step_cost(...).{f} for batch=", (batch,), getattr(want, f), got[f])
    assert got["bound"] == want.bound, f"bound for batch={batch}: expected {want.bound}, got {got['bound']}"


@given(models(), gpus, efficiencies, st.integers(1, 4096), st.integers(1, 4096), st.integers(0, 8192))
def test_lm_head_once_per_sequence_and_causal_attention(model, gpu, eff, n1, n2, c):
    # a prefill split in two chunks does the same attention and matmuls as one chunk, plus one
    # more LM head (it runs for each step's last token only)
    whole = student_step(model, gpu, [(n1 + n2, c)], eff)["flops"]
    parts = student_step(model, gpu, [(n1, c)], eff)["flops"] + student_step(model, gpu, [(n2, c + n1)], eff)["flops"]
    close("chunked prefill FLOPs - one LM head, chunks", (n1, n2, c), whole, parts - 2.0 * model.vocab_size * model.d_model)


@given(gpus)
def test_ridge_point_matches_core(gpu):
    close("ridge_point", (gpu,), gpu.ridge_point, roofline.ridge_point(plain(gpu)))


@given(models(), gpus)
def test_decode_lower_bound_matches_core(model, gpu):
    close("decode_lower_bound_s", (model, gpu), hw.weight_read_lower_bound_s(model, gpu),
          roofline.decode_lower_bound_s(plain(model), plain(gpu)))


# ---- the lecture's numbers (exercises 2 and 7) ----------------------------------------------------

def test_exercise2_a100():
    a100, m = plain(A100_80GB), plain(LLAMA3_8B)
    assert round(roofline.ridge_point(a100)) == 153
    crossover = roofline.prefill_crossover(m, a100, plain(EFF))
    assert 142 < crossover <= 145, f"A100 prefill crossover: expected in (142, 145], got {crossover}"
    want = next(n for n in range(1, 1000) if hw.prefill_cost(LLAMA3_8B, A100_80GB, n).bound == "compute")
    assert crossover == want, f"A100 prefill crossover: expected {want}, got {crossover}"
    decode = roofline.step_cost(m, a100, [(1, 512)], plain(EFF))["time_s"]
    assert round(decode * 1e3, 2) == 9.74, f"A100 decode step at context 512: expected 9.74 ms, got {decode * 1e3:.3f}"
    assert round(roofline.decode_lower_bound_s(m, a100) * 1e3, 2) == 7.88


@given(models(), gpus, efficiencies)
def test_prefill_crossover_is_the_first_compute_bound_length(model, gpu, eff):
    n = roofline.prefill_crossover(plain(model), plain(gpu), plain(eff))
    assert hw.prefill_cost(model, gpu, n, eff).bound == "compute", f"prefill of {n} tokens is not compute-bound"
    assert n == 1 or hw.prefill_cost(model, gpu, n - 1, eff).bound == "memory", f"{n - 1} tokens is already compute-bound"


def test_exercise7_output_tokens_cost_more():
    m, g, e = plain(LLAMA3_8B), plain(H100), plain(EFF)
    prefill = roofline.prefill_time_per_token(m, g, 2048, e)
    assert round(prefill * 1e6, 1) == 21.2, f"prefill per token at 2048: expected 21.2 us, got {prefill * 1e6:.2f}"
    per_token = {b: roofline.decode_time_per_token(m, g, b, 1024, e) for b in (1, 64, 256)}
    assert round(per_token[64] * 1e6) == 145 and round(per_token[256] * 1e6) == 74, per_token
    assert all(t > prefill for t in per_token.values()), "decode tokens must cost more than prefill tokens"
    for b, t in per_token.items():
        close("decode_time_per_token, batch", (b,), hw.decode_step_cost(LLAMA3_8B, H100, b, 1024).time_s / b, t)
