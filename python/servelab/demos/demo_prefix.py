"""Demo prefix: what a shared prompt prefix buys a chat service, on the simulator (§3.5, §4.5).

Two parts, each a ``compute_*`` function (what the tests assert) and a ``part*`` printer:

1. **A shared system prompt.** Single-turn chat requests, each opening with a 1024-token system
   prompt (:func:`servelab.workload.chat_sessions`), at three arrival rates: every request with
   its own system prompt, then one of 4 shared ones without and with prefix caching. TTFT,
   throughput, and the tokens the GPU computed against those served from the cache.
2. **Multi-turn conversations.** Conversations of 4 turns on average, each turn's prompt the
   whole previous turn plus a new message, without and with prefix caching.
3. **A host tier** (§8 milestone 4b). The same kind of conversations in a GPU pool of
   ``sweep.TIERED_GPU_BLOCKS`` blocks, too small to keep every conversation: evicted blocks
   move to a host tier of growing size (LRU, and the ``hits`` policy at one size) and come
   back by a PCIe copy (``hw_model.kv_host_transfer_s``) instead of a recomputation.

Continuous batching with vLLM's defaults (``serving_core.run_continuous_batching``), priced
for Llama-3-8B on an H100. Prefix caching follows the engine's allocator exactly: hits only on
computed full blocks, LRU eviction, one token always left to compute (the simulator is held
batch-equal to the engine by ``tests/test_sim_prefix.py``).

>>> off, on = compute_multi_turn(n=20)
>>> (off.label, off.cached_tokens), (on.label, on.computed_tokens + on.cached_tokens == off.computed_tokens)
(('no cache', 0), ('cache', True))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from servelab import metrics as mx
from servelab.hw_model import H100, LLAMA3_8B
from servelab.serving_core import SimResult, run_continuous_batching
from servelab.sweep import TIERED_GPU_BLOCKS
from servelab.workload import chat_sessions

TITLE = "Demo prefix: what a shared system prompt and multi-turn chat buy with prefix caching (§3.5)"

SEED = 0
N_CONVERSATIONS = 400
RATES = (4.0, 12.0, 24.0)  # req/s; 24 overloads the GPU without prefix caching
TURNS_MEAN = 4.0
TURNS_RATE = 12.0  # conversations/s
SLO = mx.SLO(1.0, 0.05)


@dataclass(frozen=True)
class Row:
    label: str
    rate: float
    n: int
    ttft_p50_s: float
    ttft_p99_s: float
    throughput_tok_s: float
    computed_tokens: int  # every token the GPU computed (prefill and decode)
    cached_tokens: int  # prompt tokens served from the prefix cache


def _row(label: str, rate: float, r: SimResult) -> Row:
    s = mx.summarize(r, SLO)
    assert r.trace is not None
    cached = 0 if r.cached_tokens is None else int(r.cached_tokens.sum())
    return Row(label, rate, s.n, s.ttft.p50, s.ttft.p99, s.throughput_tok_s, int(r.trace.tokens.sum()), cached)


def compute_system_prompt(rates: tuple[float, ...] = RATES, n: int = N_CONVERSATIONS) -> list[Row]:
    """Per rate: own system prompts (caching on: nothing to share), shared ones off and on."""
    rows = []
    for rate in rates:
        own, own_sp = chat_sessions(n, rate, SEED, shared_fraction=0.0)
        shared, sp = chat_sessions(n, rate, SEED, shared_fraction=1.0)
        runs = [("own system prompts, cache", own, own_sp, True),
                ("4 shared, no cache", shared, sp, False),
                ("4 shared, cache", shared, sp, True)]
        for label, reqs, prefixes, caching in runs:
            r = run_continuous_batching(reqs, LLAMA3_8B, H100, prefix_caching=caching,
                                        shared_prefixes=prefixes, trace=True)
            rows.append(_row(label, rate, r))
    return rows


def compute_multi_turn(rate: float = TURNS_RATE, n: int = N_CONVERSATIONS) -> list[Row]:
    """Conversations of ``TURNS_MEAN`` turns on average, without and with prefix caching."""
    reqs, sp = chat_sessions(n, rate, SEED, turns_mean=TURNS_MEAN)
    return [_row(label, rate, run_continuous_batching(reqs, LLAMA3_8B, H100, prefix_caching=caching,
                                                      shared_prefixes=sp, trace=True))
            for label, caching in (("no cache", False), ("cache", True))]


HOST_RATE = 1.0  # conversations/s: a load the small pool serves, so the tier is what differs
HOST_TIERS = ((0, "lru"), (2000, "lru"), (8000, "lru"), (32000, "lru"), (8000, "hits"))


def compute_host_tier(rate: float = HOST_RATE, n: int = 200,
                      tiers: tuple[tuple[int, str], ...] = HOST_TIERS) -> list[tuple[Row, int, float]]:
    """Per host tier ``(blocks, policy)``: the row, the blocks recalled, their copy seconds."""
    reqs, sp = chat_sessions(n, rate, SEED, turns_mean=TURNS_MEAN)
    out = []
    for blocks, policy in tiers:
        r = run_continuous_batching(reqs, LLAMA3_8B, H100, num_blocks=TIERED_GPU_BLOCKS, prefix_caching=True,
                                    shared_prefixes=sp, host_blocks=blocks, host_policy=policy, trace=True)
        label = f"host tier {blocks:,} blocks, {policy}" if blocks else "no host tier"
        out.append((_row(label, rate, r), r.host_hits, r.host_transfer_s))
    return out


def _table(title: str, rows: list[Row]) -> Table:
    t = Table(title=title)
    for col in ("rate", "configuration", "requests", "TTFT P50", "TTFT P99", "throughput",
                "tokens computed", "served from cache"):
        t.add_column(col, justify="left" if col == "configuration" else "right")
    for r in rows:
        share = r.cached_tokens / (r.cached_tokens + r.computed_tokens)
        t.add_row(f"{r.rate:g}/s", r.label, str(r.n), f"{r.ttft_p50_s * 1e3:.0f} ms",
                  f"{r.ttft_p99_s * 1e3:.0f} ms", f"{r.throughput_tok_s:,.0f} tok/s",
                  f"{r.computed_tokens:,}", f"{r.cached_tokens:,} ({share:.0%})")
    return t


def part1_system_prompt(console: Console, rows: list[Row]) -> None:
    console.print("1. A shared system prompt (1024 tokens, then a ~128-token question and a ~256-token "
                  "answer): the cached blocks skip most of each prefill.")
    console.print(_table("Single-turn chat, continuous batching, Llama-3-8B on H100", rows))
    console.print("   Computed = every prefill and decode token the GPU ran; served from cache = prompt "
                  "tokens whose KV was reused. At 24 req/s the saved prefill work is what keeps the "
                  "queue short and lifts throughput.")


def part2_multi_turn(console: Console, rows: list[Row]) -> None:
    console.print(f"2. Multi-turn conversations ({TURNS_MEAN:g} turns on average, {TURNS_RATE:g} new "
                  "conversations/s): each turn resends the whole conversation so far.")
    console.print(_table("Multi-turn chat, continuous batching, Llama-3-8B on H100", rows))


def part3_host_tier(console: Console, rows: list[tuple[Row, int, float]]) -> None:
    console.print(f"3. A host tier (§8 milestone 4b): {TURNS_MEAN:g}-turn conversations at {HOST_RATE:g}/s in "
                  f"a GPU pool of {TIERED_GPU_BLOCKS} blocks; evicted blocks wait in host memory.")
    console.print(_table("Multi-turn chat, small GPU pool, host tier of growing size", [r for r, _, _ in rows]))
    for r, hits, copy_s in rows:
        if hits:
            console.print(f"   {r.label}: {hits:,} blocks copied back over PCIe, {copy_s:.2f} s of copies in all")
    console.print("   LRU is the better policy here: a conversation's next turn needs its newest blocks, "
                  "which 'hits' (fewest prefix hits dropped first) evicts before stale, often-hit ones.")


def run(out_dir: Path, console: Console) -> None:
    part1_system_prompt(console, compute_system_prompt())
    part2_multi_turn(console, compute_multi_turn())
    part3_host_tier(console, compute_host_tier())
