"""Continuous batching in the simulator: Rust vs the pure-Python reference, and a million requests.

1. 4,096 chat requests (seed 0) at 2 req/s with vLLM's defaults, and at 32 req/s in a pool of
   2,000 blocks that forces preemptions: the two results are first asserted equal (every
   timestamp, bit for bit), then timed (Rust best of 5, Python once).
2. 1,000,000 chat requests at 20 req/s, run in a fresh process per size (250k, 500k, 1M) so
   that each peak RSS is its own: wall time, and the memory the run adds on top of its inputs,
   per request. Linear memory shows as a flat bytes-per-request column.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.timing import best_of
from servelab import serving_core as sc
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B, kv_capacity_tokens
from servelab.reference import continuous as ref
from servelab.workload import chat_requests

COLUMNS = ("start_s", "first_token_s", "finish_s", "rejected", "batch_id", "n_preemptions")

# One run in a child process: RSS before the simulation (inputs built), peak after, wall time.
CHILD = """
import json, sys, time
from servelab import serving_core as sc
from servelab.hw_model import H100, LLAMA3_8B
from servelab.workload import chat_requests

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

n = int(sys.argv[1])
reqs = chat_requests(n=n, rate=20.0, seed=0)
before = status("VmRSS:")
t0 = time.perf_counter()
r = sc.run_continuous_batching(reqs, LLAMA3_8B, H100)
wall = time.perf_counter() - t0
ok = ~r.rejected
assert (r.finish_s[ok] >= r.first_token_s[ok]).all() and (r.first_token_s[ok] > r.start_s[ok]).all()
print(json.dumps(dict(n=n, wall=wall, before=before, peak=status("VmHWM:"), steps=r.n_steps,
                      preemptions=int(r.n_preemptions.sum()), rejected=int(r.rejected.sum()))))
"""


def run(console: Console, quick: bool = False) -> None:
    _parity_and_speed(console, 512 if quick else 4096)
    _million(console, (10_000, 20_000, 40_000) if quick else (250_000, 500_000, 1_000_000))


def _parity_and_speed(console: Console, n: int) -> None:
    bs = 16
    default_blocks = kv_capacity_tokens(LLAMA3_8B, H100) // bs
    cases = [("2/s", chat_requests(n=n, rate=2.0, seed=0),
              dict(max_num_seqs=256, max_num_batched_tokens=8192, block_size=bs, num_blocks=default_blocks)),
             ("32/s tight", chat_requests(n=n, rate=32.0, seed=0),
              dict(max_num_seqs=256, max_num_batched_tokens=2048, block_size=bs, num_blocks=2000,
                   chunked_prefill=True))]
    t = Table(title=f"Continuous batching: {n:,} chat requests, Rust vs the pure-Python reference",
              title_justify="left")
    for c in ("case", "steps", "preempt", "Rust ms", "Python s", "Rust req/s", "Py req/s", "ratio"):
        t.add_column(c, justify="left" if c == "case" else "right")
    for name, reqs, params in cases:
        t_rust, r = best_of(lambda: sc.run_continuous_batching(reqs, LLAMA3_8B, H100, **params), 5)
        t_py, p = best_of(lambda: ref.run_continuous_batching(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY,
                                                              **params), 1)
        for k in COLUMNS:  # equal first, then timed
            assert np.array_equal(getattr(r, k), p[k], equal_nan=True), (name, k)
        assert r.busy_s == p["busy_s"] and r.n_steps == p["n_steps"], name
        t.add_row(name, f"{r.n_steps:,}", f"{int(r.n_preemptions.sum()):,}", f"{t_rust * 1e3:.1f}",
                  f"{t_py:.2f}", f"{n / t_rust:,.0f}", f"{n / t_py:,.0f}", f"{t_py / t_rust:,.0f}x")
    console.print(t)
    console.print("   2/s: 2 req/s with vLLM's defaults (256 seats, 8,192 tokens a step, the whole KV "
                  "pool); 32/s tight: 32 req/s, 2,000 blocks of 16, chunked prefill with 2,048 tokens a step.")


def _million(console: Console, sizes: tuple[int, ...]) -> None:
    t = Table(title="Continuous batching at 20 req/s, vLLM defaults: a fresh process per size",
              title_justify="left")
    for c in ("requests", "steps", "preempt", "reject", "wall s", "req/s", "in MB", "+MB", "B/req"):
        t.add_column(c, justify="right")
    for n in sizes:
        out = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True,
                             timeout=1800)
        if out.returncode != 0:
            raise RuntimeError(f"the {n:,}-request run failed:\n{out.stderr[-2000:]}")
        d = json.loads(out.stdout)
        added = d["peak"] - d["before"]
        t.add_row(_short(n), _short(d["steps"]), f"{d['preemptions']:,}", f"{d['rejected']:,}", f"{d['wall']:.2f}",
                  _short(n / d["wall"]), f"{d['before'] / 1e6:.0f}", f"{added / 1e6:.1f}",
                  f"{added / n:.0f}")
    console.print(t)
    console.print("   +MB: peak RSS of the run above the RSS with its inputs built; B/request: the same "
                  "per request (flat = linear memory). rejected: requests longer than the 8,192-token budget allows without chunked "
                  "prefill (rule 1). Per request the run keeps its state (4 integers) and its output columns; no "
                  "per-step data unless trace or batch_log is asked for.")


def _short(x: float) -> str:
    """1,433,000 -> 1.43M, 250,000 -> 250k: the table fits 80 columns."""
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.0f}"
