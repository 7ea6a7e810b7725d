"""The measured server, as configured, on the simulated clock (lecture §8.3): vLLM's continuous
batching with chunked prefill and prefix caching (:func:`servelab.serving_core.run_continuous_batching`,
the engine's rules) fed the experiment's workload (:mod:`.generator`), each step priced by the
paper GPU, and the client's statistics taken from the result (:mod:`.stats`).

How the server maps onto the simulator:

* ``max_num_seqs``, ``max_num_batched_tokens``, ``block_size`` as configured; chunked prefill and
  prefix caching on (vLLM V1's defaults); the KV pool is what fits beside the weights in
  ``gpu_memory_utilization`` of each card (:func:`servelab.hw_model.kv_capacity_tokens` with
  ``tp=``).
* **Tensor parallelism** (``tp`` cards, Megatron split, :func:`servelab.hw_model.tensor_parallel_cost`):
  the simulator prices a step on one card, so it is given a card ``tp`` times as fast and as
  wide (each card does ``1/tp`` of the FLOPs and reads ``1/tp`` of the weights and KV); the
  all-reduces' fixed part (their hop latencies, two all-reduces a layer, see
  :meth:`~.calibration.Calibration.allreduce_cost`) joins the per-step
  overhead, and their bytes, which grow with the step's tokens, are the step's extra seconds
  per token (``step_extra_s``): both exact. The looked-up embedding rows, replicated on real
  cards, count ``1/tp`` here: under 0.1% of a step.
* **Mixture of experts**: the card's compute rate is also raised by the model's
  :attr:`~servelab.validation.hf_config.ServedModel.flop_ratio`, so that a token pays for its
  active experts while the step reads every expert's weights.
* The calibration's ``per_seq_s`` is the step's extra seconds per sequence (``step_extra_s``).
* **What is added after the run**, per request: ``admission_lag_steps`` times the step that gave
  its first token (the schedule stays the simulator's: a first-order account of an engine that
  admits an arrival a step later), and ``frontend_s``, to its first token and its end. With
  :data:`~.calibration.PAPER` both are zero.

Stages run on one clock, each starting after the one before has drained (the generator waits
for it), so the prefix cache carries over as it did. A request counts as failed when its
latency passes the client's timeout; the real server stops computing it then, the simulator
does not (so overloaded stages, where most requests fail, are shown apart and not compared).

>>> from servelab.validation.experiment import read_experiment, shipped_experiment_dirs
>>> from servelab.validation.hf_config import shipped_models
>>> p = simulate_experiment(read_experiment(shipped_experiment_dirs()[0]), shipped_models())
>>> [s.summary.successes for s in p.stages], round(p.stages[0].summary.metric("itl_mean") * 1e3, 1)
([3000, 6000], 3.3)
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from servelab import _checks
from servelab.hw_model import H100, Efficiency, GpuSpec, check_tp, kv_capacity_tokens
from servelab.serving_core import SimResult, run_continuous_batching
from servelab.validation.calibration import PAPER, Calibration
from servelab.validation.experiment import Experiment
from servelab.validation.generator import STAGE_LEAD_S, StagedWorkload, expansion_from_measured, shared_prefix_workload
from servelab.validation.hf_config import ServedModel
from servelab.validation.stats import StageSummary, simulated_summary

__all__ = ["StagePrediction", "ExperimentPrediction", "simulate_experiment", "tp_card", "model_for"]

_FIRST_GAP_S = 900.0  # between stages at first: more than a non-overloaded stage takes to drain


@dataclass(frozen=True)
class StagePrediction:
    index: int
    summary: StageSummary
    mean_batch: float  # sequences per step, over the stage's steps
    mean_step_s: float  # seconds per step


@dataclass(frozen=True)
class ExperimentPrediction:
    experiment: Experiment
    model: ServedModel
    calibration: Calibration
    stages: tuple[StagePrediction, ...]
    sim_s: float  # wall seconds the simulation took


def tp_card(gpu: GpuSpec, tp: int, flop_ratio: float = 1.0) -> GpuSpec:
    """One card standing for ``tp`` cards of ``gpu`` (FLOP/s, bandwidth and memory times ``tp``;
    FLOP/s also times ``flop_ratio``, a mixture of experts' all-experts / active FLOPs)."""
    _checks.instance("gpu", gpu, GpuSpec, "a servelab.hw_model.GpuSpec")
    tp = _checks.positive_int("tp", tp)
    flop_ratio = _checks.real("flop_ratio", flop_ratio, 1.0, 1e3)
    if tp == 1 and flop_ratio == 1.0:
        return gpu
    return dataclasses.replace(gpu, name=f"{tp} x {gpu.name}", peak_flops=gpu.peak_flops * tp * flop_ratio,
                               hbm_bandwidth=gpu.hbm_bandwidth * tp, memory_bytes=gpu.memory_bytes * tp)


def model_for(experiment: Experiment, models: dict[str, ServedModel]) -> ServedModel:
    """The experiment's model from ``models`` (by its name after the last ``/``)."""
    name = experiment.server.model_name
    if name not in models:
        known = ", ".join(sorted(models)) or "none"
        raise ValueError(f"experiment {experiment.name!r} serves {name!r}, which has no config.json among the model "
                         f"configurations ({known}); pass --model-configs DIR with {name}/config.json")
    return models[name]


def _run(experiment: Experiment, served: ServedModel, cal: Calibration, gpu: GpuSpec,
         workload: StagedWorkload) -> SimResult:
    s, tp = experiment.server, experiment.server.tp
    m = served.spec
    tp = check_tp(m, gpu, tp)
    hops, _ = cal.allreduce_cost(tp)  # per all-reduce, two a layer
    per_layer = cal.layer_s + 2 * hops * cal.hop_latency_s  # the layer's kernels' floors, its two all-reduces
    eff = Efficiency(cal.compute, cal.bandwidth, cal.step_overhead_s + m.n_layers * per_layer)
    blocks = kv_capacity_tokens(m, gpu, s.gpu_memory_utilization, tp=tp) // s.block_size
    if blocks < 1:
        raise ValueError(f"{experiment.name}: {m.name} leaves no KV block free on {tp} x {gpu.name} at "
                         f"gpu_memory_utilization={s.gpu_memory_utilization}")
    return run_continuous_batching(
        workload.requests, m, tp_card(gpu, tp, served.flop_ratio), max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens, block_size=s.block_size, num_blocks=blocks,
        chunked_prefill=s.chunked_prefill, prefix_caching=s.prefix_caching, shared_prefixes=workload.shared,
        efficiency=eff, step_extra_s=(_per_token_allreduce_s(served, gpu, tp, cal), cal.per_seq_s), trace=True)


def _per_token_allreduce_s(served: ServedModel, gpu: GpuSpec, tp: int, cal: Calibration) -> float:
    """Seconds of all-reduce bytes per token of a step: ``2 L`` all-reduces of ``d_model``
    values a token, each card moving ``tensors`` of them over its link (the ring's
    ``2 (tp - 1) / tp``, one-shot's ``tp - 1``)."""
    _, tensors = cal.allreduce_cost(tp)
    if tensors == 0:
        return 0.0
    m = served.spec
    per_token = m.d_model * m.bytes_per_param
    return 2 * m.n_layers * tensors * per_token / (gpu.link_bandwidth * cal.link_efficiency)


def simulate_experiment(experiment: Experiment, models: dict[str, ServedModel], calibration: Calibration = PAPER, *,
                        gpu: GpuSpec = H100, seed: int = 0) -> ExperimentPrediction:
    """Simulates every stage of ``experiment`` on ``tp`` cards of ``gpu`` with ``calibration``
    (the lecture's paper GPU by default) and returns each stage's predicted statistics."""
    _checks.instance("experiment", experiment, Experiment, "a servelab.validation.Experiment")
    _checks.instance("calibration", calibration, Calibration, "a servelab.validation.Calibration")
    served = model_for(experiment, models)
    t0 = time.perf_counter()
    stages = experiment.stages
    expansion = expansion_from_measured(experiment)
    starts = [1.0]
    for k in range(1, len(stages)):
        starts.append(starts[-1] + stages[k - 1].duration_s + _FIRST_GAP_S)
    for _ in range(len(stages) + 1):  # each pass fixes at least the first stage that had not drained
        w = shared_prefix_workload(experiment.data, stages, starts, seed=seed, expansion=expansion)
        r = _run(experiment, served, calibration, gpu, w)
        moved = False
        for k in range(1, len(stages)):
            drained = float(np.nanmax(r.finish_s[w.stage == k - 1])) + STAGE_LEAD_S
            if drained > starts[k]:
                shift = drained - starts[k] + 1.0
                starts[k:] = [s + shift for s in starts[k:]]
                moved = True
                break
        if not moved:
            break
    assert r.trace is not None
    tr = r.trace
    end = tr.start_s + tr.step_s
    req = w.requests
    arrival = req.arrival_s
    # the step that gave each first token (it ends at first_token_s)
    first_step = np.clip(np.searchsorted(end, r.first_token_s * (1 - 1e-12), side="left"), 0, len(end) - 1)
    delay = calibration.admission_lag_steps * tr.step_s[first_step] + calibration.frontend_s
    first = r.first_token_s + delay
    finish = r.finish_s + delay
    out = []
    for k in range(len(stages)):
        sel = w.stage == k
        summary = simulated_summary(arrival[sel], first[sel], finish[sel], req.output_len[sel],
                                    experiment.client_timeout_s)
        span = (tr.start_s >= arrival[sel].min()) & (end <= np.nanmax(r.finish_s[sel]))
        out.append(StagePrediction(k, summary, float(tr.batch_size[span].mean()) if span.any() else 0.0,
                                   float(tr.step_s[span].mean()) if span.any() else 0.0))
    return ExperimentPrediction(experiment, served, calibration, tuple(out), time.perf_counter() - t0)
