"""Early rejection (lecture §5.3-§5.5): Rust against the pure-Python reference, and what the
oracle promises.

Parity is exact, as for the other policies (tests/test_sim_parity.py): the same decisions, the
same timestamps, the same would-be first-token times. Predicted lengths are drawn once in
Python and handed to both sides, so both see identical numbers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import serving_core as sc
from servelab.admission import (EarlyReject, MeanLength, NoisyPredictor, Oracle, PredictedLengths,
                                admission_report)
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B
from servelab.reference import sim as ref
from servelab.workload import Requests, chat_requests
from assignment_strategies import workloads
from test_sim_parity import assert_same

slos = st.one_of(st.just(0.05), st.floats(0.01, 3.0))


def both(reqs: Requests, slo: float, pred: np.ndarray, trace: bool = False):
    rust = sc.run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(slo, PredictedLengths(pred)), trace=trace)
    py = ref.run_batch1(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, trace=trace, slo_ttft_s=slo,
                        predicted_len=pred)
    return rust, py


def assert_parity(rust: sc.SimResult, py: dict) -> None:
    assert_same(rust, py)
    assert np.array_equal(rust.would_first_token_s, py["would_first_token_s"])


@given(data=st.data(), reqs=workloads(max_output=120), slo=slos, trace=st.booleans())
def test_early_reject_matches_reference(data, reqs, slo, trace):
    pred = np.array(data.draw(st.lists(st.integers(1, 300), min_size=len(reqs), max_size=len(reqs))),
                    dtype=np.int64)
    assert_parity(*both(reqs, slo, pred, trace))


@given(reqs=workloads(max_output=120), slo=slos)
def test_oracle_admits_exactly_the_requests_that_will_be_on_time(reqs, slo):
    """With true lengths the predicted TTFT is the simulator's, bit for bit (§5.3): no admitted
    request is late and no rejected request would have made it."""
    r = sc.run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(slo, Oracle()))
    a = reqs.arrival_s
    ok = ~r.rejected
    assert np.all(r.first_token_s[ok] - a[ok] <= slo)
    assert np.all(r.would_first_token_s[~ok] - a[~ok] > slo)
    # an admitted request's would-be first token is its actual one
    assert np.array_equal(r.would_first_token_s[ok], r.first_token_s[ok])
    rep = admission_report(r, slo)
    assert rep.accepted_late == 0 and rep.false_rejections == 0
    assert rep.on_time + rep.rejected == rep.n


@given(reqs=workloads())
def test_a_generous_slo_is_accept_all(reqs):
    want = sc.run_batch1(reqs, LLAMA3_8B, H100)
    got = sc.run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(1e9, "mean"))
    for k in ("start_s", "first_token_s", "finish_s", "rejected", "batch_id"):
        assert np.array_equal(getattr(got, k), getattr(want, k), equal_nan=True), k
    assert np.array_equal(got.would_first_token_s, want.first_token_s)


def test_parity_on_the_lecture_workload():
    """Demo 04 part 3's setting, 200 requests, every estimator of §5.5 and exercise 9."""
    reqs = chat_requests(200, 0.4, seed=3)
    for est in (MeanLength(), Oracle(), NoisyPredictor(0.5), NoisyPredictor(1.0, seed=7)):
        adm = EarlyReject(2.0, est)
        rust = sc.run_batch1(reqs, LLAMA3_8B, H100, admission=adm, trace=True)
        py = ref.run_batch1(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, trace=True, slo_ttft_s=2.0,
                            predicted_len=adm.predicted_len(reqs))
        assert_parity(rust, py)
        assert rust.rejected.any() and not rust.rejected.all()


def test_report_by_hand():
    """Request 0 holds the GPU for about 6.3 s (1000 tokens); request 3 arrives at 100 s to an
    idle GPU. Guessing 10 tokens for request 0, the controller thinks it is done by 0.1 s and
    admits requests 1 and 2: both accepted but late. Guessing 2000, it rejects both, rightly
    (no false rejection). Then an overestimate of a short request: a false rejection."""
    reqs = Requests([0.0, 0.1, 0.2, 100.0], [10, 10, 10, 10], [1000, 5, 5, 5])
    r = sc.run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(1.0, PredictedLengths([10, 10, 1000, 5])))
    assert r.rejected.tolist() == [False, False, False, False]  # request 2's own guess does not matter
    rep = admission_report(r, 1.0)
    assert (rep.accepted, rep.on_time, rep.accepted_late, rep.rejected) == (4, 2, 2, 0)
    assert rep.attainment == 0.5 and rep.late_share_of_accepted == 0.5
    r = sc.run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(1.0, PredictedLengths([2000, 5, 5, 5])))
    assert r.rejected.tolist() == [False, True, True, False]
    rep = admission_report(r, 1.0)
    assert (rep.on_time, rep.rejected, rep.false_rejections) == (2, 2, 0)  # both truly late
    # an overestimate of a short request in service: a false rejection
    reqs = Requests([0.0, 0.01], [10, 10], [5, 5])
    r = sc.run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(1.0, PredictedLengths([1000, 5])))
    rep = admission_report(r, 1.0)
    assert (rep.rejected, rep.false_rejections, rep.false_rejection_share) == (1, 1, 1.0)
    # without admission control nothing is rejected
    rep = admission_report(sc.run_batch1(reqs, LLAMA3_8B, H100), 1.0)
    assert (rep.rejected, rep.false_rejections, rep.false_rejection_share) == (0, 0, 0.0)


