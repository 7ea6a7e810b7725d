"""Continuous batching in the simulator: Rust against the pure-Python reference (bit for
bit), against ``servelab.engine`` (the same batches, step for step, and the same clock), small
cases by hand, rule 4, and bad input.

Equality is exact, as in ``test_sim_parity.py``: both sides price each step with the same
IEEE-754 operations and add step times in the same order.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from servelab import hw_model
from servelab import serving_core as sc
from servelab.engine import ContinuousBatchingScheduler, Engine, Request, serve
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B, step_cost
from servelab.reference import continuous as ref
from servelab.workload import Requests, chat_requests
import sim_compare
from assignment_strategies import workloads

COLUMNS = ("start_s", "first_token_s", "finish_s", "rejected", "batch_id", "reject_code",
           "n_preemptions")
TOTALS = ("busy_s", "flops", "n_steps", "peak_kv_tokens", "peak_kv_blocks")
TRACE = ("start_s", "step_s", "batch_size", "tokens", "n_prefill", "n_decode", "kv_tokens",
         "kv_blocks", "n_preempted", "n_admitted")


def assert_same(rust: sc.SimResult, py: dict) -> None:
    sim_compare.assert_same(rust, py, COLUMNS, TOTALS, TRACE)
    assert int(rust.n_preemptions.sum()) == py["preemptions"]
    if py["batch_log"] is None:
        assert rust.batch_log is None
    else:
        assert rust.batch_log.to_list() == py["batch_log"]


# Pools from roomy to so tight that requests are preempted or can never run at all.
cb_params = st.fixed_dictionaries({
    "max_num_seqs": st.one_of(st.integers(1, 4), st.just(256)),
    "max_num_batched_tokens": st.one_of(st.integers(1, 64), st.sampled_from([512, 8192])),
    "block_size": st.sampled_from([1, 2, 4, 16]),
    "num_blocks": st.one_of(st.integers(1, 40), st.sampled_from([400, 100_000])),
    "chunked_prefill": st.booleans(),
})


def both(reqs: Requests, params: dict, trace: bool = True, log: bool = True):
    rust = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, trace=trace, batch_log=log, **params)
    py = ref.run_continuous_batching(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, trace=trace,
                                     batch_log=log, **params)
    return rust, py


@st.composite
def tight(draw, max_n: int = 16, max_prompt: int = 64, max_output: int = 40):
    """A workload and a pool sized against it: at least the largest request's blocks (so few
    are rejected) and rarely enough for all, so that preemption is common."""
    reqs = draw(workloads(max_n=max_n, max_prompt=max_prompt, max_output=max_output))
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    need = reqs.prompt_len + reqs.output_len - 1
    blocks = -(-need // bs)
    lo = int(blocks.max(initial=1))
    hi = max(lo, int(blocks.sum()) // 2)
    params = {"max_num_seqs": draw(st.one_of(st.integers(2, 6), st.just(256))),
              "max_num_batched_tokens": draw(st.one_of(st.integers(1, 64),
                                                       st.just(int(need.max(initial=1))))),
              "block_size": bs, "num_blocks": draw(st.integers(lo, hi)),
              "chunked_prefill": draw(st.booleans())}
    return reqs, params


@given(reqs=workloads(max_n=16, max_prompt=64, max_output=40), params=cb_params,
       trace=st.booleans(), log=st.booleans())
def test_rust_matches_reference_on_any_pool(reqs, params, trace, log):
    rust, py = both(reqs, params, trace, log)
    assert_same(rust, py)
    event(f"rejected: {bool(py['rejected'].any())}")


@given(case=tight(), trace=st.booleans(), log=st.booleans())
def test_rust_matches_reference_on_tight_pools(case, trace, log):
    reqs, params = case
    rust, py = both(reqs, params, trace, log)
    assert_same(rust, py)
    event(f"preempted: {py['preemptions'] > 0}")
    event(f"rejected: {bool(py['rejected'].any())}")


@settings(max_examples=20)
@given(reqs=workloads(max_n=24), params=cb_params)
def test_rust_matches_reference_on_long_requests(reqs, params):
    assert_same(*both(reqs, params))


def test_parity_on_the_lecture_workload_with_preemption():
    """Three hundred chat requests in overload, in a pool small enough to preempt often."""
    reqs = chat_requests(n=300, rate=8.0, seed=3)
    for chunked, budget in ((False, 4096), (True, 512)):
        params = dict(max_num_seqs=64, max_num_batched_tokens=budget, block_size=16, num_blocks=500,
                      chunked_prefill=chunked)
        rust, py = both(reqs, params)
        assert_same(rust, py)
        assert py["preemptions"] > 10  # the test reaches rule 3 for sure


# ---- the simulator makes the engine's batches --------------------------------------------------

@st.composite
def engine_cases(draw):
    """A few requests with sorted arrival steps (so engine ids are simulator indices) and
    engine settings from roomy to tight."""
    n = draw(st.integers(1, 8))
    steps = sorted(draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)))
    reqs = [Request([draw(st.integers(0, 255))] * draw(st.integers(1, 20)), draw(st.integers(1, 8)),
                    arrival_step=s) for s in steps]
    bs = draw(st.sampled_from([1, 2, 4, 8]))
    blocks = [-(-(len(r.prompt) + r.max_new_tokens - 1) // bs) for r in reqs]
    tight_pool = st.integers(max(blocks), max(max(blocks), sum(blocks) // 2))
    eng = dict(num_blocks=draw(st.one_of(st.integers(1, 16), tight_pool)), block_size=bs,
               max_num_seqs=draw(st.integers(1, 6)),
               max_num_batched_tokens=draw(st.one_of(st.integers(1, 32), st.just(64))),
               chunked_prefill=draw(st.booleans()))
    return reqs, eng


def simulate_engine_run(reqs: list[Request], eng: dict, res) -> sc.SimResult:
    """The engine's requests in the simulator: each arrives at the engine's clock when its
    arrival step starts."""
    workload = Requests([r.arrival_s for r in res.requests], [len(r.prompt) for r in reqs],
                        [r.max_new_tokens for r in reqs])
    return sc.run_continuous_batching(workload, LLAMA3_8B, H100, trace=True, batch_log=True, **eng)


def assert_same_as_engine(reqs: list[Request], eng: dict) -> sc.SimResult:
    res = serve(reqs, **eng)
    sim = simulate_engine_run(reqs, eng, res)
    busy = [s for s in res.steps if s.batch]  # idle engine steps cost 0 and log []
    assert sim.batch_log.to_list() == [list(s.batch) for s in busy]
    # the same clock: every step's price, the KV blocks in use, the per-request times
    assert sim.trace.step_s.tolist() == [s.cost_s for s in busy]
    assert sim.trace.kv_blocks.tolist() == [s.blocks_used for s in busy]
    assert sim.trace.n_preempted.tolist() == [len(s.preempted) for s in busy]
    assert sim.trace.n_admitted.tolist() == [len(s.admitted) for s in busy]
    for i, r in enumerate(res.requests):
        assert sim.rejected[i] == (r.status == "unservable")
        assert sim.first_token_s[i] == r.first_token_s or (np.isnan(sim.first_token_s[i])
                                                           and np.isnan(r.first_token_s))
        assert sim.finish_s[i] == r.finish_s or (np.isnan(sim.finish_s[i]) and np.isnan(r.finish_s))
        assert sim.n_preemptions[i] == r.num_preemptions
        if r.status == "unservable":
            assert sim.reject_reason(i)  # a reason, in words
    return sim


@settings(max_examples=80)
@given(case=engine_cases())
def test_same_batches_as_the_engine(case):
    reqs, eng = case
    sim = assert_same_as_engine(reqs, eng)
    event(f"preempted: {int(sim.n_preemptions.sum()) > 0}")


@settings(max_examples=30)
@given(case=engine_cases(), gaps=st.lists(st.sampled_from([0.0, 0.001, 0.05, 1.0]), min_size=8,
                                          max_size=8))
def test_timed_arrivals_give_the_simulators_batches_and_times(case, gaps):
    """Rule 1 by the clock: the engine given arrival times (idle gaps included, where its clock
    jumps as the simulator's does) makes the simulator's batches, first-token and finish times."""
    reqs, eng = case
    arrival = np.cumsum(gaps[:len(reqs)]).tolist()
    e = Engine(**eng)
    for r, t in zip(reqs, arrival):
        e.add_request(r.prompt, r.max_new_tokens, r.sampler, arrival_s=t)
    res = e.run()
    sim = sc.run_continuous_batching(Requests(arrival, [len(r.prompt) for r in reqs],
                                              [r.max_new_tokens for r in reqs]),
                                     LLAMA3_8B, H100, trace=True, batch_log=True, **eng)
    assert sim.batch_log.to_list() == res.batch_log()  # no idle step is logged: the clock jumps
    assert sim.trace.step_s.tolist() == [s.cost_s for s in res.steps]
    for i, r in enumerate(res.requests):
        assert r.arrival_s == arrival[i] and sim.rejected[i] == (r.status == "unservable")
        assert np.array_equal([sim.first_token_s[i], sim.finish_s[i]], [r.first_token_s, r.finish_s],
                              equal_nan=True)
    event(f"idle jumps: {sum(g >= 1.0 for g in gaps[1:len(reqs)]) > 0}")


def test_same_batches_as_the_engine_under_pressure():
    """Eight requests over a pool of 6 blocks of 4: preemptions, recomputes, chunked or not."""
    reqs = [Request([i + 1] * (3 + 2 * i), 6 + i % 3, arrival_step=i // 2) for i in range(8)]
    for chunked in (False, True):
        eng = dict(num_blocks=6, block_size=4, max_num_seqs=4, max_num_batched_tokens=24,
                   chunked_prefill=chunked)
        sim = assert_same_as_engine(reqs, eng)
        assert sim.n_preemptions.sum() >= 2


# ---- by hand -------------------------------------------------------------------------------------

def price(*batch: tuple[int, int]) -> float:
    return step_cost(LLAMA3_8B, H100, list(batch)).time_s


def test_three_requests_with_a_preemption_by_hand():
    """A pool of 3 blocks of 2 slots (the Rust unit test `preemption_by_recompute_by_hand`):
    step 0 admits all three (1 block each) and r2 finishes; in step 1 r0 takes the freed block
    for its third slot and r1, needing one too, is preempted; r0 decodes alone until it ends in
    step 3; r1 then recomputes its 3 tokens (2 blocks) and decodes its last token."""
    reqs = Requests([0.0, 0.0, 0.0], [2, 2, 1], [4, 3, 1])
    r = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, max_num_seqs=8, max_num_batched_tokens=64,
                                   block_size=2, num_blocks=3, trace=True, batch_log=True)
    assert r.batch_log.to_list() == [[(0, 2, 0), (1, 2, 0), (2, 1, 0)], [(0, 1, 2)], [(0, 1, 3)],
                                     [(0, 1, 4)], [(1, 3, 0)], [(1, 1, 3)]]
    t1 = price((2, 0), (2, 0), (1, 0))
    t4 = t1 + price((1, 2)) + price((1, 3)) + price((1, 4))
    t6 = t4 + price((3, 0)) + price((1, 3))
    assert r.start_s.tolist() == [0.0, 0.0, 0.0]
    assert r.first_token_s.tolist() == [t1, t1, t1]
    assert r.finish_s.tolist() == [t4, t6, t1]
    assert r.n_preemptions.tolist() == [0, 1, 0]
    assert r.trace.kv_blocks.tolist() == [2, 2, 2, 0, 2, 0]


def test_a_late_request_joins_the_running_batch_by_hand():
    """r1 arrives while r0 decodes and joins the very next step (Orca's point, §4.5)."""
    t1 = price((5, 0))
    reqs = Requests([0.0, t1 / 2, 10.0], [5, 11, 7], [4, 3, 1])
    r = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, block_size=4, num_blocks=16, batch_log=True)
    assert r.batch_log.to_list() == [[(0, 5, 0)], [(0, 1, 5), (1, 11, 0)], [(0, 1, 6), (1, 1, 11)],
                                     [(0, 1, 7), (1, 1, 12)], [(2, 7, 0)]]
    t2 = t1 + price((1, 5), (11, 0))
    t4 = t2 + price((1, 6), (1, 11)) + price((1, 7), (1, 12))
    assert r.start_s.tolist() == [0.0, t1, 10.0]  # r2 arrives to an idle GPU: the clock jumps
    assert r.first_token_s.tolist() == [t1, t2, 10.0 + price((7, 0))]
    assert r.finish_s.tolist() == [t4, t4, 10.0 + price((7, 0))]


def test_chunked_prefill_by_hand():
    """A budget of 8 tokens: r0's 20-token prompt takes three steps (8, 8, 4) and r1 (3 tokens)
    rides in the third; without chunking r0 could never run (rejected, with a reason)."""
    reqs = Requests([0.0, 0.0, 0.0], [20, 3, 2], [2, 2, 1])
    kw = dict(max_num_seqs=2, max_num_batched_tokens=8, block_size=16, num_blocks=64, batch_log=True)
    r = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, chunked_prefill=True, **kw)
    assert r.batch_log.to_list() == [[(0, 8, 0)], [(0, 8, 8)], [(0, 4, 16), (1, 3, 0)],
                                     [(0, 1, 20), (1, 1, 3)], [(2, 2, 0)]]
    t3 = price((8, 0)) + price((8, 8)) + price((4, 16), (3, 0))
    assert r.first_token_s[:2].tolist() == [t3, t3]
    assert r.start_s[1] == price((8, 0)) + price((8, 8))
    plain = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, **kw)
    assert plain.rejected.tolist() == [True, False, False]
    assert plain.reject_code.tolist() == [2, 0, 0]
    assert "max_num_batched_tokens" in plain.reject_reason(0)
    assert plain.batch_log.to_list() == [[(1, 3, 0), (2, 2, 0)], [(1, 1, 3)]]


