"""Serving policies on the paper GPU (lecture §4.5): the simulator's Python surface.

The simulation runs in Rust (``rust/src/sim/``); each step is priced by the paper GPU of
:mod:`servelab.hw_model`. Policies, by the lecture's names:

* :func:`run_batch1` — one request at a time, first come first served;
* :func:`run_static_batching` — start a batch when ``batch_size`` requests wait or the oldest
  has waited ``max_wait_s``; the batch prefills together and decodes until its longest request
  ends; with ``ride_along=False`` (exercise 5) finished requests stop computing but their seats
  are not refilled;
* :func:`run_continuous_batching` — iteration-level scheduling over a paged KV pool, the same
  batches as :mod:`servelab.engine` makes with real tokens.

All return a :class:`SimResult`: per-request numpy columns ``start_s``, ``first_token_s``,
``finish_s``, ``rejected`` (and ``batch_id``), run totals, and with ``trace=True`` one row per
forward step. :mod:`servelab.metrics` turns a result into TTFT, TPOT, goodput and the rest.

What a step costs (the context convention, also in ``rust/src/sim/mod.rs``): a prefill of a
``p``-token prompt is ``(p, 0)`` and yields the first output token; decode step ``s`` of a
request (``s = 1 .. L_o - 1``) is ``(1, p + s - 1)``: one new token on top of the ``p + s - 1``
tokens already in its KV cache. A rider (a finished request kept in a static batch) keeps
decoding padding as if it were still running. Batch 1 and static batching model no KV memory
limit (the lecture's code does not); ``SimResult.peak_kv_tokens`` says how close a run came.
Continuous batching does: its requests hold blocks of a paged pool.

>>> from servelab.hw_model import LLAMA3_8B, H100
>>> from servelab.workload import Requests
>>> reqs = Requests(arrival_s=[0.0, 0.0], prompt_len=[512, 512], output_len=[2, 2])
>>> r = run_batch1(reqs, LLAMA3_8B, H100)
>>> [round(x * 1e3, 2) for x in r.finish_s.tolist()]   # prefill + one 6.13 ms decode, twice
[17.05, 34.1]
>>> s = run_static_batching(reqs, LLAMA3_8B, H100, batch_size=2)
>>> [round(x * 1e3, 2) for x in s.finish_s.tolist()]   # together: one prefill, one decode
[27.5, 27.5]
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from servelab import _checks, _core
from servelab.admission import EarlyReject
from servelab.continuous_options import ContinuousOptions, Speculation
from servelab.hw_model import DEFAULT_EFFICIENCY, Efficiency, GpuSpec, ModelSpec, kv_host_transfer_s
from servelab.workload import Requests, SharedPrefixes, check_shared_prefixes

__all__ = ["SimResult", "StepTrace", "BatchLog", "Speculation", "ContinuousOptions", "run_batch1",
           "run_static_batching", "run_continuous_batching", "run_continuous", "REJECT_REASONS"]

# SimResult.reject_code of continuous batching (rule 1 of servelab.engine.scheduler): why a
# request can never run, so it is rejected at arrival instead of waiting forever
REJECT_REASONS = {
    1: "its prompt + output - 1 tokens need more KV blocks than the pool holds",
    2: "without chunked prefill, a (re)prefill of its prompt + output - 1 tokens exceeds "
       "max_num_batched_tokens",
}


@dataclass(frozen=True, eq=False)
class StepTrace:
    """One row per forward step, in time order."""

    start_s: np.ndarray  # when the step starts
    step_s: np.ndarray  # how long it takes
    batch_size: np.ndarray  # sequences computing in it (riders included)
    tokens: np.ndarray  # new tokens computed (prompt tokens in a prefill, 1 per decoding seq)
    n_prefill: np.ndarray  # sequences whose prefill ends here (first token each)
    n_decode: np.ndarray  # sequences producing a real (not padding) later token
    kv_tokens: np.ndarray  # KV tokens held by the step's sequences after it
    # continuous batching only: KV blocks in use after the step, requests preempted / admitted
    kv_blocks: np.ndarray | None = None
    n_preempted: np.ndarray | None = None
    n_admitted: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.start_s)


@dataclass(frozen=True, eq=False)
class BatchLog:
    """Continuous batching's batches in compressed rows: step ``s`` holds the entries
    ``offsets[s]:offsets[s + 1]`` of the columns ``request_id``, ``new_tokens``,
    ``context_len`` (as in ``servelab.engine.EngineResult.batch_log()``)."""

    offsets: np.ndarray
    request_id: np.ndarray
    new_tokens: np.ndarray
    context_len: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def step(self, s: int) -> list[tuple[int, int, int]]:
        s = _checks.integer("s", s, 0, len(self) - 1)
        lo, hi = int(self.offsets[s]), int(self.offsets[s + 1])
        return list(zip(self.request_id[lo:hi].tolist(), self.new_tokens[lo:hi].tolist(),
                        self.context_len[lo:hi].tolist()))

    def to_list(self) -> list[list[tuple[int, int, int]]]:
        """One list of ``(request_id, new_tokens, context_len)`` per step."""
        return [self.step(s) for s in range(len(self))]


@dataclass(frozen=True, eq=False)
class SimResult:
    """What a simulated run did. Times are seconds on the simulated clock.

    Per request (numpy columns, one entry per request of ``requests``): ``start_s`` (its
    prefill starts), ``first_token_s`` (end of the prefill), ``finish_s`` (end of its last
    step), ``rejected`` (turned away by admission control; its times are NaN), ``batch_id``
    (which batch served it; ``-1`` if rejected). Totals: ``busy_s`` (sum of step times),
    ``flops``, ``n_steps``, ``peak_kv_tokens``. ``trace``: a :class:`StepTrace` when asked for.
    Continuous batching with prefix caching adds ``cached_tokens`` and ``computed_tokens`` per
    request and the allocator's ``prefix_hits``, ``prefix_lookups``, ``prefix_evictions``; with
    a host tier, ``host_hits`` (blocks recalled from host memory) and ``host_transfer_s``.
    """

    policy: str
    params: dict[str, Any]
    requests: Requests
    model: ModelSpec
    gpu: GpuSpec
    efficiency: Efficiency
    start_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    rejected: np.ndarray
    batch_id: np.ndarray
    busy_s: float
    flops: float
    n_steps: int
    peak_kv_tokens: int
    trace: StepTrace | None = field(default=None)
    # with admission control: when each request's first token would have come had it been
    # admitted at its arrival (see servelab.admission)
    would_first_token_s: np.ndarray | None = field(default=None)
    # continuous batching: why each request was rejected (0: it was not; REJECT_REASONS),
    # how often each was preempted, and with batch_log=True every step's batch
    reject_code: np.ndarray | None = field(default=None)
    n_preemptions: np.ndarray | None = field(default=None)
    peak_kv_blocks: int = 0
    batch_log: BatchLog | None = field(default=None)
    # continuous batching with prefix caching (§3.5): per request the prompt tokens served from
    # the cache and the tokens computed (summed over recomputes), and the allocator's counters
    cached_tokens: np.ndarray | None = field(default=None)
    computed_tokens: np.ndarray | None = field(default=None)
    prefix_hits: int = 0
    prefix_lookups: int = 0
    prefix_evictions: int = 0
    host_hits: int = 0
    host_transfer_s: float = 0.0
    # continuous batching with speculative decoding: per request the guesses proposed and
    # kept and its decoding steps; the draft's seconds (in busy_s and the clock)
    spec_proposed: np.ndarray | None = field(default=None)
    spec_accepted: np.ndarray | None = field(default=None)
    spec_steps: np.ndarray | None = field(default=None)
    draft_busy_s: float = 0.0
    # continuous batching on the twin with queues=True (servelab.trace): after each step, the waiting
    # ids, the running ids and their blocks, as CSR columns (rust/src/sim/continuous/trace.rs)
    step_queues: dict[str, np.ndarray] | None = field(default=None)

    @property
    def tokens_per_target_step(self) -> float:
        """Speculative decoding: output tokens per decoding step (after the first token),
        over the run; the closed form is ``(1 - a^(k+1)) / (1 - a)`` (nan without)."""
        if self.spec_steps is None or self.spec_accepted is None or not self.spec_steps.sum():
            return float("nan")
        return float((self.spec_steps.sum() + self.spec_accepted.sum()) / self.spec_steps.sum())

    def reject_reason(self, i: int) -> str:
        """Why request ``i`` was rejected, in words (``""`` if it was not)."""
        i = _checks.integer("i", i, 0, len(self.rejected) - 1)
        if not self.rejected[i]:
            return ""
        if self.reject_code is None:
            return "rejected by admission control"
        p, o = int(self.requests.prompt_len[i]), int(self.requests.output_len[i])
        return f"{REJECT_REASONS[int(self.reject_code[i])]} (prompt {p}, output {o}, params {self.params})"

    @property
    def label(self) -> str:
        """A short name for tables: ``batch 1``, ``static B=32``, ``static B=32 no ride``."""
        if self.policy == "static":
            extra = "" if self.params["ride_along"] else " no ride"
            return f"static B={self.params['batch_size']}{extra}"
        if self.policy == "continuous":
            return ("continuous" + (" chunked" if self.params["chunked_prefill"] else "")
                    + (" prefix" if self.params.get("prefix_caching") else "")
                    + (f" spec k={self.params['speculative'].k}" if self.params.get("speculative")
                       else ""))
        if "admission" in self.params:
            return f"batch 1, {self.params['admission']}"
        return "batch 1"

    def __repr__(self) -> str:
        return (f"SimResult({self.label}, n={len(self.requests)}, steps={self.n_steps}, "
                f"busy_s={self.busy_s:.4g}, makespan_s={np.nanmax(self.finish_s, initial=0.0):.4g})")


def _check_requests(requests: object) -> Requests:
    if not isinstance(requests, Requests):
        raise TypeError(f"requests must be a servelab.workload.Requests, got {type(requests).__name__}")
    return requests


def _check_specs(model: object, gpu: object, efficiency: object) -> None:
    for name, value, kind in (("model", model, ModelSpec), ("gpu", gpu, GpuSpec),
                              ("efficiency", efficiency, Efficiency)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a servelab.hw_model.{kind.__name__}, got {value!r}")


def _result(policy: str, params: dict[str, Any], requests: Requests, model: ModelSpec, gpu: GpuSpec,
            efficiency: Efficiency, d: dict[str, Any]) -> SimResult:
    tr = d["trace"]
    log = d.get("batch_log")
    return SimResult(
        policy=policy, params=params, requests=requests, model=model, gpu=gpu, efficiency=efficiency,
        start_s=d["start_s"], first_token_s=d["first_token_s"], finish_s=d["finish_s"],
        rejected=d["rejected"], batch_id=d["batch_id"], busy_s=float(d["busy_s"]),
        flops=float(d["flops"]), n_steps=int(d["n_steps"]), peak_kv_tokens=int(d["peak_kv_tokens"]),
        trace=None if tr is None else StepTrace(**tr), would_first_token_s=d.get("would_first_token_s"),
        reject_code=d.get("reject_code"), n_preemptions=d.get("n_preemptions"),
        peak_kv_blocks=int(d.get("peak_kv_blocks", 0)), batch_log=None if log is None else BatchLog(**log),
        cached_tokens=d.get("cached_tokens"), computed_tokens=d.get("computed_tokens"),
        prefix_hits=int(d.get("prefix_hits", 0)), prefix_lookups=int(d.get("prefix_lookups", 0)),
        prefix_evictions=int(d.get("prefix_evictions", 0)), host_hits=int(d.get("host_hits", 0)),
        host_transfer_s=float(d.get("host_transfer_s", 0.0)), spec_proposed=d.get("spec_proposed"),
        spec_accepted=d.get("spec_accepted"), spec_steps=d.get("spec_steps"),
        draft_busy_s=float(d.get("draft_busy_s", 0.0)), step_queues=d.get("step_queues"))


def run_batch1(requests: Requests, model: ModelSpec, gpu: GpuSpec, admission: EarlyReject | None = None, *,
               efficiency: Efficiency = DEFAULT_EFFICIENCY, trace: bool = False) -> SimResult:
    """Batch 1, first come first served (§4.5 policy 1): a request starts when it has arrived
    and the one before it has finished; prefill (one step) then ``L_o - 1`` decode steps.

    ``admission``: ``None`` accepts everything; :class:`servelab.admission.EarlyReject` rejects
    at arrival each request whose predicted TTFT misses its SLO (§5.3). Then the result also
    has ``would_first_token_s`` (for :func:`servelab.admission.admission_report`) and
    ``params["predicted_len"]``.
    """
    requests = _check_requests(requests)
    _check_specs(model, gpu, efficiency)
    if admission is None:
        d = _core.sim_batch1((model, gpu, efficiency), requests, _checks.flag("trace", trace))
        return _result("batch1", {}, requests, model, gpu, efficiency, d)
    if not isinstance(admission, EarlyReject):
        raise TypeError(f"admission must be None or a servelab.admission.EarlyReject, got {admission!r}")
    pred = admission.predicted_len(requests)
    d = _core.sim_batch1((model, gpu, efficiency), requests, _checks.flag("trace", trace), (admission.slo_ttft_s, pred))
    params = {"admission": admission.label, "slo_ttft_s": admission.slo_ttft_s, "predicted_len": pred}
    return _result("batch1", params, requests, model, gpu, efficiency, d)


def run_static_batching(requests: Requests, model: ModelSpec, gpu: GpuSpec, batch_size: int,
                        max_wait_s: float = 0.2, ride_along: bool = True, *,
                        efficiency: Efficiency = DEFAULT_EFFICIENCY, trace: bool = False) -> SimResult:
    """Static batching (§4.5 policy 2). When the GPU is free, a batch starts as soon as
    ``batch_size`` requests wait or the oldest has waited ``max_wait_s`` seconds; it takes the
    oldest waiting requests (at most ``batch_size``), prefills them together in one step, then
    decodes until its longest request ends. Nobody joins a running batch.

    ``ride_along=True`` (demo 03): finished requests keep computing padding and are charged for
    it. ``ride_along=False`` (exercise 5): they stop computing, but their seats stay empty.
    """
    requests = _check_requests(requests)
    _check_specs(model, gpu, efficiency)
    b = min(_checks.positive_int("batch_size", batch_size, hi=None), 2**63 - 1)  # any larger: no limit
    _checks.non_negative("max_wait_s", max_wait_s)
    _checks.flag("ride_along", ride_along)
    d = _core.sim_static_batching((model, gpu, efficiency), requests, (b, float(max_wait_s), bool(ride_along)),
                                  _checks.flag("trace", trace))
    params = {"batch_size": int(batch_size), "max_wait_s": float(max_wait_s), "ride_along": bool(ride_along)}
    return _result("static", params, requests, model, gpu, efficiency, d)


def run_continuous_batching(requests: Requests, model: ModelSpec, gpu: GpuSpec, max_num_seqs: int = 256,
                            max_num_batched_tokens: int = 8192, block_size: int = 16,
                            num_blocks: int | None = None, chunked_prefill: bool = False, *,
                            mem_util: float = 0.9, efficiency: Efficiency = DEFAULT_EFFICIENCY,
                            trace: bool = False, batch_log: bool = False,
                            prefix_caching: bool = False, shared_prefixes: SharedPrefixes | None = None,
                            host_blocks: int = 0, host_policy: str = "lru",
                            speculative: Speculation | None = None,
                            step_extra_s: tuple[float, float] = (0.0, 0.0)) -> SimResult:
    """Continuous batching (§4.5 policy 3: Orca's iteration-level scheduling over vLLM's paged
    KV blocks, §2.4): the batch is chosen anew at every step, with the rules of
    :mod:`servelab.engine.scheduler`, so that on the same requests it makes the engine's batches.

    At most ``max_num_seqs`` requests run and a step computes at most ``max_num_batched_tokens``
    tokens (vLLM's names and defaults). KV memory is ``num_blocks`` blocks of ``block_size``
    tokens, by default all that fits beside the weights:
    ``hw_model.kv_capacity_tokens(model, gpu, mem_util) // block_size``. A request holds
    ``ceil(tokens / block_size)`` blocks; when a decoding request needs a block and none is free,
    the newest running request is preempted and later recomputed (its first start and first
    token stand). ``chunked_prefill`` splits long prompts over steps within the token budget.

    ``prefix_caching=True`` (§3.5) reuses computed KV blocks of shared prompt prefixes, as the
    engine's allocator does (hits only on computed full blocks, LRU eviction of free cached
    ones, one token always left to compute). The simulator knows lengths, not tokens:
    ``shared_prefixes`` (:class:`servelab.workload.SharedPrefixes`, e.g. from
    :func:`servelab.workload.chat_sessions`; ``None``: nothing shared but a preempted request's
    own computed blocks) says which earlier request each prompt starts with. The result then
    has ``cached_tokens`` and ``computed_tokens`` per request and ``prefix_hits``. The event
    loop then drives prefix caching's KV pool at a cost per event
    (``rust/src/sim/continuous/prefix_events.rs``): slower than the plain run, see ``make bench``.

    ``host_blocks > 0`` (with prefix caching; §8 milestone 4b) adds a host tier of that many
    blocks: evicted prefix blocks move to host memory (a full tier drops by ``host_policy``,
    ``"lru"`` or ``"hits"``, see :mod:`servelab.blocks`) and come back by a copy, priced as
    ``hw_model.kv_host_transfer_s`` of their tokens and added to the step that admits them.
    The result counts ``host_hits`` and ``host_transfer_s``.

    ``speculative`` (a :class:`Speculation`: ``k``, the draft's ModelSpec, the acceptance
    rate) adds speculative decoding (§8, milestone 4a), at a cost per decoding entry
    (``rust/src/sim/continuous/speculation.rs``; with prefix caching, on the per-step twin:
    kept guesses take their slots as the engine appends them, so they can evict and fill
    cached blocks). The result then has
    ``spec_proposed``, ``spec_accepted``, ``spec_steps`` per request, ``draft_busy_s`` and
    :attr:`SimResult.tokens_per_target_step`; with ``k = 0`` it is the plain run.

    ``step_extra_s = (per_token_s, per_seq_s)`` adds that many seconds to every step for each
    new token and each sequence in it, after the roofline (§8.3: what a real serving stack adds
    to the paper GPU, such as tensor parallelism's all-reduce bytes or per-sequence CPU work;
    :mod:`servelab.validation` fits them to measured runs). ``(0.0, 0.0)``, the default, is the
    lecture's paper GPU, bit for bit.

    A request that can never run (rule 1: more blocks than the pool, or without chunked prefill
    more tokens than the budget) is rejected at arrival: ``rejected[i]`` is True and
    :meth:`SimResult.reject_reason` says why. ``batch_id`` is the rank of first admission.
    ``trace=True`` adds ``kv_blocks``, ``n_preempted`` and ``n_admitted`` to the step trace;
    ``batch_log=True`` keeps every step's batch (:class:`BatchLog`). Neither is kept otherwise,
    so memory stays linear in the number of requests. The simulator costs per event (arrival,
    admission, end of a prefill, finish, preemption), not per sequence-step.

    The keywords are those of one :class:`ContinuousOptions` record, which checks them; the run
    is :func:`run_continuous` of that record.

    >>> from servelab.hw_model import LLAMA3_8B, H100
    >>> reqs = Requests(arrival_s=[0.0, 0.0], prompt_len=[512, 512], output_len=[2, 2])
    >>> c = run_continuous_batching(reqs, LLAMA3_8B, H100, batch_log=True)
    >>> [round(x * 1e3, 2) for x in c.finish_s.tolist()]   # as static B=2 here
    [27.5, 27.5]
    >>> c.batch_log.to_list()
    [[(0, 512, 0), (1, 512, 0)], [(0, 1, 512), (1, 1, 512)]]
    >>> tiny = run_continuous_batching(reqs, LLAMA3_8B, H100, num_blocks=8)
    >>> tiny.rejected.tolist(), tiny.reject_code.tolist()
    ([True, True], [1, 1])
    >>> tiny.reject_reason(0).split(" (")[0]
    'its prompt + output - 1 tokens need more KV blocks than the pool holds'
    >>> run_continuous_batching(reqs, LLAMA3_8B, H100, block_size=0)
    Traceback (most recent call last):
    ...
    ValueError: block_size must be a positive integer, got 0
    """
    options = ContinuousOptions(
        max_num_seqs, max_num_batched_tokens, block_size, num_blocks, chunked_prefill, mem_util=mem_util,
        trace=trace, batch_log=batch_log, prefix_caching=prefix_caching, shared_prefixes=shared_prefixes,
        host_blocks=host_blocks, host_policy=host_policy, speculative=speculative, step_extra_s=step_extra_s)
    return run_continuous(requests, model, gpu, options, efficiency=efficiency)


def run_continuous(requests: Requests, model: ModelSpec, gpu: GpuSpec, options: ContinuousOptions | None = None,
                   *, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> SimResult:
    """Continuous batching (§8, milestone 2) with its options in one record: the run of
    :func:`run_continuous_batching`, which builds the record from its keywords. ``None`` is
    ``ContinuousOptions()``, the lecture's defaults.

    >>> from servelab.hw_model import LLAMA3_8B, H100
    >>> reqs = Requests(arrival_s=[0.0, 0.0], prompt_len=[512, 512], output_len=[2, 2])
    >>> r = run_continuous(reqs, LLAMA3_8B, H100, ContinuousOptions(max_num_seqs=1))
    >>> [round(x * 1e3, 2) for x in r.finish_s.tolist()]   # one seat: batch 1
    [17.05, 34.1]
    """
    return _run(requests, model, gpu, options, efficiency, twin=False, queues=False)


def run_twin(requests: Requests, model: ModelSpec, gpu: GpuSpec, options: ContinuousOptions | None = None,
              *, efficiency: Efficiency = DEFAULT_EFFICIENCY, queues: bool = False) -> SimResult:
    """:func:`run_continuous` on the per-step twin (``rust/src/sim/continuous/per_step.rs``),
    which every faster loop is held equal to, bit for bit, with any mix of features: for tests,
    benchmarks and ``servelab trace`` (``queues=True`` records the queues after every step into
    ``step_queues``), not for students.

    >>> from servelab.hw_model import LLAMA3_8B, H100
    >>> reqs = Requests(arrival_s=[0.0, 0.0], prompt_len=[512, 512], output_len=[2, 2])
    >>> o = ContinuousOptions(max_num_seqs=1)
    >>> run_twin(reqs, LLAMA3_8B, H100, o).finish_s.tolist() == run_continuous(reqs, LLAMA3_8B, H100, o).finish_s.tolist()
    True
    """
    return _run(requests, model, gpu, options, efficiency, twin=True,
                queues=_checks.flag("queues", queues))


def _run(requests: Requests, model: ModelSpec, gpu: GpuSpec, options: ContinuousOptions | None,
         efficiency: Efficiency, *, twin: bool, queues: bool) -> SimResult:
    requests = _check_requests(requests)
    _check_specs(model, gpu, efficiency)
    o = ContinuousOptions() if options is None else _checks.instance(
        "options", options, ContinuousOptions, "a servelab.serving_core.ContinuousOptions")
    n = len(requests)
    blocks = o.pool_blocks(model, gpu)
    check_shared_prefixes(o.shared_prefixes, n)
    if o.speculative is not None:
        o.speculative.acceptance_column(n)  # one rate per request, or one for all
    # the host tier's copy is linear in tokens: its price per token crosses beside the record
    host_s_per_token = kv_host_transfer_s(model, gpu, 1) if o.host_blocks else 0.0
    d = _core.sim_continuous_batching((model, gpu, efficiency), requests, replace(o, num_blocks=blocks),
                                      host_s_per_token, twin, queues)
    params: dict[str, Any] = {"max_num_seqs": o.max_num_seqs, "max_num_batched_tokens": o.max_num_batched_tokens,
                              "block_size": o.block_size, "num_blocks": blocks, "chunked_prefill": o.chunked_prefill}
    if o.prefix_caching:
        params["prefix_caching"] = True
    if o.host_blocks:
        params["host_blocks"], params["host_policy"] = o.host_blocks, o.host_policy
    if o.speculative is not None:
        params["speculative"] = o.speculative
    if any(o.step_extra_s):
        params["step_extra_s"] = o.step_extra_s
    return _result("continuous", params, requests, model, gpu, efficiency, d)
