"""servelab.timing on synthetic data (the real timings are measurements, never asserted)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.timing import coefficient_of_variation, fit_affine, median_relative_error, time_calls

xs = st.lists(st.integers(1, 2000), min_size=2, max_size=50, unique=True)


@given(xs, st.floats(0.0, 1.0), st.floats(1e-5, 1e-1))
def test_fit_recovers_an_exact_line(x, a, b):
    y = [a + b * v for v in x]
    fa, fb = fit_affine(x, y)
    assert fa == pytest.approx(a, abs=1e-9 + 1e-9 * b * max(x))
    assert fb == pytest.approx(b, rel=1e-6)
    assert median_relative_error(x, y, fa, fb) < 1e-9


def test_fit_on_noisy_synthetic_requests():
    rng = np.random.default_rng(0)
    lens = rng.integers(4, 256, 400)
    noise = 1 + 0.05 * rng.standard_normal(400)  # 5% multiplicative noise
    times = (2e-3 + 6e-4 * lens) * noise
    a, b = fit_affine(lens, times)
    assert a == pytest.approx(2e-3, abs=1e-3) and b == pytest.approx(6e-4, rel=0.03)
    # median |N(0, 0.05)| = 0.05 * 0.6745
    assert median_relative_error(lens, times, a, b) == pytest.approx(0.0337, rel=0.15)


def test_median_relative_error_by_hand():
    assert median_relative_error([1, 2, 3], [2.0, 2.0, 4.0], 0.0, 1.0) == 0.25
    assert median_relative_error([1, 2, 3], [1.0, 2.0, 3.0], 0.0, 1.0) == 0.0


def test_coefficient_of_variation():
    assert coefficient_of_variation([2.0, 2.0, 2.0]) == 0.0
    assert coefficient_of_variation([5.0]) == 0.0
    assert coefficient_of_variation([1.0, 2.0, 3.0]) == pytest.approx(0.5)
    rng = np.random.default_rng(1)
    sample = rng.normal(10.0, 0.5, 20_000)
    assert coefficient_of_variation(sample) == pytest.approx(0.05, rel=0.03)


def test_time_calls_runs_before_outside_the_timing():
    calls = []
    t = time_calls(lambda: calls.append("f"), repeat=3, warmup=2, before=lambda: calls.append("b"))
    assert t.shape == (3,) and np.all(t >= 0)
    assert calls == ["b", "f"] * 5


@pytest.mark.parametrize("call, msg", [
    (lambda: fit_affine([1, 1], [1, 2]), "at least two distinct values"),
    (lambda: fit_affine([1, 2, 3], [1, 2]), "same length, got 3 and 2"),
    (lambda: fit_affine([1], [1]), "at least 2 numbers"),
    (lambda: coefficient_of_variation([]), "at least 1 numbers"),
    (lambda: coefficient_of_variation([1.0, float("nan")]), "must be finite, got nan"),
    (lambda: coefficient_of_variation([-1.0, 0.5]), "positive mean, got -0.25"),
    (lambda: median_relative_error([1], [0.0], 0, 1), "y must be positive, got 0.0"),
    (lambda: time_calls(lambda: None, repeat=0), "repeat must be >= 1"),
])
def test_bad_input(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()
