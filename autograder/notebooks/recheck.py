"""The grader's own check of a notebook's autograded cells: the answers are judged here, in the
grader's process, from values the sandboxed child hands back.

Why: nbgrader runs a notebook's test cells in the same kernel as the student's cells, so a
notebook that patches ``math.isclose``, ``builtins.abs`` or an imported module can make a
restored test cell pass with wrong answers (README: threat model). Python tasks never had that
hole (:mod:`autograder.grading.judge` runs the tests in the grader); this module closes it for notebooks
the same way:

1. the submitted notebook's code cells, except the test cells, become one module
   (:func:`student_module`) that a :class:`autograder.sandbox.remote.Child` imports under the usual
   limits and audit hook (servelab refused: these exercises are done by hand);
2. each autograded test cell of the *source* notebook (hidden tests included) runs here, in
   order, in one namespace; a name it reads but does not bind is taken from the student's
   module as plain data (a function stays in the child and is called through the pipe; any
   other object becomes :class:`Opaque`, which no comparison or truth test accepts);
   builtins and names an earlier test cell bound are never taken from the student.

A cell's points need both: nbgrader's verdict and this one. The values are the notebook's final
state (every cell run once, top to bottom), which is what an honest notebook holds anyway.

>>> src = student_module([{"cell_type": "code", "metadata": {}, "source": "%matplotlib inline\\nx = 1"}])
>>> "'x = 1'" in src and "%matplotlib" not in src
True
>>> sorted(free_names("import math\\nassert math.isclose(y, f(2))\\nz = y"))
['f', 'y']
>>> cell_kind({"grade": True, "solution": False, "points": 2}, "code")
'auto'
>>> cell_kind({"grade": True, "solution": True, "points": 3}, "markdown")
'manual'
>>> cell_kind({"grade": False, "solution": True}, "code") is None
True
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import json
import math
import time
from pathlib import Path

from autograder.notebooks import instructors_log, neighbours
from autograder.sandbox.remote import Child, Limits, RemoteObject, SubmissionFailed, kind_of

# how a failed check's message starts: the student reads that the grader's check, not the
# notebook's own run, failed (nbgrader.not_answered sees past it to the error)
OWN_CHECK_FAILED = "the grader's own check of this cell failed: "

MODULE = "notebook_answers"  # the name the student's cells run under in the child
BLOCKED = ("servelab",)  # the ledger is done by hand; the oracle stays out of the child
# what a Jupyter kernel has imported before a notebook's first cell, and an honest notebook may
# import (matplotlib does): allowed here too, with its process spawning disarmed as in the kernel
KERNEL_PRELOAD = ("subprocess",)


class Opaque:
    """Stands for an object of the student's that is not plain data: it equals nothing but
    itself and refuses truth tests, arithmetic and attributes."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __bool__(self) -> bool:
        raise TypeError(f"a {self.kind} object from your notebook cannot be tested for truth; answer with plain values")

    def __repr__(self) -> str:
        return f"<{self.kind} object from your notebook>"


def _plain(value):
    """``value`` with every handle (an object that lives in the child) made :class:`Opaque`,
    except functions, which stay callable and whose results are made plain in turn."""
    if isinstance(value, RemoteObject):
        kind = kind_of(value)
        if kind in ("builtins.function", "builtins.method"):
            def call(*args, **kwargs):
                return _plain(value(*args, **kwargs))
            return call
        return Opaque(kind)
    if type(value) is list:
        return [_plain(v) for v in value]
    if type(value) is tuple:
        return tuple(_plain(v) for v in value)
    if type(value) is dict:
        return {k: _plain(v) for k, v in value.items()}
    return value


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def cell_kind(meta: dict, cell_type: str) -> str | None:
    """``auto`` for a graded code cell that is not a solution (nbgrader runs and scores it),
    ``manual`` for a graded answer or a task cell, None for a cell worth nothing."""
    if meta.get("task"):
        return "manual"
    if not meta.get("grade"):
        return None
    return "auto" if cell_type == "code" and not meta.get("solution") else "manual"


def _is_test_cell(cell: dict) -> bool:
    return cell_kind(cell.get("metadata", {}).get("nbgrader", {}), cell.get("cell_type", "")) == "auto"


