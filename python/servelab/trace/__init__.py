"""See a run step by step (lecture §4.5 policy 3, §2.4, §3.5): who ran in each step, prefill or
decode, how many tokens, who waited, who was preempted, how the KV pool filled, shared and freed
its blocks.

``servelab trace --out DIR`` writes two files:

* ``trace.html``, one self-contained page (open it from the file, offline): a timeline of the
  requests (waiting, prefill chunks, recomputes, decode, preemptions, finishes, SLO misses), each
  step's batch against the token budget and ``max_num_seqs``, the KV pool (blocks per request,
  shared prefix blocks, free and still-cached blocks, the host tier), the queues, TTFT/TPOT per
  request and, for the engine, each request's generated text; a slider, the arrow keys and
  clicks step through it, hovering shows the numbers;
* ``trace.json``, the Chrome trace event format, for Perfetto or chrome://tracing.

Why plain SVG and a short script of our own rather than a plotting library: the page must open
from a file with nothing fetched, and plotly's offline bundle alone is about 3.5 MB per page,
where the pictures here are rectangles, bars, bands and a grid of squares, a few hundred lines
of script; the page of the default run weighs a few hundred kB, most of it the data.

The parts: :mod:`.record` (the data model and :class:`StepRecorder`, the one recorder the engine,
the Python simulator and replays share), :mod:`.segments` (each request's spans),
:mod:`.page` (the HTML), :mod:`.chrome` (the JSON), :mod:`.files` (writing them, and the two-run
page of the a8/a10 failure message), :mod:`.runs` (the runs the command records).

>>> from servelab.trace import simulate_chat
>>> t = simulate_chat(n=8, rate=8.0, num_blocks=64)
>>> len(t.requests), t.num_preemptions > 0
(8, True)
"""

from servelab.trace.chrome import chrome_trace
from servelab.trace.files import write_comparison, write_trace
from servelab.trace.page import render_page, run_data
from servelab.trace.record import (MAX_TRACE_STEPS, RequestRecord, StepRecord, StepRecorder, Trace,
                                   from_engine_result)
from servelab.trace.runs import engine_chat, simulate_chat

__all__ = ["Trace", "StepRecord", "RequestRecord", "StepRecorder", "from_engine_result",
           "MAX_TRACE_STEPS", "chrome_trace", "render_page", "run_data", "write_trace",
           "write_comparison", "simulate_chat", "engine_chat"]
