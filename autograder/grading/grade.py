"""``grade SUBMISSION``: one submission -> Gradescope's results.json.

The course copy this grader runs from (``root``) is the pristine copy: its tests, its manifest,
its helpers. From the submission only the manifest's ``edit`` files are taken (see
:mod:`autograder.grading.submission`); every task runs in its own sandbox folder and child processes
(:mod:`autograder.grading.judge`).
"""

from __future__ import annotations

import ctypes
import itertools
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import servelab
from autograder.grading import calibrate, grading_secret, results, submission_metadata, testload
from autograder.markers import hidden_test_names
from autograder.grading.judge import Outcome, Shortcut, run_task
from autograder.sandbox.remote import Limits
from autograder.notebooks import nbgrader
from autograder.sandbox import cleanup, os_boundary
from autograder.grading.submission import SubmissionError, collect, find_file, unpack
from servelab.harness.manifest import Manifest

ROOT = Path(__file__).resolve().parents[2]  # autograder/grading/grade.py
# The time budget of a submission: an honest test takes seconds where its limit is a minute, so a
# submission that spends nearly the limit in every test (a sleep just under it) would hold the
# grader for tests x limit (80 minutes for the whole course at 60 s). So each task may take
# BUDGET_PER_TEST_S seconds per manifest test, times the calibration factor (a busy machine gets
# more), and the submission as a whole holds a reserve of RESERVE_LIMITS per-test limits, which a
# task that runs over its own share draws on (one honest hang is cut off by its own limit, not
# by the budget). The reference's slowest task takes 1.3 s per test at factor 1 (6 s per test
# at factor 4.5 on a busy 2-core machine): autograder/README.md, *Deadlines and budgets*.
BUDGET_PER_TEST_S = 4.0
RESERVE_LIMITS = 1.0
# The whole grading's worst case ends before Gradescope's timeout, whatever a submission does and
# however busy the machine is: the default timeout (600 s; the instructor need not raise it)
# less a minute for the container's start and the upload of results.json. The tasks may take
# TASKS_CAP_S of it and the notebooks NOTEBOOKS_CAP_S (one after the other, the worst case;
# side by side the grading ends sooner): a calibration factor stretches each test's limit and
# the budgets up to these caps, never past them. An honest grading takes 13-45 s.
GRADESCOPE_TIMEOUT_S = 600.0
TASKS_CAP_S = 330.0
NOTEBOOKS_CAP_S = 210.0
PR_SET_PDEATHSIG = 1  # prctl(2)


def task_budget(task, factor: float = 1.0) -> float:
    """A task's own share of the budget: :data:`BUDGET_PER_TEST_S` per test times ``factor``.

    >>> from types import SimpleNamespace
    >>> task_budget(SimpleNamespace(tests={"a": 1, "b": 2}), 2.0)
    16.0
    """
    return BUDGET_PER_TEST_S * len(task.tests) * factor


def tasks_budget(manifest: Manifest, limits: Limits, factor: float = 1.0) -> float:
    """The seconds the tasks may take in all (``limits`` already scaled): each task's share and
    the reserve, at most :data:`TASKS_CAP_S`."""
    return min(TASKS_CAP_S, sum(task_budget(task, factor) for task in manifest.tasks) + RESERVE_LIMITS * limits.wall_s)


def notebooks_budget(limits: Limits, notebooks: int) -> float:
    """The seconds ``notebooks`` notebooks may take in all: every one of their steps has a
    deadline (:func:`autograder.notebooks.nbgrader.notebooks_budget_s`), at most
    :data:`NOTEBOOKS_CAP_S`."""
    return min(NOTEBOOKS_CAP_S, nbgrader.notebooks_budget_s(notebooks, limits))


def submission_budget(manifest: Manifest, limits: Limits, factor: float = 1.0, notebooks: int = 0) -> float:
    """The seconds a whole grading may take (``limits`` already scaled): the tasks', then the
    notebooks', never more than :data:`GRADESCOPE_TIMEOUT_S` less a minute.

    >>> TASKS_CAP_S + NOTEBOOKS_CAP_S <= GRADESCOPE_TIMEOUT_S - 60
    True
    """
    return tasks_budget(manifest, limits, factor) + (notebooks_budget(limits, notebooks) if notebooks else 0.0)


def manifest_of(root: Path) -> Manifest:
    return Manifest.load(root / "assignments" / "manifest.toml")


