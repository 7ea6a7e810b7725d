"""Serving on several cards (course project §8): data parallelism behind a router, and
prefill/decode disaggregation over a priced KV link. The simulation runs in Rust
(``rust/src/sim/data_parallel.rs``, ``disaggregated.rs``); every card is the one-card
continuous-batching simulator of :func:`servelab.serving_core.run_continuous_batching`
(a decode card only decodes), priced on the paper GPU.

* :func:`run_data_parallel` — ``n_replicas`` cards, each request routed at arrival by
  ``router``: ``"round_robin"`` or ``"least_tokens"`` (the card whose unfinished requests hold
  the fewest prompt + output tokens). With one replica it *is* one card, bit for bit. With
  ``prefix_caching=True`` (§3.5) every card caches prefixes, and ``"prefix_affinity"`` sends a
  request to the card of the earlier request it shares its prefix with (its
  :class:`~servelab.workload.SharedPrefixes` parent), so a conversation stays on one card.
* :func:`run_disaggregated` — ``n_prefill`` cards prefill (and sample the first token: TTFT
  never waits for the link), each request's KV crosses ``link``
  (:func:`servelab.hw_model.kv_transfer_s`), ``n_decode`` cards decode. A decode card reserves
  blocks for all of a request's tokens at admission, so it never preempts.

Both return a :class:`ParallelResult`, whose ``overall`` is a
:class:`~servelab.serving_core.SimResult` over all requests: every :mod:`servelab.metrics`
function (TTFT, TPOT, goodput, attainment) works on it as on one card. Its totals (``busy_s``,
``n_steps``, ``flops``) add over the cards; :attr:`ParallelResult.utilisation` is per card.

>>> from servelab.hw_model import LLAMA3_8B, H100, NETWORK_400G
>>> from servelab.workload import Requests
>>> reqs = Requests(arrival_s=[0.0, 0.0], prompt_len=[512, 512], output_len=[3, 3])
>>> dp = run_data_parallel(reqs, LLAMA3_8B, H100, n_replicas=2)   # a prefill each, alone
>>> dp.card.tolist(), [round(x * 1e3, 2) for x in dp.overall.first_token_s.tolist()]
([0, 1], [10.92, 10.92])
>>> pd = run_disaggregated(reqs, LLAMA3_8B, H100, n_prefill=1, n_decode=1, link=NETWORK_400G)
>>> [round(x * 1e3, 2) for x in pd.overall.first_token_s.tolist()]   # both prefill together
[21.35, 21.35]
>>> round(float(pd.ready_s[0] - pd.overall.first_token_s[0]) * 1e3, 2)   # 64 MiB over 50 GB/s
1.35
>>> run_data_parallel(reqs, LLAMA3_8B, H100, n_replicas=0)
Traceback (most recent call last):
...
ValueError: n_replicas must be an integer in [1, 4096], got 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab import _checks, _core
from servelab.hw_model import (DEFAULT_EFFICIENCY, NVLINK_H100, Efficiency, GpuSpec, Link, ModelSpec,
                               kv_capacity_tokens)
from servelab.serving_core import SimResult
from servelab.workload import Requests, SharedPrefixes, check_shared_prefixes

__all__ = ["ROUTERS", "PREFIX_ROUTERS", "ParallelResult", "run_data_parallel", "run_disaggregated"]

ROUTERS = ("round_robin", "least_tokens")
# the routers with prefix caching on (they decide from the request list alone, see
# rust/src/sim/router.rs): least_tokens would need resumable prefix-caching cards
PREFIX_ROUTERS = ("round_robin", "prefix_affinity")


class _PoolResult(SimResult):
    """A SimResult over several cards; its label says which."""

    @property
    def label(self) -> str:
        return str(self.params["label"])


@dataclass(frozen=True, eq=False)
class ParallelResult:
    """A multi-card run. ``overall``: per-request columns and metrics as for one card.
    ``card``: which card served each request (data parallelism), or which prefill card
    (disaggregation); ``card_busy_s`` / ``card_steps`` per card of that pool. Disaggregation
    only: ``decode_card``, ``ready_s`` (when the KV reached the decode pool),
    ``decode_start_s``, ``decode_busy_s``, ``decode_steps`` (NaN / -1 for requests of one output
    token, which end with their prefill, and for rejected ones)."""

    overall: SimResult
    card: np.ndarray
    card_busy_s: np.ndarray
    card_steps: np.ndarray
    decode_card: np.ndarray | None = None
    ready_s: np.ndarray | None = None
    decode_start_s: np.ndarray | None = None
    decode_busy_s: np.ndarray | None = None
    decode_steps: np.ndarray | None = None

    @property
    def n_cards(self) -> int:
        """Cards in all pools."""
        return len(self.card_busy_s) + (0 if self.decode_busy_s is None else len(self.decode_busy_s))

    @property
    def utilisation(self) -> float:
        """Share of the span the average card spent computing."""
        from servelab.metrics import span_s
        s = span_s(self.overall)
        return self.overall.busy_s / (s * self.n_cards) if s > 0 else 0.0

    def replica(self, k: int) -> SimResult:
        """Data parallelism: card ``k``'s own run (its requests and timestamps) as a SimResult
        (its ``flops`` is NaN: only the total is kept)."""
        if self.decode_card is not None:
            raise ValueError("replica() is for data parallelism; this run is disaggregated "
                             "(see card and decode_card)")
        k = _checks.integer("k", k, 0, len(self.card_busy_s) - 1)
        m = self.card == k
        o = self.overall
        reqs = Requests(arrival_s=o.requests.arrival_s[m], prompt_len=o.requests.prompt_len[m],
                        output_len=o.requests.output_len[m])
        return SimResult(
            policy="continuous", params={**o.params, "replica": k}, requests=reqs, model=o.model,
            gpu=o.gpu, efficiency=o.efficiency, start_s=o.start_s[m], first_token_s=o.first_token_s[m],
            finish_s=o.finish_s[m], rejected=o.rejected[m], batch_id=o.batch_id[m],
            busy_s=float(self.card_busy_s[k]), flops=float("nan"), n_steps=int(self.card_steps[k]),
            peak_kv_tokens=0, reject_code=None if o.reject_code is None else o.reject_code[m],
            n_preemptions=None if o.n_preemptions is None else o.n_preemptions[m])


def _card_params(model: ModelSpec, gpu: GpuSpec, max_num_seqs: object, max_num_batched_tokens: object,
                 block_size: object, num_blocks: object, chunked_prefill: object,
                 mem_util: float) -> dict[str, Any]:
    """One card's continuous-batching parameters, checked; ``num_blocks=None``: all the KV that
    fits one card beside the weights."""
    bs = _checks.integer("block_size", block_size, 1)
    if num_blocks is None:
        blocks = kv_capacity_tokens(model, gpu, mem_util) // bs
        if not 1 <= blocks <= _core.MAX_NUM_BLOCKS:
            raise ValueError(f"num_blocks: the default, kv_capacity_tokens // block_size={bs}, is "
                             f"{blocks}, outside [1, {_core.MAX_NUM_BLOCKS}]; pass num_blocks")
    else:
        blocks = _checks.integer("num_blocks", num_blocks, 1, _core.MAX_NUM_BLOCKS)
    return {"max_num_seqs": _checks.integer("max_num_seqs", max_num_seqs, 1),
            "max_num_batched_tokens": _checks.integer("max_num_batched_tokens", max_num_batched_tokens, 1),
            "block_size": bs, "num_blocks": blocks,
            "chunked_prefill": _checks.flag("chunked_prefill", chunked_prefill)}


def _check_common(requests: object, model: object, gpu: object, efficiency: object, router: object,
                  routers: tuple[str, ...] = ROUTERS, why: str = "") -> str:
    _checks.instance("requests", requests, Requests, "a servelab.workload.Requests")
    _checks.instance("model", model, ModelSpec, "a servelab.hw_model.ModelSpec")
    _checks.instance("gpu", gpu, GpuSpec, "a servelab.hw_model.GpuSpec")
    _checks.instance("efficiency", efficiency, Efficiency, "a servelab.hw_model.Efficiency")
    if not isinstance(router, str) or router not in routers:
        raise ValueError(f"router must be one of {', '.join(map(repr, routers))}{why}, got {router!r}")
    return str(router)


def _check_prefixes(requests: Requests, caching: bool, shared_prefixes: object) -> dict[str, Any]:
    """The core's prefix arguments for ``shared_prefixes`` (checked), when caching is on."""
    sp = check_shared_prefixes(shared_prefixes, len(requests))
    if not caching:
        return {}  # sharing declared without caching: nothing is reused (as on one card)
    if sp is None:
        return {"prefix_caching": True}
    return {"prefix_caching": True, "shared": (sp.parent, sp.length)}


