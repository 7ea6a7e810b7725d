"""servelab.engine on this CPU: real tokens per second of continuous batching over the paged KV
pool vs the same requests generated one at a time (``tiny_llm.generate``), as a ratio.

Both produce the same tokens (checked before the ratio is printed, §6.5); batching wins because a
step reads every weight matrix once for the whole batch (§3.4), which on a CPU with a tiny model
pays mostly in Python and numpy overhead per forward, not in memory bandwidth.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from benchmarks.timing import best_of
from servelab import tiny_llm
from servelab.demos.demo_paged import request_mix
from servelab.engine import serve
from servelab.tiny_llm import SMALL, TINY, TinyLLM


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
