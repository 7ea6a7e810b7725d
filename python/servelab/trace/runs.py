"""The runs ``servelab trace`` records: the simulator on demo 03's chat workload, or the engine on
tiny_llm with real tokens. Both go through :class:`~servelab.trace.record.StepRecorder`.

The simulator run is the Rust core's per-step twin, asked for its queues after each step
(``rust/src/sim/continuous/trace.rs``), with any mix of chunked prefill, prefix caching, a host
tier and speculation; the faster loops that ``servelab sweep`` runs are held bit for bit equal
to it, so the page shows the sweep's run. (The Python twin,
:mod:`servelab.reference.continuous`, takes the same recorder: ``tests/test_trace.py`` holds the
two traces equal.)

>>> t = simulate_chat(n=6, rate=4.0, num_blocks=256)
>>> len(t.requests), t.steps[0].kinds
(6, ('prefill',))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servelab import _checks, hw_model, lecture
from servelab.trace.record import StepRecorder, Trace
from servelab.continuous_options import Speculation
from servelab.workload import Requests, SharedPrefixes, chat_requests, chat_sessions

__all__ = ["simulate_chat", "simulate", "engine_chat", "MAX_SIM_REQUESTS", "MAX_ENGINE_REQUESTS",
           "SIM_DEFAULTS", "ENGINE_DEFAULTS"]

# a page draws every step: a few hundred requests of demo 03 make some thousand steps
MAX_SIM_REQUESTS = 400
MAX_ENGINE_REQUESTS = 64  # tiny_llm computes every token in numpy

# demo 03's workload (§4.5) at a rate past what 64 requests' KV fits in 1,024 blocks: batching,
# a queue and preemptions all show within 80 requests
SIM_DEFAULTS: dict[str, Any] = dict(n=80, rate=24.0, num_blocks=1024, max_num_seqs=lecture.CONTINUOUS["max_num_seqs"],
                    max_num_batched_tokens=lecture.CONTINUOUS["max_num_batched_tokens"],
                    block_size=lecture.CONTINUOUS["block_size"])
# the engine's tiny pool (demo paged's sizes, smaller): 16 chat-shaped requests overflow it
ENGINE_DEFAULTS: dict[str, Any] = dict(n=16, rate=60.0, num_blocks=20, max_num_seqs=8, max_num_batched_tokens=256,
                       block_size=8)

_QUESTIONS = ("Why does a decode step read every weight once? ", "What is a KV block? ",
              "When is a request preempted? ", "How long is the first token? ",
              "What does the token budget cap? ", "Which request waits longest? ")
_SYSTEM = "System: servelab's tutor, brief\n"  # 32 bytes: 4 whole blocks of 8, shared
SYSTEM_LEN = 256  # the simulator's shared system prompts with prefix caching: 16 blocks of 16


def simulate_chat(*, n: int = SIM_DEFAULTS["n"], rate: float = SIM_DEFAULTS["rate"],
                  seed: int = lecture.SEED, model: hw_model.ModelSpec = lecture.MODEL,
                  gpu: hw_model.GpuSpec = lecture.GPU, num_blocks: int = SIM_DEFAULTS["num_blocks"],
                  max_num_seqs: int = SIM_DEFAULTS["max_num_seqs"],
                  max_num_batched_tokens: int = SIM_DEFAULTS["max_num_batched_tokens"],
                  block_size: int = SIM_DEFAULTS["block_size"], chunked_prefill: bool = False,
                  efficiency: hw_model.Efficiency = hw_model.DEFAULT_EFFICIENCY,
                  prefix_caching: bool = False, host_blocks: int = 0,
                  speculative: Speculation | None = None) -> Trace:
    """``n`` of demo 03's chat requests (§4.5) at ``rate`` req/s through continuous batching, on
    the Rust simulator's per-step twin with its queues recorded (``serving_core.run_twin``; the
    faster loops make the same run bit for bit), read step by step into the recorder.

    With ``prefix_caching`` the requests are chats that open with one of four shared system
    prompts of ``SYSTEM_LEN`` tokens (:func:`~servelab.workload.chat_sessions`, single turns),
    so their blocks are shared (§3.5); ``host_blocks`` adds a host tier; ``speculative`` (a
    :class:`~servelab.continuous_options.Speculation`) lets decoders keep guesses (§8)."""
    n = _checks.integer("n", n, 1, MAX_SIM_REQUESTS)
    rate = _checks.positive("rate", rate)
    shared = None
    if _checks.flag("prefix_caching", prefix_caching):
        requests, shared = chat_sessions(n, rate, seed, system_len=SYSTEM_LEN)
    else:
        requests = chat_requests(n, rate, seed)
    return simulate(requests, model=model, gpu=gpu, num_blocks=num_blocks,
                    max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                    block_size=block_size, chunked_prefill=chunked_prefill, efficiency=efficiency,
                    prefix_caching=prefix_caching, shared_prefixes=shared, host_blocks=host_blocks,
                    speculative=speculative, rate=rate, seed=seed)


def simulate(requests: Requests, *, model: hw_model.ModelSpec, gpu: hw_model.GpuSpec,
             num_blocks: int, max_num_seqs: int, max_num_batched_tokens: int, block_size: int,
             chunked_prefill: bool = False,
             efficiency: hw_model.Efficiency = hw_model.DEFAULT_EFFICIENCY,
             prefix_caching: bool = False, shared_prefixes: SharedPrefixes | None = None,
             host_blocks: int = 0, speculative: Speculation | None = None,
             **about: Any) -> Trace:
    """Any :class:`~servelab.workload.Requests` as :func:`simulate_chat` runs its own, with any
    mix of the simulator's features; ``about`` joins the trace's config (the rate and seed, say)."""
    from servelab.serving_core import ContinuousOptions, run_twin

    options = ContinuousOptions(max_num_seqs, max_num_batched_tokens, block_size, num_blocks, chunked_prefill,
                                trace=True, batch_log=True, prefix_caching=prefix_caching,
                                shared_prefixes=shared_prefixes, host_blocks=host_blocks,
                                speculative=speculative)
    res = run_twin(requests, model, gpu, options, efficiency=efficiency, queues=True)
    if speculative is not None:
        about = dict(about, speculative_k=speculative.k)
    rec = StepRecorder(num_blocks=num_blocks, block_size=block_size,
                       token_budget=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                       host_blocks=host_blocks, model=model.name, gpu=gpu.name,
                       chunked_prefill=chunked_prefill, prefix_caching=prefix_caching, **about)
    for i, (p, o, a) in enumerate(zip(requests.prompt_len.tolist(), requests.output_len.tolist(),
                                      requests.arrival_s.tolist())):
        rec.add_request(i, p, o, a)
        if res.rejected[i]:
            rec.unservable(i)
    _read_steps(rec, res, requests.output_len.tolist())
    return rec.trace("simulator")


def _read_steps(rec: StepRecorder, res: Any, output_len: list[int]) -> None:
    """The Rust run's steps into the recorder: the batch log, the step trace, the queues. Who
    was admitted, preempted or finished follows from the queues of two steps in a row: an entry
    not running before the step was admitted (rule 4); a request running before and waiting
    after was preempted (rule 3, newest first); one in the batch that neither runs nor waits
    after the step finished (rule 6). The tokens an entry sampled are the difference of its
    counts before and after (several where speculation kept guesses)."""
    q, log, tr = res.step_queues, res.batch_log, res.trace
    cols = {k: v.tolist() for k, v in q.items()}
    batch_ids, new, ctx, offs = (log.request_id.tolist(), log.new_tokens.tolist(),
                                 log.context_len.tolist(), log.offsets.tolist())
    before: list[int] = []
    generated: dict[int, int] = {}  # output tokens sampled, as last seen
    for s in range(len(offs) - 1):
        ids = batch_ids[offs[s]:offs[s + 1]]
        w0, w1 = cols["waiting_offsets"][s], cols["waiting_offsets"][s + 1]
        r0, r1 = cols["running_offsets"][s], cols["running_offsets"][s + 1]
        waiting, running = cols["waiting"][w0:w1], cols["running"][r0:r1]
        after = dict(zip(running, cols["running_generated"][r0:r1]))
        still, queued, was = set(running), set(waiting), set(before)
        finished = [r for r in ids if r not in still and r not in queued]
        done = {r: output_len[r] for r in finished}
        sampled = {r: after.get(r, done.get(r, 0)) - generated.get(r, 0) for r in ids}
        rec.record(s, float(tr.start_s[s]), float(tr.step_s[s]),
                   zip(ids, new[offs[s]:offs[s + 1]], ctx[offs[s]:offs[s + 1]]),
                   admitted=[r for r in ids if r not in was],
                   preempted=[r for r in reversed(before) if r in queued],
                   finished=finished, waiting=waiting, running=running, blocks_used=int(tr.kv_blocks[s]),
                   kv={r: (b, 0) for r, b in zip(running, cols["running_blocks"][r0:r1])},
                   sampled=sampled)
        generated.update(after)
        generated.update(done)
        before = running


def _prompt(i: int, length: int, shared: bool) -> list[int]:
    """``length`` bytes of questions, after the one system prompt when ``shared``."""
    question = (_QUESTIONS[i % len(_QUESTIONS)] * 8)[:max(length, 1)]
    return list(((_SYSTEM if shared else "") + question).encode("ascii"))


def engine_chat(*, n: int = ENGINE_DEFAULTS["n"], rate: float = ENGINE_DEFAULTS["rate"],
                seed: int = lecture.SEED, model: hw_model.ModelSpec = lecture.MODEL,
                gpu: hw_model.GpuSpec = lecture.GPU, num_blocks: int = ENGINE_DEFAULTS["num_blocks"],
                max_num_seqs: int = ENGINE_DEFAULTS["max_num_seqs"],
                max_num_batched_tokens: int = ENGINE_DEFAULTS["max_num_batched_tokens"],
                block_size: int = ENGINE_DEFAULTS["block_size"], chunked_prefill: bool = False,
                prefix_caching: bool = False, host_blocks: int = 0) -> Trace:
    """``n`` chat-shaped requests scaled to tiny_llm (demo paged's mix: prompts of mean 40 bytes
    of text, outputs of mean 20) arriving at ``rate`` req/s on the simulated clock, served by
    the engine with real tokens; each step priced as ``model`` on ``gpu``. ``prefix_caching``
    starts every prompt with one system prompt, so its blocks are shared."""
    from servelab.engine import Engine
    from servelab.tiny_llm import Temperature, decode

    n = _checks.integer("n", n, 1, MAX_ENGINE_REQUESTS)
    rate = _checks.positive("rate", rate)
    mix = chat_requests(n, rate, seed, prompt_mean=40, output_mean=20, max_len=120)
    engine = Engine(num_blocks=num_blocks, block_size=block_size, max_num_seqs=max_num_seqs,
                    max_num_batched_tokens=max_num_batched_tokens, chunked_prefill=chunked_prefill,
                    prefix_caching=prefix_caching, cost_model=model, gpu=gpu,
                    host_blocks=host_blocks)
    engine.recorder = StepRecorder(num_blocks=num_blocks, block_size=block_size,
                                   token_budget=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                   host_blocks=host_blocks, model=model.name, gpu=gpu.name,
                                   rate=rate, seed=seed, chunked_prefill=chunked_prefill,
                                   prefix_caching=prefix_caching, tiny_llm="TINY")
    rng = np.random.default_rng(seed)
    prompts = []
    for i, (p, m, a) in enumerate(zip(mix.prompt_len.tolist(), mix.output_len.tolist(),
                                      mix.arrival_s.tolist())):
        prompts.append(_prompt(i, int(p), prefix_caching))
        engine.add_request(prompts[-1], int(m),
                           Temperature(0.9, seed=int(rng.integers(1 << 31))), arrival_s=float(a))
    result = engine.run()
    texts = {r.request_id: decode(r.tokens) for r in result.requests if r.tokens}
    trace = engine.recorder.trace("engine", texts)
    for r in trace.requests:
        r.prompt_text = decode(prompts[r.request_id])
    return trace
