"""Junk in, a named error out: every public function of the library, fed random
junk for one argument at a time (wrong types, NaN, inf, negatives, huge ints, numpy scalars of
every dtype, strings, None, odd containers), either works or raises ``TypeError``,
``ValueError`` or ``OverflowError`` whose message names that argument. Never a Rust panic
(pyo3's ``PanicException`` is a ``BaseException``), an ``AttributeError`` from deep inside, a
bare ``MemoryError``, a hang (every baseline is tiny), or a wrong number: when a numpy scalar is
accepted, the result equals the result for the same value as a Python number.

The functions are enumerated from each module's ``__all__`` (and the public methods of every
class constructed here), so a new public function fails :func:`test_every_public_name_is_covered`
until it gets a baseline call below.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab import (admission, blocks, engine, events, fixed_service, hw_model, metrics,
                      parallel_sim, serving_core, tiny_llm, workload)
from servelab.tiny_llm import cache as tl_cache
from servelab.tiny_llm import paged as tl_paged

MODULES = (hw_model, serving_core, blocks, events, metrics, workload, admission, fixed_service,
           engine, tiny_llm, parallel_sim)
ALLOWED = (TypeError, ValueError, OverflowError)

# ---- small valid inputs ------------------------------------------------------------------------

M, G = hw_model.LLAMA3_8B, hw_model.H100
REQS = workload.Requests([0.0, 0.1], [8, 4], [3, 2])
SIM = serving_core.run_batch1(REQS, M, G, trace=True)
SIM_ADM = serving_core.run_batch1(REQS, M, G, admission.EarlyReject(1.0, "oracle"))
SIM_CB = serving_core.run_continuous_batching(REQS, M, G, num_blocks=64, batch_log=True)
FIX = fixed_service.run_fixed_service([0.0, 0.0, 0.5], 0.01, 0.015)
SLO = metrics.SLO(1.0, 0.05)
TINY = tiny_llm.TINY
LOGITS = np.linspace(-1.0, 1.0, TINY.vocab_size)


SCHED_CFG = {"block_size": 2, "num_blocks": 4, "max_num_seqs": 2, "max_num_batched_tokens": 8,
             "chunked_prefill": False, "prefix_caching": False}
# nothing waits or runs: the plan is empty and the allocator is never touched
SCHED_STATE_ARGS = {"step": 0, "waiting": [], "running": [], "free_blocks": 4,
                    "config": engine.SchedulerConfig(**SCHED_CFG)}


def allocator() -> blocks.BlockAllocator:
    a = blocks.BlockAllocator(8, 4, prefix_caching=True)
    a.allocate(0, [1, 2, 3, 4, 5])
    return a


def paged_cache() -> tl_paged.PagedKVCache:
    a = blocks.BlockAllocator(8, 4)
    a.allocate(0, [1, 2, 3])
    return tl_paged.PagedKVCache(tl_paged.PagedKVPool(TINY, 8, 4), a, 0)


def queue() -> events.EventQueue:
    q: events.EventQueue[str] = events.EventQueue()
    q.push(1.0, "a")
    return q


@dataclass(frozen=True)
class Case:
    """``make()`` returns the function (a fresh bound method for stateful objects); ``args`` are
    keyword arguments that work. ``also``: further documented exceptions (a ``KeyError`` for an
    unknown sequence id)."""

    name: str
    make: Callable[[], Callable[..., Any]]
    args: dict[str, Any] = field(default_factory=dict)
    also: tuple[type[BaseException], ...] = ()
    # other words that name the argument: a replayed trace's error names its op ("op 3: ...")
    aliases: tuple[str, ...] = ()


def fn(f: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    return lambda: f


CASES = [
    # hw_model (§3)
    Case("hw_model.ModelSpec", fn(hw_model.ModelSpec), {f.name: getattr(M, f.name) for f in dataclasses.fields(M)}),
    Case("hw_model.GpuSpec", fn(hw_model.GpuSpec), {f.name: getattr(G, f.name) for f in dataclasses.fields(G)}),
    Case("hw_model.Efficiency", fn(hw_model.Efficiency), {"compute": 0.7, "bandwidth": 0.8, "overhead_s": 5e-4}),
    Case("hw_model.step_cost", fn(hw_model.step_cost), {"model": M, "gpu": G, "batch": [(4, 8), (1, 100)]}),
    Case("hw_model.step_cost_many", fn(hw_model.step_cost_many),
         {"model": M, "gpu": G, "new_tokens": [4, 1], "context_len": [0, 9], "offsets": [0, 1, 2]}),
    Case("hw_model.decode_step_cost", fn(hw_model.decode_step_cost),
         {"model": M, "gpu": G, "batch_size": 4, "context_len": 100}),
    Case("hw_model.decode_step_costs", fn(hw_model.decode_step_costs),
         {"model": M, "gpu": G, "batch_size": [1, 4], "context_len": [10, 100], "new_tokens": [1, 2]}),
    Case("hw_model.prefill_cost", fn(hw_model.prefill_cost), {"model": M, "gpu": G, "prompt_len": 64}),
    Case("hw_model.kv_capacity_tokens", fn(hw_model.kv_capacity_tokens), {"model": M, "gpu": G, "mem_util": 0.9}),
    Case("hw_model.max_batch", fn(hw_model.max_batch), {"model": M, "gpu": G, "context_len": 1024, "mem_util": 0.9}),
    Case("hw_model.weight_read_lower_bound_s", fn(hw_model.weight_read_lower_bound_s), {"model": M, "gpu": G}),
    Case("hw_model.price_constants", fn(hw_model.price_constants), {"model": M, "gpu": G}),
    Case("hw_model.check_tp", fn(hw_model.check_tp), {"model": M, "gpu": G, "tp": 2}),
    Case("hw_model.allreduce_s", fn(hw_model.allreduce_s), {"gpu": G, "tp": 2, "n_bytes": 1e6}),
    Case("hw_model.tensor_parallel_cost", fn(hw_model.tensor_parallel_cost),
         {"whole": hw_model.step_cost(M, G, [(1, 10)]), "model": M, "gpu": G,
          "efficiency": hw_model.DEFAULT_EFFICIENCY, "tp": 2}),
    Case("hw_model.kv_host_transfer_s", fn(hw_model.kv_host_transfer_s),
         {"model": M, "gpu": G, "n_tokens": 1024}),
    Case("hw_model.fewest_cards", fn(hw_model.fewest_cards),
         {"model": hw_model.LLAMA3_70B, "gpu": G, "context_len": 1024, "mem_util": 0.9, "max_tp": 8}),
    Case("hw_model.Link", fn(hw_model.Link), {"name": "l", "bandwidth": 1e9, "latency_s": 1e-6}),
    Case("hw_model.kv_transfer_s", fn(hw_model.kv_transfer_s), {"model": M, "tokens": 512, "link": hw_model.NETWORK_400G}),
    Case("hw_model.Measurement", fn(hw_model.Measurement),
         {"model": M, "gpu": G, "batch": [(1, 100), (1, 50)], "time_s": 8e-3, "tp": 2, "source": "s", "notes": "n"}),
    Case("hw_model.Measurement.uniform", fn(hw_model.Measurement.uniform),
         {"model": M, "gpu": G, "batch_size": 2, "new_tokens": 1, "context_len": 100, "time_s": 8e-3, "tp": 1,
          "source": "s", "notes": "n"}),
    Case("hw_model.calibrate", fn(hw_model.calibrate),
         {"measurements": hw_model.MEASURED[:3], "fit": ("bandwidth", "overhead_s"), "start": hw_model.DEFAULT_EFFICIENCY}),
    # workload (§4.5)
    Case("workload.Requests", fn(workload.Requests), {"arrival_s": [0.0, 1.0], "prompt_len": [3, 4], "output_len": [2, 1]}),
    Case("workload.Requests.with_arrivals", lambda: REQS.with_arrivals, {"arrival_s": [0.5, 0.6]}),
    Case("workload.Requests.speed_up", lambda: REQS.speed_up, {"factor": 2.0}),
    Case("workload.poisson_arrivals", fn(workload.poisson_arrivals), {"n": 5, "rate": 2.0, "seed": 1}),
    Case("workload.piecewise_poisson_arrivals", fn(workload.piecewise_poisson_arrivals),
         {"breaks_s": [0.0, 1.0, 2.0], "rates": [3.0, 1.0], "seed": 1}),
    Case("workload.lognormal_lengths", fn(workload.lognormal_lengths),
         {"n": 5, "mean": 10.0, "sigma": 0.5, "seed": 1, "max_len": 100}),
    Case("workload.chat_requests", fn(workload.chat_requests), {"n": 5, "rate": 1.0, "seed": 2}),
    Case("workload.SharedPrefixes", fn(workload.SharedPrefixes), {"parent": [-1, 0], "length": [0, 3]}),
    Case("workload.SharedPrefixes.none", fn(workload.SharedPrefixes.none), {"n": 3}),
    Case("workload.check_shared_prefixes", fn(workload.check_shared_prefixes),
         {"shared_prefixes": workload.SharedPrefixes([-1, 0], [0, 3]), "n_requests": 2}),
    Case("workload.chat_sessions", fn(workload.chat_sessions),
         {"n": 3, "rate": 1.0, "seed": 2, "system_len": 32, "n_system_prompts": 2, "shared_fraction": 0.5,
          "turns_mean": 2.0, "think_s": 5.0, "user_mean": 16, "output_mean": 8, "sigma": 0.5, "max_len": 512}),
    Case("workload.azure_trace", fn(workload.azure_trace), {"kind": "code", "limit": 5}),
    # load_trace_csv reads a file: its path is fed only non-strings (see JUNK_FOR)
    Case("workload.load_trace_csv", fn(workload.load_trace_csv), {"path": workload.__file__.replace(
        "workload.py", "data/azure_llm_2023/AzureLLMInferenceTrace_code.csv"), "limit": 3}),
    # admission (§5.3)
    Case("admission.MeanLength", fn(admission.MeanLength), {"mean": 10.0}),
    Case("admission.MeanLength.predict", lambda: admission.MeanLength().predict, {"requests": REQS}),
    Case("admission.Oracle.predict", lambda: admission.Oracle().predict, {"requests": REQS}),
    Case("admission.NoisyPredictor", fn(admission.NoisyPredictor), {"sigma": 0.5, "seed": 3}),
    Case("admission.NoisyPredictor.predict", lambda: admission.NoisyPredictor(0.5).predict, {"requests": REQS}),
    Case("admission.PredictedLengths", fn(admission.PredictedLengths), {"values": [3.0, 2.0]}),
    Case("admission.PredictedLengths.predict", lambda: admission.PredictedLengths([3.0, 2.0]).predict,
         {"requests": REQS}),
    Case("admission.EarlyReject", fn(admission.EarlyReject), {"slo_ttft_s": 1.0, "estimator": "mean"}),
    Case("admission.EarlyReject.predicted_len", lambda: admission.EarlyReject(1.0).predicted_len,
         {"requests": REQS}),
    Case("admission.admission_report", fn(admission.admission_report), {"result": SIM_ADM, "slo_ttft_s": 1.0}),
    # serving_core (§4.5)
    Case("serving_core.run_batch1", fn(serving_core.run_batch1),
         {"requests": REQS, "model": M, "gpu": G, "admission": None, "trace": False}),
    Case("serving_core.run_static_batching", fn(serving_core.run_static_batching),
         {"requests": REQS, "model": M, "gpu": G, "batch_size": 2, "max_wait_s": 0.1, "ride_along": True}),
    Case("serving_core.Speculation", fn(serving_core.Speculation),
         {"k": 2, "draft": M, "acceptance": 0.5, "seed": 0}),
    Case("serving_core.Speculation.acceptance_column",
         lambda: serving_core.Speculation(2, M, [0.5, 0.9]).acceptance_column, {"n": 2}),
    Case("serving_core.run_continuous_batching", fn(serving_core.run_continuous_batching),
         {"requests": REQS, "model": M, "gpu": G, "max_num_seqs": 4, "max_num_batched_tokens": 64,
          "block_size": 4, "num_blocks": 16, "chunked_prefill": True, "prefix_caching": True,
          "shared_prefixes": workload.SharedPrefixes([-1, 0], [0, 4])}),
    Case("serving_core.ContinuousOptions", fn(serving_core.ContinuousOptions),
         {"max_num_seqs": 4, "max_num_batched_tokens": 64, "block_size": 4, "num_blocks": 16, "chunked_prefill": True,
          "prefix_caching": True, "shared_prefixes": workload.SharedPrefixes([-1, 0], [0, 4]), "host_blocks": 4}),
    Case("serving_core.ContinuousOptions.pool_blocks", lambda: serving_core.ContinuousOptions().pool_blocks,
         {"model": M, "gpu": G}),
    Case("serving_core.run_continuous", fn(serving_core.run_continuous),
         {"requests": REQS, "model": M, "gpu": G, "options": serving_core.ContinuousOptions(
             max_num_seqs=4, max_num_batched_tokens=64, block_size=4, num_blocks=16, prefix_caching=True,
             shared_prefixes=workload.SharedPrefixes([-1, 0], [0, 4]))}),
    Case("serving_core.SimResult.reject_reason", lambda: SIM_CB.reject_reason, {"i": 1}),
    Case("serving_core.BatchLog.step", lambda: SIM_CB.batch_log.step, {"s": 0}),
    # parallel_sim (§8.1: data parallelism; milestone 4: disaggregation)
    Case("parallel_sim.run_data_parallel", fn(parallel_sim.run_data_parallel),
         {"requests": REQS, "model": M, "gpu": G, "n_replicas": 2, "router": "least_tokens", "max_num_seqs": 4,
          "max_num_batched_tokens": 64, "block_size": 4, "num_blocks": 16, "chunked_prefill": True}),
    Case("parallel_sim.run_data_parallel[prefix caching]", fn(parallel_sim.run_data_parallel),
         {"requests": REQS, "model": M, "gpu": G, "n_replicas": 2, "router": "prefix_affinity", "max_num_seqs": 4,
          "max_num_batched_tokens": 64, "block_size": 4, "num_blocks": 16, "chunked_prefill": True,
          "prefix_caching": True, "shared_prefixes": workload.SharedPrefixes([-1, 0], [0, 4])}),
    Case("parallel_sim.run_disaggregated", fn(parallel_sim.run_disaggregated),
         {"requests": REQS, "model": M, "gpu": G, "n_prefill": 1, "n_decode": 2, "link": hw_model.NVLINK_H100,
          "router": "least_tokens", "max_num_seqs": 4, "max_num_batched_tokens": 64, "block_size": 4,
          "num_blocks": 16, "chunked_prefill": False}),
    Case("parallel_sim.ParallelResult.replica",
         lambda: parallel_sim.run_data_parallel(REQS, M, G, 2, num_blocks=16).replica, {"k": 1}),
    # metrics (§4)
    *[Case(f"metrics.{n}", fn(getattr(metrics, n)), {"r": SIM})
      for n in ("ttft", "tpot", "itl", "e2e", "span_s", "throughput_tok_s", "throughput_req_s",
                "utilisation", "seat_waste", "mfu")],
    *[Case(f"metrics.{n}", fn(getattr(metrics, n)), {"r": SIM, "slo": SLO})
      for n in ("meets_slo", "attainment", "goodput")],
    Case("metrics.SLO", fn(metrics.SLO), {"ttft_s": 1.0, "tpot_s": 0.05}),
    Case("metrics.percentiles", fn(metrics.percentiles), {"x": [1.0, 2.0, 3.0]}),
    Case("metrics.cost_per_million_tokens", fn(metrics.cost_per_million_tokens), {"r": SIM, "usd_per_gpu_hour": 3.0}),
    Case("metrics.summarize", fn(metrics.summarize), {"r": SIM, "slo": SLO, "usd_per_gpu_hour": 3.0}),
    Case("metrics.max_rate_at_attainment", fn(metrics.max_rate_at_attainment),
         {"simulate": lambda rate: SIM, "slo": SLO, "target": 0.9, "rates": [0.1, 0.2], "refine": 1}),
    # fixed_service (§5.1)
    Case("fixed_service.run_fixed_service", fn(fixed_service.run_fixed_service),
         {"arrival_s": [0.0, 0.001], "service_s": 0.01, "slo_s": 0.05}),
    Case("fixed_service.burst_arrivals", fn(fixed_service.burst_arrivals),
         {"base_rate": 2.0, "burst_rate": 5.0, "burst_s": (1.0, 2.0), "duration_s": 3.0, "seed": 1}),
    Case("fixed_service.FixedServiceResult.on_time", lambda: FIX.on_time, {"slo_s": 0.02}),
    Case("fixed_service.FixedServiceResult.attainment", lambda: FIX.attainment, {"slo_s": 0.02}),
    Case("fixed_service.FixedServiceResult.wasted_busy_share", lambda: FIX.wasted_busy_share, {"slo_s": 0.02}),
    # events (§4.5)
    Case("events.EventQueue.push", lambda: queue().push, {"time_s": 2.0, "payload": "x"}),
    # blocks (§2.4)
    Case("blocks.block_key", fn(blocks.block_key), {"parent_key": blocks.ROOT_KEY, "token_ids": [1, 2, 3, 4]}),
    Case("blocks.BlockAllocator", fn(blocks.BlockAllocator), {"num_blocks": 8, "block_size": 4, "prefix_caching": True,
                                                             "host_blocks": 2, "host_policy": "hits"}),
    Case("blocks.BlockAllocator.allocate", lambda: allocator().allocate,
         {"seq_id": 1, "token_ids": [1, 2, 3, 4, 9], "num_computed": 0}, also=(KeyError, blocks.OutOfBlocks)),
    Case("blocks.BlockAllocator.mark_computed", lambda: allocator().mark_computed,
         {"seq_id": 0, "num_computed": 4}, also=(KeyError,)),
    Case("blocks.BlockAllocator.append", lambda: allocator().append, {"seq_id": 0, "token_id": 6}, also=(KeyError,)),
    Case("blocks.BlockAllocator.append_many", lambda: allocator().append_many, {"seq_ids": [0], "token_ids": [6]},
         also=(KeyError,)),
    Case("blocks.BlockAllocator.free_many", lambda: allocator().free_many, {"seq_ids": [0]}, also=(KeyError,)),
    # the core's KeyError for an unknown parent says "seq_id 5 is not allocated"
    Case("blocks.BlockAllocator.fork", lambda: allocator().fork, {"parent_id": 0, "child_id": 1}, also=(KeyError,),
         aliases=("seq_id",)),
    *[Case(f"blocks.BlockAllocator.{n}", (lambda n=n: getattr(allocator(), n)), {"seq_id": 0}, also=(KeyError,))
      for n in ("free", "block_table", "num_tokens", "num_cached_tokens", "can_append")],
    Case("blocks.BlockAllocator.can_allocate", lambda: allocator().can_allocate, {"n_tokens": 5}),
    Case("blocks.BlockAllocator.block_tokens", lambda: allocator().block_tokens, {"block_id": 0}),
    Case("blocks.BlockAllocator.key_of", lambda: allocator().key_of, {"block_id": 0}),
    Case("blocks.BlockAllocator.replay", lambda: blocks.BlockAllocator(8, 4).replay,
         {"op": np.array([0, 1]), "seq": np.array([0, 0]), "arg": np.array([0, 7]),
          "tokens": np.array([1, 2, 3]), "offsets": np.array([0, 3])}, also=(KeyError,), aliases=("op ",)),
    # tiny_llm (§2)
    Case("tiny_llm.ModelConfig", fn(tiny_llm.ModelConfig),
         {f.name: getattr(TINY, f.name) for f in dataclasses.fields(TINY)}),
    Case("tiny_llm.ModelConfig.check_same", lambda: TINY.check_same, {"other": TINY, "what": "cache"}),
    Case("tiny_llm.TinyLLM", fn(tiny_llm.TinyLLM), {"config": TINY}),
    Case("tiny_llm.TinyLLM.new_cache", lambda: tiny_llm.model_for(TINY).new_cache, {"contiguous": True, "max_len": 32}),
    Case("tiny_llm.TinyLLM.forward", lambda: tiny_llm.model_for(TINY).forward,
         {"token_ids": [1, 2], "cache": None, "all_logits": False}),
    # forward_batch names sequence i "token_ids[i]" (forward's single sequence is "token_ids")
    Case("tiny_llm.TinyLLM.forward_batch", lambda: tiny_llm.model_for(TINY).forward_batch,
         {"batch_token_ids": [[1, 2], [3]], "caches": None, "all_logits": False}, aliases=("token_ids",)),
    Case("tiny_llm.model_for", fn(tiny_llm.model_for), {"config": TINY}),
    Case("tiny_llm.TensorParallelLLM", fn(tiny_llm.TensorParallelLLM), {"config": TINY, "t": 2, "reduction": "ring"}),
    Case("tiny_llm.TensorParallelLLM.new_cache", lambda: tiny_llm.TensorParallelLLM(TINY, 2).new_cache,
         {"contiguous": False, "max_len": 32}),
    Case("tiny_llm.TensorParallelLLM.forward", lambda: tiny_llm.TensorParallelLLM(TINY, 2).forward,
         {"token_ids": [1, 2], "cache": None, "all_logits": False}),
    Case("tiny_llm.TensorParallelLLM.forward_batch", lambda: tiny_llm.TensorParallelLLM(TINY, 2).forward_batch,
         {"batch_token_ids": [[1, 2], [3]], "caches": None, "all_logits": False}, aliases=("token_ids",)),
    Case("tiny_llm.ShardedKVCache", fn(tiny_llm.ShardedKVCache), {"config": TINY, "t": 2, "contiguous": False,
                                                                  "max_len": 32}),
    Case("tiny_llm.ShardedKVCache.reserve", lambda: tiny_llm.ShardedKVCache(TINY, 2).reserve, {"n_new": 2}),
    Case("tiny_llm.ShardedKVCache.commit", lambda: tiny_llm.ShardedKVCache(TINY, 2).commit, {"n_new": 0}),
    # as_token_ids names its argument with `what` (the caller's name for it)
    Case("tiny_llm.as_token_ids", fn(tiny_llm.as_token_ids), {"token_ids": [1, 2], "vocab_size": 256, "what": "prompt"},
         aliases=("prompt",)),
    Case("tiny_llm.KVCache", fn(tiny_llm.KVCache), {"config": TINY, "max_len": 64, "initial_capacity": 4}),
    Case("tiny_llm.ContiguousKVCache", fn(tiny_llm.ContiguousKVCache), {"config": TINY, "max_len": 64}),
    Case("tiny_llm.KVCache.reserve", lambda: tiny_llm.KVCache(TINY).reserve, {"n_new": 2}),
    Case("tiny_llm.KVCache.commit", lambda: tiny_llm.KVCache(TINY).commit, {"n_new": 0}),
    Case("tiny_llm.KVCache.truncate", lambda: tiny_llm.KVCache(TINY).truncate, {"n_tokens": 0}),
    Case("tiny_llm.KVCache.keys", lambda: tiny_llm.KVCache(TINY).keys, {"layer": 1}),
    Case("tiny_llm.KVCache.values", lambda: tiny_llm.KVCache(TINY).values, {"layer": 1}),
    Case("tiny_llm.PagedKVPool", fn(tiny_llm.PagedKVPool), {"config": TINY, "num_blocks": 8, "block_size": 4}),
    Case("tiny_llm.PagedKVPool.copy_block", lambda: tl_paged.PagedKVPool(TINY, 8, 4).copy_block, {"src": 0, "dst": 1}),
    Case("tiny_llm.PagedKVCache", lambda: (lambda num_computed=0: tl_paged.PagedKVCache(
        tl_paged.PagedKVPool(TINY, 8, 4), allocator(), 0, num_computed)), {"num_computed": 2}),
    Case("tiny_llm.PagedKVCache.reserve", lambda: paged_cache().reserve, {"n_new": 3}),
    Case("tiny_llm.PagedKVCache.commit", lambda: paged_cache().commit, {"n_new": 0}),
    Case("tiny_llm.forward_stats", fn(tiny_llm.forward_stats), {"config": TINY, "batch": [(3, 0), (1, 4)], "n_logits": 2}),
    Case("tiny_llm.Temperature", fn(tiny_llm.Temperature), {"temperature": 0.8, "seed": 1}),
    Case("tiny_llm.TopP", fn(tiny_llm.TopP), {"p": 0.9, "temperature": 1.0, "seed": 1}),
    Case("tiny_llm.TopP.nucleus", lambda: tiny_llm.TopP().nucleus, {"logits": LOGITS}),
    *[Case(f"tiny_llm.{n}.__call__", (lambda n=n: getattr(tiny_llm, n)()), {"logits": LOGITS, "step": 3})
      for n in ("Greedy", "Temperature", "TopP")],
    Case("tiny_llm.softmax", fn(tiny_llm.softmax), {"logits": LOGITS, "temperature": 0.5}),
    Case("tiny_llm.generate", fn(tiny_llm.generate),
         {"prompt": [1, 2], "max_new_tokens": 3, "sampler": tiny_llm.GREEDY, "use_cache": True, "stop_token": 7}),
    Case("tiny_llm.forward", fn(tiny_llm.forward), {"token_ids": [1, 2], "cache": None, "all_logits": False}),
    Case("tiny_llm.forward_batch", fn(tiny_llm.forward_batch), {"batch_token_ids": [[1], [2, 3]], "caches": None},
         aliases=("token_ids",)),
    Case("tiny_llm.encode", fn(tiny_llm.encode), {"text": "hi"}),
    Case("tiny_llm.decode", fn(tiny_llm.decode), {"token_ids": [104, 105]}),
    # engine (§8)
    Case("engine.Engine", fn(engine.Engine), {"config": TINY, "num_blocks": 8, "block_size": 4, "max_num_seqs": 2,
                                              "max_num_batched_tokens": 32, "chunked_prefill": True,
                                              "prefix_caching": True, "cost_model": M, "gpu": G,
                                              "host_blocks": 4, "host_policy": "hits"}),
    Case("engine.Engine.add_request", lambda: engine.Engine(num_blocks=8, block_size=4).add_request,
         {"prompt": [1, 2], "max_new_tokens": 2, "sampler": tiny_llm.GREEDY, "arrival_step": 1}),
    Case("engine.Engine.unservable_reason", lambda: engine.Engine(num_blocks=8, block_size=4).unservable_reason,
         {"prompt_len": 2, "max_new_tokens": 2}),
    Case("engine.Request", fn(engine.Request), {"prompt": [1, 2], "max_new_tokens": 2, "arrival_step": 0}),
    Case("engine.serve", fn(engine.serve), {"requests": [engine.Request([1, 2], 2)]}),
    Case("engine.SchedulerConfig", fn(engine.SchedulerConfig), dict(SCHED_CFG)),
    Case("engine.SchedulerConfig.unservable_reason",
         lambda: engine.SchedulerConfig(**SCHED_CFG).unservable_reason, {"prompt_len": 3, "max_new_tokens": 2}),
    Case("engine.Seq", fn(engine.Seq), {"request_id": 0, "tokens": [1, 2], "num_computed": 1, "num_slots": 2}),
    Case("engine.SchedulerState", fn(engine.SchedulerState), {**SCHED_STATE_ARGS, "blocks": None}),
    Case("engine.Plan", fn(engine.Plan), {"batch": ((0, 2, 0),), "preempted": (), "admitted": (0,), "copies": ()}),
    Case("engine.ContinuousBatchingScheduler.schedule", lambda: engine.ContinuousBatchingScheduler().schedule,
         {"state": engine.SchedulerState(**SCHED_STATE_ARGS, blocks=blocks.BlockAllocator(4, 2))}),
    Case("engine.SpeculativeScheduler", fn(engine.SpeculativeScheduler),
         {"draft": tiny_llm.model_for(TINY), "k": 2, "draft_spec": M, "inner": None}),
    Case("engine.SpeculativeScheduler.schedule", lambda: engine.SpeculativeScheduler(tiny_llm.model_for(TINY), 2).schedule,
         {"state": engine.SchedulerState(**SCHED_STATE_ARGS, blocks=blocks.BlockAllocator(4, 2))}),
    Case("engine.schedule", fn(engine.schedule),
         {"state": engine.SchedulerState(**SCHED_STATE_ARGS, blocks=blocks.BlockAllocator(4, 2))}),
]
BY_NAME = {c.name: c for c in CASES}

# Public names that take no input worth junk: results the library builds (and their methods
# without arguments), protocols, constants, and methods without arguments.
NOT_INPUTS = {
    "hw_model.StepCost", "hw_model.StepCosts", "serving_core.SimResult", "serving_core.StepTrace",
    "serving_core.BatchLog", "metrics.Percentiles", "metrics.Summary", "metrics.GoodputSearch",
    "admission.AdmissionReport", "admission.Estimator", "admission.Oracle",
    "fixed_service.FixedServiceResult", "events.EventQueue", "engine.RequestResult",
    "engine.EngineStep", "engine.EngineResult", "tiny_llm.Weights", "tiny_llm.LayerWeights",
    "tiny_llm.ForwardStats", "tiny_llm.Generation", "tiny_llm.StepRecord",
    "tiny_llm.KVCacheProtocol", "tiny_llm.Sampler", "tiny_llm.Greedy",
    "blocks.OutOfBlocks", "engine.BatchEntry", "engine.Scheduler",
    "tiny_llm.GREEDY",  # an instance of Greedy: see tiny_llm.Greedy.__call__
}
# Methods of covered classes fed through another case or needing internal state: update()
# takes arrays shaped by a forward in progress (TinyLLM.forward_batch drives it).
METHODS_NOT_FED = {"tiny_llm.KVCache.update", "tiny_llm.ShardedKVCache.update", "tiny_llm.ContiguousKVCache.update",
                   "tiny_llm.PagedKVCache.update", "tiny_llm.ContiguousKVCache.reserve",
                   "tiny_llm.ContiguousKVCache.commit", "tiny_llm.ContiguousKVCache.truncate",
                   "tiny_llm.ContiguousKVCache.keys", "tiny_llm.ContiguousKVCache.values"}


def public_callables() -> dict[str, Any]:
    out = {}
    for mod in MODULES:
        short = mod.__name__.rsplit(".", 1)[-1]
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) and not isinstance(obj, (dict, str)):
                out[f"{short}.{name}"] = obj
    return out


def methods_with_arguments(cls: type) -> list[str]:
    names = []
    for name, member in inspect.getmembers(cls):
        if (name.startswith("_") and name != "__call__") or not inspect.isroutine(member):
            continue
        try:
            params = list(inspect.signature(member).parameters.values())[1:]
        except (TypeError, ValueError):
            continue
        if params and name != "__call__" or (name == "__call__" and params):
            names.append(name)
    return names


def test_every_public_name_is_covered():
    missing = []
    for qual, obj in public_callables().items():
        if qual in NOT_INPUTS:
            continue
        if qual not in BY_NAME and not (inspect.isclass(obj) and any(c.startswith(qual + ".") for c in BY_NAME)):
            missing.append(qual)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for m in methods_with_arguments(obj):
                if f"{qual}.{m}" not in BY_NAME and f"{qual}.{m}" not in METHODS_NOT_FED:
                    missing.append(f"{qual}.{m}")
    assert not missing, f"public functions with no junk-input case: {missing}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_baseline_call_works(case):
    case.make()(**case.args)


# ---- junk --------------------------------------------------------------------------------------

NP_TYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
            np.uint64, np.float16, np.float32, np.float64, np.longdouble, np.complex64,
            np.complex128, np.str_, np.bytes_, np.datetime64, np.timedelta64]
RAW = [0, 1, -1, 2, 3, 7, 255, 2**31, 2**63 - 1, 0.5, -2.5, 1e300, math.nan, math.inf, -math.inf]


def np_scalar(kind: type, raw: Any) -> Any:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            if kind in (np.datetime64, np.timedelta64):
                return kind(int(raw) if math.isfinite(raw) and abs(raw) < 2**62 else 0, "s")
            if kind in (np.str_, np.bytes_):
                return kind(str(raw)) if kind is np.str_ else kind(str(raw).encode())
            return np.array(raw).astype(kind)[()]
        except (ValueError, OverflowError, TypeError):
            return kind(0) if kind not in (np.datetime64, np.timedelta64) else kind(0, "s")


numpy_scalars = st.builds(np_scalar, st.sampled_from(NP_TYPES), st.sampled_from(RAW))
atoms = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4), st.binary(max_size=3),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, -1, -1.5, 0, 0.0, 2**31, 2**32, 2**53 + 1,
                     2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, 2**200, 1e308, 1e-320]),
    st.integers(-5, 40), st.floats(allow_nan=True, allow_infinity=True),
    numpy_scalars, st.just(object()), st.just(print), st.just(Ellipsis), st.just({"a": 1}),
    st.just(np.zeros((2, 2))), st.just(np.array([], dtype=np.float64)), st.just(np.array(["a", "b"])),
)
junk = st.one_of(atoms, st.lists(atoms, max_size=3), st.tuples(atoms, atoms),
                 st.lists(st.tuples(atoms, atoms), min_size=1, max_size=2))
# a file path is fed everything but text (a junk string would be read as a file name)
JUNK_FOR = {"path": junk.filter(lambda v: not isinstance(v, (str, bytes, np.str_, np.bytes_)))}


def parameters(case: Case) -> list[str]:
    sig = inspect.signature(case.make())
    names = [p.name for p in sig.parameters.values()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return names or list(case.args)


PAIRS = [(c, p) for c in CASES for p in parameters(c)]


def same(a: Any, b: Any) -> bool:
    """Equal results, NaN equal to NaN; opaque objects (an engine, a model) are not compared."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        try:
            return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
        except TypeError:
            return a.shape == b.shape and bool(np.array_equal(a, b))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a) if "wall" not in f.name)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (int, str, bytes, type(None))):
        return bool(a == b)
    return True


