"""What a real serving stack adds to the paper GPU (lecture §8.3's split: the tokens are real,
the time is a GPU on paper), as a few coefficients with a physical meaning, kept in a small
JSON file that ``servelab validate --calibration FILE`` reads.

:data:`PAPER` is the lecture's paper GPU as it is (§3: 70% of peak FLOP/s, 80% of HBM
bandwidth, 0.5 ms a step; tensor parallelism's ring all-reduce at the NVLink figure with 2 us a
hop; nothing else). A calibration changes only these numbers, never the lecture's defaults:
without ``--calibration`` every demo, task and printed number runs on :data:`PAPER`.

The coefficients:

* ``compute``, ``bandwidth``: the fractions of peak FLOP/s and HBM bandwidth that the kernels
  reach (:class:`servelab.hw_model.Efficiency`);
* ``step_overhead_s``: seconds every forward step costs on top of the roofline (kernel launch
  gaps, the scheduler's and the sampler's CPU time that does not overlap the GPU);
* ``layer_s``: seconds every forward step costs per layer of the model, on one card or many
  (each layer's dozen kernels have a floor each, launch, ramp-up and tail, that a paper roofline
  does not see; with CUDA graphs it is no CPU time, so it grows with depth, not with the
  batch): what lets a model of another depth extrapolate, where a per-step constant cannot;
* ``per_seq_s``: seconds a step costs per sequence in it (per-sequence CPU work: sampling,
  output processing, detokenising; attention kernels' per-sequence cost): what makes a real
  step slower at a larger batch beyond the KV bytes it reads;
* ``allreduce``, ``hop_latency_s`` and ``link_efficiency``: tensor parallelism's two
  all-reduces per layer (zero on one card). ``"ring"`` (the lecture's, §8.1) is ``2 (tp - 1)``
  hops, each a fixed latency, moving ``2 (tp - 1) / tp`` of the tensor over each card's link;
  ``"one_shot"`` is what an inference engine does with the small tensors of a decode step
  inside one NVLink node (vLLM's custom all-reduce): every card reads the ``tp - 1`` others'
  copies at once, one hop of latency and ``tp - 1`` tensors of bytes. The bytes go at
  ``link_efficiency`` x the NVLink figure;
* ``admission_lag_steps``: steps a new request waits beyond the next step boundary before it
  runs (an engine that schedules step ``k + 1`` while step ``k`` runs, as vLLM's asynchronous
  scheduling does, admits an arrival one step later);
* ``frontend_s``: per request, the API server's and the network's share of the first token
  and of the end (HTTP, tokenising the prompt, detokenising, streaming), on no GPU's clock.

>>> PAPER.bandwidth, PAPER.step_overhead_s, PAPER.frontend_s
(0.8, 0.0005, 0.0)
>>> c = Calibration.from_dict({"bandwidth": 0.7, "frontend_s": 0.01})
>>> c.bandwidth, c.compute, c.is_paper
(0.7, 0.7, False)
>>> Calibration.from_dict({"bandwith": 0.7})
Traceback (most recent call last):
...
ValueError: calibration has an unknown coefficient 'bandwith'; known: compute, bandwidth, step_overhead_s, layer_s, per_seq_s, allreduce, hop_latency_s, link_efficiency, admission_lag_steps, frontend_s
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab import _checks
from servelab.files import write_text_atomic
from servelab.hw_model import DEFAULT_EFFICIENCY, NVLINK_HOP_S

__all__ = ["Calibration", "PAPER", "ALLREDUCE", "COEFFICIENTS", "load_calibration", "save_calibration", "fitted_path", "fits_dir",
           "FITTED"]

FITTED = "fitted"  # the name --calibration takes for the shipped fit
ALLREDUCE = ("ring", "one_shot")


@dataclass(frozen=True)
class Calibration:
    compute: float = DEFAULT_EFFICIENCY.compute
    bandwidth: float = DEFAULT_EFFICIENCY.bandwidth
    step_overhead_s: float = DEFAULT_EFFICIENCY.overhead_s
    layer_s: float = 0.0
    per_seq_s: float = 0.0
    allreduce: str = "ring"
    hop_latency_s: float = NVLINK_HOP_S
    link_efficiency: float = 1.0
    admission_lag_steps: float = 0.0
    frontend_s: float = 0.0
    # where the numbers come from (what it was fitted on, when): shown, never used
    note: str = ""

    def __post_init__(self) -> None:
        for name in ("compute", "bandwidth", "link_efficiency"):
            object.__setattr__(self, name, _checks.real(name, getattr(self, name), 0.0, 1.0, lo_open=True))
        for name in ("step_overhead_s", "layer_s", "per_seq_s", "hop_latency_s", "frontend_s"):
            object.__setattr__(self, name, _checks.real(name, getattr(self, name), 0.0, 10.0))
        object.__setattr__(self, "admission_lag_steps", _checks.real("admission_lag_steps", self.admission_lag_steps,
                                                                      0.0, 100.0))
        _checks.choice("allreduce", self.allreduce, ALLREDUCE)
        _checks.instance("note", self.note, str, "a str")

    @property
    def is_paper(self) -> bool:
        """True when every coefficient is the lecture's paper GPU's."""
        return all(getattr(self, k) == getattr(PAPER, k) for k in COEFFICIENTS)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (*COEFFICIENTS, "note")}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Calibration:
        """From a mapping of coefficients (any left out keeps the paper GPU's)."""
        if not isinstance(d, dict):
            raise ValueError(f"calibration must be a JSON object of coefficients, got {type(d).__name__}")
        for k in d:
            if k not in (*COEFFICIENTS, "note"):
                raise ValueError(f"calibration has an unknown coefficient {k!r}; known: {', '.join(COEFFICIENTS)}")
        return Calibration(**d)

    def with_values(self, **values: Any) -> Calibration:
        return dataclasses.replace(self, **values)

    def allreduce_cost(self, tp: int) -> tuple[int, float]:
        """(hops, tensors of bytes each card moves) of one all-reduce over ``tp`` cards."""
        if tp == 1:
            return 0, 0.0
        if self.allreduce == "ring":
            return 2 * (tp - 1), 2 * (tp - 1) / tp
        return 1, float(tp - 1)


COEFFICIENTS = tuple(f.name for f in dataclasses.fields(Calibration) if f.name != "note")


PAPER = Calibration(note="the lecture's paper GPU as it is")


def fits_dir() -> Path:
    """The shipped fits: ``fitted.json`` (every shipped run not overloaded) and, for
    leave-one-model-out, ``without-NAME.json`` (every run but model NAME's)."""
    return Path(__file__).resolve().parent / "fits"


def fitted_path() -> Path:
    """The calibration fitted on every shipped run that was not overloaded (``--calibration fitted``)."""
    return fits_dir() / "fitted.json"


def load_calibration(source: str | Path) -> Calibration:
    """A calibration file (JSON object of coefficients), or the shipped fit for ``"fitted"``."""
    _checks.instance("calibration", source, (str, Path), "a file path or 'fitted'")
    path = fitted_path() if str(source) == FITTED else Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"calibration file {str(source)!r} cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"calibration file {str(source)!r} is not JSON ({exc})") from None
    return Calibration.from_dict(data)


def save_calibration(calibration: Calibration, path: str | Path) -> Path:
    """Writes ``calibration`` as JSON to ``path``, whole or not at all (a temporary file in the
    same folder, then renamed)."""
    _checks.instance("calibration", calibration, Calibration, "a Calibration")
    target = Path(_checks.instance("path", path, (str, Path), "a file path"))
    for k in COEFFICIENTS:
        if isinstance(getattr(calibration, k), float) and not math.isfinite(getattr(calibration, k)):
            raise ValueError(f"calibration.{k} must be finite, got {getattr(calibration, k)!r}")
    return write_text_atomic(target, json.dumps(calibration.to_dict(), indent=2) + "\n")
