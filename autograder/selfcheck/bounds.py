"""The ``bounds`` checks: bounded grader-side work.

Every value a submission returns must be checked against a bound before the grader computes
with it (a9's split_count went into np.array_split: 1.7 GB at 6 million). A test author cannot
opt out of this check: it runs for every task of the manifest, and the inflation happens in the
grader's reply path (Child.request), so every value of every test is inflated, whatever
function, attribute or handle it came from; and it measures the grader process itself (its
peak RSS, under an address-space cap), so a test that catches MemoryError does not hide it.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from autograder.grading import calibrate
from autograder.grading.grade import ROOT, grade
from autograder.selfcheck.catalogue import HOSTILE_LIMITS, HOSTILE_SECONDS, Factor, full_marks, reference_submission

INFLATE_BY = 10_000_000  # added to every number a reply holds (bools stay bools)
BOUNDS_RSS_BYTES = 512 << 20  # the grader's own peak RSS for one inflated task (it needs about 100 MiB)
BOUNDS_AS_BYTES = 8 << 30  # the address space the inflated grading may map at all (a safety net)


def inflate(value):
    """``value`` (decoded from a reply) with every number made huge: what a submission that
    returns huge counts, sizes, ids and times would send.

    >>> from types import SimpleNamespace
    >>> inflate([1, (True, 2.5), {"n": 3}, SimpleNamespace(k=-1), "s"])
    [10000001, (True, 10000002.5), {'n': 10000003}, namespace(k=9999999), 's']
    """
    import math

    import numpy as np
    from types import SimpleNamespace

    if type(value) is int:
        return value + INFLATE_BY
    if type(value) is float:
        return value + INFLATE_BY if math.isfinite(value) else value
    if type(value) in (list, tuple):
        return type(value)(inflate(v) for v in value)
    if type(value) is dict:
        return {k: inflate(v) for k, v in value.items()}
    if type(value) is SimpleNamespace:
        return SimpleNamespace(**{k: inflate(v) for k, v in vars(value).items()})
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        return value.astype(np.int64 if value.dtype.kind in "iu" else value.dtype) + INFLATE_BY
    if isinstance(value, np.integer):  # as int64: a small dtype cannot hold the huge value
        return np.int64(value) + INFLATE_BY
    if isinstance(value, np.floating):
        return value + INFLATE_BY
    return value


def _bounds_worker(task_id: str, submission: str, out: str) -> None:
    """In a fresh process (so that its peak RSS is this grading's alone): grades ``task_id`` of
    ``submission`` with every reply inflated, writes the results and the peak RSS to ``out``."""
    import resource as res

    from autograder.sandbox import remote

    real = remote.Child.request

    def inflated(self, req, what):
        return inflate(real(self, req, what))

    setattr(remote.Child, "request", inflated)  # this process only: it grades once, then ends
    start = time.monotonic()
    factor = Factor()
    data = grade(Path(submission), only_tasks=frozenset({task_id}), limits=HOSTILE_LIMITS, report=factor)
    Path(out).write_text(json.dumps({"data": data, "seconds": time.monotonic() - start, "factor": factor.value,
                                     "rss_bytes": res.getrusage(res.RUSAGE_SELF).ru_maxrss << 10}))


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (BOUNDS_AS_BYTES, BOUNDS_AS_BYTES))


def check_bounds(task_id: str, tmp: Path, report: Callable[[str], None] | None = None) -> list[str]:
    """The reference of ``task_id`` graded with every number it returns made huge
    (:func:`inflate`): the grader's process must stay under :data:`BOUNDS_RSS_BYTES` and finish
    within :data:`HOSTILE_SECONDS` (times the load factor), no test may fail for the grader's
    own want of memory, and the task must lose points (the inflation reached its tests)."""
    sub = reference_submission(tmp / "inflated", tasks=frozenset({task_id}))
    out = tmp / "bounds.json"
    code = f"from autograder.selfcheck.bounds import _bounds_worker; _bounds_worker({task_id!r}, {str(sub)!r}, {str(out)!r})"
    limit = HOSTILE_SECONDS * calibrate.measure().factor
    try:
        run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                             timeout=limit * 2, preexec_fn=_cap_address_space)
    except subprocess.TimeoutExpired:
        return [f"{task_id}: the inflated grading ran past {limit * 2:.0f} s (a test computes with an unbounded value)"]
    if run.returncode != 0 or not out.is_file():
        return [f"{task_id}: the inflated grading failed (exit {run.returncode}): {run.stderr[-1500:]}"]
    got = json.loads(out.read_text())
    if report is not None:
        report(f"time limits x{got['factor']:g} (the inflated grading's)")
    problems = []
    if got["rss_bytes"] > BOUNDS_RSS_BYTES:
        problems.append(f"{task_id}: with huge numbers returned the grader's process grew to "
                        f"{got['rss_bytes'] >> 20} MiB (bound {BOUNDS_RSS_BYTES >> 20} MiB): a test computes with "
                        "a value it did not bound first")
    if got["seconds"] > limit:
        problems.append(f"{task_id}: with huge numbers returned the grading took {got['seconds']:.0f} s "
                        f"(limit {limit:.0f} s): a test computes with a value it did not bound first")
    tests = [t for t in got["data"]["tests"] if t["extra_data"]["task"] == task_id]
    for t in tests:
        if "MemoryError" in t["output"] or "the grader could not grade" in t["output"]:
            problems.append(f"{t['name']}: the grader itself failed on a huge value: {t['output'][:300]}")
    if sum(t["score"] for t in tests) >= full_marks()[task_id]:
        problems.append(f"{task_id}: the inflated reference kept full marks: the inflation did not reach its tests")
    return problems
