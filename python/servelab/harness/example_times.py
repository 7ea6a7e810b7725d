"""How long one example of each assignment test may run locally: a few times the slowest example
of the reference solution, scaled to this machine's speed (``assignments/example_times.json``).

An endless loop is one call that never returns. A correct solution's calls are short, so the
local limit (:mod:`.time_limit`) is set on each example (one Hypothesis input, or a test without
Hypothesis as a whole) rather than on the whole test: the shrinking of a real failure runs many
short examples and is never cut, while an example that runs :data:`FACTOR` times longer than the
slowest one of the reference is stopped within seconds, not after two minutes.

The table is written by the instructors from the course copy, whose files are the reference
solutions (``python -m servelab.harness.example_times assignments/``; a release ships it), with the
time of a fixed pure-Python workload measured alongside. A student's run times the same workload
once (:func:`workload_s`, a tenth of a second) and scales every limit by the ratio, never below
1: a slower or busier machine gets longer limits, a faster one keeps the table's (lecture §8.3's
lesson on timing: a number is only meaningful beside the machine that produced it).

>>> table = ExampleTimes({"a5_batching/test_a5_batching.py::test_hand_checked": 0.01}, workload_s=0.1)
>>> round(table.limit_s("a5_batching/test_a5_batching.py::test_hand_checked", here_s=0.3), 6)  # 3x slower here
9.0
>>> table.limit_s("a5_batching/test_a5_batching.py::test_new", here_s=0.3) is None  # not in the table
True
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

FILE_NAME = "example_times.json"
FACTOR = 10.0  # times the reference's slowest example
FLOOR_S = 3.0  # never less (a millisecond's example would otherwise get a hundredth of a second)
MAX_SPEED_FACTOR = 10.0  # a calibration run while the machine stalled must not lift every limit to minutes
WORKLOAD_N = 500_000


def workload_s(repeats: int = 3) -> float:
    """Seconds of a fixed chain of multiply-add-modulo steps (pure interpreted Python, as most
    of a test is), the best of ``repeats``: about 0.05 s on a quiet 2-core machine."""
    best = float("inf")
    for _ in range(repeats):
        start, x = time.perf_counter(), 0
        for i in range(WORKLOAD_N):
            x = (x * 31 + i) % 1000003
        best = min(best, time.perf_counter() - start)
    return best


@dataclass
class ExampleTimes:
    """Seconds of the slowest example of each manifest test (ids relative to ``assignments/``)
    in the reference run, and the workload's seconds on that machine at that time."""

    slowest_s: dict[str, float]
    workload_s: float

    def speed_factor(self, here_s: float) -> float:
        """How much slower this machine runs the workload than the table's did, at least 1.

        >>> ExampleTimes({}, 0.1).speed_factor(0.05), ExampleTimes({}, 0.1).speed_factor(0.25)
        (1.0, 2.5)
        """
        return min(MAX_SPEED_FACTOR, max(1.0, here_s / self.workload_s))

    def limit_s(self, test: str, here_s: float) -> float | None:
        """The seconds one example of ``test`` may run here; None for a test the table lacks."""
        slowest = self.slowest_s.get(test)
        if slowest is None:
            return None
        return max(FLOOR_S, FACTOR * slowest) * self.speed_factor(here_s)

    @classmethod
    def load(cls, path: Path) -> ExampleTimes | None:
        """The table at ``path``, or None where there is none (the limits are then the flat one)."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return cls({k: float(v) for k, v in data["slowest_example_s"].items()}, float(data["workload_s"]))


@dataclass
class Recorder:
    """Collects each test's slowest example during a run of the reference (``--record-example-times``)."""

    path: Path
    slowest_s: dict[str, float] = field(default_factory=dict)

    def add(self, test: str, seconds: float) -> None:
        self.slowest_s[test] = max(seconds, self.slowest_s.get(test, 0.0))

    def write(self, workload: float) -> None:
        data = {"about": "seconds of the slowest example of each test, reference solutions, student "
                         "profile (python -m servelab.harness.example_times); workload_s: the "
                         "machine's speed then (servelab.harness.example_times.workload_s)",
                "python": "%d.%d" % sys.version_info[:2], "workload_s": round(workload, 4),
                "slowest_example_s": {k: round(v, 4) for k, v in sorted(self.slowest_s.items())}}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(self.path)


def main(argv: list[str] | None = None) -> int:
    """Records the table: the assignments' tests on their reference solutions (the course copy),
    under the students' profile, one example at a time timed."""
    args = sys.argv[1:] if argv is None else argv
    assignments = Path(args[0] if args else "assignments").resolve()
    out = assignments / FILE_NAME
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(assignments),
           "--record-example-times", str(out), "--test-time-limit", "0"]
    return subprocess.call(cmd, env={**os.environ, "HYPOTHESIS_PROFILE": "student"})


if __name__ == "__main__":
    raise SystemExit(main())
