"""The paper GPU: how long one forward step of an LLM would take on a real GPU (lecture §3).

A roofline with the lecture's three discounts (§0.6, §3.2)::

    time = max(F / (0.70 * peak_flops), M / (0.80 * hbm_bandwidth)) + 0.5 ms

where ``F`` counts the FLOPs of the step and ``M`` the bytes it moves from HBM. The counting
itself runs in Rust (``servelab._core``, file ``rust/src/cost.rs``); this module holds the
presets, the typed Python surface, and the docs. (The course's own copy also holds a pure-Python
twin of the same formulas, checked against the Rust path by property tests.)

What the model counts (each rule is pinned by a number the lecture prints):

* every weight matrix is read once per step, except an untied embedding table, of which only
  the looked-up rows are read;
* matmuls cost 2 FLOPs per weight per token; the LM head runs only for the last token of each
  sequence in the step;
* attention is causal: new token ``i`` of a sequence with ``c`` cached tokens attends to
  ``c + i`` keys (4 FLOPs per key per query-head dimension);
* the step reads the KV cache of every sequence's context and writes the new tokens' KV.

What the model ignores (§8.3, pitfall 10: paper milliseconds are trends and orders of
magnitude, not a real engine's timings):

* kernel efficiency beyond the two flat discounts: tile quantisation, small-batch GEMV paths,
  attention kernels that do not reach the roofline, kernel launch gaps inside a step;
* overlap limits: compute and memory are assumed to overlap perfectly (``max``, not sum);
* the FLOPs of norms, softmax, rotary embeddings and activations, and sampling;
* the CPU side: tokenisation, scheduling, Python overhead (only the flat 0.5 ms covers it);
* communication beyond tensor parallelism's all-reduces (``tp=``: a ring over the NVLink
  figure, never overlapped with compute) and KV moved to host memory (``kv_host_transfer_s``):
  pipeline parallelism, other PCIe traffic;
* memory fragmentation, activation memory and the CUDA context (only ``mem_util`` covers them);
* caches (L2, SRAM reuse across sequences), quantisation and sparsity;
* clock throttling, power and thermals.

How far all this moves real numbers: :data:`MEASURED` holds 29 published step times (A100,
H100, H200; decode and prefill; 1 to 8 cards; 16- and 8-bit weights) and :func:`calibrate`
fits the three discounts to them or to your own card's (``servelab demo calibration``; the
lecture's 18% mean error becomes 13%, 15% leave-one-out). A per-layer overhead was tried as a
fourth term and gained nothing on this table, so :class:`Efficiency` keeps three fields.

Limits (each checked, with an error that names the argument, its value and the limit; nothing
wraps around): model dimensions up to ``2**24`` (``_core.MAX_DIM``); per sequence up to
``2**40`` new or cached tokens (``_core.MAX_TOKENS``); per step up to ``2**53`` new tokens in
total (``_core.MAX_STEP_TOKENS``: the counts stay exact as floats). A batch given as an
``(n, 2)`` integer array (or a list of pairs) is read by numpy in one piece, so a step of
millions of sequences costs no Python loop.

Example:
    >>> from servelab import hw_model
    >>> step = hw_model.step_cost(hw_model.LLAMA3_8B, hw_model.H100, [(1, 512)])
    >>> round(step.time_s * 1e3, 2), step.bound
    (6.13, 'memory')
    >>> hw_model.kv_capacity_tokens(hw_model.LLAMA3_8B, hw_model.H100)
    426784
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Sequence, overload

import numpy as np

from servelab import _checks, _core
from servelab import calibration as _calibration
from servelab import published_measurements as _published_rows

__all__ = [
    "ModelSpec",
    "GpuSpec",
    "Efficiency",
    "StepCost",
    "StepCosts",
    "DEFAULT_EFFICIENCY",
    "LLAMA3_8B",
    "LLAMA3_70B",
    "LLAMA32_1B",
    "H100",
    "H200",
    "A100_80GB",
    "GPUS",
    "MODELS",
    "step_cost",
    "step_cost_many",
    "decode_step_cost",
    "decode_step_costs",
    "prefill_cost",
    "kv_capacity_tokens",
    "max_batch",
    "weight_read_lower_bound_s",
    "price_constants",
    "check_tp",
    "allreduce_s",
    "tensor_parallel_cost",
    "fewest_cards",
    "NVLINK_HOP_S",
    "PCIE_GEN5_X16",
    "PCIE_GEN4_X16",
    "kv_host_transfer_s",
    "Link",
    "NVLINK_H100",
    "NETWORK_400G",
    "INSTANT_LINK",
    "kv_transfer_s",
    "LLAMA2_7B",
    "LLAMA2_13B",
    "LLAMA2_70B",
    "H100_FP8",
    "H200_FP8",
    "Measurement",
    "MEASURED",
    "calibrate",
]

GB = 1e9  # the lecture's GB is decimal (SPEC.md §2)
KiB = 1024


def _validate(check, spec: object, ints: tuple[str, ...] = (), reals: tuple[str, ...] = (),
              flags: tuple[str, ...] = ()) -> None:
    """Runs a Rust validator (it names the bad field, its value and the allowed range or type),
    then stores each field as a plain Python int, float or bool, so that numpy scalars given
    for them cannot overflow in later arithmetic."""
    check(spec)
    for names, kind in ((ints, int), (reals, float), (flags, bool)):
        for name in names:
            object.__setattr__(spec, name, kind(getattr(spec, name)))


_MODEL_INTS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size")


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a Llama-style decoder-only transformer (GQA attention, SwiGLU MLP, RMSNorm).

    Validated on construction; a bad field raises ``ValueError`` naming it.

    >>> import dataclasses
    >>> no_gqa = dataclasses.replace(LLAMA3_8B, n_kv_heads=32)   # exercise 3
    >>> no_gqa.kv_bytes_per_token / KiB
    512.0
    >>> ModelSpec("bad", 32, 4096, 32, 7, 128, 14336, 128256)
    Traceback (most recent call last):
    ...
    ValueError: n_heads must be a multiple of n_kv_heads, got n_heads=32 and n_kv_heads=7
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_ff: int
    vocab_size: int
    tie_embeddings: bool = False
    bytes_per_param: float = 2.0  # BF16

    def __post_init__(self) -> None:
        _checks.instance("name", self.name, str, "a str")
        _validate(_core.validate_model, self, _MODEL_INTS, ("bytes_per_param",), ("tie_embeddings",))

    @property
    def param_count(self) -> int:
        """Every parameter: layers, norms, embedding table, LM head (unless tied)."""
        return int(_core.param_count(self))

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights at ``bytes_per_param``."""
        return float(_core.weight_bytes(self))

    @property
    def kv_bytes_per_token(self) -> float:
        """``2 (K and V) x n_layers x n_kv_heads x d_head x bytes_per_param`` (§2.4)."""
        return float(_core.kv_bytes_per_token(self))