def hidden_tests(root: Path, manifest: Manifest) -> set[str]:
    """Manifest test ids defined inside a hidden region of their (pristine) test file."""
    out = set()
    for task in manifest.tasks:
        for test in task.tests:
            file_rel, _, func = test.partition("::")
            path = root / "assignments" / file_rel
            top = func.split("[", 1)[0].split("::", 1)[0]  # a test class's methods share its fate
            if path.is_file() and top in hidden_test_names(path.read_text(encoding="utf-8"), file_rel):
                out.add(test)
    return out


def forbidden_paths(root: Path, extra: Sequence[Path] = ()) -> list[Path]:
    """What the child may not read or list: every top-level entry of the course copy except the
    virtual environment that runs it (numpy lives there), servelab itself wherever it is
    installed, and ``extra`` (other students' submissions, the gradebook)."""
    venv = Path(sys.prefix).resolve()
    out = [p.resolve() for p in sorted(root.iterdir()) if not (venv == p.resolve() or p.resolve() in venv.parents)]
    out.append(Path(servelab.__file__).resolve().parent)
    for p in extra:
        out.extend(_all_but(Path(p).resolve(), venv))
    return out


def _all_but(path: Path, keep: Path) -> list[Path]:
    """``[path]``; or, when ``keep`` lies inside ``path`` (a submission that is a checkout with
    its own ``.venv``, as ``grade .`` is), every entry along the way except ``keep``'s branch."""
    if path != keep and path not in keep.parents:
        return [path]
    return [q for child in sorted(path.iterdir()) if child != keep for q in _all_but(child, keep)]


