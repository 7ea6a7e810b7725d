"""Hypothesis strategies and helpers for the engine tests: request mixes and their references."""

from __future__ import annotations

from functools import lru_cache

from hypothesis import strategies as st

from servelab import tiny_llm
from servelab.engine import Request
from servelab.tiny_llm import GREEDY, TINY, Temperature, TinyLLM, TopP

MODEL = TinyLLM(TINY)

samplers = st.one_of(
    st.just(GREEDY),
    st.builds(Temperature, st.sampled_from([0.7, 1.0, 1.5]), st.integers(0, 2**31)),
    st.builds(TopP, st.sampled_from([0.5, 0.9]), st.just(1.0), st.integers(0, 2**31)),
)


@lru_cache(maxsize=4096)
def _alone(prompt: tuple[int, ...], m: int, sampler) -> tuple[int, ...]:
    return tuple(tiny_llm.generate(list(prompt), m, sampler, model=MODEL).tokens)


def alone(r: Request) -> list[int]:
    """The request's tokens from ``tiny_llm.generate`` run alone (§6.5's reference)."""
    return list(_alone(tuple(r.prompt), r.max_new_tokens, r.sampler))


@st.composite
def request_mixes(draw, max_requests: int = 5, greedy_only: bool = False) -> list[Request]:
    """1..max_requests requests; prompts share a prefix of a common base or not; random lengths,
    output lengths and arrival steps."""
    base = draw(st.lists(st.integers(0, 255), min_size=0, max_size=24))
    n = draw(st.integers(1, max_requests))
    out = []
    for _ in range(n):
        share = draw(st.integers(0, len(base)))
        own = draw(st.lists(st.integers(0, 255), min_size=0 if share else 1, max_size=12))
        prompt = base[:share] + own
        if not prompt:
            prompt = [draw(st.integers(0, 255))]
        sampler = GREEDY if greedy_only else draw(samplers)
        out.append(Request(prompt, draw(st.integers(1, 8)), sampler, draw(st.integers(0, 6))))
    return out


def need(r: Request) -> int:
    """Tokens whose KV the request stores at most: prompt + max_new_tokens - 1."""
    return len(r.prompt) + r.max_new_tokens - 1


def blocks_needed(r: Request, block_size: int) -> int:
    return -(-need(r) // block_size)
