"""The CNN-era fixed-service-time server (lecture §5.4, demo 04 part 2): Rust against the
reference, and early rejection's promise (every admitted request on time, exactly)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.fixed_service import burst_arrivals, run_fixed_service
from servelab.reference import fixed_service as ref

arrivals = st.lists(st.one_of(st.just(0.0), st.just(0.01), st.floats(0.0, 0.05)), max_size=60).map(
    lambda gaps: np.cumsum(np.array(gaps, dtype=np.float64)))


@given(a=arrivals, service=st.sampled_from([0.01, 0.003, 0.0137]),
       slo=st.one_of(st.none(), st.sampled_from([0.01, 0.1]), st.floats(0.001, 0.5)))
def test_matches_reference(a, service, slo):
    got = run_fixed_service(a, service, slo)
    want = ref.run_fixed_service(a.tolist(), service, slo)
    for k in ("start_s", "finish_s", "rejected"):
        assert np.array_equal(getattr(got, k), np.array(want[k]), equal_nan=True), k
    assert got.busy_s == want["busy_s"]


@given(a=arrivals, slo=st.floats(0.001, 0.5))
def test_early_rejection_admits_exactly_the_on_time_requests(a, slo):
    r = run_fixed_service(a, 0.01, slo)
    assert np.array_equal(r.on_time(), ~r.rejected)
    # rejecting only shortens the queue: whoever is on time when all are accepted is admitted
    # and on time here too
    full = run_fixed_service(a, 0.01)
    assert np.all(r.on_time()[full.on_time(slo)])


def test_bad_arguments():
    with pytest.raises(ValueError, match="slo_s must be a positive finite number, got -1"):
        run_fixed_service([0.0], 0.01, -1)
    with pytest.raises(ValueError, match=r"arrival_s\[1\] must be a finite number >= 0, got nan"):
        run_fixed_service([0.0, math.nan], 0.01)
    with pytest.raises(ValueError, match="arrival_s must be sorted"):
        run_fixed_service([1.0, 0.0], 0.01)
    with pytest.raises(ValueError, match="slo_s is needed"):
        run_fixed_service([0.0], 0.01).attainment()
    with pytest.raises(ValueError, match="burst_s must lie inside"):
        burst_arrivals(burst_s=(10.0, 40.0))
