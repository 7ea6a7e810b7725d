"""The student versions: ``nbgrader generate_assignment`` on the source notebooks (once per
content of the sources, kept in the course folder for every later process: :func:`generated`),
and what of the sources is private (the lines the student versions do not hold)."""

from __future__ import annotations

import atexit
import hashlib
import importlib.metadata
import json
import os
import shutil
import stat
import tempfile
import time
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
# where generated courses are kept between processes: inside the course's autograder/ folder,
# which no child and no kernel may read or write in any mode (a top-level entry of the course:
# grade.forbidden_paths), made 0700 by the grader
CACHE = Path("autograder") / ".nbgrader-cache"
# what else decides nbgrader's output: the code that runs it
_MAKERS = (Path(__file__), Path(__file__).with_name("launch.py"), Path(__file__).with_name("runner.py"))


def _sources_key(root: Path) -> str:
    h = hashlib.sha256(str(Path(root).resolve()).encode())
    for nb in notebooks_of(root):
        h.update(nb.file.encode() + b"\0" + (Path(root) / "assignments" / nb.file).read_bytes())
    return h.hexdigest()


def _cache_key(root: Path) -> str:
    """The sources' key, nbgrader's version and the code that runs it: a kept course is used
    only for exactly what made it."""
    h = hashlib.sha256(_sources_key(root).encode())
    h.update(importlib.metadata.version("nbgrader").encode())
    for maker in _MAKERS:
        h.update(maker.read_bytes())
    return h.hexdigest()[:32]


def _own_folder(path: Path) -> bool:
    """``path`` is a folder (not a link), this user's, that nobody else may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _age_s(path: Path) -> float:
    try:
        return time.time() - os.lstat(path).st_mtime
    except OSError:
        return 0.0


def _cache_folder(root: Path) -> Path | None:
    """``root``'s :data:`CACHE`, made 0700 by this user; None where it cannot be made (a course
    folder the grader may not write) or is not safely this user's own (a link, another owner)."""
    folder = Path(root) / CACHE
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    return folder if _own_folder(folder) and _own_folder(folder.parent) else None


def _generate_kept(root: Path) -> Path | None:
    """The generated course kept in ``root``'s :data:`CACHE` (made now if it is not there yet):
    generated in a new folder of the cache and renamed into place whole, so that a process
    that finds it finds all of it, and two processes that generate at once keep one. None
    where the cache cannot be used."""
    folder = _cache_folder(root)
    if folder is None:
        return None
    entry = folder / _cache_key(root)
    if _own_folder(entry) and (entry / "course" / "gradebook.db").is_file():
        return entry / "course"
    new = Path(tempfile.mkdtemp(prefix="new-", dir=folder))
    try:
        generate(root, new / "course")
        try:
            os.rename(new, entry)
        except OSError:  # another process kept its own first (or a broken entry is in the way)
            if not (_own_folder(entry) and (entry / "course" / "gradebook.db").is_file()):
                raise
    finally:
        shutil.rmtree(new, ignore_errors=True)
    for old in folder.iterdir():  # courses of sources that changed since, and of killed generations
        if old.name != entry.name and (not old.name.startswith("new-") or _age_s(old) > 3600):
            shutil.rmtree(old, ignore_errors=True)
    return entry / "course"


def adopt(root: Path, course: Path) -> None:
    """Uses ``course`` (made by :func:`generated` in another process) for ``root``'s notebooks."""
    _GENERATED[_sources_key(root)] = Path(course)


def generated(root: Path) -> Path:
    """A generated course folder for ``root``'s source notebooks: nbgrader's generate step takes
    seconds of CPU, and every grading needs it. Made once per content of the sources and kept
    in ``root``'s :data:`CACHE` for every later process (a grade-all worker, the next ``grade``);
    where the course folder cannot hold it, once per process in a temporary folder."""
    key = _sources_key(root)
    if key not in _GENERATED or not (_GENERATED[key] / "gradebook.db").is_file():
        kept_course = _generate_kept(root)
        if kept_course is None:
            tmp = Path(tempfile.mkdtemp(prefix="servelab-nbsource-"))
            atexit.register(shutil.rmtree, tmp, True)
            kept_course = generate(root, tmp / "course")
        _GENERATED[key] = kept_course
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
