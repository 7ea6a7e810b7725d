"""Tests of assignment 3 (metrics) against servelab.metrics on simulated runs of random
workloads (batch 1 and static batching on the paper GPU), plus hand-made cases."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import metrics_hw as mine
from assignment_strategies import answer_array, answer_float, assert_close, workloads
from servelab import metrics as ref
from servelab.harness.calls import call_each, value
from servelab.admission import EarlyReject, MeanLength
from servelab.hw_model import H100, LLAMA3_8B
from servelab.serving_core import run_batch1, run_static_batching
from servelab.workload import chat_requests


@st.composite
def runs(draw):
    reqs = draw(workloads(min_n=1, max_n=40, max_prompt=2048, max_output=600))
    policy = draw(st.sampled_from(["batch1", "static", "early_reject"]))
    if policy == "early_reject":  # some requests turned away: NaN times, tokens never produced
        return run_batch1(reqs, LLAMA3_8B, H100,
                          admission=EarlyReject(draw(st.sampled_from([0.05, 0.5, 2.0])), MeanLength()))
    if policy == "batch1":
        return run_batch1(reqs, LLAMA3_8B, H100)
    return run_static_batching(reqs, LLAMA3_8B, H100, batch_size=draw(st.integers(1, 16)),
                               ride_along=draw(st.booleans()))


def cols(r):
    q = r.requests
    return q.arrival_s, r.first_token_s, r.finish_s, q.output_len, r.rejected


def same(what, expected, actual):
    # the expected shape exactly (no broadcasting), booleans where booleans are due, NaN only
    # where the reference has NaN
    kinds = "b" if np.asarray(expected).dtype == bool else "iuf"
    assert_close(what, expected, actual, rtol=1e-12, atol=0, equal_nan=True, kinds=kinds)


slos = st.tuples(st.floats(0.01, 20.0), st.floats(0.001, 0.2))


@given(runs())
def test_latencies_match(r):
    a, f, fin, lo, _ = cols(r)
    ttft, tpot, e2e = call_each([(mine.ttft, (a, f)), (mine.tpot, (f, fin, lo)), (mine.e2e, (a, fin))])
    same("ttft", ref.ttft(r), value(ttft))
    same("tpot", ref.tpot(r), value(tpot))
    same("e2e", ref.e2e(r), value(e2e))


@given(runs())
def test_percentiles_match(r):
    want = ref.percentiles(ref.ttft(r))
    same("p50/p90/p99 of TTFT", [want.p50, want.p90, want.p99], mine.p50_p90_p99(ref.ttft(r)))


@given(runs(), slos)
def test_slo_attainment_goodput_match(r, slo):
    a, f, fin, lo, rej = cols(r)
    s = ref.SLO(*slo)
    meets, span = ref.meets_slo(r, s), ref.span_s(r)
    # two batches: the reference's meets and span go to your code only once your own came back
    # (a batch is one message, and code in it can read the calls after it)
    good, mine_span = call_each([(mine.meets_slo, (a, f, fin, lo, rej, *slo)), (mine.span_s, (a, fin))])
    att, goodput = call_each([(mine.attainment, (meets,)), (mine.goodput, (meets, span))])
    same("meets_slo", meets, value(good))
    same("attainment", ref.attainment(r, s), value(att))
    same("span", span, value(mine_span))
    same("goodput", ref.goodput(r, s), value(goodput))


@given(runs(), st.floats(0.5, 10.0))
def test_throughput_and_cost_match(r, usd):
    a, _, fin, lo, rej = cols(r)
    # one call after the other: the reference's throughput goes to your code only once your own
    # came back (in one batch, code could read it from the call after its own)
    same("throughput tok/s", ref.throughput_tok_s(r), mine.throughput_tok_s(lo, rej, ref.span_s(r)))
    same("cost per million tokens", ref.cost_per_million_tokens(r, usd),
         mine.cost_per_million_tokens(ref.throughput_tok_s(r), usd))


def test_hand_made_case():
    # two requests: one of 1 token (no TPOT), one of 11 tokens over 1 s (TPOT 0.1 s)
    a = np.array([0.0, 1.0])
    f = np.array([0.5, 1.2])
    fin = np.array([0.5, 2.2])
    lo = np.array([1, 11])
    rej = np.array([False, False])
    t = mine.tpot(f, fin, lo)
    assert math.isnan(t[0]) and math.isclose(t[1], 0.1), f"tpot: expected [nan, 0.1], got {t.tolist()}"
    good = mine.meets_slo(a, f, fin, lo, rej, 0.4, 0.05)
    assert good.tolist() == [False, False], f"meets_slo at TTFT<=0.4, TPOT<=0.05: got {good.tolist()}"
    good = mine.meets_slo(a, f, fin, lo, rej, 0.5, 0.11)
    assert good.tolist() == [True, True], f"meets_slo at TTFT<=0.5, TPOT<=0.11: got {good.tolist()}"
    assert mine.span_s(a, fin) == 2.2
    assert mine.p50_p90_p99(np.array([np.nan, 1.0, 3.0])) == (2.0, 2.8, 2.98)
    assert math.isclose(mine.cost_per_million_tokens(160.0, 3.0), 5.208333333333333), "$3/h at 160 tok/s"


def test_rejected_requests_count_as_missed():
    # the third request was turned away by admission control: NaN times, still in the span
    a = np.array([0.0, 1.0, 5.0])
    f = np.array([0.5, 1.2, np.nan])
    fin = np.array([1.0, 2.2, np.nan])
    lo = np.array([6, 11, 50])
    rej = np.array([False, False, True])
    good = mine.meets_slo(a, f, fin, lo, rej, 1.0, 0.2)
    assert good.tolist() == [True, True, False], f"meets_slo with a rejected request: got {good.tolist()}"
    assert math.isclose(mine.attainment(good), 2 / 3), "attainment counts rejected requests as missed"
    assert mine.span_s(a, fin) == 5.0, f"span runs to the last arrival (5.0), got {mine.span_s(a, fin)}"
    assert math.isclose(mine.goodput(good, 5.0), 0.4)
    assert math.isclose(mine.throughput_tok_s(lo, rej, 5.0), 17 / 5), "rejected tokens are not output"


# ---- exercise 4: the SLO's tightness changes the verdict (goodput by both definitions) ----

@st.composite
def grids(draw):
    """An increasing rate grid and an attainment per rate (some exactly at the target)."""
    rates = sorted(draw(st.sets(st.integers(1, 40), min_size=1, max_size=10)))
    target = draw(st.sampled_from([0.5, 0.9, 0.95]))
    atts = draw(st.lists(st.sampled_from([0.0, 0.42, target, 0.97, 1.0]) | st.floats(0, 1),
                         min_size=len(rates), max_size=len(rates)))
    return np.array(rates) * 0.05, np.array(atts), target


def _definition_2(rates, atts, target) -> float:
    """The last rate of the unbroken run of passing rates from the bottom of the grid."""
    passing = [a >= target for a in atts] + [False]
    return float(rates[passing.index(False) - 1]) if passing[0] else 0.0


@given(grids())
def test_sustained_rate_is_definition_2(grid):
    rates, atts, target = grid
    got = answer_float("sustained_rate", mine.sustained_rate(rates, atts, target))
    want = _definition_2(rates, atts, target)
    assert got == want, f"rates {rates.tolist()}, attainments {atts.round(3).tolist()}, " \
                        f"target {target}: expected {want}, got {got}"


policies = st.sampled_from(["batch1", 8, 32])


def _simulate(policy, rate, n=120, seed=0):
    reqs = chat_requests(n=n, rate=rate, seed=seed)
    if policy == "batch1":
        return run_batch1(reqs, LLAMA3_8B, H100)
    return run_static_batching(reqs, LLAMA3_8B, H100, batch_size=policy)


def _both_definitions(sims, rates, slo_ttft, slo_tpot, target=0.9):
    """Your functions on each rate's run: goodput (def. 1) per rate and the sustained rate.
    The calls of each stage are made together (servelab.harness.calls.call_each: one message to
    your code's process under the autograder), then checked rate by rate."""
    runs = [cols(sims[rate]) for rate in rates]
    first = call_each([(mine.meets_slo, (a, f, fin, lo, rej, slo_ttft, slo_tpot)) for a, f, fin, lo, rej in runs]
                      + [(mine.span_s, (a, fin)) for a, f, fin, lo, rej in runs])
    goods = [answer_array("meets_slo", value(got), run[0].shape, kinds="b") for got, run in zip(first, runs)]
    spans = [answer_float("span_s", value(got)) for got in first[len(runs):]]
    second = call_each([(mine.attainment, (good,)) for good in goods]
                       + [(mine.goodput, (good, span)) for good, span in zip(goods, spans)])
    atts = [answer_float("attainment", value(got)) for got in second[:len(runs)]]
    goodputs = [answer_float("goodput", value(got)) for got in second[len(runs):]]
    return goodputs, answer_float("sustained_rate",
                                  mine.sustained_rate(np.array(rates), np.array(atts), target))


@given(st.sets(st.integers(1, 40), min_size=2, max_size=6), policies,
       st.floats(0.5, 8.0), st.floats(0.02, 0.1), st.integers(0, 3))
def test_exercise4_both_definitions_on_generated_slos(rate_steps, policy, slo_ttft, slo_tpot,
                                                      seed):
    rates = [0.05 * k for k in sorted(rate_steps)]
    sims = {rate: _simulate(policy, rate, seed=seed) for rate in rates}
    slo = ref.SLO(slo_ttft, slo_tpot)
    goodputs, sustained = _both_definitions(sims, rates, slo_ttft, slo_tpot)
    same(f"goodput (definition 1) of {policy} at rates {rates}", [ref.goodput(sims[r], slo)
                                                                  for r in rates], goodputs)
    want = ref.max_rate_at_attainment(sims.__getitem__, slo, 0.9, rates=rates, refine=0).rate
    assert sustained == want, f"{policy} under TTFT <= {slo_ttft:.3g} s: sustained rate " \
                              f"expected {want}, got {sustained}"


def test_exercise4_the_lecture_slos():
    """Exercise 4 as the lecture sets it (600 chat requests, TTFT <= 1 s against <= 5 s): the
    answers servelab.exercises.exercise4 computes."""
    from servelab.exercises import EX4_DEF2_RATES, exercise4
    key = exercise4(policies=("batch1", 32), def2_policies=("batch1", 32))
    for policy, label in (("batch1", "batch 1"), (32, "static B=32")):
        sims = {rate: _simulate(policy, rate, n=600) for rate in EX4_DEF2_RATES}
        for ttft_s in (1.0, 5.0):
            _, sustained = _both_definitions(sims, list(EX4_DEF2_RATES), ttft_s, 0.05)
            want = key.by_slo[ttft_s][label].def2_rate
            assert sustained == want, f"{label}, TTFT <= {ttft_s:g} s: sustained rate " \
                                      f"expected {want}, got {sustained}"

