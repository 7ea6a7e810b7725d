"""What one forward costs, counted the way :mod:`servelab.hw_model` counts (§2.3, §3.2).

The rules are :mod:`servelab.hw_model`'s ("What the model counts" in its docstring), so that a
forward of the real model and the paper GPU's price of the same step agree exactly
(``tests/test_tiny_llm_counters.py``). Specific to tiny_llm: values are FP32 (4 bytes);
``all_logits=True`` computes, and counts, the LM head at every position, not only each
sequence's last; and the masked half of the score matrix that numpy's dense attention computes
and throws away is not counted (a fused causal kernel skips it; the count is of useful work).

>>> from servelab.tiny_llm.config import TINY
>>> decode = forward_stats(TINY, [(1, 32)])
>>> decode.n_tokens, decode.flops, decode.bytes_moved
(1, 221696, 428032)
>>> round(decode.intensity, 1)
0.5
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

from servelab import _checks
from servelab.tiny_llm.config import BYTES_PER_PARAM, ModelConfig

__all__ = ["ForwardStats", "forward_stats"]


@dataclass(frozen=True)
class ForwardStats:
    """Counters of one forward (or, added up with ``+``, of many). Integers throughout."""

    n_forwards: int  # forwards added up here (1 for one forward)
    n_seqs: int  # sequences in the batch
    n_tokens: int  # tokens processed (the lecture's "tokens processed")
    n_logits: int  # positions whose logits were computed
    matmul_flops: int  # layer matmuls
    lm_head_flops: int
    attention_flops: int
    weight_bytes: int  # every weight but the embedding table, read once per forward
    embedding_bytes: int  # the looked-up rows of the embedding table
    kv_read_bytes: int  # cached K and V of every sequence's context
    kv_write_bytes: int  # K and V of the new tokens

    @property
    def flops(self) -> int:
        """All counted FLOPs: matmuls + LM head + attention (``hw_model``'s ``flops``)."""
        return self.matmul_flops + self.lm_head_flops + self.attention_flops

    @property
    def kv_bytes(self) -> int:
        """KV read + written (``hw_model``'s ``kv_bytes``)."""
        return self.kv_read_bytes + self.kv_write_bytes

    @property
    def weights_read_bytes(self) -> int:
        """Weights streamed + embedding rows looked up (``hw_model``'s ``weight_bytes``)."""
        return self.weight_bytes + self.embedding_bytes

    @property
    def bytes_moved(self) -> int:
        """Everything read or written (``hw_model``'s ``bytes_moved``)."""
        return self.weights_read_bytes + self.kv_bytes

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved (§3.2)."""
        return self.flops / self.bytes_moved

    def __add__(self, other: ForwardStats) -> ForwardStats:
        if not isinstance(other, ForwardStats):
            return NotImplemented
        return ForwardStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @classmethod
    def zero(cls) -> ForwardStats:
        """The counters of no forward at all (the start of a sum)."""
        return cls(*(0 for _ in fields(cls)))


def forward_stats(config: ModelConfig, batch: Sequence[tuple[int, int]],
                  n_logits: int | None = None) -> ForwardStats:
    """Counters of one forward over ``batch = [(new_tokens, context_len), ...]`` (the shape
    ``hw_model.step_cost`` takes), with logits for ``n_logits`` positions (default: the last
    token of each sequence).

    >>> from servelab.tiny_llm.config import TINY
    >>> s = forward_stats(TINY, [(11, 0)])
    >>> s.n_tokens, s.matmul_flops == 11 * 2 * TINY.n_layers * TINY.layer_matmul_params
    (11, True)
    >>> forward_stats(TINY, [])
    Traceback (most recent call last):
    ...
    ValueError: batch must hold at least one sequence, got an empty batch
    """
    _checks.instance("config", config, ModelConfig, "a tiny_llm.ModelConfig")
    try:
        pairs = [tuple(p) for p in batch]
    except TypeError:
        raise TypeError(f"batch must be a list of (new_tokens, context_len) pairs, got {batch!r:.80}") from None
    if not pairs:
        raise ValueError("batch must hold at least one sequence, got an empty batch")
    tokens = keys = ctx_tokens = 0
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(f"batch[{i}] must be a pair (new_tokens, context_len), got {pair!r}")
        n = _checks.integer(f"batch[{i}].new_tokens", pair[0], 1, None)
        c = _checks.integer(f"batch[{i}].context_len", pair[1], 0, None)
        tokens += n
        ctx_tokens += c
        keys += n * c + n * (n + 1) // 2  # causal: new token i attends to c + i keys
    logits = len(pairs) if n_logits is None else _checks.integer("n_logits", n_logits, 0, None)
    L, bpp = config.n_layers, BYTES_PER_PARAM
    return ForwardStats(
        n_forwards=1, n_seqs=len(pairs), n_tokens=tokens, n_logits=logits,
        matmul_flops=2 * L * config.layer_matmul_params * tokens,
        lm_head_flops=2 * config.embedding_params * logits,
        attention_flops=4 * L * config.q_dim * keys,
        weight_bytes=(config.param_count - config.embedding_params) * bpp,
        embedding_bytes=config.d_model * bpp * tokens,
        kv_read_bytes=config.kv_bytes_per_token * ctx_tokens,
        kv_write_bytes=config.kv_bytes_per_token * tokens,
    )
