"""``grade SUBMISSION``: one submission -> Gradescope's results.json.

The course copy this grader runs from (``root``) is the pristine copy: its tests, its manifest,
its helpers. From the submission only the manifest's ``edit`` files are taken (see
:mod:`autograder.grading.submission`); every task runs in its own sandbox folder and child processes
(:mod:`autograder.grading.judge`).
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

import servelab
from autograder.grading import calibrate, grading_secret, results, submission_metadata, testload
from autograder.markers import hidden_test_names
from autograder.grading.judge import Outcome, Shortcut, run_task
from autograder.sandbox.remote import Limits
from autograder.notebooks import nbgrader
from autograder.sandbox import os_boundary
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


def task_budget(task, factor: float = 1.0) -> float:
    """A task's own share of the budget: :data:`BUDGET_PER_TEST_S` per test times ``factor``.

    >>> from types import SimpleNamespace
    >>> task_budget(SimpleNamespace(tests={"a": 1, "b": 2}), 2.0)
    16.0
    """
    return BUDGET_PER_TEST_S * len(task.tests) * factor


def submission_budget(manifest: Manifest, limits: Limits, factor: float = 1.0, notebooks: int = 0) -> float:
    """The seconds a whole grading may take (``limits`` already scaled): each task's share and
    the reserve, then ``notebooks`` notebooks (:func:`autograder.notebooks.nbgrader.notebooks_budget_s`:
    every one of their steps has a deadline)."""
    return (sum(task_budget(task, factor) for task in manifest.tasks) + RESERVE_LIMITS * limits.wall_s
            + nbgrader.notebooks_budget_s(notebooks, limits))


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
          metadata: submission_metadata.Metadata | None = None, shortcut: Shortcut | None = None) -> dict:
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
    self-check's, for mutants only (:class:`autograder.grading.judge.Shortcut`).

    Each task has a time budget (its share, :func:`task_budget`, and what is left of the
    submission's reserve): a submission that stalls in every test is
    stopped when it is spent, and the tests not yet run score 0 with a message.

    Whatever the submission does, a results.json comes out: a failure inside one task (or the
    notebooks) gives it 0 with a message, and the others are still graded."""
    start = time.monotonic()
    os_boundary.require()  # no OS boundary and no --trust-submission: refuse (autograder/sandbox/os_boundary.py)
    limits, factor = calibrate.resolve(limits, time_factor, report)
    root = Path(root).resolve()
    manifest = manifest_of(root)
    secret = secret or grading_secret.resolve()
    if report is not None:  # what Gradescope's own timeout must exceed (with the notebooks' limits)
        count = len(nbgrader.notebooks_of(root))
        tasks_s = submission_budget(manifest, limits, factor)
        report(f"time budget: at most {submission_budget(manifest, limits, factor, count):.0f} s: {tasks_s:.0f} s for "
               f"the tasks ({BUDGET_PER_TEST_S:g} s a test x{factor:g}, and a reserve of {RESERVE_LIMITS:g} per-test "
               f"limit), {nbgrader.notebooks_budget_s(count, limits):.0f} s for {count} notebooks")
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
        outcomes: dict[str, dict[str, Outcome]] = {}
        try:
            folder = unpack(Path(submission), work / "unpacked")
            broken = None
        except SubmissionError as exc:
            folder, broken = None, str(exc)
        except Exception as exc:  # an unreadable folder or zip: no task can be graded
            folder, broken = None, f"the submission cannot be read: {type(exc).__name__}: {exc}"
        reserve = RESERVE_LIMITS * limits.wall_s  # drawn on by a task that runs over its share
        for task in manifest.tasks:
            if only_tasks is not None and task.id not in only_tasks:
                outcomes[task.id] = {test: Outcome(False, "not graded in this run") for test in task.tests}
                continue
            share, began = task_budget(task, factor), time.monotonic()
            outcomes[task.id] = _contained(task, lambda task=task, budget=share + reserve: _grade_task(
                root, task, folder, broken, work, limits, forbidden, secret, identity, budget, shortcut))
            reserve = max(0.0, reserve - max(0.0, time.monotonic() - began - share))
        data = results.build(manifest, outcomes, hidden_tests(root, manifest))
        # ---- nbgrader notebooks (autograder/notebooks/nbgrader.py): autograded, merged after the tasks
        if nbgrader.notebooks_of(root):
            try:
                if only_tasks is not None and not {nb.id for nb in nbgrader.notebooks_of(root)} & only_tasks:
                    scores = nbgrader.not_graded(root, "not graded in this run")
                elif broken:
                    scores = nbgrader.not_graded(root, broken)
                else:
                    nb_files = {nb.file: find_file(cast(Path, folder), nb.file) for nb in nbgrader.notebooks_of(root)}
                    scores = nbgrader.autograde(root, nb_files, work / "nb", limits,
                                                 nbgrader.kernel_forbidden(root, keep_out), keep=notebooks_out)
            except Exception as exc:  # nbgrader or the recheck fell over: the notebooks score 0, say why
                scores = nbgrader.not_graded(root, f"the grader could not grade the notebooks: "
                                                    f"{type(exc).__name__}: {results.describe(exc)}")
            data = nbgrader.merge(data, root, scores)
        data = results.count_visible(results.make_safe(data, paths), metadata.past_due())
        if report is not None:  # not in results.json: a regrade writes the same bytes
            report(f"graded in {time.monotonic() - start:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
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
