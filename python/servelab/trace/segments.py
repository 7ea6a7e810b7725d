"""Each request's life as spans on the simulated clock, from a trace's steps: *waiting* (from
arrival, or from its preemption, to its admission), *prefill* / *recompute* chunks (one span a
step, so chunked prefill shows its chunks) and *decode* (steps in a row merged into one span, so
a page stays light). Shared by the page's timeline and the Chrome trace.

>>> from servelab.trace.record import StepRecorder
>>> rec = StepRecorder(num_blocks=8, block_size=4, token_budget=16, max_num_seqs=2)
>>> rec.add_request(0, prompt_len=5, max_new_tokens=3, arrival_s=0.0)
>>> for i in range(3):
...     rec.record(i, 0.5 + i, 1.0, [(0, 5, 0)] if i == 0 else [(0, 1, 4 + i)], admitted=[0][:i == 0])
>>> all_segments(rec.trace("example"))[0]
[('waiting', 0.0, 0.5, -1, 0), ('prefill', 0.5, 1.5, 0, 0), ('decode', 1.5, 3.5, 1, 2)]
"""

from __future__ import annotations

from servelab.trace.record import Trace

__all__ = ["all_segments", "request_segments", "Segment"]

Segment = tuple[str, float, float, int, int]  # (kind, start_s, end_s, first step, last step)


def all_segments(trace: Trace) -> dict[int, list[Segment]]:
    """Every request's spans, in time order (one pass over the steps)."""
    out: dict[int, list[Segment]] = {r.request_id: [] for r in trace.requests}
    since = {r.request_id: (r.arrival_s, -1) for r in trace.requests if r.status != "unservable"}
    for s in trace.steps:
        end = s.start_s + s.dur_s
        for rid in s.preempted:
            since[rid] = (s.start_s, s.index)
        for rid in s.admitted:
            t0, i0 = since.pop(rid, (s.start_s, s.index))
            out[rid].append(("waiting", t0, s.start_s, i0, s.index))
        for (rid, _, _), kind in zip(s.batch, s.kinds):
            spans = out[rid]
            if kind == "decode" and spans and spans[-1][0] == "decode" and spans[-1][4] == s.index - 1:
                spans[-1] = ("decode", spans[-1][1], end, spans[-1][3], s.index)
            else:
                spans.append((kind, s.start_s, end, s.index, s.index))
    last = trace.steps[-1].start_s + trace.steps[-1].dur_s if trace.steps else 0.0
    for rid, (t0, i0) in since.items():  # still waiting when the run stopped
        out[rid].append(("waiting", t0, max(t0, last), i0, len(trace.steps)))
    return out


def request_segments(trace: Trace, request_id: int) -> list[Segment]:
    return all_segments(trace)[request_id]
