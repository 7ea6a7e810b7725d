"""The Rust simulator against the pure-Python event-driven reference.

Equality is exact (``np.array_equal``, ``==`` on floats), not approximate: both sides price a step
with the same IEEE-754 operations in the same order (integer totals converted once, the same
formula as ``cost::Pricer``) and advance the clock by ``t = t + step`` step after step, so any
difference at all is a real difference in the schedule, never rounding. A 1e-12 tolerance would
only hide a step priced with a slightly wrong context.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab import serving_core as sc
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B
from servelab.reference import sim as ref
from servelab.workload import chat_requests
import sim_compare
from assignment_strategies import efficiencies, gpus, models, static_params, workloads

COLUMNS = ("start_s", "first_token_s", "finish_s", "rejected", "batch_id")
TOTALS = ("busy_s", "flops", "n_steps", "peak_kv_tokens")
TRACE = ("start_s", "step_s", "batch_size", "tokens", "n_prefill", "n_decode", "kv_tokens")


def assert_same(rust: sc.SimResult, py: dict) -> None:
    sim_compare.assert_same(rust, py, COLUMNS, TOTALS, TRACE)


@given(reqs=workloads(), trace=st.booleans())
def test_batch1_matches_reference(reqs, trace):
    rust = sc.run_batch1(reqs, LLAMA3_8B, H100, trace=trace)
    assert_same(rust, ref.run_batch1(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, trace=trace))


@given(reqs=workloads(), params=static_params, trace=st.booleans())
def test_static_batching_matches_reference(reqs, params, trace):
    rust = sc.run_static_batching(reqs, LLAMA3_8B, H100, trace=trace, **params)
    assert_same(rust, ref.run_static_batching(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, trace=trace, **params))


@settings(max_examples=25)
@given(reqs=workloads(max_n=10, max_output=40), model=models(), gpu=gpus, eff=efficiencies,
       params=static_params)
def test_parity_holds_for_any_model_and_gpu(reqs, model, gpu, eff, params):
    assert_same(sc.run_batch1(reqs, model, gpu, efficiency=eff, trace=True),
                ref.run_batch1(reqs, model, gpu, eff, trace=True))
    assert_same(sc.run_static_batching(reqs, model, gpu, efficiency=eff, trace=True, **params),
                ref.run_static_batching(reqs, model, gpu, eff, trace=True, **params))


def test_parity_on_the_lecture_workload():
    """Two hundred chat requests in overload, every policy of demo 03."""
    reqs = chat_requests(n=200, rate=4.0, seed=11)
    assert_same(sc.run_batch1(reqs, LLAMA3_8B, H100, trace=True),
                ref.run_batch1(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, trace=True))
    for b in (8, 32, 128):
        for ride in (True, False):
            assert_same(sc.run_static_batching(reqs, LLAMA3_8B, H100, b, ride_along=ride, trace=True),
                        ref.run_static_batching(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, b,
                                                ride_along=ride, trace=True))


@given(reqs=workloads(), wait=st.floats(0.0, 1.0), ride=st.booleans())
def test_static_batch_of_one_is_batch1(reqs, wait, ride):
    want = sc.run_batch1(reqs, LLAMA3_8B, H100, trace=True)
    got = sc.run_static_batching(reqs, LLAMA3_8B, H100, 1, max_wait_s=wait, ride_along=ride, trace=True)
    for k in COLUMNS:
        assert np.array_equal(getattr(got, k), getattr(want, k), equal_nan=True), k
    assert got.busy_s == want.busy_s