def grade(submission: Path, root: Path = ROOT, out: Path | None = None, limits: Limits = Limits(),
          extra_forbidden: Sequence[Path] = (), only_tasks: frozenset[str] | None = None,
          notebooks_out: Path | None = None, time_factor: float | None = None,
          report: Callable[[str], None] | None = None,
          secret: grading_secret.Secret | None = None, identity: str | None = None,
          metadata: submission_metadata.Metadata | None = None, shortcut: Shortcut | None = None,
          jobs: int = 1) -> dict:
    """Grades ``submission`` (a folder or a zip) and returns (and writes to ``out``) results.json.

    ``only_tasks`` grades just those tasks (the others score zero, "not graded"): the self-check
    uses it for mutants, which change one task's file, and each task runs in a sandbox of its
    own folder, so the other tasks cannot be affected. A notebook counts as a task here (its
    manifest id). ``notebooks_out``: where to keep the autograded notebooks (for manual grading).
    ``time_factor`` multiplies the limits' seconds; None: this machine's, measured first
    (:mod:`autograder.grading.calibrate`), so that no grade depends on the load. ``report`` receives one
    line saying what the limits became (results.json does not record it).
    ``secret``: seeds the generated inputs (default :func:`autograder.grading.grading_secret.resolve`);
    a random one is recorded beside ``out``, never inside it. ``identity``: who submitted, the
    other half of the seed (default: ``metadata``'s, else the submission's folder or zip name:
    :mod:`autograder.grading.submission_metadata`). ``metadata``: Gradescope's submission
    metadata; its due date decides whether results.json's ``score`` counts the hidden tests
    (:func:`autograder.grading.results.count_visible`; unknown: not yet). ``shortcut``: the
    self-check's, for mutants only (:class:`autograder.grading.judge.Shortcut`). ``jobs``: tasks
    graded side by side, each in a worker process of its own (its own sandbox uid), with the
    notebooks beside them (:func:`_grade_tasks`); 1 (the default, as in grade-all's and the
    self-check's workers, which already fill the cores): one after the other, in this process.

    Each task has a time budget (its share, :func:`task_budget`, and what is left of the
    submission's reserve): a submission that stalls in every test is
    stopped when it is spent, and the tests not yet run score 0 with a message.

    Whatever the submission does, a results.json comes out: a failure inside one task (or the
    notebooks) gives it 0 with a message, and the others are still graded."""
    start = time.monotonic()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    if shortcut is not None:
        jobs = 1  # a mutant's shortcut is this process's object
    os_boundary.require()  # no OS boundary and no --trust-submission: refuse (autograder/sandbox/os_boundary.py)
    # (the calibration runs as many children at once as the grading will run tasks)
    limits, factor = calibrate.resolve(limits, time_factor, report, side_by_side=jobs)
    root = Path(root).resolve()
    manifest = manifest_of(root)
    secret = secret or grading_secret.resolve()
    count = len(nbgrader.notebooks_of(root))
    tasks_s, notebooks_s = tasks_budget(manifest, limits, factor), notebooks_budget(limits, count)
    if report is not None:  # what Gradescope's own timeout must exceed
        report(f"time budget: at most {submission_budget(manifest, limits, factor, count):.0f} s (under Gradescope's "
               f"default timeout of {GRADESCOPE_TIMEOUT_S:.0f} s, at any load): {tasks_s:.0f} s for the tasks "
               f"({BUDGET_PER_TEST_S:g} s a test x{factor:g}, and a reserve of {RESERVE_LIMITS:g} per-test limit; "
               f"at most {TASKS_CAP_S:.0f} s), {notebooks_s:.0f} s for {count} notebooks (at most {NOTEBOOKS_CAP_S:.0f} s)")
    metadata = metadata or submission_metadata.Metadata()
    identity = identity or metadata.identity or submission_metadata.folder_identity(Path(submission))
    if out is not None:
        grading_secret.record(secret, Path(out).with_name(Path(out).name + grading_secret.SIDECAR_SUFFIX))
    work = os_boundary.work_folder("servelab-grade-")  # the sandbox uid can be let in, nothing above changes
    keep_out = [*extra_forbidden, Path(submission).resolve()] + ([secret.file] if secret.file else [])
    if out is not None:  # a random secret's record sits there
        keep_out.append(Path(out).resolve().with_name(Path(out).name + grading_secret.SIDECAR_SUFFIX))
    paths = {work: "<work>", Path(submission).resolve(): "<submission>", root: "<course>"}
    try:
        if Path(submission).is_dir() and Path(submission).resolve() == root:
            submission = _answers_of(root, work / "course-answers", report)
            keep_out = [Path(submission).resolve() if p == root else p for p in keep_out]
        forbidden = forbidden_paths(root, keep_out)
        try:
            folder = unpack(Path(submission), work / "unpacked")
            broken = None
        except SubmissionError as exc:
            folder, broken = None, str(exc)
        except Exception as exc:  # an unreadable folder or zip: no task can be graded
            folder, broken = None, f"the submission cannot be read: {type(exc).__name__}: {exc}"

        tasks_done = threading.Event()

        def grade_notebooks() -> dict:  # nbgrader (autograder/notebooks/nbgrader.py): merged after the tasks
            try:
                if only_tasks is not None and not {nb.id for nb in nbgrader.notebooks_of(root)} & only_tasks:
                    return nbgrader.not_graded(root, "not graded in this run")
                if broken:
                    return nbgrader.not_graded(root, broken)
                nb_files = {nb.file: find_file(cast(Path, folder), nb.file) for nb in nbgrader.notebooks_of(root)}
                return nbgrader.autograde(root, nb_files, work / "nb", limits, nbgrader.kernel_forbidden(root, keep_out),
                                          keep=notebooks_out, budget_s=notebooks_s,
                                          # the neighbouring model each student's notebook is rechecked on
                                          seed_of=lambda nb_id: grading_secret.seed_for(secret, identity,
                                                                                         f"{nb_id}\0neighbour"),
                                          # no kernel (it runs the hidden tests) beside a task's child
                                          # (it shows its errors in visible tests): the rechecks go beside
                                          before_kernels=tasks_done.wait,
                                          lanes=jobs)  # with the cores the tasks had (grade-all's: 1)
            except Exception as exc:  # nbgrader or the recheck fell over: the notebooks score 0, say why
                return nbgrader.not_graded(root, f"the grader could not grade the notebooks: "
                                                 f"{type(exc).__name__}: {results.describe(exc)}")

        notebooks = _Beside(grade_notebooks if nbgrader.notebooks_of(root) else None, jobs > 1)
        # the notebooks' thread starts once the task workers exist (they may be forked copies of
        # this process, which must then have no thread but its own: _worker_context)
        try:
            outcomes = _grade_tasks(manifest, only_tasks, _TaskGrading(root, folder, broken, work, limits, forbidden,
                                                                       secret, identity, shortcut), factor, jobs,
                                   tasks_s, then=notebooks.start)
        finally:
            tasks_done.set()  # every task's child has ended: the kernels may start
        data = results.build(manifest, outcomes, hidden_tests(root, manifest))
        if nbgrader.notebooks_of(root):
            data = nbgrader.merge(data, root, notebooks.result())
        data = results.count_visible(results.make_safe(data, paths), metadata.past_due())
        if report is not None:  # not in results.json: a regrade writes the same bytes
            report(f"graded in {time.monotonic() - start:.1f} s")
    finally:
        cleanup.remove_tree(work)  # however deep a kernel's folders grew (shutil.rmtree recursed: sandbox/cleanup.py)
    if out is not None:
        results.write_json_atomic(data, Path(out))
    return data


