"""Demo paged: paged KV blocks, continuous batching, prefix caching on the real tiny model (§2.4, §3.5, §8).

Three parts, each a ``compute_*`` function (what the tests assert) and a ``part*`` printer:

1. **Reservation waste.** The same request mix held in contiguous caches (``max_len`` = 256
   slots reserved per request, as demo 01 part 4 does for one request) and in paged caches of
   several block sizes (only the blocks the tokens fill); then the engine serving the mix,
   its peak of blocks in use against what contiguous reservations would have held.
2. **Prefix caching.** Requests that share a 96-token system prompt, served with and without
   prefix caching: prompt tokens computed, the allocator's hit rate, simulated TTFT.
3. **Token equality (§6.5).** The mix under several engine settings (chunked prefill, prefix
   caching, a pool so small that requests are preempted): every request's tokens against
   ``tiny_llm.generate`` run alone.

Times are paper times: every step's batch priced by ``hw_model.step_cost`` for Llama-3-8B on
an H100 (§8.3); the tokens are tiny_llm's, computed for real.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console

from servelab import tiny_llm
from servelab.demos import table as _table, working
from servelab.engine import EngineResult, Request, serve
from servelab.tiny_llm import GREEDY, TINY, Temperature
from servelab.workload import chat_requests

TITLE = "Demo paged: paged KV blocks, continuous batching and prefix caching (§2.4, §3.5)"

SEED = 0
N_REQUESTS = 24
BLOCK_SIZES = (1, 4, 16, 64)
BLOCK_SIZE = 16
NUM_BLOCKS = 64  # 1024 token slots: 4 contiguous reservations of max_len 256
SYSTEM_PROMPT_LEN = 96
N_SHARED = 12


def request_mix(n: int = N_REQUESTS, seed: int = SEED) -> list[Request]:
    """Chat-shaped requests scaled to the tiny model: lognormal prompts (mean 40) and outputs
    (mean 20) from :func:`servelab.workload.chat_requests`, two arrivals per step, seeded
    samplers (every other request greedy)."""
    mix = chat_requests(n, 1.0, seed, prompt_mean=40, output_mean=20, max_len=120)
    rng = np.random.default_rng(seed)
    out = []
    for i, (p, m) in enumerate(zip(mix.prompt_len.tolist(), mix.output_len.tolist())):
        prompt = rng.integers(0, TINY.vocab_size, int(p)).tolist()
        sampler = GREEDY if i % 2 == 0 else Temperature(0.9, seed=seed * 1000 + i)
        out.append(Request(prompt, int(m), sampler, arrival_step=i // 2))
    return out


def shared_prompt_mix(seed: int = SEED) -> list[Request]:
    """``N_SHARED`` requests: one system prompt, then a short question each, one per step."""
    rng = np.random.default_rng(seed + 1)
    system = rng.integers(0, TINY.vocab_size, SYSTEM_PROMPT_LEN).tolist()
    return [Request(system + rng.integers(0, TINY.vocab_size, 8).tolist(), 8,
                    Temperature(0.9, seed=i), arrival_step=i) for i in range(N_SHARED)]


# ---- part 1 ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WasteRow:
    layout: str
    reserved_tokens: int
    used_tokens: int

    @property
    def waste(self) -> float:
        return 1 - self.used_tokens / self.reserved_tokens


def compute_waste(requests: list[Request]) -> list[WasteRow]:
    """Slots each layout holds for every request at its longest (prompt + output - 1 tokens)."""
    need = [len(r.prompt) + r.max_new_tokens - 1 for r in requests]
    used = sum(need)
    rows = [WasteRow(f"contiguous (max_len {TINY.max_len})", TINY.max_len * len(need), used)]
    for bs in BLOCK_SIZES:
        rows.append(WasteRow(f"paged, block {bs}", sum(-(-n // bs) * bs for n in need), used))
    return rows


@dataclass(frozen=True)
class EngineRun:
    label: str
    result: EngineResult
    equal: int  # requests whose tokens equal generate alone

    @property
    def preemptions(self) -> int:
        return sum(r.num_preemptions for r in self.result.requests)

    @property
    def peak_blocks(self) -> int:
        return max(s.blocks_used for s in self.result.steps)

    @property
    def max_batch(self) -> int:
        return max(len(s.batch) for s in self.result.steps)


def _alone(r: Request) -> list[int]:
    return tiny_llm.generate(list(r.prompt), r.max_new_tokens, r.sampler).tokens


def run_engine(label: str, requests: list[Request], reference: list[list[int]],
               **kwargs: object) -> EngineRun:
    res = serve(requests, **kwargs)  # type: ignore[arg-type]
    equal = sum(got.tokens == ref for got, ref in zip(res.requests, reference))
    return EngineRun(label, res, equal)


def compute_equality(requests: list[Request]) -> list[EngineRun]:
    """The mix under four engine settings, each checked against ``generate`` alone."""
    reference = [_alone(r) for r in requests]
    longest = max(len(r.prompt) + r.max_new_tokens - 1 for r in requests)
    tight = -(-longest // BLOCK_SIZE) + 1  # barely more than the largest request needs
    settings = [
        ("continuous batching", dict(num_blocks=NUM_BLOCKS)),
        ("+ chunked prefill (32 tok/step)", dict(num_blocks=NUM_BLOCKS, chunked_prefill=True,
                                                 max_num_batched_tokens=32)),
        ("+ prefix caching", dict(num_blocks=NUM_BLOCKS, prefix_caching=True)),
        (f"tight pool ({tight} blocks)", dict(num_blocks=tight)),
    ]
    return [run_engine(label, requests, reference, block_size=BLOCK_SIZE, max_num_seqs=8, **kw)
            for label, kw in settings]


# ---- part 2 ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PrefixRow:
    label: str
    prompt_tokens: int
    computed_prompt_tokens: int
    hits: int
    lookups: int
    mean_ttft_s: float
    equal: int


def compute_prefix() -> list[PrefixRow]:
    requests = shared_prompt_mix()
    reference = [_alone(r) for r in requests]
    rows = []
    for caching in (False, True):
        run = run_engine("", requests, reference, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE,
                         prefix_caching=caching)
        rs = run.result.requests
        prompt_tokens = sum(len(r.prompt) for r in requests)
        rows.append(PrefixRow("prefix caching" if caching else "no prefix caching",
                              prompt_tokens, prompt_tokens - sum(r.num_cached_tokens for r in rs),
                              run.result.stats["num_hits"], run.result.stats["num_lookups"],
                              float(np.mean([r.ttft_s for r in rs])), run.equal))
    return rows


# ---- printing ----------------------------------------------------------------------------------

def part1_waste(console: Console, requests: list[Request], runs: list[EngineRun]) -> None:
    t = _table(f"1. KV slots reserved for {len(requests)} requests (tokens held at their longest)",
               "layout", "slots reserved", "slots used", "waste")
    for row in compute_waste(requests):
        t.add_row(row.layout, f"{row.reserved_tokens:,}", f"{row.used_tokens:,}", f"{row.waste:.0%}")
    console.print(t)
    run = runs[0]
    slots = NUM_BLOCKS * BLOCK_SIZE
    console.print(f"   The engine ({NUM_BLOCKS} blocks of {BLOCK_SIZE} = {slots} slots) ran up to "
                  f"{run.max_batch} requests at once, peak {run.peak_blocks} blocks in use; "
                  f"contiguous reservations of {TINY.max_len} fit {slots // TINY.max_len} requests "
                  "in the same memory (§2.4: reserving max_len wastes most of it).")


def part2_prefix(console: Console) -> None:
    t = _table(f"2. {N_SHARED} requests sharing a {SYSTEM_PROMPT_LEN}-token system prompt "
               "(Llama-3-8B on a paper H100)",
               "engine", "prompt tok.", "computed", "hits/lookups", "mean TTFT", "= alone")
    for row in compute_prefix():
        rate = f"{row.hits}/{row.lookups}" if row.lookups else "-"
        t.add_row(row.label, f"{row.prompt_tokens:,}", f"{row.computed_prompt_tokens:,}", rate,
                  f"{row.mean_ttft_s * 1e3:.2f} ms", f"{row.equal}/{N_SHARED}")
    console.print(t)
    console.print("   Only the first request computes the system prompt. TTFT barely moves: on the "
                  "paper GPU a 104-token prefill costs the same ~6 ms as an 8-token one (weights "
                  "dominate, §3.3); the saving shows in TTFT once shared prompts run to thousands "
                  "of tokens.")


def part3_equality(console: Console, runs: list[EngineRun]) -> None:
    t = _table("3. The same tokens as generate() alone (§6.5), whatever the schedule",
               "engine setting", "steps", "max batch", "preempted", "sim. s", "= alone")
    for run in runs:
        n = len(run.result.requests)
        t.add_row(run.label, str(len(run.result.steps)), str(run.max_batch),
                  str(run.preemptions),  f"{run.result.clock_s:.3f}", f"{run.equal}/{n}")
    console.print(t)


def run(out_dir: Path, console: Console) -> None:
    requests = request_mix()
    with working(console, f"running the engine on tiny_llm under each setting, {len(requests)} requests (a few s)"):
        runs = compute_equality(requests)
    part1_waste(console, requests, runs)
    part2_prefix(console)
    part3_equality(console, runs)
