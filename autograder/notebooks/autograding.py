"""Autograding the submitted notebooks: the grader's own recheck of each autograded cell
(:mod:`autograder.notebooks.recheck`), then nbgrader's autograde in sandboxed kernels, and
each cell's score and message (:func:`not_answered`: a test that failed because the answers
above it were never written says so)."""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import servelab

from autograder.notebooks import instructors_log, kept, kernel_spec, recheck, safe_files
from autograder.notebooks.cells import ASSIGNMENT, MAX_NOTEBOOK, STUDENT, Notebook, cell_points, notebooks_of, runs_code
from autograder.notebooks.generation import generated, private_lines_of
from autograder.notebooks.kernel_spec import KERNEL_CPU_FACTOR

UNIX_SOCKET_PATH_MAX = 107  # bytes of a socket's path (sun_path, less its terminating zero)
from autograder.notebooks.launch import NOT_GRADED, failure_message, run_nbgrader
from autograder.notebooks.scores import PENDING
from autograder.notebooks.submitted import problems_of, suspicious
from autograder.sandbox import folder_budget, os_boundary
from autograder.sandbox.remote import Limits

KERNEL_NAME = "servelab-sandbox"
# a test cell that the grader's check passes and nbgrader's run failed (the kernel's own error
# text is not shown: see autograde())
KERNEL_FAILED = ("the test cell raised an error in your notebook's kernel (its values pass the grader's own "
                 "check: run the notebook top to bottom and look at that cell's output)")


def not_answered(path: Path, test_id: str, error: str) -> str:
    """The message for test cell ``test_id`` of the submitted notebook ``path`` when the answer
    cells between it and the test cell before it were never answered (they still ``raise NotImplementedError``) and the test
    failed the way that causes (``NameError``, ``NotImplementedError``): ``error`` alone would
    only say ``name 'a' is not defined``. Otherwise ``error`` unchanged.

    >>> import tempfile
    >>> cell = lambda kind, gid, src, **meta: {"cell_type": kind, "source": src, "metadata":
    ...     {"nbgrader": {"grade_id": gid, **meta}}}
    >>> nb = Path(tempfile.mkdtemp()) / "ex.ipynb"
    >>> _ = nb.write_text(json.dumps({"cells": [
    ...     cell("code", "a_answer", ["# YOUR CODE HERE\\n", "raise NotImplementedError()"], solution=True),
    ...     cell("code", "a_test", "assert a > 0", grade=True)]}))
    >>> print(not_answered(nb, "a_test", "NameError: name 'a' is not defined"))
    not answered: cell a_answer above still raises NotImplementedError (write your answer there); the test then failed with NameError: name 'a' is not defined
    >>> not_answered(nb, "a_test", "AssertionError: a must be positive")
    'AssertionError: a must be positive'
    >>> not_answered(nb, "a_test", recheck.OWN_CHECK_FAILED + "NameError: name 'a' is not defined")[:44]
    'not answered: cell a_answer above still rais'
    """
    if not error.removeprefix(recheck.OWN_CHECK_FAILED).startswith(("NameError", "NotImplementedError")):
        return error
    try:
        cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return error
    waiting: list[str] = []
    for c in cells:
        meta = c.get("metadata", {}).get("nbgrader", {}) if isinstance(c, dict) else {}
        if meta.get("grade_id") == test_id:
            break
        if meta.get("grade") and c.get("cell_type") == "code":
            waiting = []  # answers above an earlier test cell are that test's business
        source = c.get("source", "") if isinstance(c, dict) else ""
        source = "".join(source) if isinstance(source, list) else str(source)
        if c.get("cell_type") == "code" and meta.get("solution") and "raise NotImplementedError" in source:
            waiting.append(str(meta.get("grade_id", "?")))
    else:
        return error
    if not waiting:
        return error
    return (f"not answered: cell{'s' if len(waiting) > 1 else ''} {', '.join(waiting)} above still "
            f"raise{'' if len(waiting) > 1 else 's'} NotImplementedError (write your answer there); "
            f"the test then failed with {error}")


def _copy_template(template: Path, course: Path) -> None:
    """The generated course's source notebooks, student versions and database (cells and
    checksums nbgrader restores from), copied into the grader's new ``course`` folder."""
    for sub in ("source", "release"):
        (course / sub / ASSIGNMENT).mkdir(parents=True)
        for path in sorted((template / sub / ASSIGNMENT).iterdir()):
            safe_files.copy_file(path, course / sub / ASSIGNMENT / path.name, limit=MAX_NOTEBOOK)
    safe_files.copy_file(template / "gradebook.db", course / "gradebook.db", limit=1 << 30)


