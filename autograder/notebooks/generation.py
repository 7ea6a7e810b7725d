"""The student versions: ``nbgrader generate_assignment`` on the source notebooks (once per
process and per content of the sources), and what of the sources is private (the lines the
student versions do not hold)."""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from autograder.notebooks import kept
from autograder.notebooks.cells import ASSIGNMENT, notebooks_of
from autograder.notebooks.launch import run_nbgrader
from autograder.sandbox.remote import Limits


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
    result = run_nbgrader(course, {"action": "generate", "memory_bytes": max(2 << 30, 2 * int(limits.memory_bytes))},
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