def test_one_seat_is_batch1():
    reqs = chat_requests(n=40, rate=1.0, seed=5)
    one = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, max_num_seqs=1)
    b1 = sc.run_batch1(reqs, LLAMA3_8B, H100)
    for k in ("start_s", "first_token_s", "finish_s"):
        assert np.array_equal(getattr(one, k), getattr(b1, k)), k


# ---- rule 4: no admission in a step that preempted ------------------------------------------------

class RecordingScheduler(ContinuousBatchingScheduler):
    """Records, in each step that preempted, whether the front of the waiting queue (the last
    victim) could have been allocated had rule 4 allowed admission."""

    def __init__(self):
        super().__init__()
        self.front_fits: list[bool] = []

    def schedule(self, state):
        plan = super().schedule(state)
        if plan.preempted:
            front = next(s for s in state.running if s.request_id == plan.preempted[-1])
            self.front_fits.append(state.blocks.can_allocate(len(front.tokens)))
        return plan


def recorded_run(reqs: list[Request], eng: dict) -> tuple:
    recorder = RecordingScheduler()
    e = Engine(scheduler=recorder, **eng)
    for r in reqs:
        e.add_request(r.prompt, r.max_new_tokens, r.sampler, r.arrival_step)
    return e.run(), recorder.front_fits


