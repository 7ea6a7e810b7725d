"""Per-test time limits that follow the grading machine's speed and load.

A test that needs 3 s on a quiet machine needs 12 s on two cores shared by eight busy
processes; with a fixed ``--timeout`` its grade would depend on what else the machine was
doing. So each grading first times a fixed, deterministic CPU workload in a fresh child
process (:func:`measure`: the child's start included, as a test's limit includes it) and
compares the time with :data:`REFERENCE_S`, the same workload on a quiet machine. The ratio,
never below 1 (a fast machine keeps the limits it was given) and at most :data:`MAX_FACTOR`
(a stalled calibration must not make hostile code run for an hour), multiplies the wall-clock
seconds of :class:`~autograder.sandbox.remote.Limits` (:func:`scaled`) and the time budgets.

The CPU seconds follow the child's own CPU time instead (:data:`REFERENCE_CPU_S`): what a test
costs in CPU depends on the machine's speed, not on how many processes share it (a busy machine
gives each one fewer CPU seconds per wall-clock second, not more per operation). Scaled by the
load, a spinning submission would get ten times the CPU on a busy machine, and add to the load
that every other grading is timed against.

The factor changes how long the grader waits, never what it decides: results.json does not
record it (a regrade stays byte-identical); ``grade`` prints it on stderr, ``grade-all`` writes
it to ``OUT/timing.csv``, the self-check shows it in its table.

>>> from autograder.sandbox.remote import Limits
>>> big = scaled(Limits(wall_s=4.0, cpu_s=4), 2.5)
>>> big.wall_s, big.cpu_s
(10.0, 10)
>>> busy = scaled(Limits(wall_s=4.0, cpu_s=4), 8.0, cpu_factor=1.2)  # loaded, not slower
>>> busy.wall_s, busy.cpu_s
(32.0, 5)
>>> scaled(Limits(wall_s=4.0, cpu_s=4), 1.0) == Limits(wall_s=4.0, cpu_s=4)
True
>>> factor_of(0.9, 0.3), factor_of(0.1, 0.3), factor_of(99.0, 0.3)
(3.0, 1.0, 10.0)
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from autograder.sandbox.remote import Limits

# the workload: a chain of multiply-add-modulo steps, pure interpreted Python as most of a
# grading is (Hypothesis, the wire, the tests), with no memory or I/O to speak of
ITERATIONS = 2_000_000
WORKLOAD = f"""
import time
start, cpu = time.perf_counter(), time.process_time()
x = 0
for i in range({ITERATIONS}):
    x = (x * 31 + i) % 1000003
