"""Pure-Python reference of the serving simulator (lecture §4.5), event by event.

Small and readable on purpose, and built differently from the Rust core: Rust walks the
requests in a tight loop, this module runs a textbook discrete-event simulation on an event
queue (arrivals, ends of steps, wake-ups). Both must give the same per-request timestamps,
bit for bit: they price each step with the same arithmetic (:class:`Pricer` mirrors
``cost::Pricer`` operation by operation, with exact integer totals) and add step times in the
same order. ``tests/test_sim_parity.py`` checks it on random workloads.

The rules (the same as ``servelab.serving_core``):

* prefill of a ``p``-token prompt: one step ``(p, 0)``; it yields the first output token;
* decode step ``s = 1 .. L_o - 1``: ``(1, p + s - 1)``; the request finishes at the end of
  step ``L_o - 1`` (at the end of the prefill when ``L_o = 1``);
* batch 1: the oldest waiting request starts when the GPU is free;
* static batching: when the GPU is free, start as soon as ``batch_size`` wait or the oldest has
  waited ``max_wait_s``; take the oldest (at most ``batch_size``); prefill together; decode
  until the longest ends; riders (finished members) compute padding if ``ride_along``, else
  drop out of the step (``works`` = members with ``L_o - 1 >= s``); nobody joins mid-batch.

Events at the same instant are all handled before the scheduler decides anything, so a request
arriving exactly when a batch starts is in it.

>>> from servelab.hw_model import LLAMA3_8B, H100, DEFAULT_EFFICIENCY
>>> from servelab.workload import Requests
>>> out = run_batch1(Requests([0.0], [512], [2]), LLAMA3_8B, H100, DEFAULT_EFFICIENCY)
>>> round(float(out["finish_s"][0] - out["first_token_s"][0]) * 1e3, 2)
6.13
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

import numpy as np

from servelab.events import EventQueue
from servelab.reference.step_cost import (kv_bytes_per_token, layer_matmul_params, param_count,
                                          validate_efficiency, validate_gpu, validate_model)


class Pricer:
    """The paper GPU's step price with per-model constants computed once. The same floating-point
    operations, in the same order, as ``Pricer`` in ``rust/src/cost.rs``."""

    def __init__(self, model: Any, gpu: Any, eff: Any) -> None:
        validate_model(model)
        validate_gpu(gpu)
        validate_efficiency(eff)
        layers = float(model.n_layers)
        embedding = model.vocab_size * model.d_model
        streamed = param_count(model) - (0 if model.tie_embeddings else embedding)
        bpp = float(model.bytes_per_param)
        self.matmul_flops_per_token = 2.0 * layers * float(layer_matmul_params(model))
        self.lm_head_flops_per_seq = 2.0 * float(embedding)
        self.attn_flops_per_key = 4.0 * layers * float(model.n_heads * model.d_head)
        self.streamed_weight_bytes = float(streamed) * bpp
        self.embed_row_bytes = float(model.d_model) * bpp
        self.kv_per_token = kv_bytes_per_token(model)
        self.compute_rate = eff.compute * gpu.peak_flops
        self.memory_rate = eff.bandwidth * gpu.hbm_bandwidth
        self.overhead_s = eff.overhead_s

    def price(self, batch: list[tuple[int, int]]) -> tuple[float, float]:
        """``(time_s, flops)`` of one step over ``[(new_tokens, context_len), ...]``."""
        tokens = sum(n for n, _ in batch)
        keys = sum(n * c + n * (n + 1) // 2 for n, c in batch)  # causal attention pairs
        ctx = sum(c for _, c in batch)
        t = float(tokens)
        flops = (self.matmul_flops_per_token * t + self.lm_head_flops_per_seq * float(len(batch))
                 + self.attn_flops_per_key * float(keys))
        kv_bytes = self.kv_per_token * (float(ctx) + t)
        moved = (self.streamed_weight_bytes + self.embed_row_bytes * t) + kv_bytes
        compute_s = flops / self.compute_rate
        memory_s = moved / self.memory_rate
        return max(compute_s, memory_s) + self.overhead_s, flops


# Admission control: at an arrival instant, after every event of that instant, each arrival in
# turn: admit(now, i, running, queue) -> bool, where running = (request, start) or None.
Admit = Callable[[float, int, "tuple[int, float] | None", deque], bool]

# A policy looks at the waiting queue when the GPU is free and returns the requests to start
# now (possibly none) and, if it chose to wait, when to look again.
Choose = Callable[[float, deque], tuple[list[int], float | None]]


def run_batch1(requests: Any, model: Any, gpu: Any, efficiency: Any, trace: bool = False,
               slo_ttft_s: float | None = None, predicted_len: Any = None) -> dict[str, Any]:
    """Batch 1 FCFS; with ``slo_ttft_s`` and ``predicted_len``, early rejection (§5.3, see
    :mod:`servelab.reference.admission`), and the result has ``would_first_token_s``."""
    def choose(now: float, queue: deque) -> tuple[list[int], float | None]:
        return [queue.popleft()], None

    pricer = Pricer(model, gpu, efficiency)
    if slo_ttft_s is None:
        return _simulate(requests, pricer, choose, ride_along=True, trace=trace)
    admit = early_reject(pricer, requests, slo_ttft_s, predicted_len)
    out = _simulate(requests, pricer, choose, ride_along=True, trace=trace, admit=admit)
    out["would_first_token_s"] = np.array(would_first_token(pricer, requests, out), dtype=np.float64)
    return out


def run_static_batching(requests: Any, model: Any, gpu: Any, efficiency: Any, batch_size: int,
                        max_wait_s: float = 0.2, ride_along: bool = True,
                        trace: bool = False) -> dict[str, Any]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    if not (np.isfinite(max_wait_s) and max_wait_s >= 0):
        raise ValueError(f"max_wait_s must be a finite number >= 0, got {float(max_wait_s)!r}")
    arrival = requests.arrival_s.tolist()

    def choose(now: float, queue: deque) -> tuple[list[int], float | None]:
        deadline = arrival[queue[0]] + max_wait_s
        if len(queue) >= batch_size or now >= deadline:
            return [queue.popleft() for _ in range(min(batch_size, len(queue)))], None
        return [], deadline

    return _simulate(requests, Pricer(model, gpu, efficiency), choose, ride_along, trace)


def _simulate(requests: Any, pricer: Pricer, choose: Choose, ride_along: bool, trace: bool,
              admit: Admit | None = None) -> dict[str, Any]:
    arrival = requests.arrival_s.tolist()
    prompt = requests.prompt_len.tolist()
    output = requests.output_len.tolist()
    n = len(arrival)
    nan = float("nan")
    out: dict[str, Any] = {
        "start_s": [nan] * n, "first_token_s": [nan] * n, "finish_s": [nan] * n,
        "rejected": [False] * n, "batch_id": [-1] * n,
        "busy_s": 0.0, "flops": 0.0, "n_steps": 0, "peak_kv_tokens": 0,
    }
    rows: dict[str, list] = {k: [] for k in ("start_s", "step_s", "batch_size", "tokens", "n_prefill",
                                              "n_decode", "kv_tokens")}

    def run_step(now: float, batch: list[tuple[int, int]], n_prefill: int, n_decode: int) -> None:
        step_s, flops = pricer.price(batch)
        kv = sum(n + c for n, c in batch)
        out["busy_s"] += step_s
        out["flops"] += flops
        out["n_steps"] += 1
        out["peak_kv_tokens"] = max(out["peak_kv_tokens"], kv)
        if trace:
            for key, value in zip(rows, (now, step_s, len(batch), sum(n for n, _ in batch), n_prefill,
                                         n_decode, kv)):
                rows[key].append(value)
        events.push(now + step_s, ("step_end", None))

    events: EventQueue[tuple[str, Any]] = EventQueue()
    for i in range(n):
        events.push(arrival[i], ("arrival", i))
    queue: deque[int] = deque()  # waiting requests, oldest first
    batch: list[int] = []  # the running batch (empty: the GPU is free)
    step = 0  # the running batch's current step: 0 = prefill, s = decode step s
    n_batches = 0
    wake_at = None

    while len(events):
        now = events.peek()[0]
        arrived = []
        while len(events) and events.peek()[0] == now:  # everything that happens at `now`
            _, (kind, i) = events.pop()
            if kind == "arrival":
                arrived.append(i)
            elif kind == "step_end":
                for j in batch:  # who got a token, who is done
                    if step == 0:
                        out["first_token_s"][j] = now
                    if output[j] - 1 == step:
                        out["finish_s"][j] = now
                step += 1
                longest = max(output[j] for j in batch)
                if step <= longest - 1:  # the batch decodes on
                    works = [j for j in batch if output[j] - 1 >= step]
                    computing = batch if ride_along else works
                    run_step(now, [(1, prompt[j] + step - 1) for j in computing], 0, len(works))
                else:
                    batch = []
            # kind == "wake": nothing to do but look at the queue below
        for i in arrived:  # requests that finished at `now` are gone before anyone is judged
            running = (batch[0], out["start_s"][batch[0]]) if batch else None
            if admit is None or admit(now, i, running, queue):
                queue.append(i)
            else:
                out["rejected"][i] = True
        if not batch and queue:
            members, wake = choose(now, queue)
            if members:
                batch, step = members, 0
                for j in members:
                    out["start_s"][j] = now
                    out["batch_id"][j] = n_batches
                n_batches += 1
                run_step(now, [(prompt[j], 0) for j in members], len(members), 0)
            elif wake is not None and wake != wake_at:
                wake_at = wake
                events.push(wake, ("wake", None))

    result: dict[str, Any] = {k: np.array(v, dtype=np.float64) for k, v in out.items()
              if k in ("start_s", "first_token_s", "finish_s")}
    result["rejected"] = np.array(out["rejected"], dtype=bool)
    result["batch_id"] = np.array(out["batch_id"], dtype=np.int64)
    for k in ("busy_s", "flops", "n_steps", "peak_kv_tokens"):
        result[k] = out[k]
    if trace:
        result["trace"] = {k: np.array(v, dtype=np.float64 if k in ("start_s", "step_s") else np.int64)
                           for k, v in rows.items()}
    else:
        result["trace"] = None
    return result


# imported last: admission prices steps with the Pricer above
from servelab.reference.admission import early_reject, would_first_token  # noqa: E402
