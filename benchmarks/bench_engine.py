"""servelab.engine on this CPU: real tokens per second of continuous batching over the paged KV
pool vs the same requests generated one at a time (``tiny_llm.generate``), as a ratio.

Both produce the same tokens (checked before the ratio is printed, §6.5); batching wins because a
step reads every weight matrix once for the whole batch (§3.4), which on a CPU with a tiny model
pays mostly in Python and numpy overhead per forward, not in memory bandwidth.

A second table runs the same engine with :class:`~servelab.engine.SpeculativeScheduler` (§8
milestone 4a, k = 4) on greedy requests, against the plain engine: the target's steps, the
guesses kept, and the CPU time per output token. Drafts: the target itself (every guess kept),
the target with its weights perturbed (``perturbed_draft``, noise 0.1) and a one-layer model of
other weights (no guess kept). Tokens equal the plain engine's (checked first).
"""

from __future__ import annotations

import dataclasses
import time

from rich.console import Console
from rich.table import Table

from benchmarks.timing import best_of
from servelab import tiny_llm
from servelab.demos.demo_paged import request_mix
from servelab.engine import SpeculativeScheduler, serve
from servelab.tiny_llm import GREEDY, SMALL, TINY, TinyLLM
from servelab.tiny_llm.speculative import perturbed_draft

SPEC_K = 4


def run(console: Console, quick: bool) -> None:
    table = Table(title="Engine (continuous batching, paged KV) vs one request at a time")
    for col in ("model", "requests", "max batch", "output tokens", "one at a time (tok/s)",
                "engine (tok/s)", "ratio"):
        table.add_column(col, justify="right")
    for config in ((TINY,) if quick else (TINY, SMALL)):
        model = TinyLLM(config)
        requests = request_mix(8 if quick else 32)
        n_out = sum(r.max_new_tokens for r in requests)
        for max_seqs in ((8,) if quick else (4, 16)):
            t_alone, alone = best_of(lambda: [tiny_llm.generate(list(r.prompt), r.max_new_tokens,
                                                                 r.sampler, model=model).tokens
                                              for r in requests], 1 if quick else 3)
            t_eng, res = best_of(lambda: serve(requests, config=config, model=model,
                                               num_blocks=128, block_size=16,
                                               max_num_seqs=max_seqs), 1 if quick else 3)
            if res.tokens() != alone:  # a benchmark of wrong answers measures nothing
                raise AssertionError("engine tokens differ from generate alone")
            table.add_row(config.name, str(len(requests)), str(max_seqs), str(n_out),
                          f"{n_out / t_alone:,.0f}", f"{n_out / t_eng:,.0f}",
                          f"{t_alone / t_eng:.2f}x")
    console.print(table)
    _speculative(console, quick)


def _speculative(console: Console, quick: bool) -> None:
    model = TinyLLM(TINY)
    requests = [dataclasses.replace(r, sampler=GREEDY) for r in request_mix(4 if quick else 12)]
    n_out = sum(r.max_new_tokens for r in requests)
    drafts = {"itself": model, "noise 0.1": perturbed_draft(model, 0.1, seed=1),
              "1 layer": TinyLLM(dataclasses.replace(TINY, name="draft", n_layers=1, d_model=32, n_heads=2,
                                                     n_kv_heads=1, d_ff=64, seed=7))}
    engine = dict(config=TINY, model=model, num_blocks=128, block_size=16, max_num_seqs=16)
    repeat = 1 if quick else 2
    t_plain, plain = best_of(lambda: serve(requests, **engine), repeat, time.thread_time)
    table = Table(title=f"Engine with speculative decoding (k={SPEC_K}) vs without: {len(requests)} greedy "
                        f"requests, {n_out} tokens, TINY", title_justify="left")
    for col in ("draft", "steps", "kept", "ms", "us/token", "vs plain"):
        table.add_column(col, justify="left" if col == "draft" else "right")
    table.add_row("none (plain)", f"{len(plain.steps):,}", "-", f"{t_plain * 1e3:.1f}",
                  f"{t_plain / n_out * 1e6:,.0f}", "1.00x")
    for name, draft in drafts.items():
        t_spec, res = best_of(lambda: serve(requests, scheduler=SpeculativeScheduler(draft, SPEC_K), **engine),
                              repeat, time.thread_time)
        if res.tokens() != plain.tokens():  # greedy: exactly the target's tokens (§6.5)
            raise AssertionError(f"speculative engine with draft {name!r}: tokens differ from the plain engine")
        guessed = sum(sum(step.proposed) for step in res.steps)
        kept = sum(sum(step.accepted) for step in res.steps)
        table.add_row(name, f"{len(res.steps):,}", f"{kept:,}/{guessed:,}", f"{t_spec * 1e3:.1f}",
                      f"{t_spec / n_out * 1e6:,.0f}", f"{t_spec / t_plain:.2f}x")
    console.print(table)
    console.print("   steps: the target's forwards (one per engine step); kept: guesses kept / guessed. CPU "
                  f"time of this thread, best of {repeat}. On this CPU a draft forward of the tiny model costs "
                  "about what the target's does (Python and numpy overhead per call), so fewer target steps "
                  "do not pay for the draft's; the paper GPU's price is demo speculative part 3.")
