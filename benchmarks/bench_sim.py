"""The serving simulator: Rust core vs the pure-Python reference.

4,096 chat requests (the lecture's workload, seed 0, 2 req/s) per policy. Each pair of results
is first asserted equal (every timestamp, bit for bit), then timed: Rust best of 5 runs, Python
once. Prints simulated requests and steps per second and the ratio.

A second table puts batch 1 beside a SimPy model of it (``benchmarks/simpy_batch1.py``; SimPy
comes with the ``bench`` extra, which ``make bench`` installs). Without SimPy that table is
skipped with a note.
"""

from __future__ import annotations


import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks import simpy_batch1
from benchmarks.timing import best_of
from servelab import serving_core as sc
from servelab.admission import EarlyReject
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B
from servelab.reference import sim as ref
from servelab.workload import chat_requests




def run(console: Console, quick: bool = False) -> None:
    n = 512 if quick else 4096
    reqs = chat_requests(n=n, rate=2.0, seed=0)
    policies = [("batch 1", lambda: sc.run_batch1(reqs, LLAMA3_8B, H100),
                 lambda: ref.run_batch1(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY))]
    adm = EarlyReject(2.0, "mean")  # §5.5's admission control, demo 04's SLO
    pred = adm.predicted_len(reqs)
    policies.append(("early reject", lambda: sc.run_batch1(reqs, LLAMA3_8B, H100, admission=adm),
                     lambda: ref.run_batch1(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, slo_ttft_s=2.0,
                                            predicted_len=pred)))
    for b in (8, 32, 128):
        policies.append((f"static B={b}",
                         lambda b=b: sc.run_static_batching(reqs, LLAMA3_8B, H100, b),
                         lambda b=b: ref.run_static_batching(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, b)))
    t = Table(title=f"Simulator: {n:,} chat requests per policy (Llama-3-8B on a paper H100)",
              title_justify="left")
    for c in ("policy", "steps", "Rust ms", "Python s", "Rust req/s", "Python req/s", "Rust Msteps/s", "ratio"):
        t.add_column(c, justify="left" if c == "policy" else "right")
    for name, fast, slow in policies:
        t_rust, r = best_of(fast, 5)
        t_py, p = best_of(slow, 1)
        for k in ("start_s", "first_token_s", "finish_s", "batch_id", "rejected"):
            assert np.array_equal(getattr(r, k), p[k], equal_nan=True), (name, k)  # equal first, then timed
        assert r.busy_s == p["busy_s"] and r.n_steps == p["n_steps"]
        t.add_row(name, f"{r.n_steps:,}", f"{t_rust * 1e3:.1f}", f"{t_py:.2f}", f"{n / t_rust:,.0f}",
                  f"{n / t_py:,.0f}", f"{r.n_steps / t_rust / 1e6:.0f}", f"{t_py / t_rust:,.0f}x")
    console.print(t)
    _simpy_peer(console, reqs)


def _simpy_peer(console: Console, reqs) -> None:
    if not simpy_batch1.available():
        console.print("SimPy is not installed: the SimPy peer is skipped "
                      "(pip install 'servelab[bench]', or run make bench).")
        return
    pricer = ref.Pricer(LLAMA3_8B, H100, DEFAULT_EFFICIENCY)
    t_rust, r = best_of(lambda: sc.run_batch1(reqs, LLAMA3_8B, H100), 5)
    t_simpy, s = best_of(lambda: simpy_batch1.run_batch1(reqs, pricer), 1)
    for k in ("start_s", "first_token_s", "finish_s"):
        assert np.array_equal(getattr(r, k), s[k]), k  # equal first, then timed
    n = len(reqs)
    t = Table(title=f"Batch 1 FCFS, {n:,} requests: Rust vs a SimPy model", title_justify="left")
    for c in ("simulator", "seconds", "req/s", "ratio"):
        t.add_column(c, justify="left" if c == "simulator" else "right")
    t.add_row("Rust (servelab)", f"{t_rust:.4f}", f"{n / t_rust:,.0f}", "1x")
    t.add_row("SimPy", f"{t_simpy:.2f}", f"{n / t_simpy:,.0f}", f"{t_simpy / t_rust:,.0f}x slower")
    console.print(t)
