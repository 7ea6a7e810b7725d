"""tiny_llm on this CPU: what the KV cache and batching buy in wall time (ratios, one run).

1. Generation of 32 + 200 tokens (quick: 32 + 50) with and without the KV cache (demo 01 part 2).
2. B decode steps at context 64: one batched forward vs B forwards one sequence at a time
   (weights read once for the batch, §3.4), for TINY and SMALL.
"""

from __future__ import annotations


import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.timing import best_of
from servelab import tiny_llm
from servelab.tiny_llm import SMALL, TINY, KVCache, TinyLLM




def run(console: Console, quick: bool) -> None:
    rng = np.random.default_rng(0)
    n_new = 50 if quick else 200
    model = TinyLLM(TINY)
    prompt = rng.integers(0, 256, 32)
    t_cache, _ = best_of(lambda: tiny_llm.generate(prompt, n_new, model=model), 3)
    t_none, _ = best_of(lambda: tiny_llm.generate(prompt, n_new, model=model, use_cache=False),
                      1 if not quick else 2)
    table = Table(title=f"Generation 32 + {n_new}, TINY: with vs without the KV cache")
    for col in ("without cache (s)", "with cache (s)", "ratio"):
        table.add_column(col, justify="right")
    table.add_row(f"{t_none:.3f}", f"{t_cache:.3f}", f"{t_none / t_cache:.1f}x")
    console.print(table)

    table = Table(title="Decode at context 64: one batched forward vs one forward per sequence")
    for col in ("model", "batch", "separate (ms)", "batched (ms)", "speed-up"):
        table.add_column(col, justify="right")
    for config in (TINY, SMALL):
        m = TinyLLM(config)
        for batch in ((8,) if quick else (4, 16, 64)):
            caches = []
            for _ in range(batch):
                c = KVCache(config)
                m.forward(rng.integers(0, 256, 64), c)
                caches.append(c)
            tokens = [[int(t)] for t in rng.integers(0, 256, batch)]

            def reset() -> None:
                for c in caches:
                    c.truncate(64)

            def separate() -> None:
                reset()
                for tok, c in zip(tokens, caches):
                    m.forward(tok, c)

            def batched() -> None:
                reset()
                m.forward_batch(tokens, caches)

            t_sep, t_bat = best_of(separate, 5)[0], best_of(batched, 5)[0]
            table.add_row(config.name, str(batch), f"{t_sep * 1e3:.2f}", f"{t_bat * 1e3:.2f}",
                          f"{t_sep / t_bat:.1f}x")
    console.print(table)
