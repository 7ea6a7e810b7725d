"""What recording a trace costs (``servelab trace``), side by side in one process.

Times are CPU time of this thread, best of a few runs, except the engine's (wall time, best of
five: numpy may use other threads).

1. The Rust event-driven simulator on the trace's default run (demo 03's workload, 80
   requests at 24 req/s, 1,024 blocks) and on 4,096 requests, with recording off: the loop
   ``servelab sweep`` runs. Recording never enters it (``event_driven.rs`` has no recording
   code; a recorded run takes the per-step loop, its equal bit for bit).
2. The Rust per-step loop without and with its queues recorded (``serving_core.run_twin(..., queues=True)``,
   ``rust/src/sim/continuous/trace.rs``), and then read into :class:`servelab.trace.StepRecorder`
   (what ``servelab trace`` does).
3. The Python twin of the simulator (``servelab.reference.continuous``) with ``recorder=None``
   and with a recorder: the ratio is recording's cost where the trace is made.
4. The engine on tiny_llm, without and with a recorder (the default ``--engine`` run).
5. Writing the page and the Chrome trace of the default run, and their sizes.
"""

from __future__ import annotations

import json
import time

from rich.console import Console
from rich.table import Table

from benchmarks.timing import best_of
from servelab import lecture
from servelab import serving_core as sc
from servelab.reference import continuous as ref
from servelab.trace import StepRecorder, chrome_trace, engine_chat, render_page, run_data
from servelab.trace.runs import ENGINE_DEFAULTS, SIM_DEFAULTS, simulate
from servelab.workload import chat_requests

LIMITS = dict(max_num_seqs=SIM_DEFAULTS["max_num_seqs"],
              max_num_batched_tokens=SIM_DEFAULTS["max_num_batched_tokens"],
              block_size=SIM_DEFAULTS["block_size"], num_blocks=SIM_DEFAULTS["num_blocks"])


def run(console: Console, quick: bool = False) -> None:
    repeat = 1 if quick else 3
    n = 20 if quick else SIM_DEFAULTS["n"]
    reqs = chat_requests(n, SIM_DEFAULTS["rate"], lecture.SEED)
    model, gpu = lecture.MODEL, lecture.GPU
    eff = sc.DEFAULT_EFFICIENCY
    cpu = time.thread_time

    big = chat_requests(512 if quick else 4096, SIM_DEFAULTS["rate"], lecture.SEED)
    rust, fast = best_of(lambda: sc.run_continuous_batching(reqs, model, gpu, **LIMITS), 5, cpu)
    rust_big, _ = best_of(lambda: sc.run_continuous_batching(big, model, gpu, **LIMITS), 5, cpu)
    opts = dict(trace=True, batch_log=True)
    step_off, _ = best_of(lambda: sc.run_twin(reqs, model, gpu, sc.ContinuousOptions(**opts, **LIMITS)), 5, cpu)
    step_on, _ = best_of(lambda: sc.run_twin(reqs, model, gpu, sc.ContinuousOptions(**opts, **LIMITS),
                                              queues=True), 5, cpu)
    read, _ = best_of(lambda: simulate(reqs, model=model, gpu=gpu, **LIMITS), repeat, cpu)

    def recorded() -> dict:
        rec = StepRecorder(num_blocks=LIMITS["num_blocks"], block_size=LIMITS["block_size"],
                           token_budget=LIMITS["max_num_batched_tokens"],
                           max_num_seqs=LIMITS["max_num_seqs"])
        out = ref.run_continuous_batching(reqs, model, gpu, eff, recorder=rec, **LIMITS)
        out["trace"] = rec.trace("simulator")
        return out

    twin_off, plain = best_of(lambda: ref.run_continuous_batching(reqs, model, gpu, eff, **LIMITS),
                              repeat, cpu)
    twin_on, rec_out = best_of(recorded, repeat, cpu)
    # the same run three ways before anything is compared
    assert plain["finish_s"].tolist() == fast.finish_s.tolist() == rec_out["finish_s"].tolist()
    trace = rec_out["trace"]

    en = 4 if quick else ENGINE_DEFAULTS["n"]
    # wall time: numpy may compute on other threads, which thread_time would not count
    eng_off, _ = best_of(lambda: _engine(en, False), repeat + 2)
    eng_on, _ = best_of(lambda: _engine(en, True), repeat + 2)

    t0 = cpu()
    page = render_page([run_data(trace, "bench")])
    chrome = json.dumps(chrome_trace(trace), separators=(",", ":"))
    write = cpu() - t0

    t = Table(title=f"Recording a trace: {n} of demo 03's requests at {SIM_DEFAULTS['rate']:g} "
                    f"req/s ({len(trace.steps):,} steps), ms")
    for col in ("run", "recording off", "recording on", "on / off"):
        t.add_column(col, justify="right" if col != "run" else "left")
    t.add_row("Rust event-driven simulator (this run)", f"{rust * 1e3:.2f}", "(per-step loop)", "-")
    t.add_row(f"Rust event-driven simulator ({len(big):,} requests)", f"{rust_big * 1e3:.1f}",
              "(per-step loop)", "-")
    t.add_row("Rust per-step loop (this run)", f"{step_off * 1e3:.2f}",
              f"{step_on * 1e3:.2f}", f"{step_on / step_off:.2f}x")
    t.add_row("Rust record read into the recorder (this run)", f"{rust * 1e3:.2f}",
              f"{read * 1e3:.0f}", f"{read / rust:.0f}x")
    t.add_row("Python twin of the simulator", f"{twin_off * 1e3:.0f}", f"{twin_on * 1e3:.0f}",
              f"{twin_on / twin_off:.2f}x")
    t.add_row(f"engine on tiny_llm ({en} requests)", f"{eng_off * 1e3:.0f}", f"{eng_on * 1e3:.0f}",
              f"{eng_on / eng_off:.2f}x")
    t.add_row("trace.html + trace.json of this run", "-", f"{write * 1e3:.0f}",
              f"{len(page) / 1e3:.0f} kB + {len(chrome) / 1e3:.0f} kB")
    console.print(t)
    console.print("   Recording is off unless asked: the event-driven loop has no recording code; the "
                  "per-step loop calls a no-op hook at each step's end, the Python twin and the engine "
                  "test `recorder is not None` once a step.")


def _engine(n: int, record: bool) -> object:
    from servelab.engine import Engine
    from servelab.trace.runs import _prompt

    mix = chat_requests(n, ENGINE_DEFAULTS["rate"], lecture.SEED, prompt_mean=40,
                        output_mean=20, max_len=120)
    kw = {k: ENGINE_DEFAULTS[k] for k in ("num_blocks", "block_size", "max_num_seqs",
                                          "max_num_batched_tokens")}
    rec = StepRecorder(num_blocks=kw["num_blocks"], block_size=kw["block_size"],
                       token_budget=kw["max_num_batched_tokens"],
                       max_num_seqs=kw["max_num_seqs"]) if record else None
    e = Engine(recorder=rec, **kw)
    for i, (p, m, a) in enumerate(zip(mix.prompt_len.tolist(), mix.output_len.tolist(),
                                      mix.arrival_s.tolist())):
        e.add_request(_prompt(i, int(p), False), int(m), arrival_s=float(a))
    return e.run()
