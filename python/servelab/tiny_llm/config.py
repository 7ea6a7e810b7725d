"""Model configurations: the shape of a tiny Llama, its seed and its longest context.

A :class:`ModelConfig` identifies a model completely: the same config always gives the same
weights, bit for bit (§6.5 needs a fixed reference). Because the seed is part of the config, a
KV cache filled by one model is refused by a model with other weights (see ``check_same``).

>>> TINY.param_count, TINY.kv_bytes_per_token
(119104, 512)
>>> SMALL.d_model, SMALL.n_layers
(256, 4)
>>> TINY.spec.name, TINY.spec.bytes_per_param, TINY.spec.param_count
('tiny-llm', 4.0, 119104)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from servelab import _checks, hw_model

__all__ = ["ModelConfig", "TINY", "SMALL", "PRESETS", "BYTES_PER_PARAM", "MAX_VALUES"]

BYTES_PER_PARAM = 4  # FP32 (§2.3: decode intensity 0.5 FLOP/byte comes from 2 FLOPs / 4 bytes)
# Largest number of values in one thing tiny_llm allocates (the weights, the rotary tables, one
# sequence's KV cache at max_len, a paged KV pool): 2**27 FP32 values, 512 MiB. tiny_llm is a
# small numpy model for correctness checks; a config past this is refused with a ValueError
# naming its fields instead of a bare MemoryError halfway through.
MAX_VALUES = 2**27

_POSITIVE = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_ff",
             "max_len")


@dataclass(frozen=True)
class ModelConfig:
    """A Llama-style decoder: byte vocabulary, RMSNorm, rotary positions, GQA, SwiGLU (§2).

    Every field is validated on construction; a bad one raises ``ValueError`` naming it.

    >>> ModelConfig(n_heads=4, n_kv_heads=3)
    Traceback (most recent call last):
    ...
    ValueError: n_heads must be a multiple of n_kv_heads, got n_heads=4 and n_kv_heads=3
    >>> ModelConfig(d_head=15)
    Traceback (most recent call last):
    ...
    ValueError: d_head must be even (rotary embeddings rotate pairs), got 15
    """

    name: str = "tiny-llm"
    vocab_size: int = 256  # byte-level: token id = byte value, so "hello world" is 11 tokens
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2  # grouped-query attention: 2 query heads share each K/V head (§2.4)
    d_head: int = 16
    d_ff: int = 160
    max_len: int = 256  # longest context (prompt + generated tokens fed back)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    seed: int = 0  # weights are drawn from numpy's PCG64 seeded with this

    def __post_init__(self) -> None:
        for field in _POSITIVE:
            object.__setattr__(self, field, _checks.positive_int(field, getattr(self, field)))
        if self.n_heads % self.n_kv_heads:
            raise ValueError("n_heads must be a multiple of n_kv_heads, "
                             f"got n_heads={self.n_heads} and n_kv_heads={self.n_kv_heads}")
        if self.d_head % 2:
            raise ValueError(f"d_head must be even (rotary embeddings rotate pairs), got {self.d_head}")
        for field in ("rope_theta", "norm_eps"):
            _checks.positive(field, getattr(self, field))
        object.__setattr__(self, "seed", _checks.count("seed", self.seed))
        dims = ", ".join(f"{f}={getattr(self, f)}" for f in _POSITIVE)
        for what, n in (("parameters", self.param_count),
                        ("rotary table values (max_len x d_head / 2)", self.max_len * self.d_head // 2),
                        ("KV values per sequence at max_len (n_layers x n_kv_heads x d_head x max_len)",
                         self.n_layers * self.kv_dim * self.max_len)):
            if n > MAX_VALUES:
                raise ValueError(f"a ModelConfig with {dims} has {n} {what}, more than tiny_llm's "
                                 f"limit of {MAX_VALUES} (MAX_VALUES, 512 MiB of FP32)")

    # ---- the ledger, in the same terms as hw_model (§2.4) ---------------------------------

    @property
    def q_dim(self) -> int:
        """Width of all query heads together: ``n_heads * d_head``."""
        return self.n_heads * self.d_head

    @property
    def kv_dim(self) -> int:
        """Width of all K (or V) heads together: ``n_kv_heads * d_head``."""
        return self.n_kv_heads * self.d_head

    @property
    def layer_matmul_params(self) -> int:
        """Wq, Wk, Wv, Wo and the SwiGLU gate, up and down matrices of one layer."""
        d = self.d_model
        return d * self.q_dim + 2 * d * self.kv_dim + self.q_dim * d + 3 * d * self.d_ff

    @property
    def embedding_params(self) -> int:
        """The embedding table (and the untied LM head, which has the same shape)."""
        return self.vocab_size * self.d_model

    @property
    def param_count(self) -> int:
        """Layers (matmuls + two RMSNorm gains), final norm, embedding table, LM head (untied)."""
        d = self.d_model
        return self.n_layers * (self.layer_matmul_params + 2 * d) + d + 2 * self.embedding_params

    @property
    def kv_bytes_per_token(self) -> int:
        """``2 (K and V) x n_layers x n_kv_heads x d_head x 4 bytes`` (§2.4)."""
        return 2 * self.n_layers * self.kv_dim * BYTES_PER_PARAM

    @property
    def spec(self) -> hw_model.ModelSpec:
        """The same model as :mod:`servelab.hw_model` sees it (FP32, untied embeddings), so
        that the paper GPU can price it: ``hw_model.step_cost(TINY.spec, H100, batch)``."""
        return hw_model.ModelSpec(self.name, n_layers=self.n_layers, d_model=self.d_model,
                                  n_heads=self.n_heads, n_kv_heads=self.n_kv_heads,
                                  d_head=self.d_head, d_ff=self.d_ff, vocab_size=self.vocab_size,
                                  tie_embeddings=False, bytes_per_param=float(BYTES_PER_PARAM))

    def check_same(self, other: ModelConfig, what: str = "cache") -> None:
        """Raise ``ValueError`` naming every field where ``other`` (the config a ``what`` was
        built for) differs from this one.

        >>> TINY.check_same(dataclasses.replace(TINY, seed=1, d_ff=8))
        Traceback (most recent call last):
        ...
        ValueError: cache was built for another model: d_ff=8 (model has 160), seed=1 (model has 0)
        """
        if not isinstance(other, ModelConfig):
            raise ValueError(f"{what} config must be a ModelConfig, got other={other!r:.80}")
        diffs = [f"{f.name}={getattr(other, f.name)!r} (model has {getattr(self, f.name)!r})"
                 for f in dataclasses.fields(self) if getattr(other, f.name) != getattr(self, f.name)]
        if diffs:
            raise ValueError(f"{what} was built for another model: {', '.join(diffs)}")


# The lecture's mini model (§2): about 120 thousand parameters, FP32, byte tokens.
TINY = ModelConfig()
# Demo 04 part 1 (§5.4): d_model 256 and 4 layers, big enough that a forward is not all overhead.
SMALL = ModelConfig(name="tiny-llm-256", d_model=256, n_layers=4, n_heads=8, n_kv_heads=4,
                    d_head=32, d_ff=688, max_len=512)

PRESETS: dict[str, ModelConfig] = {c.name: c for c in (TINY, SMALL)}