def _answers_of(root: Path, into: Path, report: Callable[[str], None] | None) -> Path:
    """``grade .`` on the course copy itself: a submission folder holding its edit files and
    notebooks (what grading takes from any folder). Graded in place, the submission would be
    the course copy, its virtual environment included, which the sandboxes must not read."""
    rels = [rel for task in manifest_of(root).tasks for rel in task.edit]
    rels += [nb.file for nb in nbgrader.notebooks_of(root)]
    for rel in rels:
        if (root / "assignments" / rel).is_file():
            (into / "assignments" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / "assignments" / rel, into / "assignments" / rel)
    if report is not None:
        report("the submission is the course copy itself: its edit files and notebooks are graded from a copy "
               "(`python -m autograder selfcheck` proves the reference's full marks)")
    return into


def _grade_task(root: Path, task, folder: Path | None, broken: str | None, work: Path, limits: Limits,
                forbidden: list[Path], secret: grading_secret.Secret, identity: str,
                budget: float, shortcut: Shortcut | None = None) -> dict[str, Outcome]:
    files = broken if broken else collect(cast(Path, folder), task.edit)
    if isinstance(files, str):
        return run_task(root, task, files, work / "run", limits, forbidden)
    # each task's own copies: the student's file may change later, the sandbox may not
    files = _snapshot(files, work / "files" / task.id)
    # the generated inputs: this secret, this student, this test; not the files, so that a
    # resubmission (a regrade, a whitespace change) draws the same ones (README: the trade-off)
    with testload.seeded(lambda test_id: grading_secret.seed_for(secret, identity, f"{task.id}\0{test_id}")):
        return run_task(root, task, files, work / "run", limits, forbidden, budget_s=budget, shortcut=shortcut)


class _Beside:
    """``work()`` run in a thread beside the tasks (``beside``: from :meth:`start` on), or when
    its result is asked for."""

    def __init__(self, work: Callable[[], Any] | None, beside: bool) -> None:
        self._work, self._got = work, None
        self._thread = threading.Thread(target=self._run, name="notebooks", daemon=True) if work and beside else None

    def start(self) -> None:
        if self._thread is not None and self._thread.ident is None:
            self._thread.start()

    def _run(self) -> None:
        self._got = cast(Callable[[], Any], self._work)()

    def result(self) -> Any:
        if self._thread is None:
            self._run()
        else:
            self.start()
            self._thread.join()
        return self._got


@dataclass(frozen=True)
class _TaskGrading:
    """What grading one task needs beside the task and its budget (:func:`_grade_task`'s
    arguments): plain data, so that a worker process can be handed it."""

    root: Path
    folder: Path | None
    broken: str | None
    work: Path
    limits: Limits
    forbidden: list[Path]
    secret: grading_secret.Secret
    identity: str
    shortcut: Shortcut | None = None

    def __call__(self, task, budget: float) -> dict[str, Outcome]:
        os_boundary.adopt_work_folder(self.work)  # in a worker, the folder its grader made for it
        return _grade_task(self.root, task, self.folder, self.broken, self.work, self.limits, self.forbidden,
                           self.secret, self.identity, budget, self.shortcut)


