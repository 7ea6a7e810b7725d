"""Pure-Python reference of continuous batching (lecture §4.5 policy 3, §2.4 paged KV).

The steps are planned by the engine's own scheduler
(:class:`servelab.engine.scheduler.ContinuousBatchingScheduler`, where the rules are numbered)
over the reference paged allocator (:class:`servelab.reference.blocks.BlockAllocator`, no prefix
caching) with placeholder token ids; this module carries the plans out on counts, prices each
step with the same IEEE-754 operations as the Rust core (:class:`Pricer`), and jumps the clock
to the next arrival when nothing waits or runs. The Rust core (``rust/src/sim/continuous/event_driven.rs``)
keeps block *counts* instead and must give the same timestamps bit for bit
(``tests/test_sim_continuous.py``).

>>> from servelab.hw_model import LLAMA3_8B, H100, DEFAULT_EFFICIENCY
>>> from servelab.workload import Requests
>>> out = run_continuous_batching(Requests([0.0, 0.0], [512, 512], [2, 2]), LLAMA3_8B, H100,
...                               DEFAULT_EFFICIENCY, max_num_seqs=8, max_num_batched_tokens=2048,
...                               block_size=16, num_blocks=1024, batch_log=True)
>>> out["batch_log"]      # both prefill in one step, then decode together
[[(0, 512, 0), (1, 512, 0)], [(0, 1, 512), (1, 1, 512)]]
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from servelab.engine.scheduler import (ContinuousBatchingScheduler, SchedulerConfig,
                                       SchedulerState, Seq)
from servelab.reference.blocks import BlockAllocator
from servelab.reference.sim import Pricer

REJECT_BLOCKS, REJECT_BUDGET = 1, 2  # reject_code values (0: not rejected)


def unservable(prompt: int, output: int, config: SchedulerConfig) -> int:
    """Rule 1 as a code: 0 if the request can run, else ``REJECT_BLOCKS`` or ``REJECT_BUDGET``."""
    reason = config.unservable_reason(prompt, output)
    return 0 if not reason else REJECT_BLOCKS if reason.startswith("needs") else REJECT_BUDGET


def run_continuous_batching(requests: Any, model: Any, gpu: Any, efficiency: Any, *,
                            max_num_seqs: int, max_num_batched_tokens: int, block_size: int,
                            num_blocks: int, chunked_prefill: bool = False, trace: bool = False,
                            batch_log: bool = False, recorder: Any = None) -> dict[str, Any]:
    """``recorder``: a :class:`servelab.trace.StepRecorder` given every arrival and step
    (``servelab trace``); None records nothing."""
    pricer = Pricer(model, gpu, efficiency)
    config = SchedulerConfig(block_size, num_blocks, max_num_seqs, max_num_batched_tokens,
                             chunked_prefill)
    scheduler = ContinuousBatchingScheduler()
    arrival = requests.arrival_s.tolist()
    prompt = requests.prompt_len.tolist()
    output = requests.output_len.tolist()
    n = len(arrival)
    nan = float("nan")
    start, first, finish = [nan] * n, [nan] * n, [nan] * n
    reject_code = [0] * n
    n_preemptions = [0] * n
    seqs = [Seq(i, [0] * prompt[i]) for i in range(n)]  # placeholder tokens: only counts matter
    generated = [0] * n
    batch_id = [-1] * n
    n_started = 0
    pool = BlockAllocator(num_blocks, block_size)
    waiting: deque[Seq] = deque()
    running: list[Seq] = []
    rows: dict[str, list] = {k: [] for k in ("start_s", "step_s", "batch_size", "tokens", "n_prefill",
                                              "n_decode", "kv_tokens", "kv_blocks", "n_preempted",
                                              "n_admitted")}
    log: list[list[tuple[int, int, int]]] = []
    busy = flops_total = 0.0
    peak_kv = peak_blocks = n_steps = 0
    t, nxt = 0.0, 0

    while True:
        while nxt < n and arrival[nxt] <= t:  # rule 1
            reject_code[nxt] = unservable(prompt[nxt], output[nxt], config)
            if recorder is not None:
                recorder.add_request(nxt, prompt[nxt], output[nxt], arrival[nxt])
                if reject_code[nxt]:
                    recorder.unservable(nxt)
            if not reject_code[nxt]:
                waiting.append(seqs[nxt])
            nxt += 1
        if not waiting and not running:
            if nxt == n:
                break
            t = arrival[nxt]  # idle until the next arrival
            continue

        plan = scheduler.schedule(SchedulerState(n_steps, waiting, running, pool.num_free_blocks,
                                                 config, pool))
        for r in plan.preempted:  # rule 3
            running.remove(seqs[r])
            seqs[r].num_computed = seqs[r].num_slots = 0
            n_preemptions[r] += 1
            waiting.appendleft(seqs[r])
        for r in plan.admitted:  # rule 4
            waiting.remove(seqs[r])
            running.append(seqs[r])
            if start[r] != start[r]:  # NaN: the first admission (a recompute keeps it)
                start[r] = t
                batch_id[r] = n_started  # rank of first admission
                n_started += 1
        entries = list(plan.batch)  # rule 5
        n_decode = n_prefill = 0
        for r, k, c in entries:
            seq = seqs[r]
            decoding = seq.num_slots > 0 and seq.num_computed == seq.num_slots  # before the append
            seq.num_computed = c  # an admitted request starts at its prefix hits (none here)
            seq.num_slots = pool.num_tokens(r)
            n_decode += decoding
            n_prefill += not decoding and c + k == seq.num_slots
        step_s, flops = pricer.price([(k, c) for _, k, c in entries])
        kv = sum(k + c for _, k, c in entries)
        end = t + step_s
        n_steps += 1
        busy += step_s
        flops_total += flops
        peak_kv = max(peak_kv, kv)
        if batch_log:
            log.append(entries)

        for r, k, _ in entries:  # rule 6
            seq = seqs[r]
            seq.num_computed += k
            if seq.num_computed < len(seq.tokens):
                continue
            generated[r] += 1
            seq.tokens.append(0)
            if first[r] != first[r]:
                first[r] = end
            if generated[r] == output[r]:
                finish[r] = end
                pool.free(r)
                seq.num_slots = 0
                running.remove(seq)
        used = num_blocks - pool.num_free_blocks
        peak_blocks = max(peak_blocks, used)
        if trace:
            for key, value in zip(rows, (t, step_s, len(entries), sum(k for _, k, _ in entries),
                                         n_prefill, n_decode, kv, used, len(plan.preempted),
                                         len(plan.admitted))):
                rows[key].append(value)
        if recorder is not None:
            recorder.record(n_steps - 1, t, step_s, entries, admitted=plan.admitted,
                            preempted=plan.preempted, allocator=pool,
                            finished=[r for r, _, _ in entries if finish[r] == end],
                            waiting=[q.request_id for q in waiting],
                            running=[q.request_id for q in running])
        t = end

    out: dict[str, Any] = {
        "start_s": np.array(start), "first_token_s": np.array(first),
        "finish_s": np.array(finish), "rejected": np.array(reject_code, dtype=np.int8) > 0,
        "batch_id": np.array(batch_id, dtype=np.int64), "busy_s": busy, "flops": flops_total,
        "n_steps": n_steps, "peak_kv_tokens": peak_kv,
        "reject_code": np.array(reject_code, dtype=np.int8),
        "n_preemptions": np.array(n_preemptions, dtype=np.int64),
        "preemptions": sum(n_preemptions), "peak_kv_blocks": peak_blocks,
        "batch_log": log if batch_log else None,
        "trace": {k: np.array(v, dtype=np.float64 if k in ("start_s", "step_s") else np.int64)
                  for k, v in rows.items()} if trace else None,
    }
    return out
