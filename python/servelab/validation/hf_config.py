"""A served model's shape from its Hugging Face ``config.json`` (lecture §3.1's ledger):
layers, hidden size, query and KV heads, head size, MLP size, vocabulary, tied embeddings;
for a mixture of experts also how many experts there are and how many each token uses.

A mixture of experts is priced honestly on the paper GPU, in two halves kept apart:

* **bytes**: a step reads *every* expert's weights (at the batches served here, tens of tokens
  each routed to ``k`` of ``E`` experts, nearly every expert is hit), so :attr:`ServedModel.spec`
  is the dense shape with ``d_ff = E x d_ff``: its weight bytes, KV bytes and capacity are the
  MoE's;
* **FLOPs**: a token runs only ``k`` experts, so the matmul FLOPs per token are
  ``attention + k x MLP`` instead of ``attention + E x MLP``; :attr:`ServedModel.flop_ratio` is
  the ratio of the two, by which the simulated card's compute rate is raised
  (:mod:`servelab.validation.simulate`). That ratio is exact for the matmuls; it also shrinks
  the attention-score and LM-head FLOPs, which at these contexts (under 2,000 tokens) are under
  3% of a step's FLOPs, and only matter in compute-bound steps.

>>> from servelab.validation.hf_config import model_from_config, shipped_models
>>> m = shipped_models()["Llama-2-7b-hf"].spec
>>> (m.n_layers, m.d_model, m.n_kv_heads, m.d_ff, m.vocab_size), round(m.param_count / 1e9, 2)
((32, 4096, 32, 11008, 32000), 6.74)
>>> moe = shipped_models()["Mixtral-8x7B-v0.1"]
>>> moe.n_experts, moe.experts_per_token, round(moe.spec.param_count / 1e9, 1), round(moe.flop_ratio, 2)
(8, 2, 46.7, 3.68)
>>> model_from_config({"hidden_size": 64}, "tiny")
Traceback (most recent call last):
...
ValueError: tiny config.json: missing 'num_hidden_layers'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab import _checks
from servelab.hw_model import ModelSpec

__all__ = ["ServedModel", "model_from_config", "read_model_configs", "shipped_models", "shipped_model_configs_dir"]


@dataclass(frozen=True)
class ServedModel:
    """A model as the server holds it: :attr:`spec` prices its bytes (every expert's weights);
    ``n_experts`` and ``experts_per_token`` are 1 for a dense model."""

    spec: ModelSpec
    n_experts: int = 1
    experts_per_token: int = 1
    shared_ff: int = 0  # MLP width every token runs besides its experts (a shared expert)

    @property
    def moe(self) -> bool:
        return self.n_experts > 1

    @property
    def flop_ratio(self) -> float:
        """Matmul FLOPs per token of :attr:`spec` (every expert) over the model's own (only the
        active experts): 1 for a dense model."""
        if not self.moe:
            return 1.0
        s = self.spec
        attn = 2 * s.d_model * s.n_heads * s.d_head + 2 * s.d_model * s.n_kv_heads * s.d_head
        expert = 3 * s.d_model * ((s.d_ff - self.shared_ff) // self.n_experts)
        shared = 3 * s.d_model * self.shared_ff
        return (attn + shared + self.n_experts * expert) / (attn + shared + self.experts_per_token * expert)


def _int(config: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    if key not in config or config[key] is None:
        if default is None:
            raise ValueError(f"{where}: missing {key!r}")
        return default
    try:
        return _checks.integer(key, config[key], 1, None)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def model_from_config(config: dict[str, Any], name: str) -> ServedModel:
    """The model of a Hugging Face ``config.json`` (already parsed) named ``name``. Llama-style
    keys (Llama, Mistral, Mixtral, Qwen2 read alike); weights at 2 bytes (BF16/FP16)."""
    _checks.instance("name", name, str, "a str")
    where = f"{name} config.json"
    if not isinstance(config, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(config).__name__}")
    layers = _int(config, "num_hidden_layers", where)
    d_model = _int(config, "hidden_size", where)
    heads = _int(config, "num_attention_heads", where)
    kv_heads = _int(config, "num_key_value_heads", where, heads)
    d_head = _int(config, "head_dim", where, max(1, d_model // heads))
    d_ff = _int(config, "intermediate_size", where)
    vocab = _int(config, "vocab_size", where)
    experts = _int(config, "num_local_experts", where, _int(config, "num_experts", where, 1))
    active = _int(config, "num_experts_per_tok", where, 1) if experts > 1 else 1
    if active > experts:
        raise ValueError(f"{where}: num_experts_per_tok={active} is more than the {experts} experts")
    shared = 0
    if experts > 1 and config.get("moe_intermediate_size") is not None:
        # Qwen-style: experts of their own width, and maybe a shared expert every token runs
        shared = _int(config, "shared_expert_intermediate_size", where, 0) if config.get(
            "shared_expert_intermediate_size") else 0
        d_ff = _int(config, "moe_intermediate_size", where)
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ValueError(f"{where}: tie_word_embeddings must be true or false, got {tied!r}")
    spec = ModelSpec(name, n_layers=layers, d_model=d_model, n_heads=heads, n_kv_heads=kv_heads, d_head=d_head,
                     d_ff=d_ff * experts + shared, vocab_size=vocab, tie_embeddings=tied)
    return ServedModel(spec, experts, active, shared)


def read_model_configs(folder: str | Path) -> dict[str, ServedModel]:
    """Every ``NAME/config.json`` under ``folder``, by NAME."""
    root = Path(_checks.instance("folder", folder, (str, Path), "a folder path (str or Path)"))
    if not root.is_dir():
        raise ValueError(f"model_configs must be a folder of NAME/config.json, got {str(folder)!r} (not a folder)")
    out = {}
    for path in sorted(root.glob("*/config.json")):
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
        out[path.parent.name] = model_from_config(config, path.parent.name)
    return out


def shipped_model_configs_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "data" / "vllm_h100_inference_perf" / "model_configs"


def shipped_models() -> dict[str, ServedModel]:
    """The models of the shipped runs (Llama-2-7B, Llama-2-70B, Mixtral-8x7B), from their
    shipped ``config.json``."""
    return read_model_configs(shipped_model_configs_dir())
