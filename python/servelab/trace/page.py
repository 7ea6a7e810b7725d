"""``trace.html``: one self-contained page (styles, script and data inline; nothing loaded from the
network, so it opens offline from a file) that draws one run, or two runs up to the step where
they differ (the a8/a10 failure page).

The drawing is plain SVG made by a short script of the project's own (``page.js``, read from
this package and inlined): a library such as plotly would add some 3.5 MB to every page, and
the pictures needed (rectangles on a timeline, bars, stacked bands, a grid of blocks) are a few
SVG elements each. The data is embedded as JSON in a ``<script type="application/json">``:

``runs[i]``: ``title``, ``source`` ("simulator" or "engine"), ``config`` (the recorder's
limits), ``slo`` ``[ttft_s, tpot_s]``, ``requests`` (``id, prompt, out, arrival, ttft, tpot,
finish, preemptions, preempted_at, status, miss, text, prompt_text``), ``segments`` (request id
-> ``[kind, start_s, end_s, first step, last step]``, kind 0 waiting, 1 prefill, 2 recompute,
3 decode) and ``steps``, one array a step: ``[index, start_s, dur_s, [[id, new_tokens,
context_len, kind], ...], admitted, preempted, finished, running, waiting, len(running),
blocks_used, free_blocks, cached_free_blocks, shared_blocks, host_blocks_used, kv]`` where
``kv`` is ``[[id, blocks, shared], ...]`` or null. ``diff`` (two runs only): ``step``,
``message`` and ``rows`` (``[step, first run's parts, second run's parts]``, each part
``[text, differs]``: :func:`servelab.trace.files.comparison_rows`).

The script reports its own errors into ``<pre id="errors">`` and sets ``data-rendered`` on the
body once drawn, so a headless browser's ``--dump-dom`` shows whether it ran
(``tests/test_trace_browser.py``).

>>> from servelab.trace.record import StepRecorder
>>> rec = StepRecorder(num_blocks=8, block_size=4, token_budget=16, max_num_seqs=2)
>>> rec.add_request(0, prompt_len=5, max_new_tokens=1, arrival_s=0.0)
>>> rec.record(0, 0.0, 0.01, [(0, 5, 0)], admitted=[0], finished=[0], blocks_used=0)
>>> page = render_page([run_data(rec.trace("example"), "a run")])
>>> page.startswith("<!DOCTYPE html>"), " src=" in page, " href=" in page
(True, False, False)
"""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any, Sequence

from servelab import lecture
from servelab.trace.record import Trace
from servelab.trace.segments import all_segments

__all__ = ["render_page", "run_data"]

_KIND = {"waiting": 0, "prefill": 1, "recompute": 2, "decode": 3}

