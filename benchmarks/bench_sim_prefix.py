"""Prefix caching in the simulator (issue 15 §2): its speed with prefix caching on and off.

Chat-service workloads from :func:`servelab.workload.chat_sessions` (seed 0, Llama-3-8B on an
H100, vLLM's defaults): single-turn requests with one of 4 shared 1024-token system prompts at
24 req/s, and conversations of 4 turns on average (12 new a second). Per workload three runs:

* **off**: prefix caching off, the event-driven loop (``continuous.rs``, cost per event);
* **on, none**: prefix caching on without ``shared_prefixes``: the per-step loop over
  the real allocator (``continuous_prefix.rs``), which hashes every prompt token, alone;
* **on**: prefix caching on the shared prefixes.

Rust best of 5 through ``serving_core`` (argument checks and result columns included). Before
timing, the "on" run is checked to compute or serve from the cache every token (exactly once
unless a preemption makes it recompute).
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from benchmarks.timing import best_of
from servelab import serving_core as sc
from servelab.hw_model import H100, LLAMA3_8B
from servelab.workload import chat_sessions


def run(console: Console, quick: bool = False) -> None:
    n = 300 if quick else 4000
    workloads = [("system 24/s", chat_sessions(n, 24.0, 0)),
                 ("turns 12/s", chat_sessions(n // 4, 12.0, 0, turns_mean=4.0))]
    t = Table(title="Continuous batching with prefix caching off and on (chat_sessions, seed 0)",
              title_justify="left")
    for c in ("workload", "run", "reqs", "pre", "ms", "ns/seq-st", "us/req", "cached", "vs off"):
        t.add_column(c, justify="left" if c in ("workload", "run") else "right")
    for name, (reqs, shared) in workloads:
        traced = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, prefix_caching=True,
                                            shared_prefixes=shared, trace=True)
        off_traced = sc.run_continuous_batching(reqs, LLAMA3_8B, H100, trace=True)
        # every token computed, or served from the cache; exactly once without preemptions
        computed, cached = int(traced.computed_tokens.sum()), int(traced.cached_tokens.sum())
        need = int((reqs.prompt_len + reqs.output_len - 1)[~traced.rejected].sum())  # rule 1 rejects some
        assert computed == int(traced.trace.tokens.sum()) and computed + cached >= need
        assert computed + cached == need or traced.n_preemptions.any()
        runs = {"off": dict(), "on, none": dict(prefix_caching=True),
                "on": dict(prefix_caching=True, shared_prefixes=shared)}
        times = {}
        for label, kw in runs.items():
            times[label], r = best_of(lambda kw=kw: sc.run_continuous_batching(reqs, LLAMA3_8B, H100, **kw), 5)
            seq_steps = int((traced if label == "on" else off_traced).trace.batch_size.sum())
            cached = 0 if r.cached_tokens is None else int(r.cached_tokens.sum())
            t.add_row(name, label, f"{len(reqs):,}", f"{int(r.n_preemptions.sum()):,}",
                      f"{times[label] * 1e3:.2f}",
                      f"{times[label] / seq_steps * 1e9:,.0f}", f"{times[label] / len(reqs) * 1e6:.2f}",
                      f"{cached / max(int(reqs.prompt_len.sum()), 1):.0%}" if label == "on" else "-",
                      "-" if label == "off" else f"{times[label] / times['off']:.0f}x")
    console.print(t)
    console.print("   off: the event-driven loop (cost per event); on: the per-step loop over the real block "
                  "allocator, O(tokens): it visits every running request each step and hashes every prompt "
                  "token once. on, none: prefix caching without shared prefixes (the loop's own cost). cached: prompt "
                  "tokens served from the prefix cache. vs off: times the event-driven run's time.")
