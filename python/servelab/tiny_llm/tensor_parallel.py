"""Tensor parallelism on the real model: tiny_llm split across ``t`` devices (§8.1, milestone 1).

Each *device* is its own set of numpy arrays, as each GPU holds only its share of the weights
(Megatron-LM's layout):

* attention is split by heads: device ``s`` holds the Q columns of query heads
  ``s*H/t .. (s+1)*H/t``, the K and V columns of the KV heads those queries read, and the
  matching rows of ``Wo``. It computes ``attn_s @ Wo_s``, a partial sum of the layer's output;
* the SwiGLU MLP is split by hidden units: the gate and up columns of ``d_ff / t`` units and the
  matching rows of ``Wd``; again a partial sum;
* an **all-reduce** adds the ``t`` partial sums, twice per layer, and every device goes on with
  the full result. The embedding table, the norms and the LM head are replicated.

Which ``t`` can split a model is written once, at :func:`check_split`; which heads a device
holds, at :func:`device_heads`.

The maths is the model's, only the order of the sums changes, so greedy tokens equal the
unsharded model's and logits agree to float32 rounding, but not bit for bit (exercise 10: float
addition is not associative). Two reductions show it:

* ``"ring"`` (default) adds partial sums in a ring all-reduce's order: each ``1/t`` chunk of
  the output starts its sum at a different device, so the order depends on ``t``;
* ``"fixed"`` computes a partial sum per *unit* (one query head of attention, one block of
  ``d_ff / n_heads`` hidden units of the MLP), whatever device holds it, and adds all units in
  one global order. The result no longer depends on ``t``: every ``t`` gives the bits of
  ``t = 1``, the unsharded model reducing in that same order. It pays for it in traffic (a
  device sends one partial per unit, not one per device), as batch-invariant kernels pay in
  speed.

>>> from servelab.tiny_llm import TINY, TinyLLM
>>> tp = TensorParallelLLM(TINY, t=2)
>>> cache = tp.new_cache()
>>> logits = tp.forward(list(b"hello world"), cache)
>>> int(logits.argmax()) == int(TinyLLM(TINY).forward(list(b"hello world")).argmax())
True
>>> len(cache), [len(d) for d in cache.devices], tp.last_comm.n_allreduce
(11, [11, 11], 4)
>>> check_split(TINY, 3)
Traceback (most recent call last):
...
ValueError: t=3 must divide n_heads=4 (each device holds whole query heads)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from servelab import _checks
from servelab.tiny_llm.cache import ContiguousKVCache, KVCache, KVCacheProtocol
from servelab.tiny_llm.config import TINY, ModelConfig
from servelab.tiny_llm.model import (F32, LayerWeights, TinyLLM, attention_partial,
                                     causal_attention, lm_head_logits, mlp_partial, rms_norm,
                                     rope)

__all__ = ["REDUCTIONS", "check_split", "device_heads", "DeviceLayer", "CommStats",
           "ShardedKVCache", "TensorParallelLLM", "ring_allreduce", "fixed_order_sum"]

Reduction = Literal["ring", "fixed"]
REDUCTIONS: tuple[str, ...] = ("ring", "fixed")


def check_split(config: ModelConfig, t: int) -> None:
    """Raise ``ValueError`` unless ``config`` can be split across ``t`` devices: ``t`` divides
    ``n_heads`` (a device holds whole query heads) and ``d_ff``; and either ``t`` divides
    ``n_kv_heads`` (each device holds ``n_kv_heads / t`` KV heads) or ``n_kv_heads`` divides
    ``t`` (a KV head is *replicated* on the ``t / n_kv_heads`` devices whose query heads read
    it, so the KV cache costs more memory in total: the GQA price of wide TP)."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a tiny_llm.ModelConfig, got {config!r:.80}")
    if not _checks.is_int(t) or t < 1:
        raise ValueError(f"t must be a positive integer (the number of devices), got {t!r}")
    H, KV = config.n_heads, config.n_kv_heads
    if H % t:
        raise ValueError(f"t={t} must divide n_heads={H} (each device holds whole query heads)")
    if config.d_ff % t:
        raise ValueError(f"t={t} must divide d_ff={config.d_ff} (each device holds d_ff / t "
                         "hidden units)")
    if KV % t and t % KV:
        raise ValueError(f"t={t} and n_kv_heads={KV}: one must divide the other (a device holds "
                         "n_kv_heads / t KV heads, or one KV head replicated on t / n_kv_heads "
                         "devices)")