def _grade_tasks(manifest: Manifest, only_tasks: frozenset[str] | None, grade_one: _TaskGrading, factor: float,
                 jobs: int, cap_s: float = TASKS_CAP_S,
                 then: Callable[[], None] = lambda: None) -> dict[str, dict[str, Outcome]]:
    """Every task's outcomes, in the manifest's order. Each task may take its share of the time
    budget (:func:`task_budget`) and what is left of the submission's reserve, which a task that
    runs over its share draws on. ``jobs`` > 1: that many tasks at a time, each in a worker
    process of its own (a process has one sandbox uid, and a child's end kills everything of its
    uid), the next one started when one ends, with what is left of the reserve then; and no task
    runs past the end that the tasks one after the other could reach (every share and the
    reserve), so a stalling submission holds the grader no longer than before. Neither way do
    the tasks run past ``cap_s`` seconds from their start (:data:`TASKS_CAP_S`). ``then()`` is
    called once the workers exist (at once with ``jobs`` 1): what runs beside the tasks."""
    outcomes: dict[str, dict[str, Outcome]] = {}
    todo = []
    for task in manifest.tasks:
        if only_tasks is not None and task.id not in only_tasks:
            outcomes[task.id] = {test: Outcome(False, "not graded in this run") for test in task.tests}
        else:
            todo.append(task)
    reserve = RESERVE_LIMITS * grade_one.limits.wall_s  # drawn on by a task that runs over its share
    end = time.monotonic() + min(cap_s, sum(task_budget(task, factor) for task in todo) + reserve)
    if jobs == 1 or len(todo) < 2:
        then()
        for task in todo:
            share, began = task_budget(task, factor), time.monotonic()
            budget = max(0.0, min(share + reserve, end - began))
            outcomes[task.id] = _contained(task, lambda task=task, budget=budget: grade_one(task, budget))
            reserve = max(0.0, reserve - max(0.0, time.monotonic() - began - share))
        return {task.id: outcomes[task.id] for task in manifest.tasks}
    running: dict[Future, tuple[Any, float, float]] = {}
    # a work folder a task: each worker has a sandbox uid of its own, and the one folder would
    # be opened (its group set) to one worker's uid at a time (os_boundary.Boundary.reach)
    folders = {task.id: os_boundary.work_folder("servelab-task-") for task in todo}
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=_worker_context(),
                                 initializer=_die_with, initargs=(os.getpid(),)) as pool:
            def start(task) -> None:
                share, now = task_budget(task, factor), time.monotonic()
                own = replace(grade_one, work=folders[task.id])
                running[pool.submit(own, task, max(0.0, min(share + reserve, end - now)))] = (task, now, share)

            waiting = iter(todo)
            for task in itertools.islice(waiting, jobs):
                start(task)  # the first submit starts every worker (forked ones at once)
            then()
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    task, began, share = running.pop(future)
                    outcomes[task.id] = _contained(task, future.result)
                    reserve = max(0.0, reserve - max(0.0, time.monotonic() - began - share))
                    following = next(waiting, None)
                    if following is not None:
                        start(following)
    finally:
        for folder in folders.values():
            cleanup.remove_tree(folder)
    return {task.id: outcomes[task.id] for task in manifest.tasks}


def _worker_context() -> multiprocessing.context.BaseContext:
    """How the task workers start: forked from this process where that is safe (Linux, and no
    Python thread here but the caller's: a forked copy of a lock another thread holds would stay
    held in the worker), so they begin with the grader's modules already imported (Hypothesis,
    numpy, servelab: half a second of CPU a worker when spawned, on a 2-core machine a quarter
    of a second of every grading); spawned otherwise. The one native thread here is numpy's
    BLAS pool, which OpenBLAS shuts down around a fork (pthread_atfork), as it has for every
    multiprocessing fork of a numpy process; servelab's Rust core starts none. Either way each
    task runs the same code on the same data.

    >>> _worker_context().get_start_method() in ("fork", "spawn")
    True
    """
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _die_with(parent: int) -> None:
    """A worker dies with the grader that started it (Linux's parent-death signal), and so its
    children with it (``setpriv --pdeathsig``, os_boundary): no task goes on grading for a grader
    that was killed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the worker ends when it next finds its parent gone
        return
    if os.getppid() != parent:  # the grader died before the signal was set
        os._exit(1)


def _contained(task, grade_one) -> dict[str, Outcome]:
    """``grade_one()``, or, when the grader itself fails on this task (whatever the reason),
    every test of it at 0 with the reason: the other tasks are still graded."""
    try:
        got = grade_one()
        missing = [test for test in task.tests if test not in got]
        if missing:
            raise LookupError(f"no outcome for {missing[0]}")
        return got
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - RecursionError, OSError, SystemExit from a library...
        why = f"the grader could not grade this task: {type(exc).__name__}: {results.describe(exc)}"
        return {test: Outcome(False, why) for test in task.tests}


def _snapshot(files: dict[str, Path], into: Path) -> dict[str, Path]:
    copies = {}
    for rel, path in files.items():
        dst = into / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dst)
        copies[rel] = dst
    return copies