def tight_engine_cases():
    reqs = [Request([i + 1] * (2 + i % 5), 4 + i % 6, arrival_step=i // 3) for i in range(12)]
    for chunked in (False, True):
        yield reqs, dict(num_blocks=5, block_size=2, max_num_seqs=6, max_num_batched_tokens=16,
                         chunked_prefill=chunked)


@pytest.mark.parametrize("case", list(tight_engine_cases()))
def test_no_admission_in_a_step_that_preempted(case):
    """Rule 4 in the engine and in the simulator: a step with a preemption admits nobody.

    Without prefix caching the rule holds by itself: the front of the queue is the last victim,
    the pool had no free block before it was preempted, and it needs at least the blocks it
    gave back while the request it made room for took one of them. The recording scheduler shows it
    (``front_fits`` is all False), which is also why no test can tell the rule's guard from its
    absence here; it matters once prefix caching shares blocks."""
    reqs, eng = case
    res, front_fits = recorded_run(reqs, eng)
    pre = [s for s in res.steps if s.preempted]
    assert len(pre) >= 2
    assert all(not s.admitted for s in pre)
    assert front_fits and not any(front_fits)
    sim = assert_same_as_engine(reqs, eng)
    n_pre, n_adm = sim.trace.n_preempted, sim.trace.n_admitted
    assert (n_pre > 0).sum() == len(pre)
    assert not (n_adm[n_pre > 0]).any()


@given(case=engine_cases())
def test_after_a_preemption_the_front_of_the_queue_never_fits(case):
    """The reason rule 4's guard changes no batch without prefix caching, on random runs."""
    reqs, eng = case
    _, front_fits = recorded_run(reqs, eng)
    assert not any(front_fits)
    event(f"preemption steps: {min(len(front_fits), 3)}")


# ---- bad input ------------------------------------------------------------------------------------

REQS = Requests([0.0, 1.0], [10, 20], [5, 5])


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_num_seqs=0), "max_num_seqs must be a positive integer, got 0"),
    (dict(max_num_batched_tokens=-3), "max_num_batched_tokens must be a positive integer, got -3"),
    (dict(block_size=0), "block_size must be a positive integer, got 0"),
    (dict(block_size=2.5), "block_size must be a positive integer, got 2.5"),
    (dict(num_blocks=0), "num_blocks must be a positive integer, got 0"),
    (dict(num_blocks=True), "num_blocks must be a positive integer, got True"),
    (dict(chunked_prefill="yes"), "chunked_prefill must be True or False, got 'yes' (str)"),
    (dict(trace=1), "trace must be True or False, got 1 (int)"),
    (dict(block_size=1 << 17), "block_size must be an integer in [1, 65536], got 131072"),
    (dict(num_blocks=1 << 25), "num_blocks must be an integer in [1, 16777216], got 33554432"),
])
def test_bad_parameters_name_the_argument_and_value(kwargs, message):
    with pytest.raises(TypeError if "True or False" in message else ValueError) as e:
        sc.run_continuous_batching(REQS, LLAMA3_8B, H100, **kwargs)
    assert str(e.value) == message