def student_module(cells: list[dict], cell_timeout_s: float = 60.0) -> str:
    """A module that runs a notebook's code cells other than its test cells, in order, each on
    its own, as a kernel does: an error in one cell is recorded and the next cells still run; a
    cell running longer than ``cell_timeout_s`` (wall clock) is interrupted like nbgrader's
    per-cell timeout. IPython's ``%magic`` and ``!shell`` lines are dropped; ``display`` prints."""
    sources = []
    for cell in cells:
        if cell.get("cell_type") != "code" or _is_test_cell(cell):
            continue
        lines = [ln for ln in _source(cell).splitlines() if not ln.lstrip().startswith(("%", "!"))]
        sources.append("\n".join(lines))
    return "\n".join([
        '"""A notebook\'s code cells, run in order by the grader\'s sandboxed child."""',
        "def display(*objs, **kwargs):",
        "    print(*objs)",
        f"_CELLS = {sources!r}",
        "_CELL_ERRORS = {}",
        "import signal as _signal",
        "def _interrupt(signum, frame):",
        # no number: the timeout follows this machine's speed and load (a regrade writes the same words)
        "    raise TimeoutError('the cell ran longer than its time limit')",
        "_signal.signal(_signal.SIGALRM, _interrupt)",
        "for _i, _src in enumerate(_CELLS):",
        "    try:",
        f"        _signal.setitimer(_signal.ITIMER_REAL, {float(cell_timeout_s)!r})",
        "        exec(compile(_src, f'<notebook cell {_i + 1}>', 'exec'), globals())",
        "    except Exception as _exc:",
        "        _CELL_ERRORS[_i + 1] = f'{type(_exc).__name__}: {_exc}'",
        "    finally:",
        "        _signal.setitimer(_signal.ITIMER_REAL, 0)",
        "",
    ])


