"""Running the self-check: each :class:`~autograder.selfcheck.catalogue.Check` in a worker
process of its own (:func:`run_one`, :func:`run_all`), and ``python -m autograder selfcheck``'s
table (:func:`main`)."""

from __future__ import annotations

import multiprocessing
import os
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.grading.grade import ROOT
from autograder.notebooks import nbgrader
from autograder.selfcheck.bounds import check_bounds
from autograder.selfcheck.catalogue import (HOSTILE, MUTANTS, SELFCHECK_SECRET, SURVIVORS_FAIL, Check, Factor,
                                            checks, mutants, surviving_tests)
from autograder.selfcheck.mutant_kills import MutantKills
from autograder.selfcheck.submissions import (check_hostile, check_mutant, check_paste_back, check_reference,
                                              check_release_grades_zero, check_release_pytest_zero, make_release)
from autograder.selfcheck.tampering import check_notebook_tampering


@dataclass
class Result:
    """What one check found: ``problems`` (empty: it holds), wall-clock ``seconds``, the CPU
    seconds of its worker and the processes it waited for (``cpu_seconds``: unlike wall-clock
    time, this does not grow with the machine's load), the calibration ``factor`` of its grading
    (1.0 when it graded nothing), and for a mutant the manifest tests it made fail (``killed``)."""

    name: str
    problems: list[str]
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    factor: float = 1.0
    killed: tuple[str, ...] = ()
    data: dict | None = field(default=None, repr=False)  # the results.json of its grading, if one


def _cpu_seconds() -> float:
    """CPU time (user and system) of this process and of the children it has waited for."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def run_one(check: Check, tmp: Path, release_dir: Path, pristine: Path | None = None,
            kills: Path | None = None) -> Result:
    """Runs ``check`` in the new folder ``tmp``; a check that raises is a problem, not a crash.
    ``pristine``: a copy of the release that no check runs in (paste-back checks copy it while
    others run pytest in ``release_dir``); default ``release_dir``. ``kills``: the folder of
    the tests the run's mutants fail (:mod:`.mutant_kills`; None: a mutant runs every test)."""
    tmp.mkdir(parents=True, exist_ok=True)
    factor = Factor()
    keep: dict[str, Any] = {}  # what the check hands back (check_reference's data, a mutant's killed tests)
    start, cpu = time.monotonic(), _cpu_seconds()
    try:
        if check.kind == "reference":
            problems = check_reference(tmp, factor, keep)
        elif check.kind == "release-grade":
            problems = check_release_grades_zero(release_dir, factor)
        elif check.kind == "release-pytest":
            problems = check_release_pytest_zero(release_dir)
        elif check.kind == "notebook-tampering":
            problems = check_notebook_tampering(release_dir, tmp, factor)
        elif check.kind == "hostile":
            problems = check_hostile(HOSTILE / check.arg, tmp, factor)
        elif check.kind == "paste-back":
            problems = check_paste_back(pristine or release_dir, check.arg, tmp)
        elif check.kind == "mutant":
            problems = check_mutant(mutants()[int(check.arg)], tmp, factor, keep,
                                    None if kills is None else MutantKills(kills))
        elif check.kind == "bounds":
            problems = check_bounds(check.arg, tmp, factor)
        else:
            raise ValueError(f"unknown self-check kind {check.kind!r}")
    except Exception as exc:  # the grader or the check itself broke: that is what we are here to find
        problems = [f"the check raised {type(exc).__name__}: {exc}"]
    return Result(check.name, problems, round(time.monotonic() - start, 1), round(_cpu_seconds() - cpu, 1),
                  factor.value, keep.get("killed", ()), keep.get("data"))


def _worker_init(nb_course: str | None) -> None:
    if nb_course is not None:  # nbgrader's generate step ran once, in the parent
        nbgrader.adopt(ROOT, Path(nb_course))


