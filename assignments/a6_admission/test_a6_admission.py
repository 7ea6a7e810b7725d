"""Tests of assignment 6 (tail fan-out, early rejection): the fan-out formulas against an
independent form and the lecture's numbers; the predictors, the simulator and the report against
servelab (the Rust simulator) on random workloads; the lecture's §5.5 table and exercise 9."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import admission as mine
from assignment_strategies import answer_array, answer_int, assert_close, assert_close_float
from assignment_strategies import workloads as request_workloads  # a local workloads() below adds predictions
from servelab import hw_model as hw
from servelab.admission import EarlyReject, MeanLength, NoisyPredictor, Oracle, PredictedLengths
from servelab.admission import admission_report as core_report
from servelab import lecture
from servelab.hw_model import H100, LLAMA3_8B
from servelab.serving_core import run_batch1
from servelab.workload import Requests

PRICE = hw.price_constants(LLAMA3_8B, H100)
COUNTS = ("n", "accepted", "on_time", "accepted_late", "rejected", "false_rejections")


def step_time(batch):
    return hw.step_cost(LLAMA3_8B, H100, batch).time_s


# ---- part 1: fan-out (exercise 6) ---------------------------------------------------------------

def any_slow(n, q):
    """1 - (1 - q)^n, through logarithms so that a tiny q keeps its digits."""
    return -math.expm1(n * math.log1p(-q))


calls = st.integers(1, 1000)
probs = st.floats(1e-6, 0.999)


@given(calls, probs)
def test_p_any_slow(n, q):
    got = mine.p_any_slow(n, q)
    want = any_slow(n, q)
    assert_close_float(f"p_any_slow(n_calls={n}, p_slow={q})", want, got, rel_tol=1e-8)


@given(calls, st.floats(1e-4, 0.99))
def test_per_call_budget_and_percentile(n, target):
    q = mine.per_call_budget(n, target)
    assert isinstance(q, float) and 0.0 < q <= target * (1 + 1e-12), \
        f"per_call_budget({n}, {target}) = {q!r}: not in (0, target]"
    # the budget spends the whole target: exactly target (to rounding) at q, over it just above q
    reached = any_slow(n, q)
    assert math.isclose(reached, target, rel_tol=1e-6), (
        f"per_call_budget(n_calls={n}, target={target}) = {q}: then P(at least one slow) = {reached}, "
        f"expected {target}")
    pct = mine.per_call_percentile(n, target)
    assert_close_float(f"per_call_percentile(n_calls={n}, target={target}) (= 100 * (1 - per_call_budget))",
                       100.0 * (1.0 - q), pct, rel_tol=1e-12, abs_tol=1e-9)


@given(calls, st.floats(1e-4, 0.99))
def test_exercise6_lecture_numbers(n, target):
    # (a) 20 calls, 1% each: 18.2%; (b) at most 10% over 20 calls: q <= 0.525%, about P99.5;
    # and the budget of a generated fan-out, so that a table of the lecture's answers fails
    q = assert_close_float(f"per_call_budget({n}, {target})", -math.expm1(math.log1p(-target) / n),
                           mine.per_call_budget(n, target), rel_tol=1e-9)
    assert_close_float(f"p_any_slow({n}, per_call_budget({n}, {target}))", target, mine.p_any_slow(n, q), rel_tol=1e-6)
    a = mine.p_any_slow(20, 0.01)
    assert round(a, 3) == 0.182, f"p_any_slow(20, 0.01): expected 18.2%, got {a:.4%}"
    b = mine.per_call_budget(20, 0.10)
    assert round(b, 5) == 0.00525, f"per_call_budget(20, 0.10): expected 0.525%, got {b:.4%}"
    pct = mine.per_call_percentile(20, 0.10)
    assert round(pct, 1) == 99.5, f"per_call_percentile(20, 0.10): expected about P99.5, got P{pct:.3f}"


# ---- part 2: predictors ------------------------------------------------------------------------

lengths = st.lists(st.integers(1, 4000), min_size=1, max_size=40).map(lambda x: np.array(x, dtype=np.int64))


def as_requests(output_len):
    n = len(output_len)
    return Requests(np.zeros(n), np.ones(n, dtype=np.int64), output_len)


def same_ints(what, want, got):
    got = answer_array(what, got, want.shape, kinds="iu")
    assert np.array_equal(got, want), f"{what}: expected {want.tolist()}, got {got.tolist()}"


@given(lengths)
def test_mean_and_oracle_predictors(out):
    reqs = as_requests(out)
    same_ints(f"mean_lengths({out.tolist()})", MeanLength().predict(reqs), mine.mean_lengths(out))
    same_ints(f"oracle_lengths({out.tolist()})", Oracle().predict(reqs), mine.oracle_lengths(out))


@given(lengths, st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0, 2.5]), st.integers(0, 2**32))
def test_noisy_predictor(out, sigma, seed):
    want = NoisyPredictor(sigma, seed).predict(as_requests(out))
    same_ints(f"noisy_lengths({out.tolist()}, sigma={sigma}, seed={seed})", want,
              mine.noisy_lengths(out, sigma, seed))


# ---- part 2: the simulator ---------------------------------------------------------------------

@st.composite
def workloads(draw):
    """A small bursty workload, an SLO, and predictions that are right, too short or too long."""
    r = draw(request_workloads(min_n=1, max_n=20, max_prompt=1024, max_output=60))
    n = len(r)
    guess = draw(st.one_of(st.just(r.output_len.tolist()), st.lists(st.integers(1, 90), min_size=n, max_size=n)))
    return r, np.array(guess, dtype=np.int64), draw(st.sampled_from([0.05, 0.2, 0.5, 1.0, 3.0]))


def describe(r, guess, slo):
    return (f"arrivals {r.arrival_s.tolist()}, prompts {r.prompt_len.tolist()}, outputs "
            f"{r.output_len.tolist()}, predicted {guess.tolist()}, SLO TTFT {slo} s")


def check_run(r, guess, slo):
    want = run_batch1(r, LLAMA3_8B, H100, admission=EarlyReject(slo, PredictedLengths(guess)))
    got = mine.simulate_early_reject(r.arrival_s, r.prompt_len, r.output_len, guess, slo, PRICE)
    where = describe(r, guess, slo)
    rejected = answer_array(f"rejected for {where}", got["rejected"], want.rejected.shape, kinds="b")
    assert rejected.tolist() == want.rejected.tolist(), \
        f"rejected for {where}: expected {want.rejected.tolist()}, got {rejected.tolist()}"
    for key, expected in (("first_token_s", want.first_token_s), ("finish_s", want.finish_s),
                          ("would_first_token_s", want.would_first_token_s)):
        assert_close(f"{key} for {where}", expected, got[key], rtol=1e-9, atol=1e-12, equal_nan=True, kinds="f")
    return want, got


@given(workloads())
def test_early_reject_matches_core(case):
    check_run(*case)


@given(workloads())
def test_admission_report_matches_core(case):
    r, guess, slo = case
    want_run = run_batch1(r, LLAMA3_8B, H100, admission=EarlyReject(slo, PredictedLengths(guess)))
    want = core_report(want_run, slo)
    got = mine.admission_report(r.arrival_s, want_run.first_token_s, want_run.rejected,
                                want_run.would_first_token_s, slo)
    where = describe(r, guess, slo)
    for key in COUNTS:
        assert answer_int(f"{key} for {where}", got[key]) == getattr(want, key), f"{key} for {where}: expected {getattr(want, key)}, got {got[key]}"
    for key in ("attainment", "late_share_of_accepted", "false_rejection_share"):
        assert_close_float(f"{key} for {where}", getattr(want, key), got[key], rel_tol=1e-12)


def test_hand_checked():
    # three requests at t = 0, 100 output tokens each (about 0.62 s), SLO 1 s, oracle lengths:
    # the first two fit, the third would start after about 1.25 s
    a, p, o = np.zeros(3), np.array([10, 10, 10]), np.array([100, 100, 100])
    got = mine.simulate_early_reject(a, p, o, o, 1.0, PRICE)
    assert np.asarray(got["rejected"]).tolist() == [False, False, True], \
        f"SLO 1 s, three 100-token requests at once: expected rejected [False, False, True], got {got['rejected']}"
    assert math.isnan(got["first_token_s"][2]) and math.isnan(got["finish_s"][2]), "a rejected request is never served"
    assert np.isclose(got["first_token_s"][1], got["finish_s"][0] + step_time([(10, 0)]))
    assert np.isclose(got["would_first_token_s"][2], got["finish_s"][1] + step_time([(10, 0)])), \
        "the third request's first token, had it been admitted, comes after the second's end"
    # a short guess for a long request admits a request that will be late (accepted but late) ...
    a, p, o = np.array([0.0, 0.1]), np.array([10, 10]), np.array([1000, 5])
    got = mine.simulate_early_reject(a, p, o, np.array([10, 10]), 1.0, PRICE)
    assert np.asarray(got["rejected"]).tolist() == [False, False], "a 10-token guess looks harmless"
    assert got["first_token_s"][1] - 0.1 > 1.0, "... but the request waits for the 1000 true tokens"
    # ... and a long guess rejects a request that would have made it (a false rejection)
    a, o = np.array([0.0, 0.01]), np.array([5, 5])
    got = mine.simulate_early_reject(a, p, o, np.array([1000, 5]), 1.0, PRICE)
    assert np.asarray(got["rejected"]).tolist() == [False, True]
    assert got["would_first_token_s"][1] - 0.01 <= 1.0, "it would have been on time"
    # the request in service outlived its guess: the GPU is taken to be free now
    a, o = np.array([0.0, 2.0]), np.array([1000, 5])
    got = mine.simulate_early_reject(a, p, o, np.array([2, 5]), 0.05, PRICE)
    assert np.asarray(got["rejected"]).tolist() == [False, False], \
        "request 0 ran past its 2-token guess: request 1 is admitted on the belief that the GPU is free"


# ---- the lecture's table (§5.5) and exercise 9 -------------------------------------------------

def lecture_run(predicted):
    r = lecture.admission_workload()  # demo 03's chat workload: 600 requests at 0.4 req/s, seed 0
    got = mine.simulate_early_reject(r.arrival_s, r.prompt_len, r.output_len, predicted,
                                     lecture.LLM_SLO_TTFT_S, PRICE)
    return mine.admission_report(r.arrival_s, got["first_token_s"], got["rejected"],
                                 got["would_first_token_s"], lecture.LLM_SLO_TTFT_S)


def test_lecture_table_and_exercise9():
    """§5.5: oracle 489/600 (servelab: 490) and every admitted request on time; mean estimate
    about 70% (servelab: 73.2%), 17% of the admitted late (14.8%), 26% false rejections (28.2%).
    Exercise 9 (noise seed 42): attainment falls with sigma, and at sigma = 1 it is about the mean
    estimate's; the loss is mostly false rejections."""
    out = lecture.admission_workload().output_len
    oracle = lecture_run(mine.oracle_lengths(out))
    assert abs(oracle["on_time"] - 489) <= 6 and oracle["accepted_late"] == 0 and oracle["false_rejections"] == 0, \
        f"oracle: expected about 489/600 on time, none late, no false rejection; got {oracle}"
    mean = lecture_run(mine.mean_lengths(out))
    for key, figure in (("attainment", 0.70), ("late_share_of_accepted", 0.17), ("false_rejection_share", 0.26)):
        assert mean[key] == pytest.approx(figure, abs=0.04), f"mean estimate: {key} expected about {figure}, got {mean}"
    rows = {s: lecture_run(mine.noisy_lengths(out, s, lecture.NOISE_SEED)) for s in (0.0, 0.25, 1.0)}
    assert rows[0.0] == oracle, f"sigma 0 is the oracle: expected {oracle}, got {rows[0.0]}"
    att = [rows[s]["attainment"] for s in (0.0, 0.25, 1.0)]
    assert att[0] > att[1] > att[2], f"attainment must fall as sigma grows (0, 0.25, 1): got {att}"
    assert att[2] == pytest.approx(mean["attainment"], abs=0.03), \
        f"sigma 1: expected about the mean estimate's {mean['attainment']:.3f}, got {att[2]:.3f}"
    assert rows[1.0]["false_rejections"] > 2 * rows[1.0]["accepted_late"], \
        f"sigma 1: the loss should be mostly false rejections, got {rows[1.0]}"
