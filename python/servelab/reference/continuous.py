"""Pure-Python reference of continuous batching (lecture §4.5 policy 3, §2.4 paged KV).

Small and readable on purpose, and built differently from the Rust core
(``rust/src/sim/continuous.rs``): Rust keeps block *counts*, this module asks the reference
paged allocator (:class:`servelab.reference.blocks.BlockAllocator`, no prefix caching) with
placeholder token ids, block table and all. Both follow the seven rules of
:mod:`servelab.engine`, price every step with the same IEEE-754 operations (:class:`Pricer`),
and must give the same timestamps bit for bit (``tests/test_sim_continuous.py``).

One step, starting at clock ``t`` (the engine's rule numbers):

1. requests with ``arrival_s <= t`` arrive; one that can never run (``need = prompt + output
   - 1`` tokens need more blocks than the pool, or more than the token budget without chunked
   prefill) is rejected with a reason; the others queue;
2. running requests, oldest admitted first, while the budget lasts: a chunk of a prompt, or one
   decode token that first needs a KV slot;
3. no slot: preempt the newest running request (recompute later) until there is one, or the
   current request was the victim;
4. if nobody was preempted: admit from the front of the queue (strict FCFS) while seats,
   budget and blocks allow;
5. price the batch; 7. sample: first token, last token (free the blocks at once).

When nothing waits or runs, the clock jumps to the next arrival.

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

from servelab.reference.blocks import BlockAllocator, OutOfBlocks
from servelab.reference.sim import Pricer

REJECT_BLOCKS, REJECT_BUDGET = 1, 2  # reject_code values (0: not rejected)


def unservable(prompt: int, output: int, block_size: int, num_blocks: int,
               max_num_batched_tokens: int, chunked_prefill: bool) -> int:
    """Rule 1: 0 if the request can run, else why not (``REJECT_BLOCKS`` or ``REJECT_BUDGET``)."""
    need = prompt + output - 1  # the last token is never fed back (§2.1)
    if -(-need // block_size) > num_blocks:
        return REJECT_BLOCKS
    if not chunked_prefill and need > max_num_batched_tokens:
        return REJECT_BUDGET
    return 0


def run_continuous_batching(requests: Any, model: Any, gpu: Any, efficiency: Any, *,
                            max_num_seqs: int, max_num_batched_tokens: int, block_size: int,
                            num_blocks: int, chunked_prefill: bool = False, trace: bool = False,
                            batch_log: bool = False) -> dict[str, Any]:
    pricer = Pricer(model, gpu, efficiency)
    arrival = requests.arrival_s.tolist()
    prompt = requests.prompt_len.tolist()
    output = requests.output_len.tolist()
    n = len(arrival)
    nan = float("nan")
    start, first, finish = [nan] * n, [nan] * n, [nan] * n
    reject_code = [0] * n
    n_preemptions = [0] * n
    tokens = list(prompt)  # prompt + tokens generated so far
    computed = [0] * n  # tokens whose KV is in the pool
    held = [0] * n  # token slots the allocator holds (0 while waiting)
    generated = [0] * n
    batch_id = [-1] * n
    n_started = 0
    pool = BlockAllocator(num_blocks, block_size)
    waiting: deque[int] = deque()
    running: list[int] = []
    rows: dict[str, list] = {k: [] for k in ("start_s", "step_s", "batch_size", "tokens", "n_prefill",
                                              "n_decode", "kv_tokens", "kv_blocks", "n_preempted",
                                              "n_admitted")}
    log: list[list[tuple[int, int, int]]] = []
    busy = flops_total = 0.0
    peak_kv = peak_blocks = n_steps = 0
    t, nxt = 0.0, 0

    while True:
        while nxt < n and arrival[nxt] <= t:  # rule 1
            code = unservable(prompt[nxt], output[nxt], block_size, num_blocks,
                              max_num_batched_tokens, chunked_prefill)
            if code:
                reject_code[nxt] = code
            else:
                waiting.append(nxt)
            nxt += 1
        if not waiting and not running:
            if nxt == n:
                break
            t = arrival[nxt]  # idle until the next arrival
            continue

        batch: list[tuple[int, int, bool]] = []  # (request, new tokens, decoding?)
        budget = max_num_batched_tokens
        preempted: list[int] = []
        i = 0
        while i < len(running) and budget > 0:  # rule 2
            r = running[i]
            if computed[r] < held[r]:  # the rest of a prompt, in chunks
                batch.append((r, min(held[r] - computed[r], budget), False))
            else:
                victim = None
                while victim != r and not pool.can_append(r):  # rule 3
                    victim = running.pop()
                    pool.free(victim)
                    computed[victim] = held[victim] = 0
                    n_preemptions[victim] += 1
                    waiting.appendleft(victim)
                    preempted.append(victim)
                if victim == r:
                    break
                pool.append(r, 0)
                held[r] += 1
                batch.append((r, 1, True))
            budget -= batch[-1][1]
            i += 1

        admitted = 0
        while not preempted and waiting and budget > 0 and len(running) < max_num_seqs:  # rule 4
            r = waiting[0]
            if not chunked_prefill and tokens[r] > budget:
                break
            try:
                pool.allocate(r, [0] * tokens[r])
            except OutOfBlocks:
                break
            waiting.popleft()
            running.append(r)
            held[r], computed[r] = tokens[r], 0
            if start[r] != start[r]:  # NaN: the first admission (a recompute keeps it)
                start[r] = t
                batch_id[r] = n_started  # rank of first admission
                n_started += 1
            take = min(tokens[r], budget) if chunked_prefill else tokens[r]
            batch.append((r, take, False))
            budget -= take
            admitted += 1

        entries = [(r, k, computed[r]) for r, k, _ in batch]  # rule 5
        step_s, flops = pricer.price([(k, c) for _, k, c in entries])
        kv = sum(k + c for _, k, c in entries)
        n_decode = sum(dec for _, _, dec in batch)
        n_prefill = sum(not dec and computed[r] + k == held[r] for r, k, dec in batch)
        end = t + step_s
        n_steps += 1
        busy += step_s
        flops_total += flops
        peak_kv = max(peak_kv, kv)
        if batch_log:
            log.append(entries)

        for r, k, _ in batch:  # rule 7
            computed[r] += k
            if computed[r] < held[r]:
                continue
            generated[r] += 1
            tokens[r] += 1
            if first[r] != first[r]:
                first[r] = end
            if generated[r] == output[r]:
                finish[r] = end
                pool.free(r)
                held[r] = 0
                running.remove(r)
        used = num_blocks - pool.num_free_blocks
        peak_blocks = max(peak_blocks, used)
        if trace:
            for key, value in zip(rows, (t, step_s, len(batch), sum(k for _, k, _ in batch),
                                         n_prefill, n_decode, kv, used, len(preempted), admitted)):
                rows[key].append(value)
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