def shown(value: Any) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 100 else text[:97] + "..."


def call(case: Case, param: str, value: Any) -> Any:
    args = dict(case.args)
    args[param] = value
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return case.make()(**args)


def check(case: Case, param: str, value: Any) -> None:
    try:
        result = call(case, param, value)
    except ALLOWED + case.also as exc:
        msg = str(exc)
        assert any(word in msg for word in (param, *case.aliases)), \
            f"{case.name}({param}={shown(value)}): {type(exc).__name__}: {msg!r} does not name {param}"
        return
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a pyo3 PanicException, an AttributeError, a MemoryError...
        pytest.fail(f"{case.name}({param}={shown(value)}) raised {type(exc).__module__}.{type(exc).__name__}: {exc}")
    if isinstance(value, np.generic) and not isinstance(value, (np.datetime64, np.timedelta64)):
        # accepted: it must mean what the same Python value means
        plain = value.item()
        try:
            want = call(case, param, plain)
        except BaseException as exc:
            pytest.fail(f"{case.name}({param}={value!r}) worked but {param}={plain!r} raised {exc!r}")
        assert same(result, want), f"{case.name}({param}={value!r}) differs from {param}={plain!r}"


# Each (function, argument) pair gets its own examples: a tenth of the profile's count (6 under
# `ci`, 200 under `thorough`), at least 4.
EXAMPLES = max(4, settings().max_examples // 10)


@pytest.mark.parametrize("case,param", PAIRS, ids=[f"{c.name}-{p}" for c, p in PAIRS])
@settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_junk_gives_a_named_error(case, param, data):
    check(case, param, data.draw(JUNK_FOR.get(param, junk), label=param))
