"""Pure-Python reference of the multi-card simulators (course project §8): data parallelism
behind a router, and prefill/decode disaggregation.

Small and readable on purpose; the Rust twins are ``rust/src/sim/router.rs``,
``data_parallel.rs``, ``decode_pool.rs`` and ``disaggregated.rs``, and both must give the same
timestamps bit for bit (``tests/test_parallel_sim.py``). Each card runs the reference
continuous batching (:mod:`servelab.reference.continuous`) on its own requests; a decode card
is written out here (it only decodes, see :func:`run_decode_card`).

Routers: ``round_robin`` (request ``k`` to card ``k mod n``) and ``least_tokens`` (the card
whose unfinished requests hold the fewest ``prompt + output`` tokens when the request arrives,
ties to the lowest card). To know which requests of a card have finished by a time ``t``, the
router simulates the card from its start on the requests routed to it so far (again each time
it got a new one): those finishing by ``t`` do not depend on later arrivals. (The Rust router
gets the same answer from resumable cards, each run once and paused at every arrival.)

With prefix caching (:func:`run_data_parallel_prefix`) the routers are ``round_robin`` and
``prefix_affinity`` (a request goes to its prefix parent's card; one without a parent round
robin over the parentless ones): :func:`static_route`. A parent on another card is re-pointed
at the earlier request on the same card with the longest common prefix (:func:`card_prefixes`). This twin is of the
*routing and re-pointing* only: each card then runs the Rust one-card prefix-caching simulator
(``_core.sim_continuous_batching`` of a ``ContinuousOptions(prefix_caching=True)``), which has its own tests.

>>> from servelab.hw_model import LLAMA3_8B, H100, DEFAULT_EFFICIENCY
>>> from servelab.workload import Requests
>>> reqs = Requests([0.0, 0.0, 0.0], [512, 512, 64], [2, 2, 2])
>>> params = dict(max_num_seqs=8, max_num_batched_tokens=2048, block_size=16, num_blocks=1024)
>>> dp = run_data_parallel(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, n_replicas=2,
...                        router="round_robin", **params)
>>> dp["card"].tolist()
[0, 1, 0]
>>> pd = run_disaggregated(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, n_prefill=1, n_decode=1,
...                        router="round_robin", link_bandwidth=float("inf"), link_latency_s=0.0,
...                        **params)
>>> bool((pd["ready_s"] == pd["first_token_s"]).all())   # an instant link
True
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np

from servelab.reference.continuous import REJECT_BLOCKS, REJECT_BUDGET, run_continuous_batching
from servelab.reference.sim import Pricer
from servelab.reference.step_cost import kv_bytes_per_token

ROUTERS = ("round_robin", "least_tokens")
PREFIX_ROUTERS = ("round_robin", "prefix_affinity")


def static_route(parent: Sequence[int], n_cards: int, router: str) -> list[int]:
    """The card of each request for a router that reads only the request list.

    >>> static_route([-1, -1, 0, 2, -1, 1], 2, "prefix_affinity")
    [0, 1, 0, 0, 0, 1]
    """
    assert router in PREFIX_ROUTERS, router
    cards: list[int] = []
    turn = 0  # the next card of a request without a parent
    for k, p in enumerate(parent):
        if router == "round_robin":
            cards.append(k % n_cards)
        elif p >= 0:
            cards.append(cards[p])
        else:
            cards.append(turn % n_cards)
            turn += 1
    return cards


def token_runs(parent: Sequence[int], length: Sequence[int], r: int, total: int) -> list[tuple[int, int]]:
    """Request ``r``'s first ``total`` synthetic tokens as runs ``(origin, end)`` (each token the
    request it is the own token of, ``rust/src/sim/continuous/prefix.rs``).

    >>> token_runs([-1, 0, 1], [0, 3, 5], 2, 7)
    [(0, 3), (1, 5), (2, 7)]
    """
    if parent[r] < 0 or length[r] == 0 or total == 0:
        return [(r, total)] if total > 0 else []
    head = token_runs(parent, length, parent[r], min(total, length[r]))
    return head + ([(r, total)] if total > head[-1][1] else [])


def common_prefix(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """How many tokens two run lists agree on from the start (runs of one origin start at the
    same position in every sequence, so they can differ only in their ends)."""
    start = 0
    for (oa, ea), (ob, eb) in zip(a, b):
        if oa != ob:
            return start
        if ea != eb:
            return min(ea, eb)
        start = ea
    return start


def card_prefixes(parent: Sequence[int], length: Sequence[int], prompt: Sequence[int], output: Sequence[int],
                  idx: list[int]) -> tuple[list[int], list[int]]:
    """Parents and shared lengths of one card's requests ``idx`` (in order), renumbered within
    the card: each request points at the earlier request on the card with the longest common
    prefix (the latest on a tie), at most its prompt and that request's prompt + output.

    >>> card_prefixes([-1, 0, 1, 2], [0, 50, 80, 90], [60, 90, 100, 120], [5, 40, 10, 10], [1, 3])
    ([-1, 0], [0, 80])
    """
    seqs = [token_runs(parent, length, i, prompt[i] + output[i]) for i in idx]
    out_parent, out_len = [-1] * len(idx), [0] * len(idx)
    for k, i in enumerate(idx):
        for j in range(k):
            l = min(common_prefix(seqs[k], seqs[j]), prompt[i], prompt[idx[j]] + output[idx[j]])
            if l > 0 and l >= out_len[k]:
                out_parent[k], out_len[k] = j, l
    return out_parent, out_len


def route(at: Sequence[float], weight: Sequence[int], n_cards: int, router: str,
          finish: Callable[[int, list[int]], list[float]]) -> list[int]:
    """The card of each position ``0..len(at)``; ``finish(card, positions)`` simulates a card
    serving those positions and returns their finish times (NaN: rejected)."""
    assert router in ROUTERS, router
    if router == "round_robin" or n_cards == 1:
        return [k % n_cards for k in range(len(at))]
    routed: list[list[int]] = [[] for _ in range(n_cards)]
    known: list[list[float]] = [[] for _ in range(n_cards)]  # the last simulation's finish times
    cards = []
    for k, t in enumerate(at):
        outstanding = []
        for c in range(n_cards):
            if len(known[c]) < len(routed[c]):  # new requests since: simulate the card again
                known[c] = list(finish(c, routed[c]))
            f = known[c]
            # not finished by t (NaN > t is False: a rejected request holds nothing)
            outstanding.append(sum(weight[j] for j, fj in zip(routed[c], f) if fj > t))
        best = min(range(n_cards), key=lambda c: (outstanding[c], c))
        routed[best].append(k)
        cards.append(best)
    return cards


def _columns(arrival: Sequence[float], prompt: Sequence[int], output: Sequence[int]) -> Any:
    return SimpleNamespace(arrival_s=np.array(arrival, dtype=np.float64),
                           prompt_len=np.array(prompt, dtype=np.int64),
                           output_len=np.array(output, dtype=np.int64))


def _empty(n: int, n_cards: int) -> dict[str, Any]:
    nan = float("nan")
    return {"start_s": [nan] * n, "first_token_s": [nan] * n, "finish_s": [nan] * n,
            "rejected": [False] * n, "batch_id": [-1] * n, "busy_s": 0.0, "flops": 0.0,
            "n_steps": 0, "peak_kv_tokens": 0, "reject_code": [0] * n, "n_preemptions": [0] * n,
            "card": [-1] * n, "card_busy_s": [0.0] * n_cards, "card_steps": [0] * n_cards,
            "card_peak_kv_blocks": [0] * n_cards}


def _add_totals(out: dict[str, Any], o: dict[str, Any]) -> None:
    """Adds one card's busy time, FLOPs and steps to the pool's; the KV peak is the largest."""
    out["busy_s"] += o["busy_s"]
    out["flops"] += o["flops"]
    out["n_steps"] += o["n_steps"]
    out["peak_kv_tokens"] = max(out["peak_kv_tokens"], o["peak_kv_tokens"])


def _gather(out: dict[str, Any], c: int, idx: list[int], o: dict[str, Any]) -> None:
    for k, i in enumerate(idx):
        for key in ("start_s", "first_token_s", "finish_s", "rejected", "batch_id"):
            out[key][i] = o[key][k].item()
        out["card"][i] = c
    _add_totals(out, o)
    out["card_busy_s"][c] = o["busy_s"]
    out["card_steps"][c] = o["n_steps"]
    out["card_peak_kv_blocks"][c] = o["peak_kv_blocks"]


def _arrays(out: dict[str, Any]) -> dict[str, Any]:
    types = {"rejected": bool, "reject_code": np.int8, "card_busy_s": np.float64,
             "start_s": np.float64, "first_token_s": np.float64, "finish_s": np.float64,
             "ready_s": np.float64, "decode_start_s": np.float64, "decode_busy_s": np.float64}
    return {k: np.array(v, dtype=types.get(k, np.int64)) if isinstance(v, list) else v
            for k, v in out.items()}


def _card_runner(requests: Any, model: Any, gpu: Any, efficiency: Any,
                 params: dict[str, Any], one_token: bool) -> Callable[[list[int]], dict[str, Any]]:
    arrival, prompt = requests.arrival_s.tolist(), requests.prompt_len.tolist()
    output = requests.output_len.tolist()

    def run(idx: list[int]) -> dict[str, Any]:
        cols = _columns([arrival[i] for i in idx], [prompt[i] for i in idx],
                        [1 if one_token else output[i] for i in idx])
        return run_continuous_batching(cols, model, gpu, efficiency, **params)
    return run


def run_data_parallel(requests: Any, model: Any, gpu: Any, efficiency: Any, *, n_replicas: int,
                      router: str, **params: Any) -> dict[str, Any]:
    """Continuous batching (``params``: its keyword arguments) on ``n_replicas`` cards."""
    n = len(requests.arrival_s)
    card_run = _card_runner(requests, model, gpu, efficiency, params, one_token=False)
    weight = (requests.prompt_len + requests.output_len).tolist()
    card = route(requests.arrival_s.tolist(), weight, n_replicas, router,
                 lambda c, idx: card_run(idx)["finish_s"].tolist())
    out = _empty(n, n_replicas)
    for c in range(n_replicas):
        idx = [i for i in range(n) if card[i] == c]
        o = card_run(idx)
        _gather(out, c, idx, o)
        for k, i in enumerate(idx):
            out["reject_code"][i] = int(o["reject_code"][k])
            out["n_preemptions"][i] = int(o["n_preemptions"][k])
    return _arrays(out)


def run_data_parallel_prefix(requests: Any, model: Any, gpu: Any, efficiency: Any, *, n_replicas: int,
                             router: str, parent: Sequence[int], length: Sequence[int],
                             **params: Any) -> dict[str, Any]:
    """Data parallelism with prefix caching on every card (``params``: one card's)."""
    from servelab import _core
    from servelab.continuous_options import ContinuousOptions
    from servelab.workload import SharedPrefixes
    n = len(requests.arrival_s)
    parent, length = [int(x) for x in parent], [int(x) for x in length]
    prompt, output = requests.prompt_len.tolist(), requests.output_len.tolist()
    cards = static_route(parent, n_replicas, router)
    out = _empty(n, n_replicas)
    out.update(cached_tokens=[0] * n, computed_tokens=[0] * n, prefix_hits=0, prefix_lookups=0,
               prefix_evictions=0, host_hits=0, host_transfer_s=0.0)  # no host tier here
    for c in range(n_replicas):
        idx = [i for i in range(n) if cards[i] == c]
        cols = _columns(requests.arrival_s[idx].tolist(), requests.prompt_len[idx].tolist(),
                        requests.output_len[idx].tolist())
        p, k = card_prefixes(parent, length, prompt, output, idx)
        # the one-card prefix-caching simulator (no trace, no batch log, not per-step, caching on)
        shared = SharedPrefixes(np.array(p, dtype=np.int64), np.array(k, dtype=np.int64))
        options = ContinuousOptions(**params, prefix_caching=True, shared_prefixes=shared)
        o: dict[str, Any] = _core.sim_continuous_batching((model, gpu, efficiency), cols, options, 0.0)
        _gather(out, c, idx, o)
        for j, i in enumerate(idx):
            for key in ("reject_code", "n_preemptions", "cached_tokens", "computed_tokens"):
                out[key][i] = int(o[key][j])
        for key in ("prefix_hits", "prefix_lookups", "prefix_evictions"):
            out[key] += int(o[key])
    return _arrays(out)


def run_decode_card(pricer: Pricer, ready: list[float], prompt: list[int], output: list[int], *,
                    max_num_seqs: int, max_num_batched_tokens: int, block_size: int,
                    num_blocks: int, **_: Any) -> dict[str, Any]:
    """One decode card: requests arrive at ``ready`` with ``prompt`` tokens of KV and their first
    token; admission is FCFS while seats (``min(max_num_seqs, max_num_batched_tokens)``) and
    blocks for all ``prompt + output - 1`` tokens last; every running request decodes one token
    a step; the last one frees its blocks."""
    n = len(ready)
    nan = float("nan")
    start, finish = [nan] * n, [nan] * n
    left = list(output)  # tokens still to sample (the prefill sampled the first)
    ctx = list(prompt)
    seats = min(max_num_seqs, max_num_batched_tokens)
    free = num_blocks
    waiting: list[int] = []
    running: list[int] = []
    t, nxt, busy, flops_total, n_steps, peak_kv, peak_blocks = 0.0, 0, 0.0, 0.0, 0, 0, 0

    def blocks(r: int) -> int:
        return -(-(prompt[r] + output[r] - 1) // block_size)

    while True:
        while nxt < n and ready[nxt] <= t:
            assert output[nxt] >= 2 and blocks(nxt) <= num_blocks  # the caller's checks
            waiting.append(nxt)
            nxt += 1
        while waiting and len(running) < seats and blocks(waiting[0]) <= free:
            r = waiting.pop(0)
            free -= blocks(r)
            running.append(r)
            start[r] = t
            left[r] -= 1
        if not running:
            if nxt == n:
                break
            t = ready[nxt]
            continue
        peak_blocks = max(peak_blocks, num_blocks - free)
        step_s, flops = pricer.price([(1, ctx[r]) for r in running])
        peak_kv = max(peak_kv, sum(ctx[r] + 1 for r in running))
        end = t + step_s
        busy += step_s
        flops_total += flops
        n_steps += 1
        for r in list(running):
            ctx[r] += 1
            left[r] -= 1
            if left[r] == 0:
                finish[r] = end
                running.remove(r)
                free += blocks(r)
        t = end
    return {"start_s": start, "finish_s": finish, "busy_s": busy, "flops": flops_total,
            "n_steps": n_steps, "peak_kv_tokens": peak_kv, "peak_kv_blocks": peak_blocks}


def run_disaggregated(requests: Any, model: Any, gpu: Any, efficiency: Any, *, n_prefill: int,
                      n_decode: int, router: str, link_bandwidth: float, link_latency_s: float,
                      **params: Any) -> dict[str, Any]:
    """Prefill on ``n_prefill`` cards (continuous batching of one-token requests), the KV over
    the link, decode on ``n_decode`` cards; rules in ``rust/src/sim/disaggregated.rs``."""
    arrival, prompt = requests.arrival_s.tolist(), requests.prompt_len.tolist()
    output = requests.output_len.tolist()
    n = len(arrival)
    bs, blocks = params["block_size"], params["num_blocks"]
    out = _empty(n, n_prefill)
    served = []
    for i in range(n):  # 1. requests that could never run
        if -(-(prompt[i] + output[i] - 1) // bs) > blocks:
            out["reject_code"][i] = REJECT_BLOCKS
        elif not params.get("chunked_prefill", False) and prompt[i] > params["max_num_batched_tokens"]:
            out["reject_code"][i] = REJECT_BUDGET
        else:
            served.append(i)
        out["rejected"][i] = out["reject_code"][i] != 0

    prefill_run = _card_runner(requests, model, gpu, efficiency, params, one_token=True)  # 2.
    weight = [prompt[i] + output[i] for i in served]
    card = route([arrival[i] for i in served], weight, n_prefill, router,
                 lambda c, pos: prefill_run([served[k] for k in pos])["finish_s"].tolist())
    for c in range(n_prefill):
        idx = [served[k] for k in range(len(served)) if card[k] == c]
        _gather(out, c, idx, prefill_run(idx))

    kv = kv_bytes_per_token(model)  # 3. the link
    ready = [float("nan")] * n
    decoding = [i for i in served if output[i] >= 2]
    for i in decoding:
        ready[i] = out["first_token_s"][i] + (link_latency_s + kv * prompt[i] / link_bandwidth)
    decoding.sort(key=lambda i: ready[i])  # stable: ties keep request order
    for i in served:
        if output[i] < 2:
            out["finish_s"][i] = out["first_token_s"][i]

    pricer = Pricer(model, gpu, efficiency)  # 4. the decode pool

    def decode_run(idx: list[int]) -> dict[str, Any]:
        return run_decode_card(pricer, [ready[i] for i in idx], [prompt[i] for i in idx],
                               [output[i] for i in idx], **params)
    dcard = route([ready[i] for i in decoding], [prompt[i] + output[i] for i in decoding],
                  n_decode, router, lambda c, pos: decode_run([decoding[k] for k in pos])["finish_s"])
    out.update(ready_s=ready, decode_start_s=[float("nan")] * n, decode_card=[-1] * n,
               decode_busy_s=[0.0] * n_decode, decode_steps=[0] * n_decode,
               decode_peak_kv_blocks=[0] * n_decode)
    for c in range(n_decode):
        idx = [decoding[k] for k in range(len(decoding)) if dcard[k] == c]
        o = decode_run(idx)
        for k, i in enumerate(idx):
            out["finish_s"][i] = o["finish_s"][k]
            out["decode_start_s"][i] = o["start_s"][k]
            out["decode_card"][i] = c
        _add_totals(out, o)
        out["decode_busy_s"][c] = o["busy_s"]
        out["decode_steps"][c] = o["n_steps"]
        out["decode_peak_kv_blocks"][c] = o["peak_kv_blocks"]
    return _arrays(out)
