"""Grades hostile fixtures (or an honest class) in whatever mode this process's environment
chooses, and prints one JSON line: the boundary's mode and, per fixture, its points and the
self-check's problems. Run by test_mode_matrix.py with the interpreter of a course copy
under /opt (Gradescope's layout), as root or as another user.

Usage: ``python -m autograder.tests.mode_matrix hostile NAME...`` (``all``: every fixture but
:data:`SAME_IN_EVERY_MODE`),
``hostile-walls-off NAME...`` (the control: without Landlock and the no-new-code rule, in this
process), or ``probe`` (what a child can read and map).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from autograder.sandbox import os_boundary

# hostile submissions the audit hook alone does not stop (README: threat model)
PAST_THE_HOOK = ["subinterpreter_reads_solution", "dir_fd_reads_solution", "hardlink_via_dir_fd",
                 "grader_proc_through_subinterpreter", "runtime_extension_reads_solution", "tmp_leftovers",
                 "neighbour_temp_folder", "carried_native_code"]
JOBS = 4  # hostile gradings at a time
# fixtures that "all" leaves out here: endless_call is endless_loop's defence (a spinning child
# killed at its deadline, which is the mode's kill) run once per test by the grader's own loop
# (a new child for the next test, the task's budget), the same code in every mode; at about 30 s
# of CPU it was a quarter of a mode's hostile set. The self-check grades it in the default mode.
SAME_IN_EVERY_MODE = ("endless_call",)


def _one_hostile(name: str) -> tuple[str, dict]:
    from autograder.selfcheck import HOSTILE, check_hostile

    with tempfile.TemporaryDirectory(prefix="servelab-matrix-") as tmp:
        problems = check_hostile(HOSTILE / name, Path(tmp))
        score = json.loads((Path(tmp) / "results.json").read_text())["score"]
    return name, {"score": score, "problems": problems}


def hostile(names: list[str], jobs: int = JOBS) -> dict:
    """Each fixture graded as the self-check grades it, ``jobs`` at a time (most of a hostile
    grading is waiting on a limit, so the cores are not the bound), in worker processes of this
    interpreter (spawned: each its own boundary, as a grade-all worker)."""
    if "all" in names:
        from autograder.selfcheck import hostiles

        names = [h.name for h in hostiles() if h.name not in SAME_IN_EVERY_MODE]
    if jobs == 1 or len(names) == 1:  # in this process (walls_off patches this process only)
        return dict(map(_one_hostile, names))
    # nbgrader's generate step once, here, for every worker (as grade-all does)
    from autograder.grading.grade import ROOT
    from autograder.notebooks import nbgrader

    course = str(nbgrader.generated(ROOT)) if nbgrader.notebooks_of(ROOT) else None
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_adopt, initargs=(course,)) as pool:
        return dict(pool.map(_one_hostile, names))


def _adopt(course: str | None) -> None:
    if course is not None:
        from autograder.grading.grade import ROOT
        from autograder.notebooks import nbgrader

        nbgrader.adopt(ROOT, Path(course))


PROBE = '''
import os, servelab_core_path
def probe():
    found = {}
    for what, path in (("core", servelab_core_path.CORE), ("tmp", "/tmp"), ("course", servelab_core_path.COURSE)):
        try:
            with open(path, "rb") if what == "core" else os.scandir(path) as f:
                found[what] = "read"
        except OSError as exc:
            found[what] = type(exc).__name__
    import mmap
    fd = os.open(os.__file__, os.O_RDONLY)
    try:
        mmap.mmap(fd, 0, prot=mmap.PROT_READ | mmap.PROT_EXEC)
        found["exec_mapping"] = "mapped"
    except OSError as exc:
        found["exec_mapping"] = type(exc).__name__
    return found
'''


def probe() -> dict:
    """What a child can reach: servelab's compiled core, /tmp, the course copy, and whether it
    can map a file executable."""
    import servelab

    from autograder.grading.grade import ROOT
    from autograder.sandbox.remote import Child, Limits

    core = next(p for p in Path(servelab.__file__).resolve().parent.iterdir() if p.name.startswith("_core"))
    work = os_boundary.work_folder("servelab-probe-")
    try:
        (work / "mods").mkdir()
        (work / "mods" / "probe.py").write_text(PROBE)
        (work / "mods" / "servelab_core_path.py").write_text(f"CORE = {str(core)!r}\nCOURSE = {str(ROOT)!r}\n")
        child = Child([("probe", work / "mods" / "probe.py")], work / "scratch", [], [], Limits(wall_s=60),
                      time.monotonic() + 60)
        try:
            return child.call("probe", "probe", (), {})
        finally:
            child.close()
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def walls_off() -> None:
    """The control: the uid-only mode as it was before Landlock and the no-new-code rule (the
    uid, 0700 folders and the seccomp filter's W^X rules only)."""
    os_boundary.Boundary.confinement = lambda self, readable, writable, listed=(): {  # type: ignore[method-assign]
        "files": False, "new_code": True, "required": False}


if __name__ == "__main__":
    kind, *names = sys.argv[1:]
    walled_off = kind == "hostile-walls-off"
    if walled_off:
        walls_off()
        kind = "hostile"
    result = {"mode": os_boundary.boundary().mode}
    result.update(hostile(names, jobs=1 if walled_off else JOBS) if kind == "hostile" else probe())
    print(json.dumps(result))