def kernel_lanes(wanted: int, boundary: os_boundary.Boundary, running: int) -> int:
    """How many notebooks nbgrader runs at once, each lane one notebook at a time in a course
    folder of its own: up to ``running`` (the notebooks whose kernels run code) and one more
    than ``wanted`` (the grading's jobs: a kernel's start waits on its process, its sockets
    and nbgrader's bookkeeping much of the time, so a lane more than the cores keeps them
    busy), where every kernel has a mount namespace of its own (bubblewrap); otherwise one
    (uid-only: all kernels share the grading's uid, and a kernel must never reach another's
    folders, kernel_spec.kernel_folders). One job (grade-all's workers, which already fill the
    cores between them) keeps one lane.

    >>> bwrap = os_boundary.Boundary(bwrap=True, uid=None, gid=None)
    >>> kernel_lanes(2, bwrap, 3), kernel_lanes(2, bwrap, 2), kernel_lanes(1, bwrap, 3)
    (3, 2, 1)
    >>> kernel_lanes(2, os_boundary.Boundary(bwrap=False, uid=65534, gid=65534), 3)
    1
    """
    if not boundary.bwrap or wanted <= 1:
        return 1
    return max(1, min(wanted + 1, running))


def _lane_courses(course: Path, graded: list[Notebook], root: Path, lanes: int) -> dict[str, Path]:
    """Each graded notebook's nbgrader course folder: ``course`` itself for the first lane,
    ``course/lanes/N`` for the others (inside the course folder, which no kernel sees). The
    notebooks that run code are dealt to the lanes in turn; a notebook of written answers
    (no kernel: cells.runs_code) goes to the first."""
    roots, turn = {}, 0
    for nb in graded:
        lane = 0
        if runs_code(Path(root) / "assignments" / nb.file):
            lane, turn = turn % lanes, turn + 1
        roots[nb.name] = course if lane == 0 else course / "lanes" / str(lane)
    return roots


def _keep(roots: dict[str, Path], root: Path, notebooks: tuple[Notebook, ...], keep: Path) -> None:
    """The executed notebooks, for the instructor's manual grading: nbgrader's output (in the
    grader's own folders, where no kernel writes; ``roots``: each notebook's course folder)
    without what is private to the course (:mod:`autograder.notebooks.kept`)."""
    keep = Path(os.path.realpath(keep))  # the operator's folder; below it nothing is followed
    keep.mkdir(parents=True, exist_ok=True)
    private = private_lines_of(root)
    for nb in notebooks:
        name = Path(nb.file).name
        done = roots[nb.name] / "autograded" / STUDENT / ASSIGNMENT
        try:
            data = kept.kept_copy(safe_files.read_file(done / name, limit=kept.MAX_READ_BYTES), private)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            instructors_log.note(f"notebook {nb.name}", "the autograded notebook was not kept", repr(exc))
            continue
        if (keep / name).exists() or (keep / name).is_symlink():
            (keep / name).unlink()
        safe_files.write_new(keep / name, data, mode=0o644)


def nbgrader_budget_s(count: int, limits: Limits) -> float:
    """How long nbgrader's run of ``count`` notebooks may take (``limits`` already scaled): a
    minute for its start and the kernels', and two per-test wall-clock limits a notebook."""
    return 60 + count * 2 * max(1.0, limits.wall_s)


def notebooks_budget_s(count: int, limits: Limits) -> float:
    """The longest the notebooks of a submission may take in all: each one's recheck (its cells
    together, :data:`KERNEL_CPU_FACTOR` limits: ``recheck.recheck``), then nbgrader's run."""
    return count * KERNEL_CPU_FACTOR * limits.wall_s + nbgrader_budget_s(count, limits) if count else 0.0


