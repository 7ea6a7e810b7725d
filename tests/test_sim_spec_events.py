"""Speculative decoding on the event loop with speculation's decoders (the default,
``rust/src/sim/continuous/speculation.rs``) against the per-step twin
(``serving_core.run_twin``, ``rust/src/sim/continuous/per_step.rs``), bit for bit: every column by its
bits, the totals exactly, the trace and the batch log entry by entry, and the speculation
counters, for k in {0, 1, 4} and acceptance in {0, 0.5, 0.8, 1}, on seeded workloads that
preempt, reject, cut the guesses short by the budget or the free blocks, and on chat workloads.
"""

from __future__ import annotations

import numpy as np
import pytest

from servelab import serving_core as sc
from servelab.engine.speculative import LLAMA32_1B
from servelab.hw_model import H100, LLAMA3_8B
from servelab.workload import Requests, chat_requests

import sim_compare

COLUMNS = ("start_s", "first_token_s", "finish_s", "rejected", "batch_id", "reject_code",
           "n_preemptions", "spec_proposed", "spec_accepted", "spec_steps")
TOTALS = ("busy_s", "flops", "n_steps", "peak_kv_tokens", "peak_kv_blocks", "draft_busy_s")
TRACE = ("start_s", "step_s", "batch_size", "tokens", "n_prefill", "n_decode", "kv_tokens",
         "kv_blocks", "n_preempted", "n_admitted")
SEEDS = range(12)
KS = (0, 1, 4)
RATES = (0.0, 0.5, 0.8, 1.0)


def _workload(seed: int) -> tuple[Requests, dict]:
    """Workload `seed`: small and tight (preemption, rejection, budgets that cut the guesses
    short, blocks of 1) for most seeds, a chat workload of a few hundred requests every fourth."""
    rng = np.random.default_rng(1000 + seed)
    if seed % 4 == 0:
        reqs = chat_requests(n=int(rng.integers(50, 300)), rate=float(rng.choice([4.0, 32.0])), seed=seed)
        params = {"max_num_seqs": int(rng.choice([16, 128])),
                  "max_num_batched_tokens": int(rng.choice([512, 4096])),
                  "block_size": 16, "num_blocks": int(rng.choice([300, 2000, 40_000])),
                  "chunked_prefill": bool(rng.integers(2))}
        return reqs, params
    n = int(rng.integers(5, 40))
    gaps = rng.choice([0.0, 0.001, 0.02], size=n) * rng.random(n)
    reqs = Requests(np.cumsum(gaps), rng.integers(1, 80, n), rng.integers(1, 120, n))
    bs = int(rng.choice([1, 2, 4, 16]))
    params = {"max_num_seqs": int(rng.choice([3, 8, 64])),
              "max_num_batched_tokens": int(rng.choice([20, 40, 100, 4096])),
              "block_size": bs, "num_blocks": int(rng.integers(200 // bs // 4 + 2, 200 // bs + 2)),
              "chunked_prefill": bool(rng.integers(2))}
    return reqs, params


def _run(reqs, params, k, a, seed, twin=False):
    spec = sc.Speculation(k, LLAMA32_1B, a, seed=seed)
    run = sc.run_twin if twin else sc.run_continuous
    return run(reqs, LLAMA3_8B, H100, sc.ContinuousOptions(trace=True, batch_log=True, speculative=spec, **params))


@pytest.mark.parametrize("a", RATES)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("seed", SEEDS)
def test_spec_events_match_the_per_step_loop(seed, k, a):
    reqs, params = _workload(seed)
    try:
        want = _run(reqs, params, k, a, seed, twin=True)
    except ValueError as e:  # nothing fits: the new loop must fail the same way
        with pytest.raises(ValueError, match="^" + str(e).replace("(", r"\(").replace(")", r"\)")):
            _run(reqs, params, k, a, seed)
        return
    got = _run(reqs, params, k, a, seed)
    assert want.trace is not None  # the trace and batch log are compared too
    sim_compare.assert_same_runs(got, want, COLUMNS, TOTALS, TRACE, params)

def test_the_workloads_reach_the_rare_paths():
    """At k = 4 and a = 0.8 the workloads preempt (the new loop runs the per-step code) and
    have decoding steps that use the whole token budget or every block (the guesses capped)."""
    preempted = cut = 0
    for seed in SEEDS:
        reqs, params = _workload(seed)
        r = _run(reqs, params, 4, 0.8, seed)
        preempted += int(r.n_preemptions.sum() > 0)
        full = (r.trace.tokens == params["max_num_batched_tokens"]) | (r.trace.kv_blocks == params["num_blocks"])
        cut += int(np.any(full & (r.trace.n_decode > 0)))
    assert preempted >= 3 and cut >= 3, (preempted, cut)


@pytest.mark.parametrize("k", (1, 4))
@pytest.mark.parametrize("seed", SEEDS)
def test_spec_events_without_the_batch_log(seed, k):
    """Without the batch log (which lists a step's entries in running order), the new loop visits
    its decoders in any order, a block of eight at a time where the CPU has AVX-512
    (``continuous/spec_decoders.rs``): still the per-step loop's run, bit for bit."""
    reqs, params = _workload(seed)
    spec = sc.Speculation(k, LLAMA32_1B, 0.8, seed=seed)

    def run(twin=False):
        return (sc.run_twin if twin else sc.run_continuous)(reqs, LLAMA3_8B, H100,
                                                             sc.ContinuousOptions(speculative=spec, **params))

    try:
        want = run(twin=True)
    except ValueError:
        return  # nothing fits: the test above checks that the new loop fails the same way
    sim_compare.assert_same_runs(run(), want, COLUMNS, TOTALS, TRACE, params)
