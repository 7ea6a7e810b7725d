"""Batch 1 and static batching: hand-checked small cases (exact), invariants, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given

from servelab import hw_model as hw
from servelab import serving_core as sc
from servelab.hw_model import H100, LLAMA3_8B
from servelab.workload import Requests
from assignment_strategies import static_params, workloads


def step(*batch: tuple[int, int]) -> float:
    """The paper GPU's price of one step, through hw_model (an independent path)."""
    return hw.step_cost(LLAMA3_8B, H100, list(batch)).time_s


# ---- hand-checked cases ------------------------------------------------------------------------

def test_batch1_four_requests_by_hand():
    """r0 runs alone; r1 and r2 queue behind it (FCFS, ties in index order); r3 finds the GPU idle."""
    reqs = Requests(arrival_s=[0.0, 0.01, 0.01, 60.0], prompt_len=[512, 100, 7, 2048],
                    output_len=[3, 1, 2, 2])
    r = sc.run_batch1(reqs, LLAMA3_8B, H100, trace=True)
    f0 = 0.0 + step((512, 0))
    e0 = f0 + step((1, 512)) + step((1, 513))  # decode steps 1, 2: contexts p, p + 1
    f1 = e0 + step((100, 0))  # one token: done at its prefill
    f2 = f1 + step((7, 0))
    e2 = f2 + step((1, 7))
    f3 = 60.0 + step((2048, 0))
    e3 = f3 + step((1, 2048))
    assert r.start_s.tolist() == [0.0, e0, f1, 60.0]
    assert r.first_token_s.tolist() == [f0, f1, f2, f3]
    assert r.finish_s.tolist() == [e0, f1, e2, e3]
    assert r.rejected.tolist() == [False] * 4 and r.batch_id.tolist() == [0, 1, 2, 3]
    assert r.n_steps == 3 + 1 + 2 + 2
    assert r.trace.tokens.tolist() == [512, 1, 1, 100, 7, 1, 2048, 1]
    assert r.trace.kv_tokens.tolist() == [512, 513, 514, 100, 7, 8, 2048, 2049]
    assert r.peak_kv_tokens == 2049
    assert r.busy_s == pytest.approx(sum(r.trace.step_s), rel=1e-15)


def test_static_five_requests_by_hand_ride_along():
    """B = 3, wait 0.2 s.
    * r0 (t=0), r1 (t=0.1) wait; the oldest's 0.2 s run out at t=0.2 -> batch {r0, r1}.
    * r2 (0.21), r3 (0.22), r4 (0.22) arrive while it runs; when it ends, three wait = B -> start.
    """
    reqs = Requests(arrival_s=[0.0, 0.1, 0.21, 0.22, 0.22], prompt_len=[300, 40, 10, 20, 30],
                    output_len=[2, 4, 1, 3, 2])
    r = sc.run_static_batching(reqs, LLAMA3_8B, H100, batch_size=3, max_wait_s=0.2, trace=True)
    a1 = 0.2 + step((300, 0), (40, 0))
    a2 = a1 + step((1, 300), (1, 40))  # r0 finishes here
    a3 = a2 + step((1, 301), (1, 41))  # r0 rides along
    a4 = a3 + step((1, 302), (1, 42))  # r1 finishes here
    assert a4 > 0.22  # so r2, r3, r4 all wait
    b1 = a4 + step((10, 0), (20, 0), (30, 0))
    b2 = b1 + step((1, 10), (1, 20), (1, 30))
    b3 = b2 + step((1, 11), (1, 21), (1, 31))
    assert r.start_s.tolist() == [0.2, 0.2, a4, a4, a4]
    assert r.first_token_s.tolist() == [a1, a1, b1, b1, b1]
    assert r.finish_s.tolist() == [a2, a4, b1, b3, b2]
    assert r.batch_id.tolist() == [0, 0, 1, 1, 1]
    assert r.trace.batch_size.tolist() == [2, 2, 2, 2, 3, 3, 3]
    assert r.trace.n_decode.tolist() == [0, 2, 1, 1, 0, 2, 1]
    assert r.trace.n_prefill.tolist() == [2, 0, 0, 0, 3, 0, 0]