def test_noisy_predictor_is_seeded_and_sigma_zero_is_the_oracle():
    reqs = chat_requests(300, 0.4, seed=1)
    a, b = NoisyPredictor(0.5).predict(reqs), NoisyPredictor(0.5).predict(reqs)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, NoisyPredictor(0.5, seed=43).predict(reqs))
    assert np.array_equal(NoisyPredictor(0.0).predict(reqs), reqs.output_len)
    eps = np.random.default_rng(42).normal(0.0, 0.5, len(reqs))
    assert np.array_equal(a, np.clip(np.rint(reqs.output_len * np.exp(eps)), 1, None).astype(np.int64))
    assert np.all(MeanLength().predict(reqs) == round(float(reqs.output_len.mean())))


@pytest.mark.parametrize("make, match", [
    (lambda: EarlyReject(0.0), "slo_ttft_s must be a positive finite number, got 0.0"),
    (lambda: EarlyReject(-2.0, "oracle"), "slo_ttft_s must be a positive finite number, got -2.0"),
    (lambda: EarlyReject(math.nan), "slo_ttft_s must be a positive finite number, got nan"),
    (lambda: EarlyReject(math.inf), "slo_ttft_s must be a positive finite number, got inf"),
    (lambda: EarlyReject(2.0, "median"), "estimator must be .* got 'median'"),
    (lambda: EarlyReject(2.0, 3), "estimator must be .* got 3"),
    (lambda: NoisyPredictor(-0.25), "sigma must be a finite number >= 0, got -0.25"),
    (lambda: NoisyPredictor(math.nan), "sigma must be a finite number >= 0, got nan"),
    (lambda: NoisyPredictor(0.5, seed=-1), "seed must be a non-negative integer, got -1"),
    (lambda: MeanLength(0), "mean must be a positive finite number or None, got 0"),
])
def test_bad_arguments_name_the_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_predictions_name_the_value():
    reqs = Requests([0.0, 1.0], [5, 5], [5, 5])
    with pytest.raises(ValueError, match=r"values\[1\] must be a finite number, got nan"):
        sc.run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(1.0, PredictedLengths([3, math.nan])))
    with pytest.raises(ValueError, match=r"one length per request \(2\), got shape \(3,\)"):
        sc.run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(1.0, PredictedLengths([3, 3, 3])))
    with pytest.raises(TypeError, match="admission must be None or"):
        sc.run_batch1(reqs, LLAMA3_8B, H100, admission="oracle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slo_ttft_s must be a positive number, got 0"):
        admission_report(sc.run_batch1(reqs, LLAMA3_8B, H100), 0)


def test_parity_in_overload_with_a_long_queue():
    """A queue of tens of requests at every arrival: the quick bound decides most arrivals, and
    must decide them as the reference's step-by-step layout does."""
    reqs = chat_requests(150, 2.0, seed=5)
    for slo, est in ((10.0, MeanLength()), (20.0, NoisyPredictor(0.25)), (5.0, Oracle())):
        adm = EarlyReject(slo, est)
        rust = sc.run_batch1(reqs, LLAMA3_8B, H100, admission=adm)
        py = ref.run_batch1(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, slo_ttft_s=slo,
                            predicted_len=adm.predicted_len(reqs))
        assert_parity(rust, py)
        assert 0 < rust.rejected.sum() < len(reqs)


def test_a_generous_slo_on_a_long_overloaded_run_is_accept_all():
    reqs = chat_requests(3000, 5.0, seed=2)
    want = sc.run_batch1(reqs, LLAMA3_8B, H100)
    got = sc.run_batch1(reqs, LLAMA3_8B, H100, admission=EarlyReject(1e6, "mean"))
    assert np.array_equal(got.finish_s, want.finish_s) and not got.rejected.any()
