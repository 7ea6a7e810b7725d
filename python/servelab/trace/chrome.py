"""A :class:`~servelab.trace.record.Trace` in the Chrome trace event format, for Perfetto
(ui.perfetto.dev) or chrome://tracing, the convention Vidur's traces follow.

Process 1, "steps": one complete event (``"ph": "X"``, times in microseconds) per step on thread
1, named ``step N`` with its batch in ``args``; counters (``"ph": "C"``) for the batch's tokens,
the queues and the KV pool. Process 2, "requests": one thread per request, its waiting,
prefill, recompute and decode spans as complete events (decode steps in a row merged into one).

>>> from servelab.trace.record import StepRecorder
>>> rec = StepRecorder(num_blocks=8, block_size=4, token_budget=16, max_num_seqs=2)
>>> rec.add_request(0, prompt_len=5, max_new_tokens=2, arrival_s=0.0)
>>> rec.record(0, 0.0, 0.01, [(0, 5, 0)], admitted=[0], running=[0], blocks_used=2)
>>> rec.record(1, 0.01, 0.02, [(0, 1, 5)], finished=[0], blocks_used=0)
>>> ev = chrome_trace(rec.trace("example"))["traceEvents"]
>>> [(e["name"], e["dur"]) for e in ev if e.get("cat") == "step"]
[('step 0', 10000.0), ('step 1', 20000.0)]
"""

from __future__ import annotations

from typing import Any

from servelab.trace.record import Trace
from servelab.trace.segments import all_segments

__all__ = ["chrome_trace"]

_US = 1e6


def chrome_trace(trace: Trace) -> dict[str, Any]:
    """The ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`` object."""
    ev: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"{trace.source} steps"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "batch"}},
        {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "requests"}},
    ]
    for s in trace.steps:
        ts = s.start_s * _US
        ev.append({"name": f"step {s.index}", "cat": "step", "ph": "X", "pid": 1, "tid": 1,
                   "ts": ts, "dur": s.dur_s * _US,
                   "args": {"batch": [list(e) for e in s.batch], "kinds": list(s.kinds),
                            "admitted": list(s.admitted), "preempted": list(s.preempted),
                            "finished": list(s.finished)}})
        ev.append({"name": "tokens", "ph": "C", "pid": 1, "ts": ts,
                   "args": {"prefill": s.prefill_tokens, "decode": s.decode_tokens}})
        ev.append({"name": "queues", "ph": "C", "pid": 1, "ts": ts,
                   "args": {"waiting": len(s.waiting), "running": len(s.running)}})
        ev.append({"name": "KV blocks", "ph": "C", "pid": 1, "ts": ts,
                   "args": {"used": s.blocks_used, "free": s.free_blocks,
                            "host": s.host_blocks_used}})
    spans = all_segments(trace)
    for r in trace.requests:
        tid = r.request_id + 1
        ev.append({"name": "thread_name", "ph": "M", "pid": 2, "tid": tid,
                   "args": {"name": f"request {r.request_id}"}})
        for kind, t0, t1, s0, s1 in spans[r.request_id]:
            ev.append({"name": kind, "cat": "request", "ph": "X", "pid": 2, "tid": tid,
                       "ts": t0 * _US, "dur": (t1 - t0) * _US,
                       "args": {"steps": [s0, s1]}})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"source": trace.source, **{k: _plain(v) for k, v in trace.config.items()}}}


def _plain(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
