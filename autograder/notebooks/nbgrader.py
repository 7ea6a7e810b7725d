"""The nbgrader notebooks (``assignments/notebooks/``): student versions, autograding, and their
lines in results.json.

Where points live: in the source notebooks' nbgrader cell metadata, nowhere else. The
manifest's ``[[notebook]]`` entries say which notebooks are graded (id, title, lecture, file,
visibility) but hold no points; :func:`cell_points` reads them from the notebook, so the points
nbgrader awards and the points the grader reports cannot drift apart.

Every nbgrader run happens in its own process (:mod:`autograder.notebooks.runner`) on a temporary
course folder (``source/notebooks/`` from the pristine copy, ``submitted/student/notebooks/``
from the grader's copy of the submission), with a HOME of its own, a wall-clock timeout on the
whole run and a per-cell timeout; the notebook's code runs in a sandboxed kernel
(:mod:`autograder.sandbox.kernel`: the child's resource limits and audit hook) started as the
sandbox's uid, in fresh folders of its own outside that course folder (:func:`autograder.notebooks.kernel_spec.kernel_folders`):
nbgrader and the grader, as root, never read or write where a kernel can (README: threat
model). Nothing is written into the course copy, and results.json holds only the grader's own
messages (:data:`FAILED`; nbgrader's log goes to :mod:`autograder.notebooks.instructors_log`).

A cell's lines in results.json: an autograded test cell scores its points when nbgrader gave
them (the cell ran without an error after nbgrader restored it from the source); a manually
graded cell is listed with score 0 and the message that it awaits the instructor's grade.

"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import servelab
from servelab.grading.manifest import tomllib  # tomli on Python 3.10

from autograder import markers
from autograder.notebooks import instructors_log, kept, kernel_spec, recheck, safe_files
from autograder.notebooks.kernel_spec import KERNEL_CPU_FACTOR, kernel_forbidden  # noqa: F401  (grade.py's)
from autograder.notebooks.recheck import cell_kind
from autograder.grading import results
from autograder.sandbox import os_boundary
from autograder.sandbox.remote import Limits

ASSIGNMENT = "notebooks"  # the nbgrader assignment: the folder assignments/notebooks/
STUDENT = "student"
RUNNER = Path(__file__).with_name("runner.py")
KERNEL_NAME = "servelab-sandbox"
# a test cell that the grader's check passes and nbgrader's run failed (the kernel's own error
# text is not shown: see scores())
KERNEL_FAILED = ("the test cell raised an error in your notebook's kernel (its values pass the grader's own "
                 "check: run the notebook top to bottom and look at that cell's output)")
MAX_NOTEBOOK = 1 << 20  # bytes, as for any submitted file
PENDING = "manually graded: {points} point(s) pending, the instructor grades this cell by hand"


@dataclass(frozen=True)
class Notebook:
    """One ``[[notebook]]`` entry of the manifest."""

    id: str
    title: str
    lecture: str
    file: str  # relative to assignments/, e.g. "notebooks/ex01_ledger_70b.ipynb"
    visibility: str = "visible"

    @property
    def name(self) -> str:
        """nbgrader's notebook name (the file name without ``.ipynb``)."""
        return Path(self.file).stem


@dataclass(frozen=True)
class Cell:
    grade_id: str
    points: int
    kind: str  # "auto" (a test cell nbgrader scores) or "manual" (graded by hand)
    hidden: bool = False  # holds a ### BEGIN HIDDEN TESTS region (its message may tell of them)


def notebooks_of(root: Path) -> tuple[Notebook, ...]:
    """The manifest's notebooks (none when it lists none)."""
    data = tomllib.loads((Path(root) / "assignments" / "manifest.toml").read_text(encoding="utf-8"))
    out = []
    for i, raw in enumerate(data.get("notebook", [])):
        for key in ("id", "title", "lecture", "file"):
            if key not in raw:
                raise ValueError(f"manifest: notebook[{i}] lacks the key {key!r}")
        nb = Notebook(raw["id"], raw["title"], raw["lecture"], raw["file"], raw.get("visibility", "visible"))
        if not nb.file.startswith(f"{ASSIGNMENT}/") or not nb.file.endswith(".ipynb") or nb.file.count("/") != 1:
            raise ValueError(f"manifest: notebook[{i}] file must be {ASSIGNMENT}/<name>.ipynb, got {nb.file!r}")
        out.append(nb)
    return tuple(out)


