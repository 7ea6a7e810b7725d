"""Assignment 14: which block a full host tier drops (lecture §8, milestone 4b: a tiered KV cache).

When the GPU's prefix cache evicts a block, a tiered cache copies it to host memory instead of
losing it; a later prompt that needs it gets it back over PCIe instead of recomputing it. The
host tier is finite too: when it is full and another block arrives, one entry must go. You
write that choice. The story is in this folder's README. Check yourself with
``make check TASK=a14_host_tier``.

Each entry is a dict with plain integers:

* ``"key"``: the block's prefix key (what you return);
* ``"stamp"``: when it was offloaded (a counter: larger is more recent, no two equal);
* ``"hits"``: how many times its prefix was reused (prefix hits while it was on the GPU, plus
  one per earlier trip back from the host);
* ``"parent_key"``: the key of the block before it in its prompt (you may ignore it).

The entries come in no particular order.
"""

from __future__ import annotations


def lru_victim(entries: list) -> int:
    """The key of the entry offloaded longest ago (an entry is never touched while on the host:
    a hit moves it back to the GPU, so this is the least recently used)."""
    ### BEGIN SOLUTION
    return min(entries, key=lambda e: e["stamp"])["key"]
    ### END SOLUTION


def hits_victim(entries: list) -> int:
    """The key of the entry with the fewest hits; among equals, the one offloaded longest ago.
    A system prompt shared by every request collects hits and outlives one-off prompts."""
    ### BEGIN SOLUTION
    return min(entries, key=lambda e: (e["hits"], e["stamp"]))["key"]
    ### END SOLUTION