@dataclass(frozen=True)
class GpuSpec:
    """A GPU as the roofline sees it: dense peak FLOP/s, HBM bandwidth (B/s), memory (B), and
    its link to the other GPUs of its node for tensor parallelism (§8.1): ``link_bandwidth``
    in B/s each way (0: no link, a single card) and ``link_latency_s`` per hop of a ring.
    ``host_link_bandwidth``: B/s each way between the card and host memory (PCIe), which a
    tiered KV cache pays to offload blocks and bring them back (§8, milestone 4b; 0: no host
    link); the presets' figures and their source are beside them.

    >>> round(H100.ridge_point)
    295
    """

    name: str
    peak_flops: float
    hbm_bandwidth: float
    memory_bytes: float
    link_bandwidth: float = 0.0
    link_latency_s: float = 0.0
    host_link_bandwidth: float = 0.0

    def __post_init__(self) -> None:
        _checks.instance("name", self.name, str, "a str")
        _validate(_core.validate_gpu, self, reals=("peak_flops", "hbm_bandwidth", "memory_bytes"))
        for field in ("link_bandwidth", "link_latency_s", "host_link_bandwidth"):
            v = getattr(self, field)
            if not _checks.is_real(v) or not 0 <= v < float("inf"):
                raise ValueError(f"{field} must be a non-negative finite number, got {v!r}")
            object.__setattr__(self, field, float(v))

    @property
    def ridge_point(self) -> float:
        """FLOP per byte at which the roofline bends: ``peak_flops / hbm_bandwidth`` (§3.2)."""
        return self.peak_flops / self.hbm_bandwidth


@dataclass(frozen=True)
class Efficiency:
    """The lecture's discounts: fraction of peak compute and bandwidth reached, fixed overhead.

    >>> Efficiency(compute=0.5).bandwidth
    0.8
    """

    compute: float = 0.70
    bandwidth: float = 0.80
    overhead_s: float = 0.5e-3

    def __post_init__(self) -> None:
        _validate(_core.validate_efficiency, self, reals=("compute", "bandwidth", "overhead_s"))


DEFAULT_EFFICIENCY = Efficiency()

