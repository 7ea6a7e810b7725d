"""The event-driven continuous-batching simulator against the per-sequence-step loop it replaced
, bit for bit, on 200 seeded random workloads.

The event-driven engine (``rust/src/sim/continuous/event_driven.rs``) keeps the decoding requests as integer
aggregates and visits a request only at its events; the per-step loop
(``rust/src/sim/continuous/per_step.rs``, reached with ``serving_core.run_twin``) visits every running
sequence in every step. Both must give the same batches, so the same step totals, so the same
IEEE-754 clock: every column is compared by its bits, the totals exactly, the trace and the
batch log entry by entry.
"""

from __future__ import annotations

import numpy as np
import pytest

from servelab import serving_core as sc
from servelab.hw_model import H100, LLAMA3_8B
from servelab.workload import Requests, chat_requests

import sim_compare

COLUMNS = ("start_s", "first_token_s", "finish_s", "rejected", "batch_id", "reject_code",
           "n_preemptions")
TOTALS = ("busy_s", "flops", "n_steps", "peak_kv_tokens", "peak_kv_blocks")
TRACE = ("start_s", "step_s", "batch_size", "tokens", "n_prefill", "n_decode", "kv_tokens",
         "kv_blocks", "n_preempted", "n_admitted")
N_WORKLOADS = 200


def _workload(seed: int) -> tuple[Requests, dict, bool]:
    """Workload `seed`: small and tight (preemption, rejection, budgets below the seat count,
    blocks of 1) for most seeds, a chat workload of a few hundred requests for every tenth."""
    rng = np.random.default_rng(seed)
    if seed % 10 == 0:
        reqs = chat_requests(n=int(rng.integers(50, 400)), rate=float(rng.choice([4.0, 32.0])),
                             seed=seed)
        params = {"max_num_seqs": int(rng.choice([16, 128])),
                  "max_num_batched_tokens": int(rng.choice([512, 4096])),
                  "block_size": 16, "num_blocks": int(rng.choice([300, 2000, 40_000])),
                  "chunked_prefill": bool(rng.integers(2))}
        return reqs, params, False
    n = int(rng.integers(1, 40))
    gaps = rng.choice([0.0, 0.001, 0.02, 0.5], size=n) * rng.random(n)
    reqs = Requests(np.cumsum(gaps), rng.integers(1, 80, n), rng.integers(1, 50, n))
    bs = int(rng.choice([1, 2, 4, 16]))
    params = {"max_num_seqs": int(rng.choice([1, 3, 8, 64])),
              "max_num_batched_tokens": int(rng.choice([1, 5, 40, 100, 4096])),
              "block_size": bs, "num_blocks": int(rng.integers(1, 200 // bs + 2)),
              "chunked_prefill": bool(rng.integers(2))}
    return reqs, params, True


@pytest.mark.parametrize("seed", range(N_WORKLOADS))
def test_event_driven_matches_the_per_step_loop(seed):
    reqs, params, keep = _workload(seed)
    try:
        want = sc.run_twin(reqs, LLAMA3_8B, H100, sc.ContinuousOptions(trace=keep, batch_log=keep, **params))
    except ValueError as e:  # e.g. nothing fits: the new engine must fail the same way
        with pytest.raises(ValueError, match="^" + str(e).replace("(", r"\(").replace(")", r"\)")):
            sc.run_continuous_batching(reqs, LLAMA3_8B, H100, **params)
        return
    got = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, trace=keep, batch_log=keep, **params)
    sim_compare.assert_same_runs(got, want, COLUMNS, TOTALS, TRACE, params)

def test_the_workloads_reach_the_rare_paths():
    """The 200 workloads include preemptions, rejections and steps whose budget is smaller than
    the running batch: the paths where the event-driven engine falls back to a per-step step."""
    preempted = rejected = 0
    for seed in range(0, N_WORKLOADS, 3):
        reqs, params, _ = _workload(seed)
        r = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, **params)
        preempted += int(r.n_preemptions.sum() > 0)
        rejected += int(r.rejected.any())
    assert preempted >= 5 and rejected >= 5, (preempted, rejected)


def test_the_twin_is_no_option_of_a_run():
    """The per-step twin is the library's own switch: not a keyword of the run, not a field of
    its options record; its own switch is checked."""
    reqs = Requests([0.0], [4], [2])
    with pytest.raises(TypeError, match="_per_step"):
        sc.run_continuous_batching(reqs, LLAMA3_8B, H100, _per_step=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="_per_step"):
        sc.ContinuousOptions(_per_step=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="queues"):
        sc.run_twin(reqs, LLAMA3_8B, H100, queues="yes")
