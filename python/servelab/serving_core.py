"""Serving policies on the paper GPU (lecture §4.5): the simulator's Python surface.

The simulation runs in Rust (``rust/src/sim/``); each step is priced by the paper GPU of
:mod:`servelab.hw_model`. Policies, by the lecture's names:

* :func:`run_batch1` — one request at a time, first come first served;
* :func:`run_static_batching` — start a batch when ``batch_size`` requests wait or the oldest
  has waited ``max_wait_s``; the batch prefills together and decodes until its longest request
  ends; with ``ride_along=False`` (exercise 5) finished requests stop computing but their seats
  are not refilled.

Both return a :class:`SimResult`: per-request numpy columns ``start_s``, ``first_token_s``,
``finish_s``, ``rejected`` (and ``batch_id``), run totals, and with ``trace=True`` one row per
forward step. :mod:`servelab.metrics` turns a result into TTFT, TPOT, goodput and the rest.

What a step costs (the context convention, also in ``rust/src/sim/mod.rs``): a prefill of a
``p``-token prompt is ``(p, 0)`` and yields the first output token; decode step ``s`` of a
request (``s = 1 .. L_o - 1``) is ``(1, p + s - 1)``: one new token on top of the ``p + s - 1``
tokens already in its KV cache. A rider (a finished request kept in a static batch) keeps
decoding padding as if it were still running. Neither policy models a KV memory limit
(the lecture's code does not); ``SimResult.peak_kv_tokens`` says how close a run came.

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

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servelab import _core
from servelab.admission import EarlyReject
from servelab.hw_model import DEFAULT_EFFICIENCY, Efficiency, GpuSpec, ModelSpec
from servelab.workload import Requests

__all__ = ["SimResult", "StepTrace", "run_batch1", "run_static_batching"]


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

    def __len__(self) -> int:
        return len(self.start_s)


@dataclass(frozen=True, eq=False)
class SimResult:
    """What a simulated run did. Times are seconds on the simulated clock.

    Per request (numpy columns, one entry per request of ``requests``): ``start_s`` (its
    prefill starts), ``first_token_s`` (end of the prefill), ``finish_s`` (end of its last
    step), ``rejected`` (turned away by admission control; its times are NaN), ``batch_id``
    (which batch served it; ``-1`` if rejected). Totals: ``busy_s`` (sum of step times),
    ``flops``, ``n_steps``, ``peak_kv_tokens``. ``trace``: a :class:`StepTrace` when asked for.
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

    @property
    def label(self) -> str:
        """A short name for tables: ``batch 1``, ``static B=32``, ``static B=32 no ride``."""
        if self.policy == "static":
            extra = "" if self.params["ride_along"] else " no ride"
            return f"static B={self.params['batch_size']}{extra}"
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
    return SimResult(
        policy=policy, params=params, requests=requests, model=model, gpu=gpu, efficiency=efficiency,
        start_s=d["start_s"], first_token_s=d["first_token_s"], finish_s=d["finish_s"],
        rejected=d["rejected"], batch_id=d["batch_id"], busy_s=float(d["busy_s"]),
        flops=float(d["flops"]), n_steps=int(d["n_steps"]), peak_kv_tokens=int(d["peak_kv_tokens"]),
        trace=None if tr is None else StepTrace(**tr), would_first_token_s=d.get("would_first_token_s"))


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
        d = _core.sim_batch1(model, gpu, efficiency, requests.arrival_s, requests.prompt_len,
                             requests.output_len, bool(trace))
        return _result("batch1", {}, requests, model, gpu, efficiency, d)
    if not isinstance(admission, EarlyReject):
        raise TypeError(f"admission must be None or a servelab.admission.EarlyReject, got {admission!r}")
    pred = admission.predicted_len(requests)
    d = _core.sim_batch1_early_reject(model, gpu, efficiency, requests.arrival_s, requests.prompt_len,
                                      requests.output_len, admission.slo_ttft_s, pred, bool(trace))
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
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if isinstance(max_wait_s, bool) or not isinstance(max_wait_s, numbers.Real) or not (
            math.isfinite(float(max_wait_s)) and float(max_wait_s) >= 0):
        raise ValueError(f"max_wait_s must be a finite number >= 0, got {max_wait_s!r}")
    if not isinstance(ride_along, (bool, np.bool_)):
        raise ValueError(f"ride_along must be True or False, got {ride_along!r}")
    b = min(int(batch_size), 2**63 - 1)
    d = _core.sim_static_batching(model, gpu, efficiency, requests.arrival_s, requests.prompt_len,
                                  requests.output_len, b, float(max_wait_s), bool(ride_along),
                                  bool(trace))
    params = {"batch_size": int(batch_size), "max_wait_s": float(max_wait_s), "ride_along": bool(ride_along)}
    return _result("static", params, requests, model, gpu, efficiency, d)
