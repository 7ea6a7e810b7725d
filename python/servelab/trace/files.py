"""Writing a trace's two files, each whole or not at all (a temporary file renamed into place):
``trace.html`` (:mod:`servelab.trace.page`) and ``trace.json`` (:mod:`servelab.trace.chrome`);
and the two-run page of the a8/a10 failure message (:func:`write_comparison`).

>>> import tempfile, pathlib
>>> from servelab.trace.runs import simulate_chat
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> [p.name for p in write_trace(simulate_chat(n=4, rate=2.0, num_blocks=256), out, "four")]
['trace.html', 'trace.json']
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from servelab.files import write_text_atomic
from servelab.trace.chrome import chrome_trace
from servelab.trace.page import render_page, run_data
from servelab.trace.record import StepRecord, Trace

__all__ = ["write_trace", "write_comparison", "comparison_rows"]


def write_trace(trace: Trace, out_dir: Path | str, title: str, **slo: float) -> list[Path]:
    """``out_dir/trace.html`` and ``out_dir/trace.json``; returns their paths. ``slo``:
    ``ttft_s``/``tpot_s`` for the page's SLO marks (the lecture's by default)."""
    out = Path(out_dir)
    page = render_page([run_data(trace, title, **slo)])
    chrome = json.dumps(chrome_trace(trace), separators=(",", ":"), allow_nan=False)
    return [write_text_atomic(out / "trace.html", page), write_text_atomic(out / "trace.json", chrome)]


def _parts(s: StepRecord | None, other: StepRecord | None) -> list[list[Any]]:
    """A step as ``[[text, differs], ...]``: each batch entry, then the preempted list; an
    entry the other run's step does not have, or a preempted list unlike its, is marked."""
    if s is None:
        return [["no step", other is not None]]
    theirs = set() if other is None else set(other.batch)
    parts: list[list[Any]] = [[str(list(e)), e not in theirs] for e in s.batch]
    same = other is not None and other.preempted == s.preempted
    parts.append([f"preempted {list(s.preempted)}", not same])
    return parts


def comparison_rows(want: Trace, got: Trace, upto: int) -> list[list[Any]]:
    """``[step, want's parts, got's parts]`` for steps 0..``upto`` (see :func:`_parts`).

    >>> from servelab.trace.record import StepRecorder
    >>> def one(batch):
    ...     rec = StepRecorder(num_blocks=4, block_size=4, token_budget=8, max_num_seqs=2)
    ...     rec.add_request(0, 3, 1, 0.0); rec.add_request(1, 2, 1, 0.0)
    ...     rec.record(0, 0.0, 1.0, batch, admitted=[r for r, _, _ in batch])
    ...     return rec.trace("x")
    >>> comparison_rows(one([(0, 3, 0), (1, 2, 0)]), one([(0, 3, 0)]), 0)[0][1]
    [['[0, 3, 0]', False], ['[1, 2, 0]', True], ['preempted []', False]]
    """
    def at(t: Trace, i: int) -> StepRecord | None:
        return t.steps[i] if i < len(t.steps) else None
    return [[i, _parts(at(want, i), at(got, i)), _parts(at(got, i), at(want, i))]
            for i in range(upto + 1)]


def write_comparison(want: Trace, got: Trace, step: int, message: str, path: Path | str,
                     titles: Sequence[str] = ("expected: servelab's engine", "got: your schedule")
                     ) -> Path:
    """One page with both runs cut after ``step`` (the first that differs), that step marked."""
    cut = [Trace(t.source, t.config, t.steps[:step + 1], t.requests) for t in (want, got)]
    diff = {"step": step, "message": message, "rows": comparison_rows(want, got, step)}
    runs = [run_data(t, title) for t, title in zip(cut, titles)]
    return write_text_atomic(Path(path), render_page(runs, f"servelab: step {step} differs", diff))
