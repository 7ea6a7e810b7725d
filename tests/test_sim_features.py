"""Continuous batching's five features in any mix (§8: a real vLLM runs chunked prefill, prefix
caching and speculation together): chunked prefill, prefix caching, a host tier, speculation and
the record of the queues that ``servelab trace`` draws.

Every mix runs, and the default run is the per-step twin's (``serving_core.run_twin``,
``rust/src/sim/continuous/per_step.rs``) bit for bit. The features compose: speculation with
``k = 0`` is the run without it, whatever else is on; recording the queues changes nothing;
prefix caching with nothing shared and no preemption is the run without it. With prefix caching
and a perfect draft (acceptance 1), the simulator makes the engine's batches, hits and evictions
(the engine's SpeculativeScheduler over its prefix-caching allocator).
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from servelab import serving_core as sc
from servelab.engine import SpeculativeScheduler, serve
from servelab.engine.speculative import LLAMA32_1B
from servelab.hw_model import H100, LLAMA3_8B
from servelab.workload import Requests, SharedPrefixes

import sim_compare
from engine_strategies import MODEL
from test_sim_prefix import shared_cases

COLUMNS = ("start_s", "first_token_s", "finish_s", "rejected", "batch_id", "reject_code", "n_preemptions")
PREFIX_COLUMNS = ("cached_tokens", "computed_tokens")
SPEC_COLUMNS = ("spec_proposed", "spec_accepted", "spec_steps")
TOTALS = ("busy_s", "flops", "n_steps", "peak_kv_tokens", "peak_kv_blocks")
PREFIX_TOTALS = ("prefix_hits", "prefix_lookups", "prefix_evictions", "host_hits", "host_transfer_s")
TRACE = ("start_s", "step_s", "batch_size", "tokens", "n_prefill", "n_decode", "kv_tokens",
         "kv_blocks", "n_preempted", "n_admitted")
# (chunked prefill, prefix caching, host tier, speculation, recording); a host tier holds cached
# prefixes, so it comes with prefix caching
MIXES = [m for m in itertools.product((False, True), repeat=5) if m[1] or not m[2]]


@st.composite
def workloads(draw):
    """Up to 24 requests in a pool tight enough to preempt and evict, with prompts that share
    prefixes at random (a parent's prompt and output, cut anywhere)."""
    n = draw(st.integers(1, 24))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.001, 0.004, 0.03]), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    parent, length = [], []
    for i in range(n):
        p = draw(st.integers(-1, i - 1))
        parent.append(p)
        length.append(0 if p < 0 else draw(st.integers(0, min(prompt[i], prompt[p] + output[p]))))
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    most = max(-(-(p + o - 1) // bs) for p, o in zip(prompt, output))
    card = {"max_num_seqs": draw(st.integers(1, 8)), "max_num_batched_tokens": draw(st.sampled_from([16, 48, 256])),
            "block_size": bs, "num_blocks": draw(st.integers(max(most // 2, 1), 2 * most + 4))}
    reqs = Requests(np.cumsum(gaps), prompt, output)
    return reqs, SharedPrefixes(parent, length), card


def options(card: dict, shared: SharedPrefixes, mix: tuple[bool, ...], k: int = 4,
            a: float = 0.7) -> sc.ContinuousOptions:
    chunked, caching, host, spec, _ = mix
    return sc.ContinuousOptions(**card, chunked_prefill=chunked, trace=True, batch_log=True,
                                prefix_caching=caching, shared_prefixes=shared if caching else None,
                                host_blocks=3 if host else 0,
                                speculative=sc.Speculation(k, LLAMA32_1B, a, seed=11) if spec else None)


def run(reqs: Requests, o: sc.ContinuousOptions, mix: tuple[bool, ...], twin: bool = False) -> sc.SimResult:
    """The default run of `o`, or the per-step twin's; with `mix`'s recording on, the twin
    recording the queues (as ``servelab trace`` runs it)."""
    if mix[4]:
        return sc.run_twin(reqs, LLAMA3_8B, H100, o, queues=True)
    return (sc.run_twin if twin else sc.run_continuous)(reqs, LLAMA3_8B, H100, o)


def assert_same(got: sc.SimResult, want: sc.SimResult, mix: tuple[bool, ...], queues: bool = True) -> None:
    """`got` is `want`'s run, compared on what `mix`'s features add (a run without prefix
    caching has no prefix counters to compare)."""
    columns = COLUMNS + (PREFIX_COLUMNS if mix[1] else ()) + (SPEC_COLUMNS if mix[3] else ())
    totals = TOTALS + (PREFIX_TOTALS if mix[1] else ()) + (("draft_busy_s",) if mix[3] else ())
    sim_compare.assert_same_runs(got, want, columns, totals, TRACE, mix)
    if queues and want.step_queues is not None:
        assert {k: v.tolist() for k, v in got.step_queues.items()} == \
            {k: v.tolist() for k, v in want.step_queues.items()}


@settings(max_examples=15)
@given(case=workloads())
def test_every_mix_runs_and_is_the_twins_run(case):
    reqs, shared, card = case
    for mix in MIXES:
        want = run(reqs, options(card, shared, mix), mix, twin=True)
        assert_same(run(reqs, options(card, shared, mix), mix), want, mix)
        assert (want.step_queues is not None) == mix[4]
        assert (want.spec_proposed is not None) == mix[3] and (want.cached_tokens is not None) == mix[1]
        event(f"preempted: {int(want.n_preemptions.sum()) > 0}")
        event(f"evicted: {want.prefix_evictions > 0}")


@settings(max_examples=15)
@given(case=workloads())
def test_the_features_compose(case):
    """No guess (k = 0) is the run without speculation, and recording is the run without the
    record, whatever else is on; prefix caching with nothing shared is the run without it unless
    a preempted request hits its own blocks when it comes back."""
    reqs, shared, card = case
    for mix in MIXES:
        chunked, caching, host, spec, queues = mix
        got = run(reqs, options(card, shared, mix, k=0), mix)
        plain = (chunked, caching, host, False, queues)
        assert_same(got, run(reqs, options(card, shared, plain), plain), plain)
        silent = (chunked, caching, host, spec, False)
        assert_same(run(reqs, options(card, shared, mix), mix), run(reqs, options(card, shared, silent), silent),
                    silent, queues=False)
        if caching and not host:
            alone = run(reqs, options(card, SharedPrefixes.none(len(reqs)), mix), mix)
            if alone.n_preemptions.sum() == 0:
                without = (chunked, False, False, spec, queues)
                assert_same(alone, run(reqs, options(card, shared, without), without), without)


def test_the_record_follows_the_batches():
    """With prefix caching and speculation on, each step's record lists the running requests of
    the batch log and no others, and the blocks they hold add up to at least the pool's use
    (shared blocks are counted by each holder)."""
    reqs = Requests([0.0] * 4 + [0.5] * 2, [40, 40, 40, 12, 46, 50], [20, 20, 20, 30, 10, 10])
    # two share r0's system prompt; r4 is r3's next turn; r5 starts with all of r0's prompt
    shared = SharedPrefixes([-1, 0, 0, -1, 3, 0], [0, 32, 32, 0, 12 + 30, 40])
    mix = (True, True, False, True, True)
    res = run(reqs, options({"max_num_seqs": 4, "max_num_batched_tokens": 64, "block_size": 4,
                             "num_blocks": 48}, shared, mix), mix)
    q, log = res.step_queues, res.batch_log
    assert res.prefix_hits > 0 and res.spec_accepted.sum() > 0
    for s in range(len(log.offsets) - 1):
        running = q["running"][q["running_offsets"][s]:q["running_offsets"][s + 1]].tolist()
        batch = log.request_id[log.offsets[s]:log.offsets[s + 1]].tolist()
        assert set(running) <= set(batch), s
        held = q["running_blocks"][q["running_offsets"][s]:q["running_offsets"][s + 1]]
        assert held.sum() >= res.trace.kv_blocks[s] or not running, s


@settings(max_examples=25)
@given(case=shared_cases(), k=st.integers(1, 4))
def test_speculation_with_prefix_caching_makes_the_engines_batches(case, k):
    """A perfect draft keeps every guess, in the engine (the target drafting for itself, greedy)
    and in the simulator (acceptance 1): the same batches, cached and computed tokens, hits and
    blocks in use, step by step; kept guesses take their slots as the engine appends them."""
    reqs, shared, eng = case
    res = serve(reqs, prefix_caching=True, model=MODEL, scheduler=SpeculativeScheduler(MODEL, k), **eng)
    workload = Requests([r.arrival_s for r in res.requests], [len(r.prompt) for r in reqs],
                        [r.max_new_tokens for r in reqs])
    sim = sc.run_continuous_batching(workload, LLAMA3_8B, H100, trace=True, batch_log=True, prefix_caching=True,
                                     shared_prefixes=shared, speculative=sc.Speculation(k, LLAMA32_1B, 1.0), **eng)
    busy = [s for s in res.steps if s.batch]  # idle engine steps cost 0 and log []
    assert sim.batch_log.to_list() == [list(s.batch) for s in busy]
    assert sim.trace.kv_blocks.tolist() == [s.blocks_used for s in busy]
    assert sim.cached_tokens.tolist() == [r.num_cached_tokens for r in res.requests]
    assert sim.computed_tokens.tolist() == [r.num_computed_tokens for r in res.requests]
    assert (sim.prefix_hits, sim.prefix_lookups) == (res.stats["num_hits"], res.stats["num_lookups"])
    assert sim.spec_accepted.sum() == sum(sum(s.accepted) for s in res.steps)
    np.testing.assert_allclose(sim.trace.step_s, [s.cost_s for s in busy], rtol=1e-12)
    event(f"guesses kept: {int(sim.spec_accepted.sum()) > 0}")
    event(f"hits: {sim.prefix_hits > 0}")
