"""The statistics are inference-perf's: checked on a run made by hand (stamps written out), the
closed forms of a simulated run against the same definitions, and the stream model against
the shipped measurements."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.validation.experiment import read_experiment, shipped_experiment_dirs
from servelab.validation.stats import (METRICS, lifecycle_summary, simulated_summary, stream_stamps, summarize)


def test_definitions_on_a_run_made_by_hand():
    # three requests; the second failed (it is in no distribution); the third streamed nothing
    start = [0.0, 1.0, 2.0]
    end = [1.0, 301.0, 2.5]
    stamps = [[0.1, 0.1, 0.4, 0.4, 1.0, 1.0], [1.2, 1.2], [2.5]]
    s = lifecycle_summary(start, end, stamps, [False, True, False])
    assert (s.successes, s.failures) == (2, 1)
    ttft = s.latency["time_to_first_token"]
    assert ttft["mean"] == pytest.approx(0.1) and ttft["max"] == pytest.approx(0.1)  # only the streamed one
    # TPOT: (last stamp - first) / (stamps - 1) = 0.9 / 5
    assert s.latency["time_per_output_token"]["mean"] == pytest.approx(0.18)
    # ITL: every gap pooled: 0, 0.3, 0, 0.6, 0
    itl = s.latency["inter_token_latency"]
    assert itl["mean"] == pytest.approx(0.18) and itl["median"] == pytest.approx(0.0) and itl["max"] == pytest.approx(0.6)
    # request latency over both successes: 1.0 and 0.5
    e2e = s.latency["request_latency"]
    assert e2e["mean"] == pytest.approx(0.75) and e2e["p90"] == pytest.approx(0.95)
    assert s.metric("e2e_p90") == pytest.approx(0.95) and s.metric("itl_mean") == pytest.approx(0.18)


def test_percentiles_are_numpys_linear_ones():
    v = [3.0, 1.0, 2.0, 10.0]
    d = summarize(v)
    assert d["p90"] == pytest.approx(7.9) and d["median"] == pytest.approx(2.5) and d["mean"] == 4.0


def test_simulated_summary_equals_the_definitions_on_its_stamps():
    rng = np.random.default_rng(7)
    n = 50
    start = np.sort(rng.uniform(0, 100, n))
    first = start + rng.uniform(0.01, 0.2, n)
    out = rng.integers(1, 40, n)
    finish = first + (out - 1) * rng.uniform(0.005, 0.02, n)
    finish[3] = start[3] + 400.0  # past the client's timeout: a failure
    sim = simulated_summary(start, first, finish, out, timeout_s=300.0)
    stamps = [stream_stamps(float(a), float(b), int(k)) for a, b, k in zip(first, finish, out)]
    ref = lifecycle_summary(start.tolist(), finish.tolist(), stamps, [i == 3 for i in range(n)])
    assert (sim.successes, sim.failures) == (ref.successes, ref.failures) == (n - 1, 1)
    for metric in METRICS:
        assert sim.metric(metric) == pytest.approx(ref.metric(metric), rel=1e-12), metric
    # the definitions read only first and last stamps for TTFT/TPOT/E2E; ITL's mean too
    for name in ("time_to_first_token", "time_per_output_token", "request_latency"):
        for stat in ("p10", "p90", "max"):
            assert sim.latency[name][stat] == pytest.approx(ref.latency[name][stat], rel=1e-12)


def test_two_stamps_per_token_is_what_was_measured():
    # inference-perf stamps the data line and the blank line of each event, and [DONE]: its
    # TPOT is then (E2E - TTFT) / (2 N + 1) for N tokens; the shipped measurements agree to 1%
    for d in shipped_experiment_dirs()[:2]:
        e = read_experiment(d)
        for m in e.measured:
            lat = m.latency
            n = e.data.output_len
            implied = (lat["request_latency"]["mean"] - lat["time_to_first_token"]["mean"]) / (2 * n + 1)
            assert lat["time_per_output_token"]["mean"] == pytest.approx(implied, rel=0.01)
            # and ITL pooled over equal-length answers has the same mean
            assert lat["inter_token_latency"]["mean"] == pytest.approx(lat["time_per_output_token"]["mean"], rel=1e-3)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="one entry per request"):
        lifecycle_summary([0.0], [1.0, 2.0], [[0.5]], [False])
    with pytest.raises(ValueError, match="output_len must be a positive integer"):
        stream_stamps(0.0, 1.0, 0)
    with pytest.raises(ValueError, match="name must be"):
        simulated_summary(np.zeros(1), np.ones(1), np.ones(1), np.ones(1, int)).metric("ttft")
