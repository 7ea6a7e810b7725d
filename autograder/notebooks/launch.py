"""One nbgrader run in a process of its own (:mod:`autograder.notebooks.runner`): its
environment, its wall-clock timeout, its log (to :mod:`autograder.notebooks.instructors_log`),
and the grader's own words for what went wrong (:data:`FAILED`: the only text about nbgrader's
run that results.json holds)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

from autograder.notebooks import instructors_log
from autograder.notebooks.cells import ASSIGNMENT, STUDENT

RUNNER = Path(__file__).with_name("runner.py")
GO = "go\n"  # what a runner started with ``go`` in its config reads before it starts any kernel


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


def nbgrader_env(course: Path) -> dict[str, str]:
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


def run_nbgrader(course: Path, cfg: dict, timeout_s: float, subject: str,
                 before: Callable[[], object] | None = None) -> dict:
    """One nbgrader run (``cfg``: the runner's config, less ``course`` and ``out``) in its own
    process group, killed when ``timeout_s`` runs out. Its log goes to the instructors' log.
    ``before``: waited for once the runner has started, and only then is it told to go (it
    imports nbgrader meanwhile, about a second and a half); ``timeout_s`` counts from then."""
    action = cfg["action"]
    out = course / f"{action}.json"
    cfg = {**cfg, "course": str(course), "assignment": ASSIGNMENT, "student": STUDENT, "out": str(out),
           "go": GO if before is not None else None}
    log_path = course / f"{action}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-s", str(RUNNER), json.dumps(cfg)], cwd=course,
                                env=nbgrader_env(course), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if before is not None else None, start_new_session=True)
        try:
            if before is not None and proc.stdin is not None:
                before()
                try:
                    proc.stdin.write(GO.encode())
                    proc.stdin.close()
                except BrokenPipeError:  # the runner ended already: its log says why
                    pass
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