_STYLE = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; } h3 { font-size: 13px; margin: 14px 0 2px; }
.summary { color: #444; } .tick { font-size: 10px; fill: #555; }
.controls { position: sticky; top: 0; background: #fff; padding: 6px 0; z-index: 2; }
.controls input { width: 560px; vertical-align: middle; } .where { margin-left: 10px; font-weight: 600; }
.legend span { margin-right: 14px; } .legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
g.req:hover rect:first-child { fill: #fff3c4; } g.step:hover rect:last-child { fill: rgba(0,0,0,0.12); }
table { border-collapse: collapse; margin: 4px 0; } td, th { border: 1px solid #ddd; padding: 1px 6px; text-align: right; }
td.text { text-align: left; font-family: monospace; max-width: 420px; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; }
tr.miss td { color: #b00; } tr.differs td { background: #fde0dc; font-weight: 600; }
table.sidebyside td { text-align: left; font-family: monospace; }
.detail p { margin: 2px 0; } #tip { position: absolute; display: none; background: #222; color: #fff;
  padding: 4px 8px; border-radius: 3px; white-space: pre; font-size: 12px; pointer-events: none; z-index: 9; }
#errors { color: #b00; } span.bad { background: #d62728; color: #fff; padding: 0 2px; }
"""


_ABOUT = {False: "Made by <code>servelab trace</code>; the same run for Perfetto is "
                 "<code>trace.json</code>.",
          True: "Both runs up to the first step where they differ, that step marked in red "
                "(what differs in it too); the arrow keys step both runs together."}

# before the page's script, so that an error anywhere in it is shown (and seen by --dump-dom)
_ON_ERROR = ("window.onerror = function (msg, src, line) { var e = document.getElementById('errors');"
             " if (e) e.textContent += 'error: ' + msg + ' (line ' + line + ')\\n'; };")


def _num(x: float) -> float | None:
    """A time for the page: null for NaN, to the nanosecond (the page shows microseconds)."""
    return None if x != x or math.isinf(x) else round(float(x), 9)


def run_data(trace: Trace, title: str, ttft_s: float = lecture.LECTURE_SLO.ttft_s,
             tpot_s: float = lecture.LECTURE_SLO.tpot_s) -> dict[str, Any]:
    """One run as the page's script reads it (see the module docstring)."""
    misses = set(trace.slo_misses(ttft_s, tpot_s))
    preempted_at: dict[int, list[float | None]] = {}  # null: a NaN time (see _num)
    for s in trace.steps:
        for rid in s.preempted:
            preempted_at.setdefault(rid, []).append(_num(s.start_s))
    requests = [{"id": r.request_id, "prompt": r.prompt_len, "out": r.max_new_tokens,
                 "arrival": _num(r.arrival_s), "ttft": _num(r.ttft_s), "tpot": _num(r.tpot_s),
                 "finish": _num(r.finish_s), "preemptions": r.preemptions,
                 "preempted_at": preempted_at.get(r.request_id, []), "status": r.status,
                 "miss": r.request_id in misses, "text": r.text, "prompt_text": r.prompt_text}
                for r in trace.requests]
    segments = {str(rid): [[_KIND[k], _num(t0), _num(t1), s0, s1] for k, t0, t1, s0, s1 in spans]
                for rid, spans in all_segments(trace).items()}
    steps = [[s.index, _num(s.start_s), _num(s.dur_s),
              [[r, n, c, _KIND[k]] for (r, n, c), k in zip(s.batch, s.kinds)],
              list(s.admitted), list(s.preempted), list(s.finished), list(s.running),
              list(s.waiting), len(s.running), s.blocks_used, s.free_blocks,
              s.cached_free_blocks, s.shared_blocks, s.host_blocks_used,
              None if s.kv is None else [[r, b, sh] for r, (b, sh) in sorted(s.kv.items())]]
             for s in trace.steps]
    config = {k: v if isinstance(v, (int, float, str, bool)) else str(v)
              for k, v in trace.config.items()}
    return {"title": title, "source": trace.source, "config": config, "slo": [ttft_s, tpot_s],
            "requests": requests, "segments": segments, "steps": steps}


def render_page(runs: Sequence[dict[str, Any]], heading: str = "servelab trace",
                diff: dict[str, Any] | None = None) -> str:
    """The whole page as a string: ``runs`` from :func:`run_data`; ``diff`` for two runs."""
    data = json.dumps({"runs": list(runs), "diff": diff}, separators=(",", ":"), allow_nan=False)
    data = data.replace("</", "<\\/")  # a generated text holding "</script>" ends no element
    script = resources.files("servelab.trace").joinpath("page.js").read_text(encoding="utf-8")
    title = heading.replace("&", "&amp;").replace("<", "&lt;")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{_STYLE}</style><script>{_ON_ERROR}</script></head>\n<body>\n<h1>{title}</h1>\n"
            f"<p>Scrub with the slider or the arrow keys, click a step or a request to go there, "
            f"hover for numbers. {_ABOUT[diff is not None]}</p>\n"
            f"<pre id=\"errors\"></pre><div id=\"runs\"></div>"
            f"<div id=\"tip\"></div>\n<script type=\"application/json\" id=\"trace-data\">{data}"
            f"</script>\n<script>{script}</script>\n</body></html>\n")
