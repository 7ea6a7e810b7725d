"""Speculative decoding in the simulator: what the option costs beside the plain run, on the
event loop with speculation's decoders (``continuous/speculation.rs``, the default) and on the
per-step twin (``serving_core.run_twin``, ``continuous/per_step.rs``).

20,000 chat requests (seed 0) with vLLM's defaults, at 2 req/s (batches of a few), 16 req/s
(dozens running) and 64 req/s (the 256 seats full). Per workload, side by side in one process,
on the same requests:

* **off**: no speculation, the event-driven loop (``continuous/event_driven.rs``, the default);
* **k=0**: the option with no guess: the plain run bit for bit (checked), on the new loop;
* **k=4 a=0.8**, on the new loop and on the per-step loop (checked equal, bit for bit);
* **k=4 a=0.5** and **k=8 a=0.9**, on the new loop: a Llama-3.2-1B draft for Llama-3-8B on an H100.

Before timing, each run's tokens per target step is checked against the closed form
``(1 - a^(k+1)) / (1 - a)`` (within 3%: the last steps of a request guess fewer; at 64 req/s
only below it, the full pool's spare blocks cutting guesses). Rust best of 5 through
``serving_core``, CPU time of this thread. The ratios: each run's time over **off**'s, and the
per-step loop's over the new loop's.

Why speculation costs more than the plain run however it is computed: the plain loop never
visits a decoding request (a cost per event), while with speculation every decoder changes by a
drawn amount in every step (visited once a step, with one draw: a hash of seed, request and
output tokens left that says how many guesses are kept, defined by the per-step loop and
reproduced by the new loop). The new loop makes the visit cheap: its decoders are columns, and
on a CPU with AVX2 or AVX-512 a step in which no guess is cut short visits them 8 at a time,
hash and all (``continuous/spec_decoders.rs``).
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
SPEC_COLUMNS = COLUMNS + ("spec_proposed", "spec_accepted", "spec_steps")
SPECS = ((4, 0.8), (4, 0.5), (8, 0.9))  # (k, acceptance), on the new loop
HEADLINE = "k=4 a=0.8"


def run(console: Console, quick: bool = False) -> None:
    n = 2048 if quick else 20_000
    for rate in (2.0, 16.0, 64.0):
        _one_rate(console, chat_requests(n=n, rate=rate, seed=0), rate)
    console.print("   off: no speculation, the event-driven loop (the default); new / per-step: the "
                  "loop speculation runs on by default, and the per-step loop it replaced (the same run "
                  "bit for bit, checked); k=0: the option with no guess, the plain run bit for bit "
                  "(checked). tok/st: tokens per target step, measured; closed: (1 - a^(k+1)) / (1 - a). "
                  "ns/dec: per decoding entry (a request's step). vs off: times the plain run's time. "
                  "CPU time of this thread, best of 5.")


def _same(a, b, columns, label: str) -> None:
    for k in columns:
        assert np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True), (label, k)
    assert repr(a.busy_s) == repr(b.busy_s) and a.n_steps == b.n_steps, label


def _run(reqs, twin: bool = False, **options):
    """The default run of `options`, or the per-step twin's."""
    return (sc.run_twin if twin else sc.run_continuous)(reqs, LLAMA3_8B, H100, sc.ContinuousOptions(**options))


def _one_rate(console: Console, reqs, rate: float) -> None:
    spec = {f"k={k} a={a:g}": sc.Speculation(k, LLAMA32_1B, a) for k, a in SPECS}
    runs: dict[str, dict] = {"off": {}, "k=0, new": dict(speculative=sc.Speculation(0, LLAMA32_1B, 0.8))}
    runs[f"{HEADLINE}, new"] = dict(speculative=spec[HEADLINE])
    runs[f"{HEADLINE}, per-step"] = dict(speculative=spec[HEADLINE], twin=True)
    runs.update({f"{label}, new": dict(speculative=s) for label, s in spec.items() if label != HEADLINE})
    times, results = {}, {}
    for label, kw in runs.items():
        times[label], results[label] = best_of(
            lambda kw=kw: _run(reqs, **kw), 5, time.thread_time)
    plain = results["off"]
    _same(results["k=0, new"], plain, COLUMNS, "k=0")
    _same(results[f"{HEADLINE}, per-step"], results[f"{HEADLINE}, new"], SPEC_COLUMNS, "per-step")
    for label, r in results.items():
        s = runs[label].get("speculative")
        if s is not None and s.k > 0:
            got, want = r.tokens_per_target_step, expected_tokens_per_step(s.acceptance, s.k)
            # at 64 req/s the full pool's spare blocks cut guesses: fewer tokens a step, never more
            assert abs(got / want - 1) < 0.03 or (rate > 16 and got < want), (label, got, want)
            assert r.n_steps < plain.n_steps, label
    n = len(reqs)
    t = Table(title=f"Speculative decoding in the simulator: {n:,} chat requests at {rate:g} req/s, vLLM "
                    "defaults, Llama-3-8B with a Llama-3.2-1B draft", title_justify="left")
    for c in ("run", "steps", "tok/st", "closed", "ms", "ns/dec", "us/req", "vs off"):
        t.add_column(c, justify="left" if c == "run" else "right")
    for label, r in results.items():
        s = runs[label].get("speculative")
        entries = r.spec_steps.sum() if s is not None else None
        t.add_row(label, f"{r.n_steps:,}",
                  "-" if s is None else f"{r.tokens_per_target_step:.2f}",
                  "-" if s is None else f"{expected_tokens_per_step(s.acceptance, s.k):.2f}",
                  f"{times[label] * 1e3:.2f}",
                  "-" if not entries else f"{times[label] / entries * 1e9:,.1f}",
                  f"{times[label] / n * 1e6:.2f}",
                  "-" if label == "off" else f"{times[label] / times['off']:.1f}x")
    console.print(t)
    new, old = times[f"{HEADLINE}, new"], times[f"{HEADLINE}, per-step"]
    console.print(f"   {HEADLINE}: the new loop {new / times['off']:.2f}x the plain run (target: within 3x), "
                  f"the per-step loop {old / times['off']:.2f}x; the new loop is {old / new:.1f}x faster.")
    console.print(f"   k=0 costs {times['k=0, new'] / times['off']:.2f}x the plain run (the option's own "
                  "overhead: the decoders visited every step).")