def test_a_model_that_leaves_no_kv_memory_needs_num_blocks():
    with pytest.raises(ValueError, match="num_blocks: no KV block"):
        sc.run_continuous_batching(REQS, hw_model.LLAMA3_70B, H100)
    r = sc.run_continuous_batching(REQS, hw_model.LLAMA3_70B, H100, num_blocks=64)
    assert not r.rejected.any() and np.isfinite(r.finish_s).all()


def test_unsorted_arrivals_are_refused():
    # wrong requests and spec types: test_sim_policies.test_wrong_types_are_type_errors[continuous]
    with pytest.raises(ValueError, match="arrival_s must be sorted"):
        Requests([1.0, 0.5], [1, 1], [1, 1])


def test_nothing_servable_is_all_rejected_and_returns():
    """Every request too big for the pool: all rejected with a reason, no step, no hang."""
    r = sc.run_continuous_batching(Requests([0.0] * 3, [100] * 3, [50] * 3), LLAMA3_8B, H100,
                                   block_size=16, num_blocks=4)
    assert r.rejected.all() and r.n_steps == 0 and r.reject_code.tolist() == [1, 1, 1]
    assert np.isnan(r.finish_s).all()
    assert "KV blocks" in r.reject_reason(2) and r.reject_reason(2).endswith(
        "(prompt 100, output 50, params {'max_num_seqs': 256, 'max_num_batched_tokens': 8192, "
        "'block_size': 16, 'num_blocks': 4, 'chunked_prefill': False})")
