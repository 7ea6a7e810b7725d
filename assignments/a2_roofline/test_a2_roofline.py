"""Tests of assignment 2 (the roofline) against servelab's Rust core and the lecture's numbers.
Each failure names the input, the expected and the actual value."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given
from hypothesis import strategies as st

import roofline
from assignment_strategies import answer_float, answer_int, assert_close_float, batches, efficiencies, gpus, models, plain
from servelab import hw_model as hw
from servelab.harness.calls import call_each, value
from servelab.hw_model import A100_80GB, DEFAULT_EFFICIENCY, H100, LLAMA3_8B

EFF = DEFAULT_EFFICIENCY
FIELDS = ("flops", "bytes_moved", "compute_s", "memory_s", "time_s")


def close(what, args, expected, actual, rel=1e-9):
    assert_close_float(f"{what}{args}", expected, actual, rel_tol=rel)


def step_call(model, gpu, batch, eff=EFF):
    return roofline.step_cost, (plain(model), plain(gpu), list(batch), plain(eff))


def checked_step(batch, got):
    assert isinstance(got, dict) and set(FIELDS) | {"bound"} <= set(got), \
        f"step_cost(..., batch={batch}): expected a dict with keys {sorted(FIELDS + ('bound',))}, got {got!r:.300}"
    for f in FIELDS:
        answer_float(f"step_cost(..., batch={batch})[{f!r}]", got[f])
    return got


def student_step(model, gpu, batch, eff=EFF):
    fn, args = step_call(model, gpu, batch, eff)
    return checked_step(batch, fn(*args))


def student_steps(model, gpu, batches, eff=EFF):
    """step_cost of each batch: the calls made together (servelab.harness.calls.call_each: under
    the autograder, one message to your code's process), then each answer checked in order."""
    got = call_each([step_call(model, gpu, batch, eff) for batch in batches])
    return [checked_step(batch, value(one)) for batch, one in zip(batches, got)]


# ---- against the Rust core on random models, GPUs and batches ------------------------------------

@given(models(), gpus, efficiencies, batches)
def test_step_cost_matches_core(model, gpu, eff, batch):
    got = student_step(model, gpu, batch, eff)
    want = hw.step_cost(model, gpu, batch, eff)
    for f in FIELDS:
        close(f"step_cost(...).{f} for batch=", (batch,), getattr(want, f), got[f])
    assert got["bound"] == want.bound, f"bound for batch={batch}: expected {want.bound}, got {got['bound']}"


@given(models(), gpus, efficiencies, st.integers(1, 4096), st.integers(1, 4096), st.integers(0, 8192),
       st.integers(1, 4096), st.integers(0, 8192))
def test_lm_head_once_per_sequence_and_causal_attention(model, gpu, eff, n1, n2, c, n3, c3):
    # a prefill split in two chunks does the same attention and matmuls as one chunk, plus one
    # more LM head (it runs for each step's last token only)
    steps = student_steps(model, gpu, [[(n1 + n2, c)], [(n1, c)], [(n2, c + n1)], [(n3, c3)],
                                       [(n1 + n2, c), (n3, c3)], [(1, c3)], [(1, c3)] * 2], eff)
    whole, first, second, other, both, *decode = (step["flops"] for step in steps)
    lm_head = 2.0 * model.vocab_size * model.d_model
    close("chunked prefill FLOPs - one LM head, chunks", (n1, n2, c), whole, first + second - lm_head)
    # two sequences in one step: the FLOPs of each alone, added (one LM head each: a head
    # counted once per step, or any constant, breaks this)
    close("FLOPs of a two-sequence step vs each sequence alone", ((n1 + n2, c), (n3, c3)), whole + other, both)
    # and the head's share is 2 * vocab * d_model per sequence, not a constant
    close("FLOPs of two decodes vs one", (c3,), 2 * decode[0], decode[1])


@given(gpus)
def test_ridge_point_matches_core(gpu):
    close("ridge_point", (gpu,), gpu.ridge_point, roofline.ridge_point(plain(gpu)))


@given(models(), gpus)
def test_decode_lower_bound_matches_core(model, gpu):
    close("decode_lower_bound_s", (model, gpu), hw.weight_read_lower_bound_s(model, gpu),
          roofline.decode_lower_bound_s(plain(model), plain(gpu)))


# ---- the lecture's numbers (exercises 2 and 7) ----------------------------------------------------

# the first prefill length the core finds compute-bound on the A100 (computed once, not per example)
A100_CROSSOVER = next(n for n in range(1, 1000) if hw.prefill_cost(LLAMA3_8B, A100_80GB, n).bound == "compute")
# Each comes with the same questions on a generated neighbour (another bandwidth, prompt length,
# batch or context), answered by the core: a table of the lecture's answers passes neither test.

@given(st.floats(5e11, 2e13), st.integers(1, 1024))
def test_exercise2_a100(bandwidth, context):
    other = dataclasses.replace(A100_80GB, hbm_bandwidth=bandwidth)
    a100, m, o = plain(A100_80GB), plain(LLAMA3_8B), plain(other)
    # the calls made together (call_each: one message under the autograder), checked in order
    got = iter(call_each([(roofline.ridge_point, (o,)), (roofline.decode_lower_bound_s, (m, o)),
                          step_call(LLAMA3_8B, other, [(1, context)]), (roofline.prefill_crossover, (m, o, plain(EFF))),
                          (roofline.ridge_point, (a100,)), (roofline.prefill_crossover, (m, a100, plain(EFF))),
                          (roofline.step_cost, (m, a100, [(1, 512)], plain(EFF))),
                          (roofline.decode_lower_bound_s, (m, a100))]))
    close("ridge_point", (other,), other.ridge_point, value(next(got)))
    close("decode_lower_bound_s", (other,), hw.weight_read_lower_bound_s(LLAMA3_8B, other), value(next(got)))
    close("decode step time_s at context", (context, other), hw.step_cost(LLAMA3_8B, other, [(1, context)]).time_s,
          checked_step([(1, context)], value(next(got)))["time_s"])
    want = next(n for n in range(1, 1 << 20) if hw.prefill_cost(LLAMA3_8B, other, n).bound == "compute")
    crossover = answer_int(f"prefill_crossover(LLAMA3_8B, {other})", value(next(got)))
    assert crossover == want, f"prefill crossover on {other}: expected {want}, got {crossover}"
    assert round(value(next(got))) == 153
    crossover = answer_int("prefill_crossover(LLAMA3_8B, A100)", value(next(got)))
    assert 142 < crossover <= 145, f"A100 prefill crossover: expected in (142, 145], got {crossover}"
    assert crossover == A100_CROSSOVER, f"A100 prefill crossover: expected {A100_CROSSOVER}, got {crossover}"
    decode = value(next(got))["time_s"]
    assert round(decode * 1e3, 2) == 9.74, f"A100 decode step at context 512: expected 9.74 ms, got {decode * 1e3:.3f}"
    assert round(value(next(got)) * 1e3, 2) == 7.88


@given(models(), gpus, efficiencies)
def test_prefill_crossover_is_the_first_compute_bound_length(model, gpu, eff):
    n = answer_int(f"prefill_crossover({model}, {gpu}, {eff})", roofline.prefill_crossover(plain(model), plain(gpu), plain(eff)))
    assert n >= 1, f"prefill_crossover({model}, {gpu}, {eff}): expected a length of at least 1, got {n}"
    assert hw.prefill_cost(model, gpu, n, eff).bound == "compute", f"prefill of {n} tokens is not compute-bound"
    assert n == 1 or hw.prefill_cost(model, gpu, n - 1, eff).bound == "memory", f"{n - 1} tokens is already compute-bound"


@given(st.integers(1, 32768), st.integers(1, 512), st.integers(0, 32768))
def test_exercise7_output_tokens_cost_more(prompt_len, batch, context):
    m, g, e = plain(LLAMA3_8B), plain(H100), plain(EFF)
    # the calls made together (call_each: one message under the autograder), checked in order
    got = call_each([(roofline.prefill_time_per_token, (m, g, prompt_len, e)),
                     (roofline.decode_time_per_token, (m, g, batch, context, e)),
                     (roofline.prefill_time_per_token, (m, g, 2048, e))]
                    + [(roofline.decode_time_per_token, (m, g, b, 1024, e)) for b in (1, 64, 256)])
    close("prefill_time_per_token, prompt_len", (prompt_len,), hw.prefill_cost(LLAMA3_8B, H100, prompt_len).time_s / prompt_len,
          value(got[0]))
    close("decode_time_per_token, batch and context", (batch, context),
          hw.decode_step_cost(LLAMA3_8B, H100, batch, context).time_s / batch, value(got[1]))
    prefill = value(got[2])
    assert round(prefill * 1e6, 1) == 21.2, f"prefill per token at 2048: expected 21.2 us, got {prefill * 1e6:.2f}"
    per_token = {b: value(one) for b, one in zip((1, 64, 256), got[3:])}
    assert round(per_token[64] * 1e6) == 145 and round(per_token[256] * 1e6) == 74, per_token
    assert all(t > prefill for t in per_token.values()), "decode tokens must cost more than prefill tokens"
    for b, t in per_token.items():
        close("decode_time_per_token, batch", (b,), hw.decode_step_cost(LLAMA3_8B, H100, b, 1024).time_s / b, t)