print('{{"x": %d, "cpu_s": %.6f}}' % (x, time.process_time() - cpu))
"""
EXPECTED_X = 235197  # the workload's answer: a child that printed anything else did not run it
# seconds the child takes, start to exit, on a quiet 2-core machine (CPython 3.11; its CPU time
# alone is 0.17 s): measured by `python -c "from autograder.grading.calibrate import measure; print(measure())"`
REFERENCE_S = 0.2
REFERENCE_CPU_S = 0.17  # the same child's CPU seconds (the workload alone), on that machine
MAX_FACTOR = 10.0
TIMEOUT_S = 120.0  # a calibration child slower than this is a machine not fit to grade on


@dataclass(frozen=True)
class Calibration:
    """One timing of the workload: wall-clock seconds of the child (start to exit), its CPU
    seconds, the factor of the wall-clock limits and budgets (speed and load) and that of the
    CPU limits (speed only)."""

    wall_s: float
    cpu_s: float
    factor: float
    cpu_factor: float = 1.0

    def describe(self, limits: Limits) -> str:
        """One line for the instructor: the factor and the limits it gives."""
        big = scaled(limits, self.factor, self.cpu_factor)
        return (f"time limits x{self.factor:.2f} for this machine's speed and load (a {REFERENCE_S:g} s "
                f"calibration took {self.wall_s:.2f} s): per test {big.wall_s:g} s wall-clock, {big.cpu_s} s CPU "
                f"(x{self.cpu_factor:.2f}, the speed alone: its CPU time was {self.cpu_s:.2f} s)")


def factor_of(seconds: float, reference: float = REFERENCE_S) -> float:
    """``seconds / reference``, kept within 1 and :data:`MAX_FACTOR`, rounded to two decimals
    (up: the limit is a floor)."""
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    if not (isinstance(reference, (int, float)) and math.isfinite(reference) and reference > 0):
        raise ValueError(f"reference must be a finite number > 0, got {reference!r}")
    return min(MAX_FACTOR, max(1.0, math.ceil(100 * seconds / reference) / 100))


def scaled(limits: Limits, factor: float, cpu_factor: float | None = None) -> Limits:
    """``limits`` with its wall-clock seconds multiplied by ``factor`` and its CPU seconds by
    ``cpu_factor`` (None: ``factor`` too), each >= 1."""
    cpu = factor if cpu_factor is None else cpu_factor
    for name, value in (("factor", factor), ("cpu_factor", cpu)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 1):
            raise ValueError(f"{name} must be a finite number >= 1, got {value!r}")
    return dataclasses.replace(limits, wall_s=limits.wall_s * factor, cpu_s=math.ceil(limits.cpu_s * cpu),
                               given_wall_s=limits.wall_s if limits.given_wall_s is None else limits.given_wall_s,
                               given_cpu_s=limits.cpu_s if limits.given_cpu_s is None else limits.given_cpu_s)


def measure(side_by_side: int = 1) -> Calibration:
    """Times :data:`WORKLOAD` in a fresh child of this interpreter (``-I``: no site packages,
    no environment, nothing of the course loaded); ``side_by_side`` children at once, as many as
    the grading will run tests at once (their load is part of the machine's then), the slowest
    one counting."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-I", "-c", WORKLOAD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(side_by_side)]
    walls, cpus = [], []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(0.1, TIMEOUT_S - (time.perf_counter() - start)))
            walls.append(time.perf_counter() - start)
            try:
                reply = json.loads(out)
                ok = proc.returncode == 0 and reply["x"] == EXPECTED_X
            except (ValueError, KeyError, TypeError):
                ok = False
            if not ok:
                raise RuntimeError(f"the calibration child failed (exit {proc.returncode}): {err[-500:]!r}")
            cpus.append(float(reply["cpu_s"]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall, cpu = max(walls), max(cpus)
    return Calibration(round(wall, 3), round(cpu, 3), factor_of(wall), factor_of(cpu, REFERENCE_CPU_S))


def apply(limits: Limits, factor: float | None = None, report: Callable[[str], None] | None = None) -> Limits:
    """``limits`` scaled by ``factor``, or (None) by a fresh :func:`measure`; ``report`` gets one
    line saying so. A calibration that fails leaves the limits as given (and says why): it
    must never stop a grading."""
    return resolve(limits, factor, report)[0]


def resolve(limits: Limits, factor: float | None = None,
            report: Callable[[str], None] | None = None, side_by_side: int = 1) -> tuple[Limits, float]:
    """:func:`apply`'s limits and the factor they were scaled by (1.0 when the calibration
    failed): the submission's time budget scales by it too (``grade.task_budget``).
    ``side_by_side``: the tasks the grading runs at once (:func:`measure`)."""
    if factor is not None:
        big, used = scaled(limits, factor), float(factor)
        line = f"time limits x{factor:g} (given): per test {big.wall_s:g} s wall-clock, {big.cpu_s} s CPU"
    else:
        try:
            cal = measure(side_by_side)
            big, line, used = scaled(limits, cal.factor, cal.cpu_factor), cal.describe(limits), cal.factor
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            big, used = limits, 1.0
            line = f"time limits as given (the calibration failed: {type(exc).__name__}: {exc})"
    if report is not None:
        report(line)
    return big, used


if __name__ == "__main__":  # prints a measurement (how REFERENCE_S was found)
    print(measure())