def free_names(source: str) -> set[str]:
    """Names a test cell reads without binding them itself (at any depth)."""
    loaded, bound = _names(source)
    return loaded - bound


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names read, names bound) anywhere in ``source``."""
    tree = ast.parse(source)
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return loaded, bound


def recheck(source_nb: Path, submitted_nb: Path, scratch: Path, forbidden: list[Path],
            limits: Limits, cells_factor: int = 4, deadline: float | None = None,
            seed: int = 0) -> dict[str, tuple[bool, str]]:
    """``{grade_id: (passed, message)}`` for every autograded test cell of ``source_nb``, judged
    in this process on the answers ``submitted_nb`` computes in a sandboxed child. Each cell
    has ``limits.wall_s``; the whole notebook ``cells_factor`` times the wall and CPU limits
    (as the kernel has, :data:`autograder.notebooks.nbgrader.KERNEL_CPU_FACTOR`), and no more
    than until ``deadline`` (``time.monotonic()``: the notebooks' share of the grading). A
    notebook with a constants cell is then run again on a neighbouring model drawn from
    ``seed`` (:func:`check_neighbour`)."""
    source = json.loads(Path(source_nb).read_text(encoding="utf-8"))
    tests = [c for c in source["cells"] if _is_test_cell(c)]
    ids = [c["metadata"]["nbgrader"]["grade_id"] for c in tests]
    try:
        cells = json.loads(Path(submitted_nb).read_text(encoding="utf-8"))["cells"]
        module_path = Path(scratch) / f"{MODULE}.py"
        if not isinstance(cells, list):
            raise TypeError("its cells are not a list")
        module_path.parent.mkdir(parents=True, exist_ok=True)
        module_path.write_text(student_module(cells, limits.wall_s), encoding="utf-8")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        # the parser's text may quote the file: the instructors' log has it, students the grader's words
        instructors_log.note(f"notebook {Path(submitted_nb).name}", "the recheck could not read it",
                             f"{type(exc).__name__}: {exc}")
        return {g: (False, "the grader could not read the notebook (JSON in nbformat 4)") for g in ids}
    try:
        # the CPU seconds of every cell together, at least their wall-clock timeouts: a cell that
        # spins until its deadline must not leave the cells after it without CPU
        gw, gc = limits.given_wall_s, limits.given_cpu_s
        whole = dataclasses.replace(limits, wall_s=cells_factor * limits.wall_s,
                                    cpu_s=cells_factor * max(limits.cpu_s, math.ceil(limits.wall_s)),
                                    given_wall_s=None if gw is None else cells_factor * gw,
                                    given_cpu_s=None if gw is None or gc is None else cells_factor * max(gc, math.ceil(gw)))
        end = time.monotonic() + whole.wall_s
        deadline = end if deadline is None else min(end, deadline)
        child = Child([(MODULE, module_path)], Path(scratch) / "child", forbidden, list(BLOCKED), whole,
                      deadline, preload=KERNEL_PRELOAD)
    except SubmissionFailed as exc:
        return {g: (False, f"the grader's check could not run your notebook: {exc}") for g in ids}
    out: dict[str, tuple[bool, str]] = {}
    namespace: dict = {"__name__": "__grader_notebook_check__"}
    bound_by_tests: set[str] = set()
    try:
        for grade_id, cell in zip(ids, tests):
            code = _source(cell)
            try:
                for name in sorted(free_names(code)):
                    if name in bound_by_tests or hasattr(builtins, name):
                        continue  # never the student's: a builtin, or what an earlier test cell set
                    try:
                        namespace[name] = _plain(child.attr(MODULE, name))
                    except AttributeError:
                        namespace.pop(name, None)  # not defined: the test cell's NameError says so
                exec(compile(code, f"<test cell {grade_id}>", "exec"), namespace)
                out[grade_id] = (True, "passed")
            except SubmissionFailed as exc:
                out[grade_id] = (False, f"the grader's check of this cell failed: {exc}")
            except Exception as exc:  # an assertion or an error of the test on the student's values
                out[grade_id] = (False, f"{OWN_CHECK_FAILED}{type(exc).__name__}: {exc}")
            bound_by_tests |= _names(code)[1]
    finally:
        child.close()
    check_neighbour(source["cells"], cells, dict(zip(ids, map(_source, tests))), out, Path(scratch) / "neighbour",
                    forbidden, whole, deadline, seed)
    return out


def check_neighbour(source_cells: list[dict], cells: list[dict], tests: dict[str, str],
                    out: dict[str, tuple[bool, str]], scratch: Path, forbidden: list[Path], limits: Limits,
                    deadline: float, seed: int) -> None:
    """When the source notebook has a constants cell (:mod:`autograder.notebooks.neighbours`):
    the student's cells and the source's solutions run again with a neighbouring model's
    constants, and each test cell that passed fails unless every number it reads is the
    source's on that model too. An answer read off the shipped library, or typed in, is the
    lecture model's whatever the constants say (``out`` is updated in place)."""
    found = neighbours.constants_cell(source_cells)
    passed = [grade_id for grade_id, (ok, _) in out.items() if ok]
    if found is None or not passed:
        return
    grade_id, constants = found
    names = {g: sorted(n for n in free_names(tests[g]) if not hasattr(builtins, n)) for g in passed}
    wanted = sorted({n for ns in names.values() for n in ns})
    for index, whole in enumerate(neighbours.NEIGHBOURS):
        other = neighbours.varied(constants, seed + index, whole)
        changed = ", ".join(f"{k} = {v!r}" for k, v in other.items() if v != constants[k])
        expected = _values(neighbours.with_constants(source_cells, grade_id, other) or [], wanted,
                           scratch / f"source-{index}", forbidden, limits, deadline)
        theirs = neighbours.with_constants(cells, grade_id, other)
        got = {} if theirs is None else _values(theirs, wanted, scratch / f"student-{index}", forbidden, limits, deadline)
        for g in [g for g in passed if out[g][0]]:
            for name in names[g]:
                want = expected.get(name)
                if not isinstance(want, (bool, int, float)):
                    continue  # a function or a module: the test cell calls it, on the lecture's model
                if theirs is None or not _same_number(got.get(name), want):
                    out[g] = (False, f"{OWN_CHECK_FAILED}with the constants of another model ({changed}), "
                                     f"{name} is {got.get(name)!r} where the constants give {want!r}: compute each "
                                     f"answer from the constants cell")
                    break


def _same_number(got, want) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if type(got) not in (int, float):
        return False
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1 if isinstance(want, int) else 1e-12)


def _values(cells: list[dict], names: list[str], scratch: Path, forbidden: list[Path], limits: Limits,
            deadline: float) -> dict:
    """The plain values ``names`` hold after ``cells`` ran in a sandboxed child (a name the
    cells do not define, or a child that fails, is left out)."""
    module_path = scratch / f"{MODULE}.py"
    module_path.parent.mkdir(parents=True, exist_ok=True)
    module_path.write_text(student_module(cells, limits.wall_s), encoding="utf-8")
    found: dict = {}
    try:
        child = Child([(MODULE, module_path)], scratch / "child", forbidden, list(BLOCKED), limits, deadline,
                      preload=KERNEL_PRELOAD)
    except SubmissionFailed:
        return found
    try:
        for name in names:
            try:
                found[name] = _plain(child.attr(MODULE, name))
            except (AttributeError, SubmissionFailed):
                pass
    finally:
        child.close()
    return found
