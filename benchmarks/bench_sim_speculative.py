"""Speculative decoding in the simulator: what the option costs
per simulated step and per request, beside the plain run.

4,096 chat requests (seed 0) with vLLM's defaults, at 2 req/s (batches of a few) and at 16 req/s
(dozens running). Per workload, side by side in one process:

* **off, events**: no speculation, the event-driven loop (``continuous/event_driven.rs``, the default);
* **off, per-step**: the per-sequence-step loop (``_per_step=True``), the loop speculation runs on;
* **k=0**: the speculative option with no guess: the plain run bit for bit (checked), so this
  row is the option's own overhead on the per-step loop;
* **k=4, a=0.8 / a=0.5** and **k=8, a=0.9**: a Llama-3.2-1B draft for Llama-3-8B on an H100.

The simulator has no Python reference for speculation; before timing, each run's tokens per
target step is checked against the closed form ``(1 - a^(k+1)) / (1 - a)`` (within 3%: the last
step of a request guesses fewer). Rust best of 5 through ``serving_core``, CPU time of this thread.
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.timing import best_of
from servelab import serving_core as sc
from servelab.engine.speculative import LLAMA32_1B
from servelab.hw_model import H100, LLAMA3_8B
from servelab.tiny_llm.speculative import expected_tokens_per_step
from servelab.workload import chat_requests

COLUMNS = ("start_s", "first_token_s", "finish_s", "rejected", "batch_id", "n_preemptions")
SPECS = ((4, 0.8), (4, 0.5), (8, 0.9))  # (k, acceptance)


def run(console: Console, quick: bool = False) -> None:
    n = 512 if quick else 4096
    for rate in (2.0, 16.0):
        _one_rate(console, chat_requests(n=n, rate=rate, seed=0), rate)
    console.print("   events / per-step: no speculation, the event-driven loop (the default) or the per-step "
                  "loop speculation runs on; k=0: the option with no guess, the plain run bit for bit "
                  "(checked): the option's own overhead. tok/st: tokens per target step, measured; closed: "
                  "(1 - a^(k+1)) / (1 - a). ns/step: per simulated (target) step. vs off: times the event-"
                  "driven run's time. CPU time of this thread, best of 5.")


def _one_rate(console: Console, reqs, rate: float) -> None:
    runs: dict[str, dict] = {"events": {}, "per-step": dict(_per_step=True),
                             "k=0": dict(speculative=sc.Speculation(0, LLAMA32_1B, 0.8))}
    runs.update({f"k={k} a={a:g}": dict(speculative=sc.Speculation(k, LLAMA32_1B, a)) for k, a in SPECS})
    times, results = {}, {}
    for label, kw in runs.items():
        times[label], results[label] = best_of(
            lambda kw=kw: sc.run_continuous_batching(reqs, LLAMA3_8B, H100, **kw), 5, time.thread_time)
    plain = results["events"]
    for label in ("per-step", "k=0"):  # the same run bit for bit, then timed
        r = results[label]
        for k in COLUMNS:
            assert np.array_equal(getattr(r, k), getattr(plain, k), equal_nan=True), (label, k)
        assert r.busy_s == plain.busy_s and r.n_steps == plain.n_steps, label
    for (k, a), label in zip(SPECS, list(runs)[3:]):
        got, want = results[label].tokens_per_target_step, expected_tokens_per_step(a, k)
        assert abs(got / want - 1) < 0.03, (label, got, want)
        assert results[label].n_steps < plain.n_steps, label
    n = len(reqs)
    t = Table(title=f"Speculative decoding in the simulator: {n:,} chat requests at {rate:g} req/s, vLLM "
                    "defaults, Llama-3-8B with a Llama-3.2-1B draft", title_justify="left")
    for c in ("run", "steps", "tok/st", "closed", "ms", "ns/step", "us/req", "vs off"):
        t.add_column(c, justify="left" if c == "run" else "right")
    for label, r in results.items():
        spec = runs[label].get("speculative")
        t.add_row(label, f"{r.n_steps:,}",
                  "-" if spec is None else f"{r.tokens_per_target_step:.2f}",
                  "-" if spec is None else f"{expected_tokens_per_step(spec.acceptance, spec.k):.2f}",
                  f"{times[label] * 1e3:.2f}", f"{times[label] / r.n_steps * 1e9:,.0f}",
                  f"{times[label] / n * 1e6:.2f}",
                  "-" if label == "events" else f"{times[label] / times['events']:.1f}x")
    console.print(t)
    console.print(f"   k=0 costs {times['k=0'] / times['per-step']:.2f}x the per-step loop without the option.")