def test_static_five_requests_by_hand_no_ride_along():
    """The same five requests with ride_along=False (exercise 5): finished members leave the
    step (r0 after step 1 of batch 0, r2 at once, r4 after step 1) but no one takes their seats."""
    reqs = Requests(arrival_s=[0.0, 0.1, 0.21, 0.22, 0.22], prompt_len=[300, 40, 10, 20, 30],
                    output_len=[2, 4, 1, 3, 2])
    r = sc.run_static_batching(reqs, LLAMA3_8B, H100, batch_size=3, max_wait_s=0.2, ride_along=False,
                               trace=True)
    a1 = 0.2 + step((300, 0), (40, 0))
    a2 = a1 + step((1, 300), (1, 40))
    a3 = a2 + step((1, 41))
    a4 = a3 + step((1, 42))
    b1 = a4 + step((10, 0), (20, 0), (30, 0))
    b2 = b1 + step((1, 20), (1, 30))
    b3 = b2 + step((1, 21))
    assert r.start_s.tolist() == [0.2, 0.2, a4, a4, a4]
    assert r.finish_s.tolist() == [a2, a4, b1, b3, b2]
    assert r.trace.batch_size.tolist() == [2, 2, 1, 1, 3, 2, 1]


def test_static_full_batch_starts_at_the_filling_arrival_and_ties_join():
    """B = 2: r1 fills the batch at t=0.05, before r0's 0.2 s run out; r2, arriving at the same
    instant, finds the batch full and waits alone for its own 0.2 s."""
    reqs = Requests(arrival_s=[0.0, 0.05, 0.05, 10.0], prompt_len=[8, 8, 8, 8], output_len=[1, 1, 1, 1])
    r = sc.run_static_batching(reqs, LLAMA3_8B, H100, batch_size=2)
    s0 = 0.05 + step((8, 0), (8, 0))
    assert r.start_s.tolist()[:2] == [0.05, 0.05]
    # r2 arrived at 0.05 too but the batch was full; when batch 0 ends (s0 < 0.25) it has
    # waited less than 0.2 s, and r3 is far away: it starts at 0.05 + 0.2
    assert s0 < 0.25
    assert r.start_s[2] == 0.05 + 0.2
    assert r.start_s[3] == 10.0 + 0.2
    # with max_wait_s = 0 nobody waits for company
    z = sc.run_static_batching(reqs, LLAMA3_8B, H100, batch_size=2, max_wait_s=0.0)
    assert z.start_s.tolist()[:3] == [0.0, 0.05, 0.05]  # r0 alone, then r1 + r2 at once
    assert z.finish_s[0] < 0.05


def test_idle_system_ttft_is_the_prefill_and_tpot_a_decode_step():
    """Demo 03 part 1: with nobody else around, TTFT = prefill, TPOT ~ 6.1-6.3 ms."""
    for p, lo in [(128, 16), (512, 256), (2048, 2048)]:
        r = sc.run_batch1(Requests([0.0], [p], [lo]), LLAMA3_8B, H100)
        assert r.first_token_s[0] == hw.prefill_cost(LLAMA3_8B, H100, p).time_s
        tpot = (r.finish_s[0] - r.first_token_s[0]) / (lo - 1)
        assert 6.1e-3 < tpot < 6.4e-3


# ---- invariants on random workloads ----------------------------------------------------------

@given(reqs=workloads())
def test_batch1_invariants(reqs):
    r = sc.run_batch1(reqs, LLAMA3_8B, H100, trace=True)
    a = reqs.arrival_s
    assert (r.start_s >= a).all() and (r.first_token_s > r.start_s).all()
    assert (r.finish_s >= r.first_token_s).all()
    assert ((r.finish_s == r.first_token_s) == (reqs.output_len == 1)).all()
    assert (r.start_s[1:] >= r.finish_s[:-1]).all()  # one at a time, in arrival order
    # work conserving: the GPU idles only when nobody waits
    assert ((r.start_s[1:] == r.finish_s[:-1]) | (r.start_s[1:] == a[1:])).all()
    assert r.n_steps == int(reqs.output_len.sum()) == len(r.trace)
    assert r.busy_s == pytest.approx(float(np.sum(r.trace.step_s)), rel=1e-12)
    assert np.array_equal(r.trace.n_decode.sum(), (reqs.output_len - 1).sum())


