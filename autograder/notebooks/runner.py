"""The nbgrader process: ``python -s runner.py CONFIG_JSON``, started by
:mod:`autograder.notebooks.nbgrader` in a temporary course folder with a fresh HOME.

It runs nbgrader's own ``generate_assignment`` or ``autograde`` (through ``NbGraderAPI``, the
same code as the ``nbgrader`` command) and writes what the gradebook then holds as JSON to
``CONFIG["out"]``. It never reads a score from the student's notebook: nbgrader restores every
locked cell (test cells included) from the checksummed source in its database before it
executes, and scores a test cell by whether it raised. Student code runs only in the kernel that
nbgrader starts, under the sandbox of :mod:`autograder.sandbox.kernel`.

Config keys: ``action`` (``generate`` or ``autograde``), ``course`` (the course folder, holding
``source/<assignment>/``), ``assignment``, ``student``, ``cell_timeout`` (seconds per cell),
``kernel`` (kernel name for execution), ``memory_bytes`` (this process's address space),
``out`` (the JSON to write).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path


def _error_messages(notebook: Path) -> dict[str, str]:
    """grade_id -> the last error a test cell showed in the executed notebook."""
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for cell in nb.get("cells", []):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if grade_id and errors:
            out[grade_id] = f"{errors[-1].get('ename', 'Error')}: {errors[-1].get('evalue', '')}"[:1000]
    return out


def _reason(log: str) -> str:
    """The line of nbgrader's log that says why a notebook could not be graded."""
    lines = [line.strip() for line in log.splitlines()
             if line.strip() and not line.strip().startswith(("raise ", "File ", "^"))]
    for marker in ("DeadKernelError", "Kernel died", "CellTimeoutError", "timed out", "MemoryError",
                   "is not a valid notebook", "NotJSONError", "ValidationError", "missing"):
        for line in lines:
            if marker in line:
                return line[-500:]
    errors = [line for line in lines if "ERROR" in line or "Error" in line]
    return (errors[0] if errors else lines[-1] if lines else "no reason given")[-500:]


def _scores(cfg: dict, db_url: str) -> dict:
    from nbgrader.api import Gradebook, MissingEntry

    course, assignment, student = Path(cfg["course"]), cfg["assignment"], cfg["student"]
    notebooks = {}
    with Gradebook(db_url) as gb:
        for nb in gb.find_assignment(assignment).notebooks:
            try:
                sub = gb.find_submission_notebook(nb.name, assignment, student)
            except MissingEntry:
                continue
            errors = _error_messages(course / "autograded" / student / assignment / f"{nb.name}.ipynb")
            notebooks[nb.name] = {g.name: {"auto_score": g.auto_score, "max_score": g.max_score,
                                           "needs_manual_grade": bool(g.needs_manual_grade),
                                           "cell_type": g.cell_type, "error": errors.get(g.name)}
                                  for g in sub.grades}
    return notebooks


def main() -> None:
    # started as a script, this folder leads sys.path: its modules (nbgrader.py among them)
    # must not stand in for the real packages of that name
    here = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != here]
    cfg = json.loads(sys.argv[1])
    # the notebook's outputs pile up in this process while it runs (nbgrader trims them only
    # afterwards): an output flood must end in a MemoryError here, not in the grader's machine
    # swapping. The kernel, a child of this process, sets its own lower limits.
    limit = int(cfg.get("memory_bytes", 4 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    course = str(Path(cfg["course"]).resolve())
    db_url = f"sqlite:///{course}/gradebook.db"
    c = Config()
    c.CourseDirectory.root = course
    c.CourseDirectory.db_url = db_url
    c.Execute.timeout = int(cfg.get("cell_timeout", 60))
    c.Execute.kernel_name = cfg.get("kernel", "python3")
    # Unix sockets in the runtime folder instead of TCP on loopback: the kernel then needs no
    # network at all, and runs in a network namespace of its own (autograder/sandbox/os_boundary.py)
    c.KernelManager.transport = "ipc"
    c.KernelManager.ip = str(Path(os.environ["JUPYTER_RUNTIME_DIR"]) / "kernel")  # the socket files' prefix
    api = NbGraderAPI(config=c)
    if cfg["action"] == "generate":
        result = api.generate_assignment(cfg["assignment"], force=True, create=True)
        data = {"success": bool(result.get("success")), "log": str(result.get("error") or "")[-4000:]}
    elif cfg["action"] == "autograde":
        # one notebook at a time: a notebook that kills its kernel fails alone (nbgrader gives
        # up on the whole batch it is processing)
        submitted = Path(course) / "submitted" / cfg["student"] / cfg["assignment"]
        failed = {}
        for path in sorted(submitted.glob("*.ipynb")):
            api.coursedir.notebook_id = path.stem
            result = api.autograde(cfg["assignment"], cfg["student"], force=True, create=True)
            if not result.get("success"):
                failed[path.stem] = _reason(str(result.get("log") or "") + str(result.get("error") or ""))
        api.coursedir.notebook_id = "*"
        scores = _scores(cfg, db_url)
        data = {"success": True, "log": "", "failed": failed,
                "notebooks": {name: cells for name, cells in scores.items() if name not in failed}}
    else:
        raise ValueError(f"action must be 'generate' or 'autograde', got {cfg['action']!r}")
    tmp = cfg["out"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, cfg["out"])


if __name__ == "__main__":
    main()
