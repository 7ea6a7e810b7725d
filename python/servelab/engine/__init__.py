"""A continuous-batching engine on tiny_llm, with paged KV blocks (lecture §2.4, §3.5, §8).

Orca's iteration-level scheduling picks the batch anew at every step; vLLM's PagedAttention
takes KV memory a block at a time (:class:`servelab.blocks.BlockAllocator` keeps the books,
:class:`servelab.tiny_llm.paged.PagedKVPool` holds the data). Every request gets exactly the
tokens ``tiny_llm.generate`` gives it alone (§6.5: samplers are seeded by ``(seed, output
index)``). The tokens are real; the time is paper time, each batch ``[(new_tokens,
context_len), ...]`` priced by ``hw_model.step_cost`` (default Llama-3-8B on an H100, §8.3).

- :mod:`servelab.engine.scheduler`: ``schedule(state) -> Plan``, and the rules, numbered once;
- :mod:`servelab.engine.speculative`: :class:`SpeculativeScheduler`, a draft guesses and the
  target verifies (§8, milestone 4a): ``Engine(scheduler=SpeculativeScheduler(draft, k))``;
- :mod:`servelab.engine.offload`: the host tier's KV data and its step hook (§8, milestone 4b);
- :mod:`servelab.engine.core`: :class:`Engine` carries plans out, knowing no feature (a
  feature is a scheduler, a plan's verify step or a step hook); :func:`serve`;
- :mod:`servelab.engine.records`: what goes in and comes out. ``EngineResult.batch_log()``
  is the plain record to compare: one list per step of ``(request_id, new_tokens, context_len)``.

>>> from servelab.tiny_llm import generate
>>> res = serve([Request(list(b"hello"), 4), Request(list(b"hello world"), 3, arrival_step=1)],
...             num_blocks=16, block_size=4)
>>> res.batch_log()
[[(0, 5, 0)], [(0, 1, 5), (1, 11, 0)], [(0, 1, 6), (1, 1, 11)], [(0, 1, 7), (1, 1, 12)]]
>>> res.requests[1].tokens == generate(list(b"hello world"), 3).tokens
True
>>> round(res.requests[0].ttft_s * 1e3, 2), res.requests[1].status
(6.1, 'finished')
"""

from servelab.engine import core as _core_loop
from servelab.engine.core import Engine, serve
from servelab.engine.offload import HostTierHook as _HostTier
from servelab.engine.records import (BatchEntry, EngineResult, EngineStep, Request,
                                     RequestResult)
from servelab.engine.scheduler import (ContinuousBatchingScheduler, Plan, Scheduler,
                                       SchedulerConfig, SchedulerState, Seq, schedule)
from servelab.engine.speculative import SpeculativeScheduler

# the features that add a step hook to the engine loop (servelab.engine.core.STEP_HOOKS)
if _HostTier.for_engine not in _core_loop.STEP_HOOKS:
    _core_loop.STEP_HOOKS.append(_HostTier.for_engine)

__all__ = ["Engine", "serve", "Request", "RequestResult", "EngineStep", "EngineResult",
           "BatchEntry", "Scheduler", "SchedulerState", "SchedulerConfig", "Seq", "Plan",
           "ContinuousBatchingScheduler", "schedule", "SpeculativeScheduler"]