def _overall(policy: str, params: dict[str, Any], requests: Requests, model: ModelSpec, gpu: GpuSpec,
             efficiency: Efficiency, d: dict[str, Any]) -> SimResult:
    return _PoolResult(
        policy=policy, params=params, requests=requests, model=model, gpu=gpu, efficiency=efficiency,
        start_s=d["start_s"], first_token_s=d["first_token_s"], finish_s=d["finish_s"],
        rejected=d["rejected"], batch_id=d["batch_id"], busy_s=float(d["busy_s"]), flops=float(d["flops"]),
        n_steps=int(d["n_steps"]), peak_kv_tokens=int(d["peak_kv_tokens"]), reject_code=d["reject_code"],
        n_preemptions=d["n_preemptions"], peak_kv_blocks=int(max(d["card_peak_kv_blocks"], default=0)),
        cached_tokens=d.get("cached_tokens"), computed_tokens=d.get("computed_tokens"),
        prefix_hits=int(d.get("prefix_hits", 0)), prefix_lookups=int(d.get("prefix_lookups", 0)),
        prefix_evictions=int(d.get("prefix_evictions", 0)))


def run_data_parallel(requests: Requests, model: ModelSpec, gpu: GpuSpec, n_replicas: int,
                      router: str = "round_robin", max_num_seqs: int = 256,
                      max_num_batched_tokens: int = 8192, block_size: int = 16,
                      num_blocks: int | None = None, chunked_prefill: bool = False, *,
                      prefix_caching: bool = False, shared_prefixes: SharedPrefixes | None = None,
                      mem_util: float = 0.9, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> ParallelResult:
    """Continuous batching on ``n_replicas`` identical cards behind ``router`` (one of
    :data:`ROUTERS`, or with prefix caching :data:`PREFIX_ROUTERS`); the other arguments are one card's, as in
    :func:`servelab.serving_core.run_continuous_batching`.

    ``prefix_caching=True`` caches prefixes on every card (``shared_prefixes`` says which
    prompts share what, as on one card); the routers are then :data:`PREFIX_ROUTERS`, which
    decide from the request list alone: ``"prefix_affinity"`` sends a request to its
    ``shared_prefixes`` parent's card (one without a parent round robin), ``"round_robin"``
    ignores the sharing. Under round robin a request whose parent is on another card shares
    instead with the earlier request on its own card with the longest common prefix (another
    conversation of its system prompt, say), as a real cache matching tokens would
    (``rust/src/sim/data_parallel.rs``). ``overall`` then has the
    prefix columns (``cached_tokens``, ``prefix_hits``, ...) summed over the cards.

    >>> from servelab.hw_model import LLAMA3_8B, H100
    >>> reqs = Requests(arrival_s=[0.0, 0.0, 0.0], prompt_len=[2000, 10, 10], output_len=[50, 5, 5])
    >>> run_data_parallel(reqs, LLAMA3_8B, H100, 2, router="least_tokens").card.tolist()
    [0, 1, 1]
    >>> chat = Requests(arrival_s=[0.0, 1.0, 2.0], prompt_len=[600, 700, 800], output_len=[50, 50, 50])
    >>> sp = SharedPrefixes(parent=[-1, 0, 1], length=[0, 650, 750])   # one conversation
    >>> for router in PREFIX_ROUTERS:
    ...     r = run_data_parallel(chat, LLAMA3_8B, H100, 2, router, prefix_caching=True, shared_prefixes=sp)
    ...     print(router, r.card.tolist(), r.overall.cached_tokens.tolist())
    round_robin [0, 1, 0] [0, 0, 640]
    prefix_affinity [0, 0, 0] [0, 640, 736]
    """
    caching = _checks.flag("prefix_caching", prefix_caching)
    if caching:
        router = _check_common(requests, model, gpu, efficiency, router, PREFIX_ROUTERS,
                               " with prefix_caching=True")
    else:
        router = _check_common(requests, model, gpu, efficiency, router, ROUTERS,
                               " without prefix caching ('prefix_affinity' needs prefix_caching=True)")
    pre = _check_prefixes(requests, caching, shared_prefixes)
    n = _checks.integer("n_replicas", n_replicas, 1, _core.MAX_CARDS)
    p = _card_params(model, gpu, max_num_seqs, max_num_batched_tokens, block_size, num_blocks,
                     chunked_prefill, mem_util)
    d: dict[str, Any] = _core.sim_data_parallel((model, gpu, efficiency), requests,
                                                dict(card=p, n_replicas=n, router=router, **pre))
    params = {**p, "n_replicas": n, "router": router, "label": f"DP x{n} ({router})"}
    if caching:
        params["prefix_caching"] = True
        params["label"] = f"DP x{n} ({router}, prefix caching)"
    return ParallelResult(overall=_overall("data_parallel", params, requests, model, gpu, efficiency, d),
                          card=d["card"], card_busy_s=d["card_busy_s"], card_steps=d["card_steps"])


def run_disaggregated(requests: Requests, model: ModelSpec, gpu: GpuSpec, n_prefill: int, n_decode: int,
                      link: Link = NVLINK_H100, router: str = "round_robin", max_num_seqs: int = 256,
                      max_num_batched_tokens: int = 8192, block_size: int = 16,
                      num_blocks: int | None = None, chunked_prefill: bool = False, *,
                      mem_util: float = 0.9, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> ParallelResult:
    """Prefill/decode disaggregation: ``n_prefill`` prefill cards and ``n_decode`` decode
    cards of ``gpu`` (each with one card's parameters, as in
    :func:`servelab.serving_core.run_continuous_batching`), the KV over ``link``
    (:data:`servelab.hw_model.NVLINK_H100` in a node, :data:`~servelab.hw_model.NETWORK_400G`
    between nodes). Requests that could never run are rejected at arrival:
    ``reject_code`` 1 (more KV blocks than a decode card holds) or 2 (without chunked
    prefill, a prompt over ``max_num_batched_tokens``).

    >>> from servelab.hw_model import LLAMA3_8B, H100, INSTANT_LINK
    >>> reqs = Requests(arrival_s=[0.0], prompt_len=[512], output_len=[1])
    >>> r = run_disaggregated(reqs, LLAMA3_8B, H100, 1, 1, link=INSTANT_LINK)
    >>> r.overall.finish_s[0] == r.overall.first_token_s[0], int(r.decode_card[0])  # done at prefill
    (np.True_, -1)
    """
    router = _check_common(requests, model, gpu, efficiency, router)
    _checks.instance("link", link, Link, "a servelab.hw_model.Link")
    n_p = _checks.integer("n_prefill", n_prefill, 1, _core.MAX_CARDS)
    n_d = _checks.integer("n_decode", n_decode, 1, _core.MAX_CARDS)
    p = _card_params(model, gpu, max_num_seqs, max_num_batched_tokens, block_size, num_blocks,
                     chunked_prefill, mem_util)
    d: dict[str, Any] = _core.sim_disaggregated((model, gpu, efficiency), requests, dict(
        card=p, n_prefill=n_p, n_decode=n_d, router=router, link=(link.bandwidth, link.latency_s)))
    params = {**p, "n_prefill": n_p, "n_decode": n_d, "router": router, "link": link.name,
              "label": f"disagg {n_p}P:{n_d}D ({link.name})"}
    return ParallelResult(overall=_overall("disaggregated", params, requests, model, gpu, efficiency, d),
                          card=d["card"], card_busy_s=d["card_busy_s"], card_steps=d["card_steps"],
                          decode_card=d["decode_card"], ready_s=d["ready_s"],
                          decode_start_s=d["decode_start_s"], decode_busy_s=d["decode_busy_s"],
                          decode_steps=d["decode_steps"])
