"""tiny_llm: a real miniature Llama in numpy, the reference every optimisation must match (§2, §6.5).

Byte-level vocabulary (256 tokens: ``list(b"hello world")`` is an 11-token prompt), RMSNorm,
rotary positions, grouped-query attention, SwiGLU; FP32 weights drawn from a seeded generator
(about 120 thousand parameters in ``TINY``). No download and no training: the weights are random,
so the text is gibberish, but the computation is real, which is what correctness checks need.

The lecture's API (§2.3)::

    logits = tiny_llm.forward(token_ids, cache)   # prefill: the prompt; decode: one token

Where things live:

* :mod:`.config` -- :class:`ModelConfig`, the presets ``TINY`` (demo 01) and ``SMALL``
  (d_model 256, 4 layers: demo 04), and ``config.spec``, the same model as a
  :class:`servelab.hw_model.ModelSpec` so the paper GPU can price it;
* :mod:`.model` -- :class:`TinyLLM`: weights, ``forward`` and the batched ``forward_batch``;
* :mod:`.cache` -- :class:`KVCache` (grows), :class:`ContiguousKVCache` (reserves ``max_len``),
  and the four-call protocol any other cache layout implements;
* :mod:`.paged` -- :class:`PagedKVPool` and :class:`PagedKVCache`: KV in blocks addressed
  through a :class:`servelab.blocks.BlockAllocator`'s block tables (``servelab.engine`` uses it);
* :mod:`.counters` -- :class:`ForwardStats`: tokens, FLOPs and bytes of each forward, counted
  as ``hw_model`` counts;
* :mod:`.sampling` -- greedy, temperature and top-p samplers, seeded;
* :mod:`.generation` -- :func:`generate`, with or without the cache;
* :mod:`.tensor_parallel` -- :class:`TensorParallelLLM`: the same model split across ``t``
  devices by heads and MLP columns, with an all-reduce (§8.1, milestone 1);
* :mod:`.speculative` -- :func:`~servelab.tiny_llm.speculative.speculate`: a draft model
  guesses ``k`` tokens, the model checks them in one forward (§8, milestone 4a).

>>> from servelab import tiny_llm
>>> cache = tiny_llm.KVCache(tiny_llm.TINY)
>>> logits = tiny_llm.forward(list(b"hello world"), cache)
>>> len(cache), logits.shape
(11, (256,))
>>> g = tiny_llm.generate(list(b"hello world"), 8)
>>> len(g.tokens), sum(s.kind == "decode" for s in g.steps)
(8, 7)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from servelab.tiny_llm.cache import ContiguousKVCache, KVCache, KVCacheProtocol, is_kv_cache
from servelab.tiny_llm.config import BYTES_PER_PARAM, PRESETS, SMALL, TINY, ModelConfig
from servelab.tiny_llm.counters import ForwardStats, forward_stats
from servelab.tiny_llm.generation import Generation, StepRecord, generate
from servelab.tiny_llm.model import LayerWeights, TinyLLM, Weights, as_token_ids, model_for
from servelab.tiny_llm.paged import PagedKVCache, PagedKVPool
from servelab.tiny_llm.sampling import GREEDY, Greedy, Sampler, Temperature, TopP, softmax
from servelab.tiny_llm.tensor_parallel import ShardedKVCache, TensorParallelLLM

__all__ = [
    "ModelConfig", "TINY", "SMALL", "PRESETS", "BYTES_PER_PARAM",
    "TinyLLM", "Weights", "LayerWeights", "model_for", "as_token_ids",
    "KVCacheProtocol", "KVCache", "ContiguousKVCache", "PagedKVPool", "PagedKVCache",
    "ForwardStats", "forward_stats",
    "Sampler", "Greedy", "Temperature", "TopP", "GREEDY", "softmax",
    "Generation", "StepRecord", "generate", "TensorParallelLLM", "ShardedKVCache",
    "forward", "forward_batch", "encode", "decode",
]


def forward(token_ids: Sequence[int] | np.ndarray, cache: KVCacheProtocol | None = None, *,
            model: TinyLLM | None = None, all_logits: bool = False) -> np.ndarray:
    """The lecture's ``forward(token_ids, cache) -> logits`` (§2.3): see :meth:`TinyLLM.forward`.

    ``model`` defaults to the shared model of the cache's config (``TINY`` without a cache).
    """
    if model is None:
        model = model_for(cache.config if is_kv_cache(cache) else TINY)
    elif not isinstance(model, TinyLLM):
        raise TypeError(f"model must be a TinyLLM or None, got {model!r:.80}")
    return model.forward(token_ids, cache, all_logits=all_logits)


def forward_batch(batch_token_ids: Sequence[Sequence[int] | np.ndarray],
                  caches: Sequence[KVCacheProtocol | None] | None = None, *,
                  model: TinyLLM | None = None, all_logits: bool = False) -> list[np.ndarray]:
    """Several sequences, ragged lengths, one forward: see :meth:`TinyLLM.forward_batch`."""
    if model is None:
        try:
            configs = {c.config for c in (() if caches is None else caches) if is_kv_cache(c)}
        except TypeError:
            raise TypeError(f"caches must be a list of KV caches (or None), got {caches!r:.80}") from None
        model = model_for(configs.pop() if len(configs) == 1 else TINY)
    elif not isinstance(model, TinyLLM):
        raise TypeError(f"model must be a TinyLLM or None, got {model!r:.80}")
    return model.forward_batch(batch_token_ids, caches, all_logits=all_logits)


def encode(text: str) -> list[int]:
    """Text to byte tokens.

    >>> encode("hello world")
    [104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {text!r:.80} ({type(text).__name__})")
    return list(text.encode("utf-8"))


def decode(token_ids: Sequence[int]) -> str:
    """Byte tokens to text (invalid UTF-8 replaced).

    >>> decode(encode("hello world"))
    'hello world'
    """
    return bytes(as_token_ids(token_ids, 256, "token_ids").tolist()).decode("utf-8", errors="replace")