def device_heads(config: ModelConfig, t: int, device: int) -> tuple[range, range]:
    """The query heads and the KV heads that ``device`` (of ``t``) holds.

    >>> device_heads(TINY, 4, 3)   # 4 query heads, 2 KV heads: KV head 1 lives on devices 2, 3
    (range(3, 4), range(1, 2))
    """
    check_split(config, t)
    h_per = config.n_heads // t
    group = config.n_heads // config.n_kv_heads  # query heads per KV head
    heads = range(device * h_per, (device + 1) * h_per)
    return heads, range(heads.start // group, (heads.stop - 1) // group + 1)


@dataclass(frozen=True)
class DeviceLayer:
    """One device's share of one layer, each array its own copy (its "device memory").

    ``wqkv``/``wo``/``w_gate_up``/``w_down`` are the device's slab (the ring reduction uses
    them); ``unit_*`` are the same columns cut per unit for the fixed-order reduction:
    ``unit_wq[i]``/``unit_wo[i]`` for its ``i``-th query head, ``unit_wk[j]``/``unit_wv[j]``
    for its ``j``-th KV head, ``unit_mlp[u]`` = (gate-up columns, down rows) of its ``u``-th
    MLP block.
    """

    attn_norm: np.ndarray
    mlp_norm: np.ndarray
    wqkv: np.ndarray
    wo: np.ndarray
    w_gate_up: np.ndarray
    w_down: np.ndarray
    unit_wq: tuple[np.ndarray, ...]
    unit_wk: tuple[np.ndarray, ...]
    unit_wv: tuple[np.ndarray, ...]
    unit_wo: tuple[np.ndarray, ...]
    unit_mlp: tuple[tuple[np.ndarray, np.ndarray], ...]

    def nbytes(self) -> int:
        """Bytes of this device's slab (the unit copies hold the same numbers)."""
        return sum(a.nbytes for a in (self.attn_norm, self.mlp_norm, self.wqkv, self.wo,
                                      self.w_gate_up, self.w_down))


def _copy(a: np.ndarray) -> np.ndarray:
    out = np.ascontiguousarray(a, dtype=F32).copy()
    out.flags.writeable = False
    return out


def _shard_layer(layer: LayerWeights, config: ModelConfig, t: int, device: int) -> DeviceLayer:
    D, q_dim, kv_dim, ff = config.d_head, config.q_dim, config.kv_dim, config.d_ff
    heads, kv_heads = device_heads(config, t, device)
    wq = [layer.wqkv[:, h * D:(h + 1) * D] for h in heads]
    wk = [layer.wqkv[:, q_dim + j * D:q_dim + (j + 1) * D] for j in kv_heads]
    wv = [layer.wqkv[:, q_dim + kv_dim + j * D:q_dim + kv_dim + (j + 1) * D] for j in kv_heads]
    wo = [layer.wo[h * D:(h + 1) * D] for h in heads]
    block = ff // config.n_heads if ff % config.n_heads == 0 else 0
    per_device = ff // t
    cols = range(device * per_device, (device + 1) * per_device)
    units = []
    if block:  # fixed-order units: n_heads blocks of d_ff / n_heads hidden units
        for u in range(cols.start // block, cols.stop // block):
            lo, hi = u * block, (u + 1) * block
            units.append((_copy(np.concatenate([layer.w_gate_up[:, lo:hi],
                                                layer.w_gate_up[:, ff + lo:ff + hi]], axis=1)),
                          _copy(layer.w_down[lo:hi])))
    return DeviceLayer(
        attn_norm=layer.attn_norm, mlp_norm=layer.mlp_norm,  # replicated, read-only already
        wqkv=_copy(np.concatenate(wq + wk + wv, axis=1)), wo=_copy(np.concatenate(wo, axis=0)),
        w_gate_up=_copy(np.concatenate([layer.w_gate_up[:, cols.start:cols.stop],
                                        layer.w_gate_up[:, ff + cols.start:ff + cols.stop]],
                                       axis=1)),
        w_down=_copy(layer.w_down[cols.start:cols.stop]),
        unit_wq=tuple(map(_copy, wq)), unit_wk=tuple(map(_copy, wk)),
        unit_wv=tuple(map(_copy, wv)), unit_wo=tuple(map(_copy, wo)), unit_mlp=tuple(units))


def ring_allreduce(partials: Sequence[np.ndarray]) -> np.ndarray:
    """The sum a ring all-reduce leaves on every device: the columns are cut into ``t``
    chunks, and chunk ``c`` is summed along the ring starting at device ``c + 1`` (its
    reduce-scatter), so each chunk adds the same partials in a different order.

    >>> big = np.float32(1e8)
    >>> parts = [np.full((1, 3), v, np.float32) for v in (big, 1, -big)]
    >>> ring_allreduce(parts).tolist()  # only chunk 1 adds -1e8 + 1e8 before the 1
    [[0.0, 1.0, 0.0]]
    """
    t = len(partials)
    out = np.empty_like(partials[0])
    for c, cols in enumerate(np.array_split(np.arange(out.shape[-1]), t)):
        if cols.size == 0:
            continue
        sl = slice(int(cols[0]), int(cols[-1]) + 1)
        acc = partials[(c + 1) % t][:, sl].copy()
        for step in range(2, t + 1):
            acc += partials[(c + step) % t][:, sl]
        out[:, sl] = acc
    return out


def fixed_order_sum(units: Sequence[np.ndarray]) -> np.ndarray:
    """Add per-unit partial sums left to right, in the one global unit order."""
    acc = units[0].copy()
    for u in units[1:]:
        acc += u
    return acc


class ShardedKVCache:
    """A sequence's KV cache spread over the devices: device ``s`` keeps the K and V of its own
    KV heads (:func:`device_heads`) in a cache of its own (``devices[s]``). Follows
    :class:`~servelab.tiny_llm.cache.KVCacheProtocol` for the model's bookkeeping; the layers'
    K/V go to the devices' caches directly, so :meth:`update` itself is refused."""

    def __init__(self, config: ModelConfig, t: int, contiguous: bool = False,
                 max_len: int | None = None) -> None:
        check_split(config, t)
        self.config, self.t = config, int(t)
        kind = ContiguousKVCache if _checks.flag("contiguous", contiguous) else KVCache
        self.devices = [kind(_device_config(config, t, s), max_len) for s in range(t)]
        self.max_len = self.devices[0].max_len

    def __len__(self) -> int:
        return len(self.devices[0])

    def __repr__(self) -> str:
        return f"ShardedKVCache({self.config.name!r}, t={self.t}, tokens={len(self)})"

    @property
    def used_bytes(self) -> int:
        """KV bytes over all devices (more than unsharded when KV heads are replicated)."""
        return sum(d.used_bytes for d in self.devices)

    def reserve(self, n_new: int) -> None:
        for d in self.devices:
            d.reserve(n_new)

    def update(self, layer: int, k_new: np.ndarray,
               v_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise TypeError("a ShardedKVCache is updated per device (cache.devices[s].update)")

    def commit(self, n_new: int) -> None:
        for d in self.devices:
            d.commit(n_new)

    def rollback(self) -> None:
        for d in self.devices:
            d.rollback()


def _device_config(config: ModelConfig, t: int, device: int) -> ModelConfig:
    """The shapes one device holds, as a config (its caches are built from it)."""
    import dataclasses
    heads, kv_heads = device_heads(config, t, device)
    return dataclasses.replace(config, n_heads=len(heads), n_kv_heads=len(kv_heads),
                               d_ff=config.d_ff // t)


@dataclass(frozen=True)
class CommStats:
    """What one forward sent over the interconnect: ``n_allreduce`` all-reduces (two per
    layer; none on one device), each of a ``tensor_bytes`` tensor (``tokens x d_model``
    float32), summed from ``partials`` partial sums (one per device; one per unit under the
    fixed order, which is why that order costs traffic)."""

    n_allreduce: int
    tensor_bytes: int
    partials: int


class TensorParallelLLM(TinyLLM):
    """The model of ``config`` split across ``t`` devices; :meth:`forward`, :meth:`forward_batch`
    and :func:`~servelab.tiny_llm.generate` work as on :class:`TinyLLM`, with caches from
    :meth:`new_cache`. ``last_comm`` says what the last forward all-reduced."""

    def __init__(self, config: ModelConfig = TINY, t: int = 2,
                 reduction: Reduction = "ring") -> None:
        super().__init__(config)
        check_split(config, t)
        if not isinstance(reduction, str) or reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if reduction == "fixed" and config.d_ff % config.n_heads:
            raise ValueError(f"reduction='fixed' cuts the MLP into n_heads={config.n_heads} "
                             f"blocks, so d_ff={config.d_ff} must be a multiple of it")
        self.t, self.reduction = int(t), reduction
        self.devices = [tuple(_shard_layer(layer, config, self.t, s) for layer in self.weights.layers)
                        for s in range(self.t)]
        self.last_comm: CommStats | None = None

    def __repr__(self) -> str:
        return f"TensorParallelLLM({self.config.name!r}, t={self.t}, reduction={self.reduction!r})"

    def new_cache(self, contiguous: bool = False,  # type: ignore[override]
                  max_len: int | None = None) -> ShardedKVCache:
        """An empty cache spread over this model's devices."""
        return ShardedKVCache(self.config, self.t, contiguous, max_len)

    def _forward(self, seqs: list[np.ndarray], caches: list[KVCacheProtocol | None],
                 contexts: list[int], all_logits: bool) -> list[np.ndarray]:
        cfg, w = self.config, self.weights
        for c in caches:
            if c is not None and not (isinstance(c, ShardedKVCache) and c.t == self.t):
                raise ValueError(f"a model split across t={self.t} devices needs caches from "
                                 f"its new_cache(), got {c!r}")
        lengths = [len(s) for s in seqs]
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        positions = np.concatenate([np.arange(c, c + n) for c, n in zip(contexts, lengths)])
        cos, sin = self._cos[positions], self._sin[positions]

        x = w.embed[np.concatenate(seqs)]  # replicated: every device embeds the same tokens
        n_partials = self.t
        for layer_idx in range(cfg.n_layers):
            layer = w.layers[layer_idx]
            # the norms are replicated and give every device the same bits: compute them once
            h = rms_norm(x, layer.attn_norm, cfg.norm_eps)
            parts = [self._attention(s, layer_idx, h, cos, sin, offsets, contexts, caches)
                     for s in range(self.t)]
            x = x + self._reduce(parts)
            h = rms_norm(x, layer.mlp_norm, cfg.norm_eps)
            parts = [self._mlp(s, layer_idx, h) for s in range(self.t)]
            x = x + self._reduce(parts)
            if self.reduction == "fixed":
                n_partials = sum(len(p) for p in parts)
        self.last_comm = CommStats(2 * cfg.n_layers if self.t > 1 else 0, x.nbytes, n_partials)
        return lm_head_logits(x, w, cfg, offsets, all_logits)

    def _reduce(self, parts: list[list[np.ndarray]]) -> np.ndarray:
        if self.reduction == "fixed":  # every unit, in global order (devices hold consecutive units)
            return fixed_order_sum([u for device in parts for u in device])
        return ring_allreduce([p[0] for p in parts])

    def _attention(self, s: int, layer_idx: int, h: np.ndarray, cos: np.ndarray,
                   sin: np.ndarray, offsets: np.ndarray, contexts: list[int],
                   caches: list[KVCacheProtocol | None]) -> list[np.ndarray]:
        dev, cfg = self.devices[s][layer_idx], self.config

        def kv(i: int, k_new: np.ndarray, v_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            cache = caches[i]
            if cache is None:
                return k_new, v_new
            assert isinstance(cache, ShardedKVCache)
            return cache.devices[s].update(layer_idx, k_new, v_new)

        if self.reduction == "ring":
            return [attention_partial(h, dev.wqkv, dev.wo, len(dev.unit_wq), len(dev.unit_wk),
                                      cfg.d_head, cos, sin, offsets, contexts, kv)]
        # fixed order: one partial per query head, each from matmuls of the same shapes
        # whatever t is, so no BLAS kernel choice can depend on the split
        n_tok, D = h.shape[0], cfg.d_head
        k = np.stack([rope((h @ wk).reshape(n_tok, 1, D), cos, sin)[:, 0] for wk in dev.unit_wk], 1)
        v = np.stack([h @ wv for wv in dev.unit_wv], 1)  # (n_tok, n_kv, D)
        heads, kv_heads = device_heads(cfg, self.t, s)
        group = cfg.n_heads // cfg.n_kv_heads
        attn = [np.empty((n_tok, D), F32) for _ in heads]
        for i, context_len in enumerate(contexts):
            lo, hi = offsets[i], offsets[i + 1]
            k_all, v_all = kv(i, k[lo:hi].transpose(1, 0, 2), v[lo:hi].transpose(1, 0, 2))
            for j, (head, wq) in enumerate(zip(heads, dev.unit_wq)):
                q = rope((h[lo:hi] @ wq).reshape(hi - lo, 1, D), cos[lo:hi], sin[lo:hi])
                g = head // group - kv_heads.start  # this head's KV head, on this device
                attn[j][lo:hi] = causal_attention(q, k_all[g:g + 1], v_all[g:g + 1], context_len)
        return [a @ wo for a, wo in zip(attn, dev.unit_wo)]

    def _mlp(self, s: int, layer_idx: int, h: np.ndarray) -> list[np.ndarray]:
        dev = self.devices[s][layer_idx]
        if self.reduction == "ring":
            return [mlp_partial(h, dev.w_gate_up, dev.w_down)]
        return [mlp_partial(h, gu, down) for gu, down in dev.unit_mlp]