def cell_points(path: Path) -> list[Cell]:
    """The graded cells of a source notebook, in order, with their points (nbgrader metadata)."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    cells = []
    for c in nb["cells"]:
        meta = c.get("metadata", {}).get("nbgrader", {})
        kind = cell_kind(meta, c["cell_type"])
        if kind is not None:
            points = meta.get("points")
            if not isinstance(points, (int, float)) or points <= 0 or int(points) != points:
                raise ValueError(f"{path}: cell {meta.get('grade_id')!r} must have positive whole points, got {points!r}")
            hidden = markers.count_regions("".join(c["source"]), markers.HIDDEN) > 0
            cells.append(Cell(meta["grade_id"], int(points), kind, hidden))
    return cells


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


# ---- running nbgrader -------------------------------------------------------------------------


# why nbgrader could not grade a notebook (runner.FAILURES), in the grader's words: the only
# text about nbgrader's run that results.json holds (its log goes to the instructors' log)
FAILED = {
    "kernel_died": "nbgrader could not run this notebook: Kernel died (a cell ended the kernel's process, "
                   "or it ran out of memory)",
    "timeout": "nbgrader could not run this notebook: a cell ran longer than its time limit",
    "memory": "nbgrader could not run this notebook: it ran out of memory (MemoryError)",
    "not_a_notebook": "nbgrader could not run this notebook: it is not a valid notebook (nbformat 4)",
    "other": "nbgrader could not run this notebook (your instructors have the details)",
}


def failure_message(kind: str, log: str) -> str:
    """What results.json says of a notebook nbgrader could not run: the fixed message for its
    ``kind``. ``log`` (nbgrader's, holding file names and text a kernel chose) is not used: it
    is the instructors' (the tests' control passes it through to show why)."""
    return FAILED.get(kind, FAILED["other"])


NOT_GRADED = "nbgrader could not grade the notebooks (your instructors have the details)"
TIMED_OUT = "nbgrader could not grade the notebooks: the run took longer than its time limit"
NOT_READABLE = "the file is not a readable notebook (JSON, UTF-8)"


def _nbgrader_env(course: Path) -> dict[str, str]:
    """nbgrader's own environment: its HOME and Jupyter folders in the course folder, which
    only the grader can write (never a kernel's: those are set in the kernel spec)."""
    home = course / "nbgrader-home"
    home.mkdir(mode=0o700, exist_ok=True)
    tmp = home / "tmp"
    tmp.mkdir(mode=0o700, exist_ok=True)
    return {"HOME": str(home), "TMPDIR": str(tmp), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
            # nbgrader calls the `alembic` command: the venv's bin folder first
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1", "JUPYTER_PATH": str(course / "jupyter"),
            "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_DATA_DIR": str(home / "data"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "IPYTHONDIR": str(home / "ipython"),
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _run(course: Path, cfg: dict, timeout_s: float, subject: str) -> dict:
    """One nbgrader run (``cfg``: the runner's config, less ``course`` and ``out``) in its own
    process group, killed when ``timeout_s`` runs out. Its log goes to the instructors' log."""
    action = cfg["action"]
    out = course / f"{action}.json"
    cfg = {**cfg, "course": str(course), "assignment": ASSIGNMENT, "student": STUDENT, "out": str(out)}
    log_path = course / f"{action}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-s", str(RUNNER), json.dumps(cfg)], cwd=course,
                                env=_nbgrader_env(course), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the kernel too, and anything it left
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    text = log_path.read_text(encoding="utf-8", errors="replace")
    if timed_out:
        instructors_log.note(subject, f"nbgrader {action} ran longer than {timeout_s:g} s", text)
        return {"success": False, "why": TIMED_OUT, "notebooks": {}}
    if not out.is_file():
        instructors_log.note(subject, f"nbgrader {action} exited with code {proc.returncode}", text)
        return {"success": False, "why": NOT_GRADED, "notebooks": {}}
    result = json.loads(out.read_text(encoding="utf-8"))
    if result.get("failed") or not result.get("success"):
        instructors_log.note(subject, f"nbgrader {action}: {sorted(result.get('failed', {}).items())}", text)
    result["log"] = text  # for failure_message only: never a message of results.json
    return result


def _course(root: Path, into: Path) -> Path:
    """A course folder with the pristine source notebooks under ``source/notebooks/``."""
    src = into / "source" / ASSIGNMENT
    src.mkdir(parents=True)
    for nb in notebooks_of(root):
        shutil.copyfile(Path(root) / "assignments" / nb.file, src / Path(nb.file).name)
    return into


def generate(root: Path, into: Path, limits: Limits = Limits()) -> Path:
    """Runs ``nbgrader generate_assignment`` on the source notebooks in a course folder made in
    ``into`` and returns that folder (``release/notebooks/`` holds the student versions,
    ``gradebook.db`` the cells and checksums autograde restores from). Raises when nbgrader
    fails: a release must never fall back to shipping a source notebook."""
    course = _course(root, Path(into))
    # generate runs no notebook (a release is no grading): the instructors' sources only
    result = _run(course, {"action": "generate", "memory_bytes": max(2 << 30, 2 * int(limits.memory_bytes))},
                  timeout_s=300, subject="release")
    if not result.get("success"):
        log = (course / "generate.log").read_text(encoding="utf-8", errors="replace")[-4000:]
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{log}")
    for nb in notebooks_of(root):
        if not (course / "release" / ASSIGNMENT / Path(nb.file).name).is_file():
            raise RuntimeError(f"nbgrader generate_assignment wrote no {Path(nb.file).name}")
    return course


_GENERATED: dict[str, Path] = {}


def _sources_key(root: Path) -> str:
    h = hashlib.sha256(str(Path(root).resolve()).encode())
    for nb in notebooks_of(root):
        h.update(nb.file.encode() + b"\0" + (Path(root) / "assignments" / nb.file).read_bytes())
    return h.hexdigest()


def adopt(root: Path, course: Path) -> None:
    """Uses ``course`` (made by :func:`generated` in another process) for ``root``'s notebooks."""
    _GENERATED[_sources_key(root)] = Path(course)


def generated(root: Path) -> Path:
    """A generated course folder for ``root``'s source notebooks, made once per process (and per
    content of the sources): nbgrader's generate step takes seconds, grading repeats it often."""
    key = _sources_key(root)
    if key not in _GENERATED or not (_GENERATED[key] / "gradebook.db").is_file():
        tmp = Path(tempfile.mkdtemp(prefix="servelab-nbsource-"))
        atexit.register(shutil.rmtree, tmp, True)
        _GENERATED[key] = generate(root, tmp / "course")
    return _GENERATED[key]


def _readable_notebook(path: Path) -> str | None:
    """Why a submitted notebook cannot be graded, or None when it can."""
    try:
        if path.stat().st_size > MAX_NOTEBOOK:
            return f"the notebook is larger than {MAX_NOTEBOOK} bytes"
        nb = json.loads(safe_files.read_file(path, limit=MAX_NOTEBOOK).decode("utf-8"))
    except (OSError, ValueError) as exc:
        # never the parser's text: it may quote the file, which need not be the student's own
        instructors_log.note(f"notebook {path.name}", "not readable as JSON", f"{type(exc).__name__}: {exc}")
        return NOT_READABLE
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        return "the file is not a notebook in nbformat 4"
    return None


# Names a notebook's own cells have no honest use for in these exercises, but that could subvert
# the test cells sharing its kernel (README: threat model). Not a defence: a flag for the human
# who grades the written answers anyway.
SUSPICIOUS = ("builtins", "sys.modules", "set_custom_exc", "showtraceback", "settrace", "setprofile",
              "get_ipython", "__import__", "importlib", "AssertionError", "isclose =", "hw_model.", "gc.",
              "__class__", "inspect")


def suspicious(path: Path) -> list[str]:
    """The :data:`SUSPICIOUS` names in a submitted notebook's code cells other than its test
    cells (which nbgrader replaces anyway).

    >>> import tempfile
    >>> nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "import builtins; builtins.abs = len"}]}
    >>> p = Path(tempfile.mkdtemp()) / "n.ipynb"; _ = p.write_text(json.dumps(nb))
    >>> suspicious(p)
    ['builtins']
    """
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
        code = "\n".join("".join(c.get("source", "")) for c in nb.get("cells", [])
                         if c.get("cell_type") == "code"
                         and cell_kind(c.get("metadata", {}).get("nbgrader", {}), "code") != "auto")
    except (OSError, ValueError, AttributeError, TypeError):
        return []
    return [name for name in SUSPICIOUS if name in code]


def problems_of(root: Path, files: dict[str, Path | None]) -> dict[str, str]:
    """notebook id -> why it cannot be graded (missing, too large, not a notebook)."""
    problems = {}
    for nb in notebooks_of(root):
        path = files.get(nb.file)
        why = f"missing file: the submission has no {nb.file}" if path is None else _readable_notebook(path)
        if why:
            problems[nb.id] = why
    return problems


def _copy_template(template: Path, course: Path) -> None:
    """The generated course's source notebooks, student versions and database (cells and
    checksums nbgrader restores from), copied into the grader's new ``course`` folder."""
    for sub in ("source", "release"):
        (course / sub / ASSIGNMENT).mkdir(parents=True)
        for path in sorted((template / sub / ASSIGNMENT).iterdir()):
            safe_files.copy_file(path, course / sub / ASSIGNMENT / path.name, limit=MAX_NOTEBOOK)
    safe_files.copy_file(template / "gradebook.db", course / "gradebook.db", limit=1 << 30)


def _keep(course: Path, root: Path, notebooks: tuple[Notebook, ...], keep: Path) -> None:
    """The executed notebooks, for the instructor's manual grading: nbgrader's output (in the
    grader's own folder, where no kernel writes) without what is private to the course
    (:mod:`autograder.notebooks.kept`)."""
    done = course / "autograded" / STUDENT / ASSIGNMENT
    keep = Path(os.path.realpath(keep))  # the operator's folder; below it nothing is followed
    keep.mkdir(parents=True, exist_ok=True)
    private = private_lines_of(root)
    for nb in notebooks:
        name = Path(nb.file).name
        try:
            data = kept.kept_copy(safe_files.read_file(done / name, limit=64 * MAX_NOTEBOOK), private)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            instructors_log.note(f"notebook {nb.name}", "the autograded notebook was not kept", repr(exc))
            continue
        if (keep / name).exists() or (keep / name).is_symlink():
            (keep / name).unlink()
        safe_files.write_new(keep / name, data, mode=0o644)


def autograde(root: Path, files: dict[str, Path | None], work: Path, limits: Limits = Limits(),
              forbidden: Sequence[Path] = (), keep: Path | None = None) -> dict[str, dict[str, tuple[float, str]]]:
    """Autogrades the submitted notebooks (``files``: manifest file -> submitted path, the
    grader's own copies) with nbgrader. Returns ``{notebook id: {grade_id: (score, message)}}``
    for every graded cell of every manifest notebook; a missing or unreadable notebook scores 0
    with a message saying so. ``keep``: a folder to copy the executed (autograded) notebooks into.

    Every message is the grader's own (README: threat model): nbgrader's log and the kernel's
    errors go to the instructors' log (:mod:`autograder.notebooks.instructors_log`)."""
    notebooks = notebooks_of(root)
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
                                               limits, KERNEL_CPU_FACTOR)
    result: dict = {"success": True, "notebooks": {}}
    if graded:
        _copy_template(generated(root), course)
        boundary = os_boundary.boundary()
        jobs = []
        hide = kernel_spec.kernel_hidden(list(forbidden), course)
        for nb in graded:
            folders = kernel_spec.kernel_folders(work / "kernels", nb.name)
            spec = f"{KERNEL_NAME}-{nb.name}"
            kernel_spec.write_spec(course / "jupyter", spec, folders, hide, limits, boundary)
            jobs.append({"name": nb.name, "kernel": spec, "runtime": str(folders.runtime), "base": str(folders.base),
                         "sockets": str(folders.sockets / "kernel")})
        # the whole run may take the per-test wall clock for each notebook, plus kernel starts
        budget = 60 + len(notebooks) * 2 * max(1.0, limits.wall_s)
        result = _run(course, {"action": "autograde", "notebooks": jobs, "gid": boundary.gid,
                               "cell_timeout": max(1, int(limits.wall_s)),
                               # nbgrader itself plus a kernel's worth of outputs
                               "memory_bytes": max(2 << 30, 2 * int(limits.memory_bytes))},
                      timeout_s=budget, subject="notebooks")
        boundary.reap()  # anything still running as the kernels' uid
        if keep is not None:
            _keep(course, root, tuple(graded), Path(keep))
    for nb in notebooks:
        cells = cell_points(Path(root) / "assignments" / nb.file)
        got = result.get("notebooks", {}).get(nb.name)
        scores: dict[str, tuple[float, str]] = {}
        for cell in cells:
            if nb.id in problems:
                scores[cell.grade_id] = (0, problems[nb.id])
            elif nb.name in result.get("failed", {}):
                scores[cell.grade_id] = (0, failure_message(result["failed"][nb.name], result.get("log", "")))
            elif not result.get("success") or got is None or cell.grade_id not in got:
                scores[cell.grade_id] = (0, result.get("why") or NOT_GRADED)
            elif cell.kind == "manual":
                scores[cell.grade_id] = (0, PENDING.format(points=cell.points))
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


def private_lines_of(root: Path) -> set[str]:
    """The lines of every source notebook's solutions, hidden tests and model answers
    (:func:`autograder.notebooks.kept.private_lines`) that the student versions do not hold
    (a question above an answer, a rubric shown to students): none may reach a student."""
    lines = {line for nb in notebooks_of(root)
             for line in kept.private_lines(json.loads((Path(root) / "assignments" / nb.file).read_text(encoding="utf-8"))["cells"])}
    released = "\n".join(student_versions(root).values())
    public = {line for text in kept.strings_in(json.loads(f"[{','.join(student_versions(root).values())}]"))
              for line in text.splitlines()}
    return {line for line in lines if line not in released and line not in {p.strip() for p in public}}


def student_versions(root: Path) -> dict[str, str]:
    """``release``: path in the repository -> nbgrader's student version of each manifest
    notebook (solutions stubbed, hidden tests removed, cells locked, checksums set)."""
    course = generated(root)
    return {f"assignments/{nb.file}": (course / "release" / ASSIGNMENT / Path(nb.file).name).read_text(encoding="utf-8")
            for nb in notebooks_of(root)}


def not_graded(root: Path, why: str) -> dict[str, dict[str, tuple[float, str]]]:
    """Every notebook cell at 0 with the message ``why`` (a run that grades only some tasks)."""
    return {nb.id: {c.grade_id: (0, why) for c in cell_points(Path(root) / "assignments" / nb.file)}
            for nb in notebooks_of(root)}


def merge(data: dict, root: Path, scores: dict[str, dict[str, tuple[float, str]]]) -> dict:
    """Adds the notebooks' cells to results.json ``data`` (built for the manifest's tasks): one
    test per graded cell, named ``<notebook id>: <grade_id>``, its points from the source
    notebook; score, max_score and the summary output grow accordingly. A test cell holding
    hidden tests is shown ``after_due_date`` (its error message may quote them)."""
    lines = []
    base = len({t["extra_data"]["task"] for t in data["tests"]})
    for n_index, nb in enumerate(notebooks_of(root), base + 1):
        got: float = 0
        total = pending = 0
        for c_index, cell in enumerate(cell_points(Path(root) / "assignments" / nb.file), 1):
            score, message = scores[nb.id][cell.grade_id]
            score = int(score) if float(score).is_integer() else float(score)
            passed = cell.kind == "auto" and score >= cell.points
            waiting = cell.kind == "manual" and message == PENDING.format(points=cell.points)  # not failed
            data["tests"].append({
                "name": f"{nb.id}: {cell.grade_id}" + (" (manually graded)" if cell.kind == "manual" else ""),
                "number": f"{n_index}.{c_index}", "score": score, "max_score": cell.points,
                **results.status_fields(passed, pending=waiting), "output": message,
                # as for Python tests in hidden regions: a cell with hidden tests is shown after the due date
                "visibility": "after_due_date" if cell.hidden and nb.visibility == "visible" else nb.visibility,
                "extra_data": {"task": nb.id, "notebook": nb.file, "cell": cell.grade_id, "kind": cell.kind}})
            got += score
            total += cell.points
            pending += cell.points if cell.kind == "manual" else 0
        data["score"] += got
        data["max_score"] += total
        note = f"  [{pending} point(s) manually graded, pending]" if pending else ""
        lines.append(results.summary_line(f"{nb.id} ({nb.title}, {nb.lecture})",
                                          [t for t in data["tests"] if t["extra_data"]["task"] == nb.id], note))
    if lines:
        data["output"] = "\n".join([data["output"], *lines])
    return data
