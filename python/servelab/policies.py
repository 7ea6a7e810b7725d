"""Scheduling policies as records: one :class:`Policy` per policy, in :data:`REGISTRY`.

A record says everything the rest of servelab needs to know about a policy: its name, its
parameter axes (each with a default, a check and a help line: an :class:`Axis`), how a point is
labelled, which workload it serves and how it runs. :mod:`servelab.sweep` builds its grid, its
checks and its row labels from the records, ``servelab sweep`` its flags and their help, and
demo 03 runs its policies through them; none of them names a policy. Adding a policy is one
record and one run function (ARCHITECTURE.md shows a worked example)::

    def run_fixed(job: Job) -> SimResult:
        requests, model, gpu = job.requests, job.model, job.gpu
        b = job.params["fixed_b"]    # the point's value of the record's axis
        return run_static_batching(requests, model, gpu, b, efficiency=job.efficiency)

    register(Policy("fixed", run_fixed, lambda p: f"fixed B={p['fixed_b']}",
                    axes=(Axis("fixed_b", (16,), POSITIVE_INT, "batch size"),)))

after which ``Grid(policies=("fixed",), rates=(1.0,), fixed_b=(8, 32))`` and
``servelab sweep --policy fixed --fixed-b 8 32`` work. A policy registered at run time reaches
a process pool's workers only where they fork (Linux); a built-in one reaches every executor.

>>> sorted(REGISTRY)
['batch1', 'continuous', 'early_reject', 'prefix', 'speculative', 'static', 'tiered']
>>> REGISTRY["static"].label({"batch_size": 8, "max_wait_s": 0.2, "ride_along": False})
'static B=8 no ride'
>>> [a.name for a in REGISTRY["tiered"].axes]
['host_blocks', 'host_policy']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from servelab import _checks, lecture
from servelab._core import MAX_NUM_BLOCKS
from servelab.admission import EarlyReject, NoisyPredictor
from servelab.blocks import HOST_POLICIES
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B, LLAMA32_1B, Efficiency, GpuSpec, ModelSpec
from servelab.metrics import SLO
from servelab.serving_core import SimResult, Speculation, run_batch1, run_continuous_batching, run_static_batching
from servelab.workload import Requests, SharedPrefixes, chat_requests, chat_sessions

__all__ = ["Kind", "Axis", "Job", "Policy", "REGISTRY", "register", "unregister", "axes",
           "POSITIVE_INT", "SECONDS", "FRACTION", "YES_NO", "int_in", "choice_of"]


# ---- kinds of value: how an axis's values are checked, read from a flag and shown ------------

def _number(text: str, kind: Callable[[str], Any]) -> Any:
    try:
        return kind(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Kind:
    """A kind of axis value. ``many`` words the values for :class:`servelab.sweep.Grid`'s error
    (``batch_size must hold positive integers, got 0``); ``test`` says if a Python value is one
    (it may raise its own ``ValueError``); ``parse`` reads a flag's text or raises
    ``ValueError`` worded for ``servelab sweep`` (``must be a positive integer, got '0'``);
    ``choices``, when set, are the texts a flag takes (argparse lists them), read by ``parse``."""

    many: str
    test: Callable[[Any], bool]
    parse: Callable[[str], Any]
    choices: tuple[str, ...] = ()
    show: Callable[[Any], str] = lambda v: f"{v:g}" if isinstance(v, float) else str(v)


def int_in(lo: int, hi: int | None = None) -> Kind:
    """Integers in ``[lo, hi]`` (``hi=None``: no upper bound), worded as :mod:`servelab._checks`
    words them."""
    one, many = (_checks.int_wording(lo, hi, plural=False), _checks.int_wording(lo, hi, plural=True))

    def test(v: Any) -> bool:
        return _checks.is_int(v) and int(v) >= lo and (hi is None or int(v) <= hi)

    def parse(text: str) -> int:
        v = _number(text, int)
        if v is None or not test(v):
            raise ValueError(f"must be {one}, got {text!r}")
        return int(v)
    return Kind(many, test, parse)


def _seconds_test(v: Any) -> bool:
    return _checks.is_real(v) and math.isfinite(float(v)) and float(v) >= 0.0


def _seconds_parse(text: str) -> float:
    v = _number(text, float)
    if v is None or not _seconds_test(v):
        raise ValueError(f"must be a number of seconds >= 0, got {text!r}")
    return float(v)


def _fraction_test(v: Any) -> bool:
    return _checks.is_real(v) and 0.0 <= float(v) <= 1.0


def _fraction_parse(text: str) -> float:
    v = _number(text, float)
    if v is None or not _fraction_test(v):
        raise ValueError(f"must be a number in [0, 1], got {text!r}")
    return float(v)


def choice_of(allowed: tuple[str, ...]) -> Kind:
    """One of ``allowed`` (strings)."""
    return Kind(_checks.either(allowed), lambda v: isinstance(v, str) and v in allowed,
                lambda text: _checks.choice("value", text, allowed), choices=allowed)


POSITIVE_INT = int_in(1)
SECONDS = Kind("finite numbers >= 0", _seconds_test, _seconds_parse)
FRACTION = Kind("numbers in [0, 1]", _fraction_test, _fraction_parse)
YES_NO = Kind("True or False", _checks.is_bool, lambda text: _checks.choice("value", text, ("yes", "no")) == "yes",
              choices=("yes", "no"), show=lambda v: "yes" if v else "no")


def estimator(spec: str) -> Any:
    """Early rejection's TTFT estimator from its name: ``"mean"``, ``"oracle"`` or
    ``"sigma=0.5"`` (exercise 9's noisy predictor)."""
    if spec in ("mean", "oracle"):
        return spec
    if isinstance(spec, str) and spec.startswith("sigma="):
        try:
            return NoisyPredictor(float(spec[len("sigma="):]))
        except ValueError as exc:
            raise ValueError(f"estimator {spec!r}: {exc}") from None
    raise ValueError(f"estimator must be 'mean', 'oracle' or 'sigma=<number>', got {spec!r}")


def _estimator_parse(text: str) -> str:
    estimator(text)
    return text


ESTIMATOR = Kind("'mean', 'oracle' or 'sigma=<number>'", lambda v: estimator(v) is not None, _estimator_parse)


# ---- the records ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Axis:
    """One parameter of a policy: a :class:`servelab.sweep.Grid` field of this ``name`` and a
    ``servelab sweep`` flag (``flag``, else ``--`` and the name with dashes), taking values of
    ``kind``; ``default``, the values a grid takes when the axis is not given."""

    name: str
    default: tuple[Any, ...]
    kind: Kind
    help: str
    flag: str = ""

    @property
    def option(self) -> str:
        """The command-line flag."""
        return self.flag or "--" + self.name.replace("_", "-")

    def shown_default(self) -> str:
        return " ".join(self.kind.show(v) for v in self.default)


@dataclass(frozen=True)
class Job:
    """What a policy's run function is given: one point's requests, parameters and hardware."""

    requests: Requests
    params: Mapping[str, Any]
    model: ModelSpec = LLAMA3_8B
    gpu: GpuSpec = H100
    efficiency: Efficiency = DEFAULT_EFFICIENCY
    slo: SLO = lecture.LECTURE_SLO
    seed: int = lecture.SEED
    shared_prefixes: SharedPrefixes | None = None


def chat(n: int, rate: float, seed: int, params: Mapping[str, Any]) -> tuple[Requests, SharedPrefixes | None]:
    """Demo 03's chat requests (lecture §4.5): the workload of a policy that names no other."""
    return chat_requests(n, rate, seed), None


@dataclass(frozen=True)
class Policy:
    """A scheduling policy: ``run(job) -> SimResult``; ``label(params)`` names one setting of
    it (a curve of a plot, a table's row); ``axes``, its parameters; ``workload(n, rate, seed,
    params) -> (requests, shared prefixes or None)``, the requests it serves."""

    name: str
    run: Callable[[Job], SimResult]
    label: Callable[[Mapping[str, Any]], str]
    axes: tuple[Axis, ...] = ()
    workload: Callable[[int, float, int, Mapping[str, Any]], tuple[Requests, SharedPrefixes | None]] = chat


REGISTRY: dict[str, Policy] = {}
_RESERVED = {"policies", "rates", "model", "gpu", "efficiency"}  # Grid's own fields


def axes() -> dict[str, tuple[Axis, list[str]]]:
    """Every registered axis: name -> (the axis, the policies taking it), in registration order."""
    out: dict[str, tuple[Axis, list[str]]] = {}
    for p in REGISTRY.values():
        for a in p.axes:
            out.setdefault(a.name, (a, []))[1].append(p.name)
    return out


def register(policy: Policy) -> Policy:
    """Adds ``policy`` to :data:`REGISTRY` (so to the sweep, its grid and its flags); returns it.
    An axis may be shared by two policies only as the same :class:`Axis`."""
    _checks.instance("policy", policy, Policy, "a servelab.policies.Policy")
    if policy.name in REGISTRY:
        raise ValueError(f"policy {policy.name!r} is registered already")
    known = axes()
    for a in policy.axes:
        _checks.instance(f"{policy.name}'s axis", a, Axis, "a servelab.policies.Axis")
        if a.name in _RESERVED or (a.name in known and known[a.name][0] != a):
            raise ValueError(f"axis {a.name!r} of policy {policy.name!r} is taken by "
                             f"{'the grid' if a.name in _RESERVED else known[a.name][1]}")
    REGISTRY[policy.name] = policy
    return policy


def unregister(name: str) -> None:
    """Removes a registered policy (a test's toy one)."""
    _checks.choice("name", name, tuple(REGISTRY))
    del REGISTRY[name]


# ---- the built-in policies (lecture §4.5, §5.3, §8) -------------------------------------------

# the tiered policy's workload and GPU pool (§8 milestone 4b): long conversations, a pool of
# 1500 blocks x 16 tokens (24k tokens: a few dozen conversations), so prefixes get evicted
TIERED_TURNS_MEAN = 4.0
TIERED_GPU_BLOCKS = 1500


def run_batch1_policy(job: Job) -> SimResult:
    return run_batch1(job.requests, job.model, job.gpu, efficiency=job.efficiency)


def run_early_reject(job: Job) -> SimResult:
    admission = EarlyReject(job.slo.ttft_s, estimator(job.params["estimator"]))
    return run_batch1(job.requests, job.model, job.gpu, admission=admission, efficiency=job.efficiency)


def run_static(job: Job) -> SimResult:
    p = job.params
    return run_static_batching(job.requests, job.model, job.gpu, int(p["batch_size"]), float(p["max_wait_s"]),
                               bool(p["ride_along"]), efficiency=job.efficiency)


def run_continuous(job: Job) -> SimResult:
    return run_continuous_batching(job.requests, job.model, job.gpu, max_num_seqs=int(job.params["max_num_seqs"]),
                                   chunked_prefill=bool(job.params["chunked_prefill"]), efficiency=job.efficiency)


def _prefix_workload(n: int, rate: float, seed: int, p: Mapping[str, Any]) -> tuple[Requests, SharedPrefixes]:
    return chat_sessions(n, rate, seed, shared_fraction=float(p["shared_fraction"]))


def run_prefix(job: Job) -> SimResult:
    return run_continuous_batching(job.requests, job.model, job.gpu, prefix_caching=bool(job.params["prefix_caching"]),
                                   shared_prefixes=job.shared_prefixes, efficiency=job.efficiency)


def _tiered_workload(n: int, rate: float, seed: int, p: Mapping[str, Any]) -> tuple[Requests, SharedPrefixes]:
    return chat_sessions(n, rate, seed, turns_mean=TIERED_TURNS_MEAN)


def run_tiered(job: Job) -> SimResult:
    return run_continuous_batching(job.requests, job.model, job.gpu, num_blocks=TIERED_GPU_BLOCKS,
                                   prefix_caching=True, shared_prefixes=job.shared_prefixes,
                                   host_blocks=int(job.params["host_blocks"]),
                                   host_policy=str(job.params["host_policy"]), efficiency=job.efficiency)


def run_speculative(job: Job) -> SimResult:
    spec = Speculation(int(job.params["spec_k"]), LLAMA32_1B, float(job.params["acceptance"]), job.seed)
    return run_continuous_batching(job.requests, job.model, job.gpu, speculative=spec, efficiency=job.efficiency)


def _static_label(p: Mapping[str, Any]) -> str:
    extra = "" if p["ride_along"] else " no ride"
    wait = "" if p["max_wait_s"] == lecture.MAX_WAIT_S else f" wait {p['max_wait_s']:g}s"
    return f"static B={p['batch_size']}{wait}{extra}"


for _policy in (
    Policy("batch1", run_batch1_policy, lambda p: "batch 1"),
    Policy("early_reject", run_early_reject, lambda p: f"batch 1, early reject ({p['estimator']})",
           (Axis("estimator", ("mean",), ESTIMATOR, "mean, oracle, sigma=0.5"),)),
    Policy("static", run_static, _static_label, (
        Axis("batch_size", (32,), POSITIVE_INT, "batch sizes"),
        Axis("max_wait_s", (lecture.MAX_WAIT_S,), SECONDS, "longest wait for a batch to fill, s", "--max-wait"),
        Axis("ride_along", (True,), YES_NO, "finished requests keep computing"))),
    Policy("continuous", run_continuous,  # vLLM's defaults otherwise (serving_core)
           lambda p: f"continuous seqs={p['max_num_seqs']}{' chunked' if p['chunked_prefill'] else ''}", (
               Axis("max_num_seqs", (lecture.CONTINUOUS["max_num_seqs"],), POSITIVE_INT, "seats"),
               Axis("chunked_prefill", (False,), YES_NO, "split long prompts over steps"))),
    Policy("prefix", run_prefix,
           lambda p: f"shared {p['shared_fraction']:g}, {'cache' if p['prefix_caching'] else 'no cache'}", (
               Axis("prefix_caching", (False, True), YES_NO, "reuse the KV of shared prompt prefixes"),
               Axis("shared_fraction", (1.0,), FRACTION, "share of requests whose system prompt is a shared one")),
           _prefix_workload),
    Policy("speculative", run_speculative, lambda p: f"speculative k={p['spec_k']} a={p['acceptance']:g}", (
        Axis("spec_k", (4,), int_in(0, 64), "draft guesses per step, at most 64"),
        Axis("acceptance", (0.8,), FRACTION, "chance each guess is kept"))),
    Policy("tiered", run_tiered, lambda p: f"host tier {p['host_blocks']} blocks {p['host_policy']}", (
        Axis("host_blocks", (0, 2000, 8000), int_in(0, MAX_NUM_BLOCKS), "host tier sizes in KV blocks"),
        Axis("host_policy", ("lru",), choice_of(HOST_POLICIES), "which entry a full host tier drops")),
           _tiered_workload),
):
    register(_policy)