def autograde(root: Path, files: dict[str, Path | None], work: Path, limits: Limits = Limits(),
              forbidden: Sequence[Path] = (), keep: Path | None = None,
              budget_s: float | None = None,
              seed_of: Callable[[str], int] | None = None,
              before_kernels: Callable[[], object] | None = None,
              lanes: int = 1) -> dict[str, dict[str, tuple[float, str]]]:
    """Autogrades the submitted notebooks (``files``: manifest file -> submitted path, the
    grader's own copies) with nbgrader. Returns ``{notebook id: {grade_id: (score, message)}}``
    for every graded cell of every manifest notebook; a missing or unreadable notebook scores 0
    with a message saying so. ``keep``: a folder to copy the executed (autograded) notebooks into.
    ``budget_s``: the most the rechecks and nbgrader's run take together (default
    :func:`notebooks_budget_s`; the grading's cap may leave less: ``grade.GRADESCOPE_TIMEOUT_S``).
    ``seed_of``: a notebook id's seed for the neighbouring model its recheck draws
    (:mod:`autograder.notebooks.neighbours`; default: a fixed one per notebook).
    ``before_kernels``: waited for after the rechecks, once nbgrader's process has started and
    before it starts a kernel (the time it waits does not count against ``budget_s``): the
    grading's tasks end first, since a kernel runs the hidden tests and a task's child beside it shows its errors in visible tests
    (a kernel sent them lines through file locks; timing would do, slowly). ``lanes``: the
    grading's jobs (1 in grade-all's workers, which already fill the cores); at most one more
    notebook than that runs at once (:func:`kernel_lanes`): the kernels' serial start was most
    of a grading's tail

    Every message is the grader's own (README: threat model): nbgrader's log and the kernel's
    errors go to the instructors' log (:mod:`autograder.notebooks.instructors_log`)."""
    notebooks = notebooks_of(root)
    end = time.monotonic() + (notebooks_budget_s(len(notebooks), limits) if budget_s is None else budget_s)
    out: dict[str, dict[str, tuple[float, str]]] = {}
    work = Path(os.path.realpath(work))
    work.mkdir(parents=True, exist_ok=True)
    course = work / "course"
    problems = problems_of(root, files)
    graded = [nb for nb in notebooks if nb.id not in problems]
    # a missing notebook is one of the problems: every graded one has its file
    submitted = {nb.file: path for nb in graded if (path := files.get(nb.file)) is not None}
    course.mkdir(mode=0o700)
    flags = {}
    sub = course / "submitted" / STUDENT / ASSIGNMENT
    sub.mkdir(parents=True)
    for nb in graded:
        safe_files.copy_file(submitted[nb.file], sub / Path(nb.file).name, limit=MAX_NOTEBOOK)
        found = suspicious(sub / Path(nb.file).name)
        if found:
            flags[nb.id] = f"  [flagged for the instructor's review: the notebook's own cells use {', '.join(found)}]"
    # the grader's own verdict on the autograded cells (autograder/notebooks/recheck.py): nbgrader's
    # test cells share the student's kernel, these run here on values the child hands back. First:
    # the child then never runs after a kernel that ran the hidden tests (nothing of theirs to find)
    rechecked: dict[str, dict[str, tuple[bool, str]]] = {}
    for nb in graded:
        source = Path(root) / "assignments" / nb.file
        if any(c.kind == "auto" for c in cell_points(source)):
            # servelab's folder too (the kernel needs it for the test cells, the child does not):
            # its compiled core loaded by path would answer for the notebook
            rechecked[nb.id] = recheck.recheck(source, sub / Path(nb.file).name, work / "recheck" / nb.id,
                                               [*forbidden, Path(servelab.__file__).resolve().parent],
                                               limits, KERNEL_CPU_FACTOR, deadline=end,
                                               seed=seed_of(nb.id) if seed_of else zlib.crc32(nb.id.encode()))
    result: dict = {"success": True, "notebooks": {}}
    if graded:
        boundary = os_boundary.boundary()
        running = sum(runs_code(Path(root) / "assignments" / nb.file) for nb in graded)
        roots = _lane_courses(course, graded, Path(root), kernel_lanes(lanes, boundary, running))
        template = generated(root)
        for lane_course in sorted(set(roots.values())):
            lane_course.mkdir(mode=0o700, parents=True, exist_ok=True)
            _copy_template(template, lane_course)
        for nb in graded:  # a later lane's notebooks in its own course too (the first's hold them all)
            if roots[nb.name] != course:
                lane_sub = roots[nb.name] / "submitted" / STUDENT / ASSIGNMENT
                lane_sub.mkdir(parents=True, exist_ok=True)
                safe_files.copy_file(sub / Path(nb.file).name, lane_sub / Path(nb.file).name, limit=MAX_NOTEBOOK)
        jobs = []
        hide = kernel_spec.kernel_hidden(list(forbidden), course)
        for index, nb in enumerate(graded):
            # short names: the kernel's socket files lie below (kernel_spec.kernel_folders)
            folders = kernel_spec.kernel_folders(work / "k", str(index))
            spec = f"{KERNEL_NAME}-{nb.name}"
            kernel_spec.write_spec(course / "jupyter", spec, folders, hide, limits, boundary)
            jobs.append({"name": nb.name, "kernel": spec, "runtime": str(folders.runtime), "base": str(folders.base),
                         "sockets": str(folders.sockets / "k"), "course": str(roots[nb.name]),
                         # no kernel for a notebook of written answers (cells.runs_code)
                         "execute": runs_code(Path(root) / "assignments" / nb.file),
                         # what its folders may hold, watched by nbgrader's process (folder_budget)
                         "budget": [folder_budget.DEFAULT.max_bytes, folder_budget.DEFAULT.max_entries]})
            longest = len(os.fsencode(folders.sockets / "k-65535"))
            if longest > UNIX_SOCKET_PATH_MAX:  # the kernel could not bind, and would die unexplained
                instructors_log.note(f"notebook {nb.name}", f"its kernel's socket paths are {longest} bytes, more "
                                     f"than a Unix socket's {UNIX_SOCKET_PATH_MAX}: grade with a shorter TMPDIR")
        budget = max(1.0, min(nbgrader_budget_s(len(notebooks), limits), end - time.monotonic()))
        result = run_nbgrader(course, {"action": "autograde", "notebooks": jobs, "gid": boundary.gid,
                               "cell_timeout": max(1, int(limits.wall_s)),
                               # nbgrader itself plus a kernel's worth of outputs
                               "memory_bytes": max(2 << 30, 2 * int(limits.memory_bytes))},
                      timeout_s=budget, subject="notebooks", before=before_kernels)
        boundary.reap()  # anything still running as the kernels' uid
        if keep is not None:
            _keep(roots, root, tuple(graded), Path(keep))
    for nb in notebooks:
        cells = cell_points(Path(root) / "assignments" / nb.file)
        got = result.get("notebooks", {}).get(nb.name)
        scores: dict[str, tuple[float, str]] = {}
        for cell in cells:
            # What a student sees before the due date never depends on nbgrader's run: its kernel
            # ran the hidden test cells, and could choose how it fails (or how long it takes)
            # from what it read there. A manually graded cell is pending and a visible test
            # cell is judged by the grader's own check, whose child ran before any kernel and
            # never saw a hidden test; only the hidden test cells (shown after the due date)
            # take nbgrader's verdict too.
            if nb.id in problems:
                scores[cell.grade_id] = (0, problems[nb.id])
            elif cell.kind == "manual":
                scores[cell.grade_id] = (0, PENDING.format(points=cell.points))
            elif not cell.hidden:
                ok, why = rechecked.get(nb.id, {}).get(cell.grade_id, (False, "the grader did not check this cell"))
                message = "passed" if ok else not_answered(submitted[nb.file], cell.grade_id, why)
                scores[cell.grade_id] = (cell.points if ok else 0, message + flags.get(nb.id, ""))
            elif nb.name in result.get("failed", {}):
                scores[cell.grade_id] = (0, failure_message(result["failed"][nb.name], result.get("log", "")))
            elif not result.get("success") or got is None or cell.grade_id not in got:
                scores[cell.grade_id] = (0, result.get("why") or NOT_GRADED)
            else:
                g = got[cell.grade_id]
                score = min(float(g.get("auto_score") or 0), cell.points)
                ok, why = rechecked.get(nb.id, {}).get(cell.grade_id, (False, "the grader did not check this cell"))
                # the message is the grader's own check's, never the kernel's error text: the
                # kernel is the student's, and it has run every test cell above, hidden tests
                # included (it could quote them in a visible cell's error)
                message = "passed" if score >= cell.points and ok else not_answered(
                    submitted[nb.file], cell.grade_id, why if not ok else KERNEL_FAILED)
                if not ok:  # nbgrader may have passed it in the student's kernel; the grader does not
                    score = 0
                scores[cell.grade_id] = (score, message + flags.get(nb.id, ""))
        out[nb.id] = scores
    return out
