"""The runs ``servelab trace`` records: the simulator on demo 03's chat workload, or the engine on
tiny_llm with real tokens. Both go through :class:`~servelab.trace.record.StepRecorder`.

The simulator run is the Python twin of the Rust core (:mod:`servelab.reference.continuous`,
held equal to it batch for batch); its batches are checked once more against the Rust
simulator's batch log of the same run, so the page shows what ``servelab sweep`` computes.

>>> t = simulate_chat(n=6, rate=4.0, num_blocks=256)
>>> len(t.requests), t.steps[0].kinds
(6, ('prefill',))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servelab import _checks, hw_model, lecture
from servelab.trace.record import StepRecorder, Trace
from servelab.workload import chat_requests

__all__ = ["simulate_chat", "engine_chat", "MAX_SIM_REQUESTS", "MAX_ENGINE_REQUESTS",
           "SIM_DEFAULTS", "ENGINE_DEFAULTS"]

# a page draws every step: a few hundred requests of demo 03 make some thousand steps
MAX_SIM_REQUESTS = 400
MAX_ENGINE_REQUESTS = 64  # tiny_llm computes every token in numpy

# demo 03's workload (§4.5) at a rate past what 64 requests' KV fits in 1,024 blocks: batching,
# a queue and preemptions all show within 80 requests
SIM_DEFAULTS = dict(n=80, rate=24.0, num_blocks=1024, max_num_seqs=lecture.CONTINUOUS["max_num_seqs"],
                    max_num_batched_tokens=lecture.CONTINUOUS["max_num_batched_tokens"],
                    block_size=lecture.CONTINUOUS["block_size"])
# the engine's tiny pool (demo paged's sizes, smaller): 16 chat-shaped requests overflow it
ENGINE_DEFAULTS = dict(n=16, rate=60.0, num_blocks=20, max_num_seqs=8, max_num_batched_tokens=256,
                       block_size=8)

_QUESTIONS = ("Why does a decode step read every weight once? ", "What is a KV block? ",
              "When is a request preempted? ", "How long is the first token? ",
              "What does the token budget cap? ", "Which request waits longest? ")
_SYSTEM = "You are a helpful assistant for the servelab course. Answer briefly. "


def simulate_chat(*, n: int = SIM_DEFAULTS["n"], rate: float = SIM_DEFAULTS["rate"],
                  seed: int = lecture.SEED, model: hw_model.ModelSpec = lecture.MODEL,
                  gpu: hw_model.GpuSpec = lecture.GPU, num_blocks: int = SIM_DEFAULTS["num_blocks"],
                  max_num_seqs: int = SIM_DEFAULTS["max_num_seqs"],
                  max_num_batched_tokens: int = SIM_DEFAULTS["max_num_batched_tokens"],
                  block_size: int = SIM_DEFAULTS["block_size"], chunked_prefill: bool = False,
                  efficiency: hw_model.Efficiency = hw_model.DEFAULT_EFFICIENCY) -> Trace:
    """``n`` of demo 03's chat requests (§4.5) at ``rate`` req/s through continuous batching."""
    from servelab.reference.continuous import run_continuous_batching as twin
    from servelab.serving_core import run_continuous_batching

    n = _checks.integer("n", n, 1, MAX_SIM_REQUESTS)
    rate = _checks.positive("rate", rate)
    requests = chat_requests(n, rate, seed)
    limits = dict(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                  block_size=block_size, num_blocks=num_blocks, chunked_prefill=chunked_prefill)
    fast = run_continuous_batching(requests, model, gpu, efficiency=efficiency, batch_log=True,
                                   **limits)  # checks every limit, names a bad one
    rec = StepRecorder(num_blocks=num_blocks, block_size=block_size,
                       token_budget=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                       model=model.name, gpu=gpu.name, rate=rate, seed=seed,
                       chunked_prefill=chunked_prefill, prefix_caching=False)
    twin(requests, model, gpu, efficiency, recorder=rec, **limits)
    trace = rec.trace("simulator")
    if [list(s.batch) for s in trace.steps] != fast.batch_log.to_list():
        raise RuntimeError("the Python twin's batches differ from the Rust simulator's on this "
                           "run: tests/test_sim_continuous.py should have caught it")
    return trace


def _prompt(i: int, length: int, shared: bool) -> list[int]:
    text = (_SYSTEM if shared else "") + _QUESTIONS[i % len(_QUESTIONS)] * 8
    return list(text.encode("ascii"))[:max(length, len(_SYSTEM) + 8 if shared else 1)]


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
    texts = {r.request_id: decode(r.tokens) for r in result.requests}
    trace = engine.recorder.trace("engine", texts)
    for r in trace.requests:
        r.prompt_text = decode(prompts[r.request_id])
    return trace