@given(reqs=workloads(), params=static_params)
def test_static_invariants(reqs, params):
    r = sc.run_static_batching(reqs, LLAMA3_8B, H100, trace=True, **params)
    a, b, w = reqs.arrival_s, params["batch_size"], params["max_wait_s"]
    assert (r.start_s >= a).all() and (r.first_token_s > r.start_s).all()
    assert (r.finish_s >= r.first_token_s).all()
    assert (np.diff(r.batch_id) >= 0).all() and (np.diff(r.start_s) >= 0).all()  # FCFS batches
    for k in np.unique(r.batch_id):
        m = r.batch_id == k
        assert 1 <= m.sum() <= b
        assert len(set(r.start_s[m])) == 1 and len(set(r.first_token_s[m])) == 1
        start = r.start_s[m][0]
        oldest = a[m][0]
        # the batch started because it was full, or its oldest had waited max_wait_s, or the
        # GPU had just become free (with the oldest waiting long enough or a full queue)
        full = m.sum() == b
        assert full or start >= oldest + w
        # the batch ends when its longest member does
        longest = r.finish_s[m].max()
        later = r.start_s > start
        assert (r.start_s[later] >= longest).all()
    tr = r.trace
    assert tr.n_decode.sum() == (reqs.output_len - 1).sum()
    assert tr.n_prefill.sum() == len(reqs)
    if params["ride_along"]:
        assert (tr.batch_size >= tr.n_decode).all()
    else:
        assert ((tr.n_prefill > 0) | (tr.batch_size == tr.n_decode)).all()


# ---- bad input --------------------------------------------------------------------------------

REQS = Requests([0.0], [1], [1])


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
    ({"batch_size": -3}, "batch_size must be a positive integer, got -3"),
    ({"batch_size": 2.5}, "batch_size must be a positive integer, got 2.5"),
    ({"batch_size": True}, "batch_size must be a positive integer, got True"),
    ({"batch_size": 2, "max_wait_s": -0.1}, r"max_wait_s must be a finite number >= 0, got -0.1"),
    ({"batch_size": 2, "max_wait_s": math.nan}, r"max_wait_s must be a finite number >= 0, got nan"),
    ({"batch_size": 2, "max_wait_s": math.inf}, r"max_wait_s must be a finite number >= 0, got inf"),
    ({"batch_size": 2, "ride_along": "yes"}, r"ride_along must be True or False, got 'yes'"),
])
def test_static_bad_parameters(kwargs, message):
    with pytest.raises(TypeError if "True or False" in message else ValueError, match=message):
        sc.run_static_batching(REQS, LLAMA3_8B, H100, **kwargs)


def test_the_rust_core_checks_parameters_too():
    from servelab import _core
    for b, w, msg in [(0, 0.2, "batch_size must be a positive integer, got 0"),
                      (2, -1.0, "max_wait_s must be a finite number >= 0, got -1.0")]:
        with pytest.raises(ValueError, match=msg):
            _core.sim_static_batching((LLAMA3_8B, H100, hw.DEFAULT_EFFICIENCY), REQS, (b, w, True), False)


def test_huge_batch_size_is_fine():
    r = sc.run_static_batching(Requests([0.0, 0.0], [1, 1], [1, 1]), LLAMA3_8B, H100, 10**30)
    assert r.start_s.tolist() == [0.2, 0.2]


# every simulator entry point shares the requests/spec checks (serving_core): one test for all
RUNNERS = {"batch1": sc.run_batch1, "static": lambda *a: sc.run_static_batching(*a, 4),
           "continuous": sc.run_continuous_batching}


@pytest.mark.parametrize("run", RUNNERS.values(), ids=RUNNERS.keys())
def test_wrong_types_are_type_errors(run):
    with pytest.raises(TypeError, match="requests must be a servelab.workload.Requests, got list"):
        run([(0.0, 1, 1)], LLAMA3_8B, H100)
    with pytest.raises(TypeError, match="gpu must be a servelab.hw_model.GpuSpec, got 'H100'"):
        run(REQS, LLAMA3_8B, "H100")


def test_batch1_admission_must_be_an_early_reject():
    with pytest.raises(TypeError, match="admission must be None"):
        sc.run_batch1(REQS, LLAMA3_8B, H100, admission="early-reject")


def test_empty_workload():
    r = sc.run_batch1(Requests([], [], []), LLAMA3_8B, H100, trace=True)
    assert r.n_steps == 0 and len(r.trace) == 0 and r.busy_s == 0.0
    s = sc.run_static_batching(Requests([], [], []), LLAMA3_8B, H100, 4)
    assert len(s.start_s) == 0