# Public configs of Meta's Llama 3 (SPEC.md §2). Untied embeddings, vocabulary 128256.
LLAMA3_8B = ModelSpec("Llama-3-8B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                      d_head=128, d_ff=14336, vocab_size=128256)
LLAMA3_70B = ModelSpec("Llama-3-70B", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                       d_head=128, d_ff=28672, vocab_size=128256)

# NVIDIA datasheets: BF16 dense (no sparsity) peak, HBM bandwidth, memory in decimal GB.
# Links: the datasheets give NVLink's total bidirectional bandwidth per GPU (H100 and H200
# SXM, NVLink 4: 900 GB/s; A100 SXM, NVLink 3: 600 GB/s); a ring all-reduce sends and
# receives at once, so each direction gets half. The per-hop latency is not a datasheet
# figure: 2 us is an assumed order of magnitude of one small NCCL transfer over NVLink.
# Host link: the same datasheets give PCIe's bidirectional total, "PCIe Gen5: 128 GB/s" for
# H100 and H200 SXM (x16 lanes at 32 GT/s) and "PCIe Gen4: 64 GB/s" for A100 80GB SXM; offload
# and reload each use one direction, so each gets half: 64 GB/s and 32 GB/s.
NVLINK_HOP_S = 2e-6
PCIE_GEN5_X16 = 128 * GB / 2
PCIE_GEN4_X16 = 64 * GB / 2
H100 = GpuSpec("H100-SXM", peak_flops=989e12, hbm_bandwidth=3.35e12, memory_bytes=80 * GB,
               link_bandwidth=900 * GB / 2, link_latency_s=NVLINK_HOP_S,
               host_link_bandwidth=PCIE_GEN5_X16)
H200 = GpuSpec("H200", peak_flops=989e12, hbm_bandwidth=4.8e12, memory_bytes=141 * GB,
               link_bandwidth=900 * GB / 2, link_latency_s=NVLINK_HOP_S,
               host_link_bandwidth=PCIE_GEN5_X16)
A100_80GB = GpuSpec("A100-80GB", peak_flops=312e12, hbm_bandwidth=2.039e12, memory_bytes=80 * GB,
                    link_bandwidth=600 * GB / 2, link_latency_s=NVLINK_HOP_S,
                    host_link_bandwidth=PCIE_GEN4_X16)

# Llama 2's public configs (the models of the published measurements, ``MEASURED``): vocabulary
# 32000, untied; 7B and 13B without GQA, 70B with 8 KV heads.
LLAMA2_7B = ModelSpec("Llama-2-7B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32,
                      d_head=128, d_ff=11008, vocab_size=32000)
LLAMA2_13B = ModelSpec("Llama-2-13B", n_layers=40, d_model=5120, n_heads=40, n_kv_heads=40,
                       d_head=128, d_ff=13824, vocab_size=32000)
LLAMA2_70B = ModelSpec("Llama-2-70B", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                       d_head=128, d_ff=28672, vocab_size=32000)
# Meta's public config of Llama-3.2-1B: the same 128,256-token vocabulary as Llama-3-8B, so it
# can draft for it (§8 milestone 4a); tied embeddings. The default price of a draft step.
LLAMA32_1B = ModelSpec("Llama-3.2-1B", n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8,
                       d_head=64, d_ff=8192, vocab_size=128256, tie_embeddings=True)
# The same cards at their FP8 dense tensor-core peak (the datasheets: 1979 TFLOP/s, twice BF16),
# for engines that run the matmuls in FP8 (W8A8); pair them with a bytes_per_param=1 model.
H100_FP8 = dataclasses.replace(H100, name="H100-SXM (FP8)", peak_flops=1979e12)
H200_FP8 = dataclasses.replace(H200, name="H200 (FP8)", peak_flops=1979e12)

GPUS: dict[str, GpuSpec] = {g.name: g for g in (H100, H200, A100_80GB)}
MODELS: dict[str, ModelSpec] = {m.name: m for m in (LLAMA3_8B, LLAMA3_70B)}


@dataclass(frozen=True)
class StepCost:
    """The price of one forward step. Times in seconds, FLOPs and bytes as floats."""

    time_s: float
    flops: float
    bytes_moved: float
    weight_bytes: float  # weights streamed + embedding rows looked up
    kv_bytes: float  # KV cache read (contexts) + written (new tokens)
    compute_s: float
    memory_s: float
    bound: Literal["compute", "memory"]
    mfu: float  # achieved FLOP/s / peak FLOP/s over the whole step, overhead included
    intensity: float  # FLOP per byte moved
    n_tokens: int
    n_seqs: int
    comm_s: float = 0.0  # tensor parallelism: the all-reduces' time, on top of the roofline
    tp: int = 1  # cards the step is split across; FLOPs, bytes and mfu are per card

    @classmethod
    def _from_core(cls, d: dict[str, Any]) -> StepCost:
        """From the core's dict of its ``StepCost`` fields (``compute_bound`` a bool). Read key by
        key into positional arguments: twice as fast as ``cls(**d)`` on this hot path."""
        return cls(d["time_s"], d["flops"], d["bytes_moved"], d["weight_bytes"], d["kv_bytes"], d["compute_s"],
                   d["memory_s"], "compute" if d["compute_bound"] else "memory", d["mfu"], d["intensity"],
                   d["n_tokens"], d["n_seqs"])


@dataclass(frozen=True)
class StepCosts:
    """Many steps' costs as numpy columns (what the vectorised entry points return)."""

    time_s: np.ndarray
    flops: np.ndarray
    bytes_moved: np.ndarray
    weight_bytes: np.ndarray
    kv_bytes: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    compute_bound: np.ndarray
    mfu: np.ndarray
    intensity: np.ndarray

    def __len__(self) -> int:
        return len(self.time_s)


_STEP_COLUMNS = [f.name for f in dataclasses.fields(StepCosts)]  # the core's order (StepCosts::NAMES)


def _int_array(name: str, values: Iterable[int] | np.ndarray) -> np.ndarray:
    return _checks.int64_array(name, values)


def _as_batch(batch: object) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` as two int64 columns (new_tokens, context_len). A numpy array of shape (n, 2)
    or a list of integer pairs goes through numpy in one piece (a batch of millions of sequences
    takes no Python loop); anything else is read pair by pair, to name the first bad one."""
    if isinstance(batch, (str, bytes)) or not hasattr(batch, "__iter__"):
        raise TypeError("batch must be a sequence of (new_tokens, context_len) pairs, "
                        f"got {type(batch).__name__} {batch!r:.80}")
    try:
        arr = np.asarray(batch) if isinstance(batch, (list, tuple, np.ndarray)) else None
    except (TypeError, ValueError, OverflowError):  # ragged, or ints past int64
        arr = None
    if arr is not None and arr.ndim == 2 and arr.shape[1] == 2 and arr.dtype.kind in "iu" and (
            arr.dtype.kind == "i" or not arr.size or int(arr.max()) < 2**63):
        return (np.ascontiguousarray(arr[:, 0], dtype=np.int64),
                np.ascontiguousarray(arr[:, 1], dtype=np.int64))
    pairs = []
    for i, seq in enumerate(batch):  # type: ignore[attr-defined]
        try:
            new_tokens, context_len = seq
        except (TypeError, ValueError):
            raise ValueError(
                f"batch[{i}] must be a pair (new_tokens, context_len), got {seq!r}") from None
        pairs.append((_as_int(f"batch[{i}].new_tokens", new_tokens),
                      _as_int(f"batch[{i}].context_len", context_len)))
    cols = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return np.ascontiguousarray(cols[:, 0]), np.ascontiguousarray(cols[:, 1])


def _as_int(name: str, value: object) -> int:
    if not _checks.is_int(value):  # a ValueError, as the Rust core's own check of a batch raises
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not -(2**63) <= int(value) < 2**63:  # the core counts in i64
        raise ValueError(f"{name} must fit in a signed 64-bit integer, got {value}")
    return int(value)



def step_cost(model: ModelSpec, gpu: GpuSpec, batch: Sequence[tuple[int, int]] | np.ndarray,
              efficiency: Efficiency = DEFAULT_EFFICIENCY, *, tp: int = 1) -> StepCost:
    """Cost of one forward over ``batch``, a list of ``(new_tokens, context_len)`` per sequence
    (or an integer array of shape (n, 2), the cheaper form for a batch of many sequences).

    ``context_len`` is the number of tokens already in that sequence's KV cache: a prefill of
    a 2048-token prompt is ``[(2048, 0)]``, a decode step of 64 sequences at context 1024 is
    ``[(1, 1024)] * 64``, and a chunked prefill mixes both in one step.

    ``tp`` splits the step across that many cards (see :func:`tensor_parallel_cost`).

    >>> s = step_cost(LLAMA3_8B, H100, [(2048, 0)])
    >>> round(s.time_s / 2048 * 1e6, 1), s.bound
    (21.2, 'compute')
    """
    new_tokens, context_len = _as_batch(batch)
    whole = StepCost._from_core(_core.step_cost_columns((model, gpu, efficiency), new_tokens, context_len))
    return whole if check_tp(model, gpu, tp) == 1 else tensor_parallel_cost(whole, model, gpu,
                                                                            efficiency, tp)


def _costs(d: dict[str, np.ndarray]) -> StepCosts:
    return StepCosts(**d)


@overload
def step_cost_many(model: ModelSpec, gpu: GpuSpec, new_tokens: Sequence[int] | np.ndarray,
                   context_len: Sequence[int] | np.ndarray, offsets: Sequence[int] | np.ndarray,
                   efficiency: Efficiency = ..., *, columns: None = None, out: None = None) -> StepCosts: ...


@overload
def step_cost_many(model: ModelSpec, gpu: GpuSpec, new_tokens: Sequence[int] | np.ndarray,
                   context_len: Sequence[int] | np.ndarray, offsets: Sequence[int] | np.ndarray,
                   efficiency: Efficiency = ..., *, columns: Sequence[str] | None = None,
                   out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]: ...


def step_cost_many(model: ModelSpec, gpu: GpuSpec, new_tokens: Sequence[int] | np.ndarray,
                   context_len: Sequence[int] | np.ndarray, offsets: Sequence[int] | np.ndarray,
                   efficiency: Efficiency = DEFAULT_EFFICIENCY, *, columns: Sequence[str] | None = None,
                   out: dict[str, np.ndarray] | None = None) -> StepCosts | dict[str, np.ndarray]:
    """Vectorised :func:`step_cost` over many steps (runs in Rust without the GIL).

    The steps come in compressed form: step ``s`` holds the sequences
    ``offsets[s]:offsets[s+1]`` of the ``new_tokens`` and ``context_len`` columns.
    ``columns`` (names of :class:`StepCosts` fields) computes only those and returns them as a
    dict: a sweep that reads two columns of a million steps then writes 16 MB, not 80. ``out``
    (instead of ``columns``) maps column names to the caller's arrays, one element per step
    (float64; bool for ``compute_bound``), which are filled in place and returned: a loop that
    reuses them allocates nothing. On an error the arrays hold the steps before the bad one.

    >>> c = step_cost_many(LLAMA3_8B, H100, [2048, 1, 1], [0, 512, 512], [0, 1, 3])
    >>> len(c), c.compute_bound.tolist()
    (2, [True, False])
    >>> d = step_cost_many(LLAMA3_8B, H100, [2048, 1, 1], [0, 512, 512], [0, 1, 3],
    ...                    columns=["time_s", "mfu"])
    >>> sorted(d), bool((d["time_s"] == c.time_s).all())
    (['mfu', 'time_s'], True)
    >>> buf = {"time_s": np.empty(2)}
    >>> step_cost_many(LLAMA3_8B, H100, [2048, 1, 1], [0, 512, 512], [0, 1, 3], out=buf) is buf
    True
    >>> bool((buf["time_s"] == c.time_s).all())
    True
    """
    if out is not None:
        if columns is not None:
            raise ValueError("pass columns or out, not both (out's keys are the columns)")
        if not isinstance(out, dict):
            raise ValueError(f"out must be a dict of column name -> numpy array, got {type(out).__name__}")
    names = None if columns is None or isinstance(columns, (str, bytes)) or not hasattr(columns, "__iter__") \
        else list(columns)
    if columns is not None and (names is None or not all(isinstance(x, str) for x in names)):
        raise ValueError(f"columns must be a list of column names, got {columns!r}")
    n, c, o = (_int_array("new_tokens", new_tokens), _int_array("context_len", context_len),
               _int_array("offsets", offsets))
    # without out, fresh arrays of the columns asked for (in StepCosts' order)
    d = out if out is not None else {k: np.empty(max(len(o) - 1, 0), bool if k == "compute_bound" else np.float64)
                                     for k in _step_columns(names)}
    _core.step_cost_many_into((model, gpu, efficiency), n, c, o, d)
    return _costs(d) if out is None and columns is None else d


def _step_columns(names: list[str] | None) -> list[str]:
    """The fields of :class:`StepCosts` named in ``names`` (None: all), in their order."""
    if names is None:
        return _STEP_COLUMNS
    if not names:
        raise ValueError("columns must name at least one column, got an empty list")
    for i, name in enumerate(names):
        if name not in _STEP_COLUMNS:
            raise ValueError(f"columns[{i}] must be one of {', '.join(_STEP_COLUMNS)}, got '{name}'")
    return [k for k in _STEP_COLUMNS if k in names]


def decode_step_costs(model: ModelSpec, gpu: GpuSpec, batch_size: Sequence[int] | np.ndarray,
                      context_len: Sequence[int] | np.ndarray, new_tokens: Sequence[int] | np.ndarray | None = None,
                      efficiency: Efficiency = DEFAULT_EFFICIENCY) -> StepCosts:
    """Vectorised cost of uniform steps: ``batch_size[s]`` sequences, each with
    ``new_tokens[s]`` (default 1: decode) on top of ``context_len[s]`` cached tokens.

    >>> c = decode_step_costs(LLAMA3_8B, H100, [1, 64], [1024, 1024])
    >>> [round(t * 1e3, 2) for t in c.time_s.tolist()]
    [6.15, 9.31]
    """
    b = _int_array("batch_size", batch_size)
    n = np.ones_like(b) if new_tokens is None else _int_array("new_tokens", new_tokens)
    return _costs(_core.step_cost_columns((model, gpu, efficiency), n, _int_array("context_len", context_len), b))


def decode_step_cost(model: ModelSpec, gpu: GpuSpec, batch_size: int, context_len: int,
                     efficiency: Efficiency = DEFAULT_EFFICIENCY) -> StepCost:
    """One decode step: ``batch_size`` sequences, one new token each, ``context_len`` cached.

    >>> round(decode_step_cost(LLAMA3_8B, A100_80GB, 1, 512).time_s * 1e3, 2)
    9.74
    """
    b = _checks.positive_int("batch_size", batch_size, _core.MAX_TOKENS)
    c = _as_int("context_len", context_len)
    if not 0 <= c <= _core.MAX_TOKENS:
        raise ValueError(f"context_len must be an integer in [0, {_core.MAX_TOKENS}], got {c}")
    # one group of b identical sequences: no list of b pairs (b may be millions)
    cols = _core.step_cost_columns((model, gpu, efficiency), np.array([1]), np.array([c]), np.array([b]))
    first = {k: float(v[0]) for k, v in cols.items() if k != "compute_bound"}
    return StepCost._from_core({**first, "compute_bound": bool(cols["compute_bound"][0]), "n_tokens": b, "n_seqs": b})


def prefill_cost(model: ModelSpec, gpu: GpuSpec, prompt_len: int,
                 efficiency: Efficiency = DEFAULT_EFFICIENCY) -> StepCost:
    """Prefill of one prompt of ``prompt_len`` tokens with an empty cache.

    >>> round(prefill_cost(LLAMA3_8B, H100, 8192).time_s, 1)
    0.2
    """
    return step_cost(model, gpu, [(_checks.positive_int("prompt_len", prompt_len, _core.MAX_TOKENS), 0)], efficiency)


def kv_capacity_tokens(model: ModelSpec, gpu: GpuSpec, mem_util: float = 0.9, *,
                       tp: int = 1) -> int:
    """Tokens of KV cache that fit beside the weights in ``mem_util`` of the GPU's memory
    (§3.5; 0.9 is vLLM's default). Zero, never negative, when the weights alone do not fit.
    With ``tp`` cards each holds ``1/tp`` of the weights and of every token's KV (KV heads
    replicated past ``n_kv_heads`` cards, see :func:`tensor_parallel_cost`).

    >>> kv_capacity_tokens(LLAMA3_70B, H100)   # exercise 1d: 141 GB of weights, 72 GB usable
    0
    >>> kv_capacity_tokens(LLAMA3_70B, H100, tp=2)   # 1.45 GB left per card
    8827
    """
    mem_util = _checks.real("mem_util", mem_util, finite=False)
    tp = check_tp(model, gpu, tp)  # a plain int from here on (a numpy int8 would overflow)
    if tp == 1:
        return int(_core.kv_capacity_tokens(model, gpu, mem_util))
    _core.kv_capacity_tokens(model, gpu, mem_util)  # the one-card checks of mem_util
    free = gpu.memory_bytes * mem_util - model.weight_bytes / tp
    per_token = model.kv_bytes_per_token / min(tp, model.n_kv_heads)
    return max(0, int(free // per_token))


def max_batch(model: ModelSpec, gpu: GpuSpec, context_len: int, mem_util: float = 0.9, *,
              tp: int = 1) -> int:
    """Most sequences of ``context_len`` tokens whose KV caches fit at once (§3.5), on ``tp``
    cards.

    >>> max_batch(LLAMA3_8B, H100, 1024)
    416
    """
    tp = check_tp(model, gpu, tp)  # a plain int from here on (a numpy int8 would overflow)
    if tp == 1:
        return int(_core.max_batch(model, gpu, _as_int("context_len", context_len),
                                   _checks.real("mem_util", mem_util, finite=False)))
    _core.max_batch(model, gpu, _as_int("context_len", context_len),
                    _checks.real("mem_util", mem_util, finite=False))  # the one-card checks
    return kv_capacity_tokens(model, gpu, mem_util, tp=tp) // int(context_len)


def check_tp(model: ModelSpec, gpu: GpuSpec, tp: int) -> int:
    """``tp`` as an int, or ``ValueError`` when ``model`` cannot be split across ``tp`` cards of
    ``gpu``: ``tp`` must divide ``n_heads`` and ``d_ff``, ``tp`` and ``n_kv_heads`` must divide
    one another (KV heads split, or replicated past ``n_kv_heads`` cards), and the GPU needs a
    link. The same rules as the real split, :mod:`servelab.tiny_llm.tensor_parallel`.

    >>> check_tp(LLAMA3_8B, H100, 3)
    Traceback (most recent call last):
    ...
    ValueError: tp=3 must divide n_heads=32 (each card holds whole query heads)
    """
    _checks.instance("model", model, ModelSpec, "a servelab.hw_model.ModelSpec")
    _checks.instance("gpu", gpu, GpuSpec, "a servelab.hw_model.GpuSpec")
    if not _checks.is_int(tp) or tp < 1:
        raise ValueError(f"tp must be a positive integer (the number of cards), got {tp!r}")
    tp = int(tp)  # a numpy int8 would overflow in the arithmetic below
    if tp == 1:
        return 1
    if model.n_heads % tp:
        raise ValueError(f"tp={tp} must divide n_heads={model.n_heads} (each card holds whole "
                         "query heads)")
    if model.d_ff % tp:
        raise ValueError(f"tp={tp} must divide d_ff={model.d_ff}")
    if model.n_kv_heads % tp and tp % model.n_kv_heads:
        raise ValueError(f"tp={tp} and n_kv_heads={model.n_kv_heads}: one must divide the other")
    if not gpu.link_bandwidth > 0:
        raise ValueError(f"tp={tp} needs a link between cards, but {gpu.name} has "
                         "link_bandwidth 0")
    return int(tp)


def allreduce_s(gpu: GpuSpec, tp: int, n_bytes: float) -> float:
    """One ring all-reduce of an ``n_bytes`` tensor over ``tp`` cards: ``2 (tp - 1)`` hops,
    each moving ``n_bytes / tp`` each way, so ``2 (tp - 1) / tp x n_bytes / link_bandwidth``
    plus ``2 (tp - 1)`` hop latencies; zero on one card.

    >>> allreduce_s(H100, 1, 1e6), round(allreduce_s(H100, 2, 1e6) * 1e6, 2)
    (0.0, 6.22)
    """
    _checks.instance("gpu", gpu, GpuSpec, "a servelab.hw_model.GpuSpec")
    tp = _checks.integer("tp", tp, 1, None)
    n_bytes = _checks.real("n_bytes", n_bytes, 0.0)
    if tp == 1:
        return 0.0
    return 2 * (tp - 1) / tp * n_bytes / gpu.link_bandwidth + 2 * (tp - 1) * gpu.link_latency_s


def kv_host_transfer_s(model: ModelSpec, gpu: GpuSpec, n_tokens: int) -> float:
    """Seconds to move the KV of ``n_tokens`` tokens between the GPU and host memory, one way:
    ``n_tokens x kv_bytes_per_token / host_link_bandwidth`` (§8, milestone 4b: a tiered KV
    cache offloads evicted blocks and brings them back on a hit instead of recomputing them).
    The link is taken at its full figure, with no latency term and no overlap with compute.

    >>> round(kv_host_transfer_s(LLAMA3_8B, H100, 1024) * 1e3, 2)   # 128 MiB over 64 GB/s
    2.1
    >>> kv_host_transfer_s(LLAMA3_8B, H100, 0)
    0.0
    """
    _checks.instance("model", model, ModelSpec, "a servelab.hw_model.ModelSpec")
    _checks.instance("gpu", gpu, GpuSpec, "a servelab.hw_model.GpuSpec")
    n_tokens = _checks.integer("n_tokens", n_tokens, 0, None)
    if gpu.host_link_bandwidth <= 0:
        raise ValueError(f"{gpu.name} has host_link_bandwidth 0: no link to host memory to move KV over")
    return n_tokens * model.kv_bytes_per_token / gpu.host_link_bandwidth


def tensor_parallel_cost(whole: StepCost, model: ModelSpec, gpu: GpuSpec,
                         efficiency: Efficiency, tp: int) -> StepCost:
    """The step ``whole`` (priced on one card) split across ``tp`` cards, Megatron-style.

    Each card does ``1/tp`` of the FLOPs and streams ``1/tp`` of the weights (the embedding
    rows looked up are replicated); it reads and writes the KV of its own KV heads,
    ``1/min(tp, n_kv_heads)`` of it. Two all-reduces per layer (after attention, after the MLP)
    sum the cards' partial outputs, ``n_tokens x d_model`` values each, at
    ``bytes_per_param``; they sit on the critical path, so their time adds to the roofline::

        time = max(F/tp / compute_rate, M_card / memory_rate) + 2 L allreduce_s + overhead

    >>> s = step_cost(LLAMA3_70B, H100, [(1, 1024)] * 32, tp=2)
    >>> round(s.time_s * 1e3, 1), s.bound, round(s.comm_s * 1e3, 2)
    (29.3, 'memory', 0.83)
    """
    _checks.instance("whole", whole, StepCost, "a servelab.hw_model.StepCost")
    _checks.instance("efficiency", efficiency, Efficiency, "a servelab.hw_model.Efficiency")
    tp = check_tp(model, gpu, tp)
    emb_rows = 0.0 if model.tie_embeddings else whole.n_tokens * model.d_model * model.bytes_per_param
    weight_bytes = (whole.weight_bytes - emb_rows) / tp + emb_rows
    kv_bytes = whole.kv_bytes / min(tp, model.n_kv_heads)
    flops = whole.flops / tp
    compute_s = flops / (efficiency.compute * gpu.peak_flops)
    memory_s = (weight_bytes + kv_bytes) / (efficiency.bandwidth * gpu.hbm_bandwidth)
    comm_s = 2 * model.n_layers * allreduce_s(
        gpu, tp, whole.n_tokens * model.d_model * model.bytes_per_param)
    time_s = max(compute_s, memory_s) + comm_s + efficiency.overhead_s
    moved = weight_bytes + kv_bytes
    return StepCost(time_s, flops, moved, weight_bytes, kv_bytes, compute_s, memory_s,
                    "compute" if compute_s >= memory_s else "memory",
                    flops / time_s / gpu.peak_flops, flops / moved, whole.n_tokens, whole.n_seqs,
                    comm_s, tp)


def fewest_cards(model: ModelSpec, gpu: GpuSpec, context_len: int = 1, mem_util: float = 0.9,
                 max_tp: int = 64) -> int:
    """Exercise 1(d): the fewest cards of ``gpu`` that hold ``model`` with room for at least
    one sequence of ``context_len`` tokens, over the valid tensor-parallel splits.

    >>> fewest_cards(LLAMA3_8B, H100), fewest_cards(LLAMA3_70B, H100)
    (1, 2)
    """
    max_tp = _checks.integer("max_tp", max_tp, 1, 4096)
    for tp in range(1, max_tp + 1):
        try:
            check_tp(model, gpu, tp)
        except ValueError:
            continue
        if max_batch(model, gpu, context_len, mem_util, tp=tp) >= 1:
            return tp
    raise ValueError(f"{model.name} does not fit on {max_tp} or fewer cards of {gpu.name} "
                     f"(context_len={context_len!r}, mem_util={mem_util!r}, max_tp={max_tp})")


def price_constants(model: ModelSpec, gpu: GpuSpec,
                    efficiency: Efficiency = DEFAULT_EFFICIENCY) -> dict[str, float]:
    """The per-model constants of the step price (what ``cost.rs``'s ``Pricer`` computes once),
    as plain numbers, so that code which may not import servelab (a student's simulator in the
    grader's sandbox) can price steps. With ``T`` new tokens, ``S`` sequences, ``K`` causal
    (query, key) pairs and ``C`` cached context tokens in a step::

        flops = matmul_flops_per_token * T + lm_head_flops_per_seq * S + attn_flops_per_key * K
        bytes = streamed_weight_bytes + embed_row_bytes * T + kv_bytes_per_token * (C + T)
        time  = max(flops / compute_rate, bytes / memory_rate) + overhead_s

    >>> c = price_constants(LLAMA3_8B, H100)
    >>> round(c["streamed_weight_bytes"] / 1e9, 2), c["kv_bytes_per_token"]
    (15.01, 131072.0)
    """
    _core.validate_model(model)  # names a bad or missing field, like every entry point
    _core.validate_gpu(gpu)
    _core.validate_efficiency(efficiency)
    d_model, n_layers, d_ff = int(model.d_model), int(model.n_layers), int(model.d_ff)
    embedding = int(model.vocab_size) * d_model
    streamed = int(_core.param_count(model)) - (0 if model.tie_embeddings else embedding)
    q, kv = int(model.n_heads) * int(model.d_head), int(model.n_kv_heads) * int(model.d_head)
    layer = 2 * d_model * q + 2 * d_model * kv + 3 * d_model * d_ff
    return {
        "matmul_flops_per_token": 2.0 * n_layers * layer,
        "lm_head_flops_per_seq": 2.0 * embedding,
        "attn_flops_per_key": 4.0 * n_layers * q,
        "streamed_weight_bytes": streamed * float(model.bytes_per_param),
        "embed_row_bytes": d_model * float(model.bytes_per_param),
        "kv_bytes_per_token": float(_core.kv_bytes_per_token(model)),
        "compute_rate": efficiency.compute * gpu.peak_flops,
        "memory_rate": efficiency.bandwidth * gpu.hbm_bandwidth,
        "overhead_s": efficiency.overhead_s,
    }


def weight_read_lower_bound_s(model: ModelSpec, gpu: GpuSpec) -> float:
    """Time to stream every weight once at full nominal bandwidth: the physical floor of a
    batch-1 decode step (§3.3), with no efficiency discount and no overhead.

    >>> round(weight_read_lower_bound_s(LLAMA3_8B, H100) * 1e3, 1)
    4.8
    """
    _core.validate_gpu(gpu)
    return float(_core.weight_bytes(model)) / float(gpu.hbm_bandwidth)



@dataclass(frozen=True)
class Link:
    """A link that carries a request's KV cache from a prefill card to a decode card
    (prefill/decode disaggregation, course project §8): ``bandwidth`` in bytes per second one
    way (``math.inf`` for an instant link) and ``latency_s`` added to every transfer.

    >>> Link("slow", bandwidth=0.0)
    Traceback (most recent call last):
    ...
    ValueError: bandwidth must be a number > 0.0, got 0.0
    """

    name: str
    bandwidth: float
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        _checks.instance("name", self.name, str, "a str")
        object.__setattr__(self, "bandwidth",
                           _checks.real("bandwidth", self.bandwidth, 0.0, lo_open=True, finite=False))
        object.__setattr__(self, "latency_s", _checks.real("latency_s", self.latency_s, 0.0))


# Within a node: one direction of NVLink 4, half the 900 GB/s total of the H100 SXM datasheet
# (as for tensor parallelism above). Between nodes: one 400 Gb/s NIC per GPU (InfiniBand NDR or
# 400G Ethernet, e.g. ConnectX-7, one per GPU in a DGX H100), 400e9 / 8 = 50 GB/s. The
# latencies are assumed orders of magnitude (one NVLink hop; an RDMA message across a switch),
# not datasheet figures; at KV sizes (megabytes) the bandwidth term dominates either way.
NVLINK_H100 = Link("NVLink 4 (in a node)", bandwidth=900 * GB / 2, latency_s=NVLINK_HOP_S)
NETWORK_400G = Link("400 Gb/s network (between nodes)", bandwidth=400e9 / 8, latency_s=5e-6)
INSTANT_LINK = Link("instant", bandwidth=float("inf"), latency_s=0.0)


def kv_transfer_s(model: ModelSpec, tokens: int, link: Link) -> float:
    """Seconds to move the KV of ``tokens`` tokens over ``link``:
    ``latency_s + kv_bytes_per_token x tokens / bandwidth`` (the simulator's order of
    operations, ``rust/src/sim/disaggregated.rs``). A 512-token Llama-3-8B prompt is 64 MiB of
    KV: 0.15 ms over NVLink, 1.3 ms over a 400 Gb/s network.

    >>> round(kv_transfer_s(LLAMA3_8B, 512, NVLINK_H100) * 1e3, 3)
    0.151
    >>> round(kv_transfer_s(LLAMA3_8B, 512, NETWORK_400G) * 1e3, 3)
    1.347
    >>> kv_transfer_s(LLAMA3_8B, 512, INSTANT_LINK)
    0.0
    """
    _checks.instance("model", model, ModelSpec, "a servelab.hw_model.ModelSpec")
    tokens = _checks.integer("tokens", tokens, 0, None)
    _checks.instance("link", link, Link, "a servelab.hw_model.Link")
    return link.latency_s + model.kv_bytes_per_token * tokens / link.bandwidth


# --- the paper GPU held against real ones (lecture §8.3): measurements and a fitted Efficiency ---

def _preset(value: object, cls: type[ModelSpec] | type[GpuSpec], what: str) -> Any:
    """A spec itself, or the name of one of this module's presets (``"LLAMA3_8B"`` or its
    ``.name``, ``"Llama-3-8B"``)."""
    if isinstance(value, cls):
        return value
    found = {k: v for k, v in globals().items() if k.isupper() and isinstance(v, cls)}
    if isinstance(value, str):
        for k, v in found.items():
            if value in (k, v.name):
                return v
    raise ValueError(f"{what} must be a servelab.hw_model.{cls.__name__} or a preset name "
                     f"({', '.join(found)}), got {value!r}")


@dataclass(frozen=True)
class Measurement:
    """One forward step timed on a real card: ``batch`` as ``(new_tokens, context_len)``
    pairs (as :func:`step_cost` takes it), ``time_s`` measured, on ``tp`` cards; ``source``
    (a paper, a benchmark page, a repository file) and ``notes`` (precision, engine, how the
    number became a step time). ``model`` and ``gpu`` take a spec or a preset name; 8-bit
    weights are a model with ``bytes_per_param=1``. Checked on construction: a positive
    finite time, a valid split, and a batch whose KV fits beside the weights.

    >>> m = Measurement.uniform("LLAMA3_8B", "H100", 1, 1, 100, 7.88e-3)
    >>> m.label
    'Llama-3-8B on H100-SXM: decode B=1 ctx 100'
    >>> Measurement.uniform("LLAMA3_8B", "H100", 4096, 1, 8192, 0.1)
    Traceback (most recent call last):
    ...
    ValueError: batch needs the KV of 33558528 tokens (batch_size=4096 sequences of new_tokens + context_len), but Llama-3-8B on 1 x H100-SXM holds 487819 beside its weights
    """

    model: ModelSpec
    gpu: GpuSpec
    batch: tuple[tuple[int, int], ...]
    time_s: float
    tp: int = 1
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        model, gpu = _preset(self.model, ModelSpec, "model"), _preset(self.gpu, GpuSpec, "gpu")
        new, ctx = _as_batch(self.batch)
        if not len(new) or (new < 1).any() or (ctx < 0).any():
            raise ValueError("batch must hold at least one (new_tokens >= 1, context_len >= 0) pair, "
                             f"got {self.batch!r:.80}")
        tp = check_tp(model, gpu, self.tp)
        need, cap = int((new + ctx).sum()), kv_capacity_tokens(model, gpu, 1.0, tp=tp)
        if need > cap:
            raise ValueError(f"batch needs the KV of {need} tokens (batch_size={len(new)} sequences of "
                             f"new_tokens + context_len), but {model.name} on {tp} x {gpu.name} holds {cap} "
                             "beside its weights")
        for name, v in (("model", model), ("gpu", gpu), ("tp", tp),
                        ("batch", tuple(zip(new.tolist(), ctx.tolist()))),
                        ("time_s", _checks.real("time_s", self.time_s, 0.0, lo_open=True)),
                        ("source", _checks.instance("source", self.source, str, "a str")),
                        ("notes", _checks.instance("notes", self.notes, str, "a str"))):
            object.__setattr__(self, name, v)

    @classmethod
    def uniform(cls, model: ModelSpec | str, gpu: GpuSpec | str, batch_size: int, new_tokens: int,
                context_len: int, time_s: float, tp: int = 1, source: str = "", notes: str = "") -> Measurement:
        """A step of ``batch_size`` equal sequences (what the CSV format holds)."""
        b = _checks.positive_int("batch_size", batch_size, _core.MAX_TOKENS)
        # a preset name is resolved by __post_init__ (the fields hold specs from then on)
        return cls(model, gpu, ((new_tokens, context_len),) * b, time_s, tp, source, notes)  # type: ignore[arg-type]

    @property
    def label(self) -> str:
        """``model on gpu[, TP n]: decode|prefill B=.. ctx ..`` (the first sequence's shape)."""
        n, c = self.batch[0]
        kind = "decode" if n == 1 else f"prefill {n}"
        split = f" x{self.tp}" if self.tp > 1 else ""
        return f"{self.model.name} on {self.gpu.name}{split}: {kind} B={len(self.batch)} ctx {c}"


def calibrate(measurements: Iterable[Measurement], fit: Sequence[str] | str = _calibration.FIELDS,
              start: Efficiency = DEFAULT_EFFICIENCY) -> _calibration.Calibration:
    """Fits the discounts named in ``fit`` (of ``compute``, ``bandwidth``, ``overhead_s``; the
    others stay at ``start``'s) to ``measurements`` by least squares on relative error, and
    reports every row before and after, with a leave-one-out error (:mod:`servelab.calibration`).

    >>> cal = calibrate(MEASURED)
    >>> cal.mape_after < 0.15 < cal.mape_before
    True
    >>> calibrate([])
    Traceback (most recent call last):
    ...
    ValueError: measurements must hold at least one Measurement, got an empty table
    """
    if isinstance(measurements, (str, bytes)) or not hasattr(measurements, "__iter__"):
        raise TypeError(f"measurements must be a list of servelab.hw_model.Measurement, got {measurements!r:.80}")
    rows = list(measurements)
    if not rows:
        raise ValueError("measurements must hold at least one Measurement, got an empty table")
    for i, m in enumerate(rows):
        _checks.instance(f"measurements[{i}]", m, Measurement, "a servelab.hw_model.Measurement")
    fields = (fit,) if isinstance(fit, str) else tuple(fit) if isinstance(fit, (list, tuple)) else ()
    if not fields or any(not isinstance(f, str) or f not in _calibration.FIELDS for f in fields):
        raise ValueError(f"fit must name some of {', '.join(_calibration.FIELDS)}, got {fit!r}")
    _checks.instance("start", start, Efficiency, "a servelab.hw_model.Efficiency")
    unit = Efficiency(1.0, 1.0, 0.0)  # each step's seconds at full peak: the fit divides them
    costs = [step_cost(m.model, m.gpu, m.batch, unit, tp=m.tp) for m in rows]
    C, M, K = (np.array([getattr(c, k) for c in costs]) for k in ("compute_s", "memory_s", "comm_s"))
    T = np.array([m.time_s for m in rows])
    s = (start.compute, start.bandwidth, start.overhead_s)
    eff = _calibration.fit(C, M, K, T, s, fields)
    before, after = _calibration.predict(C, M, K, s), _calibration.predict(C, M, K, eff)
    loo = _calibration.leave_one_out(C, M, K, T, s, fields)
    table = tuple(_calibration.CalibrationRow(
        m.label, m.source, m.time_s, float(before[i]), float(after[i]), float(loo[i]),
        "compute" if C[i] / eff[0] >= M[i] / eff[1] else "memory", float(K[i] / after[i]), m.tp,
        costs[i].n_tokens, costs[i].n_seqs) for i, m in enumerate(rows))
    return _calibration.Calibration(Efficiency(*eff), start, fields, table)


def _published(row: tuple[Any, ...]) -> Measurement:
    model_name, gpu_name, tp, b, n, c, t, bytes_per_param, source, notes = row
    model = _preset(model_name, ModelSpec, "model")
    if bytes_per_param != model.bytes_per_param:  # 8-bit weights: the same shape, half the bytes
        model = dataclasses.replace(model, name=f"{model.name} 8-bit", bytes_per_param=bytes_per_param)
    return Measurement.uniform(model, gpu_name, b, n, c, t, tp, source, notes)


# Published step times (sources, conditions and conversions: servelab.published_measurements)
MEASURED: tuple[Measurement, ...] = tuple(_published(r) for r in _published_rows.ROWS)
