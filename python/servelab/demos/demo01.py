"""Demo 01: autoregressive generation and the KV cache (lecture §2, SPEC.md §3).

Five parts, all on the real tiny model (``tiny_llm.TINY``, FP32, byte tokens):

1. step-by-step generation: an 11-token prompt and 8 new tokens take 1 prefill + 7 decodes;
2. with vs without the cache, 32 + 200 tokens: 231 vs 26,300 tokens processed (114x), FLOPs
   about 100x, weight bytes nearly equal, and the measured wall-time ratio, much smaller;
3. FLOPs, bytes and arithmetic intensity per forward: decode 0.5 FLOP/byte, prefill grows;
4. a contiguous reservation of 256 tokens: a 20 + 10 request uses 12% of it;
5. logits with vs without the cache differ by about 1e-6 and the tokens are identical (§6.5).

Each part is a function that returns its numbers (the tests assert them) and ``run`` prints
them as tables and writes one plot, ``demo01_tokens_processed.png``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from servelab import hw_model, plots, tiny_llm
from servelab.demos import working
from servelab.tiny_llm import ContiguousKVCache, ForwardStats, Generation, KVCache, TinyLLM

TITLE = "Demo 01: autoregressive generation and the KV cache (§2)"

PROMPT_1 = "hello world"  # 11 byte tokens
NEW_1 = 8
PROMPT_2 = "KV caches trade memory for FLOPs"  # 32 byte tokens
NEW_2 = 200
PROMPT_4 = "a short request here"  # 20 byte tokens
NEW_4 = 10
MAX_LEN_4 = 256
PREFILL_LENGTHS = (1, 8, 32, 128, 256)
DECODE_CONTEXTS = (11, 32, 128, 255)


# ---- part 1 -------------------------------------------------------------------------------

def part1(model: TinyLLM) -> Generation:
    """``hello world`` + 8 tokens, with the cache: 1 prefill then 7 decodes (§2.1)."""
    return tiny_llm.generate(tiny_llm.encode(PROMPT_1), NEW_1, model=model)


# ---- part 2 and 5 -------------------------------------------------------------------------

@dataclass(frozen=True)
class CacheComparison:
    """Part 2 (and the data of part 5): one prompt generated with and without the cache."""

    with_cache: Generation
    without_cache: Generation

    @property
    def token_ratio(self) -> float:
        return self.without_cache.tokens_processed / self.with_cache.tokens_processed

    @property
    def flop_ratio(self) -> float:
        return self.without_cache.stats.flops / self.with_cache.stats.flops

    @property
    def weight_bytes_ratio(self) -> float:
        return (self.without_cache.stats.weights_read_bytes
                / self.with_cache.stats.weights_read_bytes)

    @property
    def wall_ratio(self) -> float:
        return self.without_cache.wall_s / self.with_cache.wall_s

    @property
    def identical_tokens(self) -> bool:
        return self.with_cache.tokens == self.without_cache.tokens

    @property
    def max_logit_diff_last(self) -> float:
        """Part 5: max |logits with cache - without| at the last step (the lecture's number)."""
        return float(np.abs(self.with_cache.logits[-1] - self.without_cache.logits[-1]).max())

    @property
    def max_logit_diff_all(self) -> float:
        """Part 5: the same over every step."""
        return float(np.abs(self.with_cache.logits - self.without_cache.logits).max())


def part2(model: TinyLLM) -> CacheComparison:
    """32 + 200 tokens with and without the cache (§2.2)."""
    prompt = tiny_llm.encode(PROMPT_2)
    return CacheComparison(tiny_llm.generate(prompt, NEW_2, model=model),
                           tiny_llm.generate(prompt, NEW_2, model=model, use_cache=False))


# ---- part 3 -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ForwardRow:
    """Part 3: one forward's counters, and ``hw_model``'s price of the same step."""

    label: str
    new_tokens: int
    context_len: int
    stats: ForwardStats
    paper: hw_model.StepCost  # hw_model.step_cost(TINY.spec, H100, [(new_tokens, context_len)])
    wall_s: float

    @property
    def weight_intensity(self) -> float:
        """FLOPs of the weight matmuls (layers + LM head) per byte of weights read."""
        s = self.stats
        return (s.matmul_flops + s.lm_head_flops) / s.weights_read_bytes

    @property
    def matches_hw_model(self) -> bool:
        return (self.stats.flops == self.paper.flops
                and self.stats.bytes_moved == self.paper.bytes_moved)


def part3(model: TinyLLM) -> list[ForwardRow]:
    """Prefills of growing length and decodes at growing context, one forward each (§2.3)."""
    rng = np.random.default_rng(0)
    rows = []
    shapes = [(f"prefill {n}", n, 0) for n in PREFILL_LENGTHS]
    shapes += [(f"decode @ {c}", 1, c) for c in DECODE_CONTEXTS]
    for label, n, c in shapes:
        cache = KVCache(model.config)
        if c:
            model.forward(rng.integers(0, model.config.vocab_size, c), cache)
        tokens = rng.integers(0, model.config.vocab_size, n)
        t0 = time.perf_counter()
        model.forward(tokens, cache)
        wall = time.perf_counter() - t0
        assert model.last_stats is not None
        paper = hw_model.step_cost(model.config.spec, hw_model.H100, [(n, c)])
        rows.append(ForwardRow(label, n, c, model.last_stats, paper, wall))
    return rows


# ---- part 4 -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reservation:
    """Part 4: a short request in a cache that reserved ``max_len`` tokens up front (§2.4)."""

    prompt_len: int
    new_tokens: int
    cache: ContiguousKVCache
    growing: KVCache  # the same request in a cache that grows (doubling)

    @property
    def request_tokens(self) -> int:
        """The request's length, prompt + output: what its KV occupies by the end."""
        return self.prompt_len + self.new_tokens

    @property
    def used_fraction(self) -> float:
        """Request tokens over reserved slots: the lecture's 12%."""
        return self.request_tokens / self.cache.reserved_tokens

    @property
    def written_tokens(self) -> int:
        """KV actually written: the last output token is never fed back, so one fewer."""
        return len(self.cache)


def part4(model: TinyLLM) -> Reservation:
    """A 20 + 10 request in a 256-token contiguous reservation, and in a growing cache."""
    prompt = tiny_llm.encode(PROMPT_4)
    cache = ContiguousKVCache(model.config, max_len=MAX_LEN_4)
    tiny_llm.generate(prompt, NEW_4, model=model, cache=cache)
    growing = KVCache(model.config)
    tiny_llm.generate(prompt, NEW_4, model=model, cache=growing)
    return Reservation(len(prompt), NEW_4, cache, growing)


# ---- printing -----------------------------------------------------------------------------

def _si(x: float, unit: str = "") -> str:
    """1234567 -> '1.23 M' (decimal prefixes, §0.4)."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def _token_repr(t: int) -> str:
    return repr(bytes([t]))[2:-1]


def _print_part1(console: Console, g: Generation) -> None:
    table = Table(title=f"Part 1: step by step, prompt {PROMPT_1!r} ({len(g.prompt)} tokens), "
                        f"{len(g.tokens)} new tokens")
    for col in ("step", "forward", "tokens in", "cached before", "cached after", "token out",
                "ms"):
        table.add_column(col, justify="right", no_wrap=True)
    for i, s in enumerate(g.steps, 1):
        table.add_row(str(i), s.kind, str(s.n_tokens), str(s.context_len),
                      str(s.context_len + s.n_tokens), f"{s.token} {_token_repr(s.token)!s}",
                      f"{s.wall_s * 1e3:.3f}")
    console.print(table)
    n_pre = sum(s.kind == "prefill" for s in g.steps)
    n_dec = sum(s.kind == "decode" for s in g.steps)
    console.print(f"{len(g.tokens)} tokens = {n_pre} prefill + {n_dec} decode: the prefill "
                  "already yields the first token, and the last token is never fed back.\n")


def _print_part2(console: Console, cmp: CacheComparison) -> None:
    w, wo = cmp.with_cache, cmp.without_cache
    table = Table(title=f"Part 2: with vs without the KV cache, prompt {len(w.prompt)} tokens, "
                        f"{len(w.tokens)} generated")
    for col in ("", "without cache", "with cache", "ratio"):
        table.add_column(col, justify="right")
    table.add_row("forwards", str(len(wo.steps)), str(len(w.steps)), "1x")
    table.add_row("tokens processed", f"{wo.tokens_processed:,}", f"{w.tokens_processed:,}",
                  f"{cmp.token_ratio:.0f}x")
    table.add_row("FLOPs", _si(wo.stats.flops), _si(w.stats.flops), f"{cmp.flop_ratio:.0f}x")
    table.add_row("weight bytes read", _si(wo.stats.weights_read_bytes, "B"),
                  _si(w.stats.weights_read_bytes, "B"), f"{cmp.weight_bytes_ratio:.2f}x")
    table.add_row("KV bytes read + written", _si(wo.stats.kv_bytes, "B"),
                  _si(w.stats.kv_bytes, "B"), f"{wo.stats.kv_bytes / w.stats.kv_bytes:.1f}x")
    table.add_row("wall time (measured)", f"{wo.wall_s * 1e3:.0f} ms", f"{w.wall_s * 1e3:.0f} ms",
                  f"{cmp.wall_ratio:.1f}x")
    console.print(table)
    console.print(
        f"Identical tokens: {'yes' if cmp.identical_tokens else 'NO'}. Weight bytes are nearly "
        "equal: both make 200 forwards and each reads every weight once (the difference is the "
        "embedding rows looked up again). KV traffic is equal too: without a cache every step "
        "recomputes and writes K and V of the whole sequence, with one it reads them back. "
        "Wall time shrinks far less than FLOPs: a forward of "
        "this tiny model is mostly Python and numpy overhead (overhead-bound, §2.2).\n")


def _print_part3(console: Console, rows: list[ForwardRow]) -> None:
    table = Table(title="Part 3: one forward's FLOPs, bytes and arithmetic intensity (FP32)")
    for col in ("forward", "FLOPs", "bytes", "FLOP/B", "weights", "=hw", "ms"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(r.label, _si(r.stats.flops), _si(r.stats.bytes_moved, "B"),
                      f"{r.stats.intensity:.2f}", f"{r.weight_intensity:.2f}",
                      "yes" if r.matches_hw_model else "NO", f"{r.wall_s * 1e3:.3f}")
    console.print(table)
    console.print(
        "Decode does 0.5 FLOP per byte: each 4-byte FP32 weight takes part in one multiply-add "
        "(2 FLOPs). Attention over the cache reads K and V at about 1 FLOP/byte (2 query heads "
        "share each K/V head), which nudges long-context decodes up. Prefill reuses every "
        "weight for each prompt token, so its intensity grows with the prompt. The counts equal "
        "hw_model.step_cost for TINY.spec (=hw; norms, softmax and rotary count in neither). "
        "'weights' is the FLOP/B of the weight matmuls alone.\n")


def _print_part4(console: Console, r: Reservation) -> None:
    cfg = r.cache.config
    table = Table(title=f"Part 4: a {r.prompt_len} + {r.new_tokens} request, "
                        f"contiguous reservation of max_len {r.cache.reserved_tokens}")
    for col in ("cache", "slots", "bytes", "request tokens", "used", "wasted"):
        table.add_column(col, justify="right", no_wrap=True)
    for name, slots in (("contiguous (max_len)", r.cache.reserved_tokens),
                        ("growing (doubling)", r.growing.capacity)):
        table.add_row(name, str(slots), _si(slots * cfg.kv_bytes_per_token, "B"),
                      str(r.request_tokens), f"{r.request_tokens / slots:.0%}",
                      f"{1 - r.request_tokens / slots:.0%}")
    console.print(table)
    console.print(
        f"The request's {r.request_tokens} tokens fill {r.used_fraction:.0%} of the "
        f"reservation (its KV cache holds {r.written_tokens}: the last token is never fed back). "
        "The rest is reserved and unused; PagedAttention (lecture 3) hands out small blocks "
        "instead.\n")


def _print_part5(console: Console, cmp: CacheComparison) -> None:
    table = Table(title="Part 5: logits with vs without the cache (§6.5)")
    table.add_column("", justify="right")
    table.add_column("value", justify="right")
    table.add_row("max |logits difference|, last step", f"{cmp.max_logit_diff_last:.1e}")
    table.add_row(f"max |logits difference|, all {len(cmp.with_cache.steps)} steps",
                  f"{cmp.max_logit_diff_all:.1e}")
    table.add_row("identical tokens", "yes" if cmp.identical_tokens else "NO")
    console.print(table)
    console.print(
        "Not 0: the two paths add in different orders (one big matmul vs many small ones), so "
        "the last bits differ. Here no chosen token changes; two nearly tied logits could "
        "flip a greedy choice.\n")


def make_plot(out_dir: Path, cmp: CacheComparison) -> Path | None:
    """``demo01_tokens_processed.png``: cumulative tokens processed, with and without the cache."""
    curves = {label: (np.arange(1, len(g.steps) + 1), np.cumsum([s.n_tokens for s in g.steps]))
              for g, label in ((cmp.without_cache, "without cache"), (cmp.with_cache, "with cache"))}
    return plots.tokens_processed(Path(out_dir) / "demo01_tokens_processed.png", curves)


def run(out_dir: Path, console: Console) -> None:
    model = TinyLLM(tiny_llm.TINY)
    console.print(f"Model: {model.config.name}, {model.config.param_count:,} parameters, FP32, "
                  f"byte tokens, max_len {model.config.max_len}.\n")
    _print_part1(console, part1(model))
    with working(console, f"Part 2: generating {NEW_2} tokens twice, with and without the cache (a few s)"):
        cmp = part2(model)
    _print_part2(console, cmp)
    _print_part3(console, part3(model))
    _print_part4(console, part4(model))
    _print_part5(console, cmp)
    console.print(f"Plot: {make_plot(Path(out_dir), cmp)}")
