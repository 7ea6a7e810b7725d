"""Demo speculative: a draft guesses, the target verifies, on the real tiny model (§8, milestone 4a).

The tokens come from :func:`servelab.tiny_llm.speculative.speculate` run for real; the time
comes from the paper GPU, Llama-3-8B verifying the guesses of a Llama-3.2-1B draft on an H100
(:func:`~servelab.tiny_llm.speculative.speculative_step_cost`). Drafts of graded quality are the
target with noise in its weights (:func:`~servelab.tiny_llm.speculative.perturbed_draft`), plus
an unrelated model that agrees with the target only by chance.

1. **Same tokens (§6.5).** Greedy speculation emits exactly the target's own tokens, whatever
   the draft: a bad one only wastes work.
2. **Sweep over acceptance rate and k.** For each draft and ``k``: the measured acceptance rate
   ``a``, tokens per target step measured against the closed form ``(1 - a^(k+1)) / (1 - a)``,
   and the paper-GPU speed-up over plain decoding, measured (every step priced at its context)
   against predicted (the closed form times the decode/speculative step-cost ratio). One plot.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console

from servelab import hw_model as hw
from servelab import plots
from servelab.demos import table as _table, working
from servelab.tiny_llm import TINY, TinyLLM, generate
from servelab.tiny_llm.speculative import (expected_tokens_per_step, perturbed_draft, speculate,
                                           speculative_step_cost)

TITLE = "Demo speculative: speculative decoding, real tokens and paper speed-up (§8, milestone 4a)"

PROMPT = list(b"hello world")
NEW_TOKENS = 64
KS = (1, 2, 4, 8)
NOISES = (0.0, 0.05, 0.1, 0.2, 0.3)  # perturbed_draft's noise: 0 is a perfect draft
DRAFT_SEED = 1
TARGET_SPEC, GPU = hw.LLAMA3_8B, hw.H100
# Meta's public config of Llama-3.2-1B: the same 128,256-token vocabulary as Llama-3-8B, so it
# can draft for it; tied embeddings.
DRAFT_SPEC = hw.ModelSpec("Llama-3.2-1B", n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8,
                          d_head=64, d_ff=8192, vocab_size=128256, tie_embeddings=True)


def drafts(target: TinyLLM, noises: tuple[float, ...] = NOISES) -> dict[str, TinyLLM]:
    """The drafts, best first: ``target`` with each noise, then an unrelated model (another seed)."""
    out = {f"noise {n:g}": perturbed_draft(target, n, seed=DRAFT_SEED) for n in noises}
    out["unrelated model"] = TinyLLM(dataclasses.replace(target.config, seed=target.config.seed + 1))
    return out


# ---- part 1 ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SameTokensRow:
    draft: str
    k: int
    acceptance_rate: float
    equal: bool  # speculate's tokens == generate's


def compute_same_tokens(target: TinyLLM, drafts_: dict[str, TinyLLM], k: int = 4,
                        prompt: list[int] = PROMPT, new_tokens: int = NEW_TOKENS) -> list[SameTokensRow]:
    """Each draft at ``k``: greedy speculation against the target generating alone."""
    alone = generate(prompt, new_tokens, model=target).tokens
    rows = []
    for name, draft in drafts_.items():
        run = speculate(prompt, new_tokens, k, draft=draft, target=target)
        rows.append(SameTokensRow(name, k, run.acceptance_rate, run.tokens == alone))
    return rows


# ---- part 2 ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepRow:
    draft: str
    k: int
    acceptance_rate: float  # measured a
    tokens_per_step: float  # measured
    predicted_tokens_per_step: float  # closed form at the measured a
    speedup: float  # measured: plain decode's paper time / speculation's, same tokens
    predicted_speedup: float  # closed form x decode step / speculative step, at the mean context
    equal: bool


def decode_time_s(prompt_len: int, new_tokens: int) -> float:
    """Paper seconds of plain decoding after the prefill: one target step per token but the
    first (which the prefill emits), at contexts ``prompt_len .. prompt_len + new_tokens - 2``.

    >>> decode_time_s(11, 1), round(decode_time_s(11, 3) * 1e3, 1)   # two decode steps of ~6.1 ms
    (0.0, 12.2)
    """
    return float(sum(hw.step_cost(TARGET_SPEC, GPU, [(1, prompt_len + i)]).time_s for i in range(new_tokens - 1)))


def compute_sweep(target: TinyLLM, drafts_: dict[str, TinyLLM], ks: tuple[int, ...] = KS,
                  prompt: list[int] = PROMPT, new_tokens: int = NEW_TOKENS) -> list[SweepRow]:
    """Every draft at every ``k``: measured against predicted, tokens per step and speed-up."""
    alone = generate(prompt, new_tokens, model=target).tokens
    plain_s = decode_time_s(len(prompt), new_tokens)
    rows = []
    for name, draft in drafts_.items():
        for k in ks:
            run = speculate(prompt, new_tokens, k, draft=draft, target=target)
            # each step priced with the guesses it really made (fewer near the end) at its context
            spec_s = sum(speculative_step_cost(TARGET_SPEC, DRAFT_SPEC, GPU, s.proposed, s.context)
                         for s in run.steps)
            a = run.acceptance_rate
            a_known = a if np.isfinite(a) else 0.0
            context = int(round(np.mean([s.context for s in run.steps])))
            ratio = (hw.step_cost(TARGET_SPEC, GPU, [(1, context)]).time_s
                     / speculative_step_cost(TARGET_SPEC, DRAFT_SPEC, GPU, k, context))
            closed = expected_tokens_per_step(a_known, k)
            rows.append(SweepRow(name, k, a, run.tokens_per_step, closed, plain_s / spec_s,
                                 closed * ratio, run.tokens == alone))
    return rows


# ---- printing ----------------------------------------------------------------------------------

def part1_same_tokens(console: Console, rows: list[SameTokensRow]) -> None:
    t = _table(f"1. Greedy speculation against the target alone, k = {rows[0].k}, "
               f"{NEW_TOKENS} tokens (§6.5)", "draft", "acceptance a", "same tokens")
    for r in rows:
        t.add_row(r.draft, f"{r.acceptance_rate:.2f}", "yes" if r.equal else "NO")
    console.print(t)
    console.print("   A guess is kept only when it is the target's own argmax, so a poor draft "
                  "lowers the acceptance rate, never the tokens.")


def part2_sweep(console: Console, rows: list[SweepRow]) -> None:
    t = _table(f"2. Tokens per target step and paper speed-up ({TARGET_SPEC.name} verifying "
               f"{DRAFT_SPEC.name} on {GPU.name})",
               "draft", "k", "a", "tok/step", "(1-a^(k+1))/(1-a)", "speed-up", "predicted",
               "same tokens")
    for r in rows:
        t.add_row(r.draft, str(r.k), f"{r.acceptance_rate:.2f}", f"{r.tokens_per_step:.2f}",
                  f"{r.predicted_tokens_per_step:.2f}", f"{r.speedup:.2f}x",
                  f"{r.predicted_speedup:.2f}x", "yes" if r.equal else "NO")
    console.print(t)
    best = max(rows, key=lambda r: r.speedup)
    worst = min(rows, key=lambda r: r.speedup)
    console.print(f"   Best: {best.draft}, k = {best.k}, {best.speedup:.2f}x. Worst: {worst.draft}, "
                  f"k = {worst.k}, {worst.speedup:.2f}x: every draft step costs "
                  f"{hw.step_cost(DRAFT_SPEC, GPU, [(1, len(PROMPT))]).time_s * 1e3:.2f} ms whether its guess "
                  "is kept or not. Where measured and closed form part, the closed form's assumptions "
                  "fail: guesses are not kept independently (a draft that misses tends to miss "
                  "again), and the last steps guess fewer than k.")


def run(out_dir: Path, console: Console) -> None:
    target = TinyLLM(TINY)
    with working(console, "building the drafts and running speculate on tiny_llm (a few s)"):
        ds = drafts(target)
        same = compute_same_tokens(target, ds)
        sweep = compute_sweep(target, ds)
    part1_same_tokens(console, same)
    part2_sweep(console, sweep)
    path = plots.speculative_speedup(Path(out_dir) / "speculative_speedup.png", *plot_curves(sweep))
    if path is not None:
        console.print(f"   plot: {path}")


def plot_curves(rows: list[SweepRow]) -> tuple[dict, dict]:
    """The plot's series, per k: the closed forms over ``a`` in [0, 1] (the speed-up at the
    runs' middle context) and the measured points, sorted by ``a``."""
    grid = np.linspace(0.0, 1.0, 101)
    context = len(PROMPT) + NEW_TOKENS // 2
    decode = hw.step_cost(TARGET_SPEC, GPU, [(1, context)]).time_s
    predicted: dict[str, dict] = {"tokens": {}, "speedup": {}}
    measured: dict[str, dict] = {"tokens": {}, "speedup": {}}
    for k in dict.fromkeys(r.k for r in rows):
        key = f"k={k}"
        closed = np.array([expected_tokens_per_step(float(a), k) for a in grid])
        ratio = decode / speculative_step_cost(TARGET_SPEC, DRAFT_SPEC, GPU, k, context)
        predicted["tokens"][key], predicted["speedup"][key] = (grid, closed), (grid, closed * ratio)
        pts = sorted((r.acceptance_rate, r.tokens_per_step, r.speedup) for r in rows if r.k == k)
        a, tok, up = (np.array(c) for c in zip(*pts))
        measured["tokens"][key], measured["speedup"][key] = (a, tok), (a, up)
    return predicted, measured