def default_jobs() -> int:
    """Worker processes by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def run_all(tmp: Path, jobs: int | None = None, only: list[Check] | None = None,
            done: Callable[[Result], None] | None = None, stop: threading.Event | None = None) -> dict[str, Result]:
    """Makes the release in ``tmp`` and runs ``only`` (default: every check), ``jobs`` at a
    time (default :func:`default_jobs`), each in its own worker process and folder. ``done``
    is called with each result as it arrives. Returns name -> result, in :func:`checks` order.
    Setting ``stop`` (an interrupted test session) drops the checks not yet started and raises
    :class:`InterruptedError` once the running ones end."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    todo = checks() if only is None else list(only)
    tmp = Path(tmp)
    release_dir = make_release(tmp)
    pristine = Path(shutil.copytree(release_dir, tmp / "release-pristine", symlinks=True))
    nb_course = str(nbgrader.generated(ROOT)) if nbgrader.notebooks_of(ROOT) else None
    results: dict[str, Result] = {}
    # spawn, not fork: a forked copy of a process that runs threads (rich, pytest) is unsafe
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs or default_jobs(), mp_context=context,
                             initializer=_worker_init, initargs=(nb_course,)) as pool:
        # the mutants' failing tests, shared by the workers (a mutant stops once it has lost a point)
        futures = {pool.submit(run_one, c, tmp / f"check{n}", release_dir, pristine, tmp / "mutant-kills"): c
                   for n, c in enumerate(todo)}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            if stop is not None and stop.is_set():
                pool.shutdown(wait=True, cancel_futures=True)
                raise InterruptedError("the self-check was stopped")
            for future in finished:
                check = futures[future]
                try:
                    result = future.result()
                except Exception as exc:  # the worker itself died
                    result = Result(check.name, [f"the worker running it failed: {type(exc).__name__}: {exc}"])
                results[check.name] = result
                if done is not None:
                    done(result)
    return {c.name: results[c.name] for c in todo}


def survivors_of(results: dict[str, Result]) -> list[str]:
    """The manifest tests no mutant in ``results`` fails (every mutant must have run)."""
    return surviving_tests([r.killed for name, r in results.items() if name.startswith("mutant: ")])


def boundary_line() -> str:
    """Which OS boundary the hostile set is graded behind here (the mode matrix: on Gradescope,
    where setup.sh runs the self-check, it is uid-only with Landlock; autograder/README.md)."""
    from autograder.sandbox import os_boundary

    try:
        mode = os_boundary.boundary().mode
    except os_boundary.Refused as exc:
        return f"no OS boundary ({exc})"
    return f"OS boundary {mode}" + (f", Landlock ABI {os_boundary.landlock_abi()}" if mode != "none" else "")


def main(jobs: int | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    # a fixed, public secret unless the instructors set theirs: the same inputs run after run
    os.environ.setdefault("SERVELAB_GRADING_SECRET", SELFCHECK_SECRET)
    if not (HOSTILE.is_dir() and MUTANTS.is_dir()):
        console.print("selfcheck needs the instructors' copy: autograder/tests/hostile and autograder/mutants "
                      "are not in a student release")
        return 2
    todo = checks()
    start = time.monotonic()
    console.print(f"self-check: {len(todo)} checks, {jobs or default_jobs()} at a time, {boundary_line()}")

    def done(r: Result) -> None:
        console.print(f"  {'ok ' if not r.problems else 'FAILED'} {r.name} ({r.seconds:.0f} s, {r.cpu_seconds:.0f} s CPU)",
                      highlight=False)

    with tempfile.TemporaryDirectory(prefix="servelab-selfcheck-") as t:
        results = run_all(Path(t), jobs, todo, done)
    table = Table(title="autograder self-check")
    table.add_column("check")
    table.add_column("result")
    table.add_column("seconds", justify="right")
    table.add_column("CPU s", justify="right")
    table.add_column("limits x", justify="right")
    for r in results.values():
        table.add_row(r.name, "[green]ok" if not r.problems else "[red]" + "\n".join(r.problems)[:500],
                      f"{r.seconds:.1f}", f"{r.cpu_seconds:.1f}", f"{r.factor:.2f}")
    survivors = survivors_of(results)
    failed = sum(bool(r.problems) for r in results.values())
    if survivors:
        failed += SURVIVORS_FAIL
        colour, verdict = ("red", "FAILED") if SURVIVORS_FAIL else ("yellow", "warning")
        table.add_row("every graded test fails under some mutant",
                      f"[{colour}]{verdict}: {len(survivors)} tests no mutant fails (listed below)", "", "", "")
    console.print(table)
    for name in survivors:
        console.print(f"  no mutant fails {name}", highlight=False, soft_wrap=True)
    console.print(f"{len(results) - sum(bool(r.problems) for r in results.values())} of {len(results)} checks hold"
                  + (f"; {len(survivors)} graded tests no mutant fails" if survivors else "")
                  + f" ({time.monotonic() - start:.0f} s)")
    return 1 if failed else 0
