"""Hypothesis strategies shared by the tiny_llm tests."""

from __future__ import annotations

from hypothesis import strategies as st

token_ids = st.integers(min_value=0, max_value=255)


def prompts(min_size: int = 1, max_size: int = 64) -> st.SearchStrategy[list[int]]:
    """Random byte-token prompts (the acceptance range is 1..64 tokens)."""
    return st.lists(token_ids, min_size=min_size, max_size=max_size)


# One sequence of a ragged batch: (tokens already cached, new tokens, has a cache at all)
batch_entries = st.tuples(prompts(0, 40), prompts(1, 24), st.booleans())
