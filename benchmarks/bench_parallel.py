"""Serving on several cards: the Rust multi-card simulators against their pure-Python
reference, and their time per simulated step against one card's.

1. Rust vs the pure-Python reference (``servelab.reference.parallel``) on the same chat
   requests: data parallelism on 4 replicas (both routers) and disaggregation 2 prefill : 2
   decode cards over NVLink. Results are first asserted equal (every timestamp, bit for bit),
   then timed: Rust best of 5, Python once.
2. Time per simulated step (CPU time of the calling thread, where the Rust runs, over the steps
   summed over cards; on a shared machine the wall time of a few-ms run swings 2-4x with the
   load): one card at 16 req/s against 4 cards at 64 req/s (4x the requests), so each card sees
   about one card's load. The goal: the multi-card runs within 2x of one card. Every
   router runs each card once: the cards are resumable, and least-tokens advances each one to
   every arrival to see what it has finished (``rust/src/sim/router.rs``), at ``O(cards)`` more
   per request.
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.timing import best_of
from servelab import parallel_sim as ps
from servelab import serving_core as sc
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B, NVLINK_H100
from servelab.reference import parallel as ref
from servelab.workload import chat_requests

PARAMS = dict(max_num_seqs=128, max_num_batched_tokens=4096, block_size=16, num_blocks=2000)
COLUMNS = ("start_s", "first_token_s", "finish_s", "rejected")


def run(console: Console, quick: bool = False) -> None:
    _against_reference(console, 48 if quick else 160)
    _per_step(console, 512 if quick else 8192)


def _same(r: ps.ParallelResult, d: dict, name: str) -> None:
    for k in COLUMNS:
        assert np.array_equal(getattr(r.overall, k), d[k], equal_nan=True), (name, k)
    assert r.overall.busy_s == d["busy_s"] and r.overall.n_steps == d["n_steps"], name


def _against_reference(console: Console, n: int) -> None:
    reqs = chat_requests(n=n, rate=16.0, seed=0)
    link = dict(link_bandwidth=NVLINK_H100.bandwidth, link_latency_s=NVLINK_H100.latency_s)
    cases = {
        "DP x4, round robin": (
            lambda: ps.run_data_parallel(reqs, LLAMA3_8B, H100, 4, "round_robin", **PARAMS),
            lambda: ref.run_data_parallel(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, n_replicas=4,
                                          router="round_robin", **PARAMS)),
        "DP x4, least tokens": (
            lambda: ps.run_data_parallel(reqs, LLAMA3_8B, H100, 4, "least_tokens", **PARAMS),
            lambda: ref.run_data_parallel(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, n_replicas=4,
                                          router="least_tokens", **PARAMS)),
        "disagg 2P:2D, NVLink": (
            lambda: ps.run_disaggregated(reqs, LLAMA3_8B, H100, 2, 2, NVLINK_H100, **PARAMS),
            lambda: ref.run_disaggregated(reqs, LLAMA3_8B, H100, DEFAULT_EFFICIENCY, n_prefill=2, n_decode=2,
                                          router="round_robin", **link, **PARAMS)),
    }
    table = Table(title=f"Rust vs pure-Python reference, {n} chat requests at 16 req/s (same results, bit for bit)")
    for col in ("simulation", "steps", "Rust ms", "Python ms", "Python / Rust"):
        table.add_column(col, justify="right" if col != "simulation" else "left")
    for name, (rust, py) in cases.items():
        t_rust, r = best_of(rust, 5)
        t_py, d = best_of(py, 1)
        _same(r, d, name)
        table.add_row(name, f"{r.overall.n_steps:,}", f"{t_rust * 1e3:.2f}", f"{t_py * 1e3:.0f}",
                      f"{t_py / t_rust:,.0f}x")
    console.print(table)


def _per_step(console: Console, n: int) -> None:
    one = chat_requests(n=n // 4, rate=16.0, seed=0)
    four = chat_requests(n=n, rate=64.0, seed=0)
    cases = [("one card", n // 4, lambda: sc.run_continuous_batching(one, LLAMA3_8B, H100, **PARAMS))]
    for router in ps.ROUTERS:
        name = router.replace("_", " ")
        cases += [
            (f"DP x4, {name}", n, lambda r=router: ps.run_data_parallel(four, LLAMA3_8B, H100, 4, r, **PARAMS).overall),
            (f"disagg 2P:2D, {name}", n, lambda r=router: ps.run_disaggregated(
                four, LLAMA3_8B, H100, 2, 2, NVLINK_H100, r, **PARAMS).overall),
        ]
    table = Table(title="Time per simulated step (CPU time / steps summed over cards), best of 7; "
                        "the goal: multi-card within 2x of one card")
    for col in ("simulation", "requests", "steps", "CPU ms", "ns / step", "vs one card"):
        table.add_column(col, justify="right" if col != "simulation" else "left")
    one_ns = None
    for name, count, fn in cases:
        t, r = best_of(fn, 7, clock=time.thread_time)
        ns = t / max(r.n_steps, 1) * 1e9
        one_ns = one_ns or ns
        table.add_row(name, f"{count:,}", f"{r.n_steps:,}", f"{t * 1e3:.1f}", f"{ns:.0f}", f"{ns / one_ns:.2f}x")
    console.print(table)
