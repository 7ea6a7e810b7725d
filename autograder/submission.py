"""Finding the files a student edited in a submission (a folder or a zip of one).

Only the files the manifest lists under ``edit`` are ever taken, each as a regular file of at
most :data:`MAX_FILE` bytes (a symlink could point at the grader's private files). A file is
looked for at ``assignments/<edit>`` (a whole repository), then at ``<edit>`` (the assignments
folder), then by its name alone if exactly one file has it (a Gradescope upload of loose files).

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> (d / "ledger.py").write_text("x = 1")
5
>>> find_file(d, "a1_ledger/ledger.py") == d / "ledger.py"
True
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

MAX_FILE = 1 << 20
MAX_ZIP_TOTAL = 200 << 20
MAX_ZIP_MEMBERS = 20_000
SKIP_DIRS = {".git", ".venv", "target", "node_modules", "__pycache__", ".hypothesis"}


class SubmissionError(ValueError):
    """The submission as a whole cannot be read (not a folder, a bad zip)."""


def unpack(submission: Path, into: Path) -> Path:
    """The folder to grade: ``submission`` itself, or a zip's contents extracted into ``into``
    (only regular files, no absolute or ``..`` paths, bounded in count and size)."""
    if submission.is_dir():
        return submission
    if not submission.is_file():
        raise SubmissionError(f"submission must be a folder or a .zip file, got {str(submission)!r} (not found)")
    if not zipfile.is_zipfile(submission):
        raise SubmissionError(f"submission must be a folder or a .zip file, got {str(submission)!r}")
    into.mkdir(parents=True, exist_ok=True)
    total = 0
    with zipfile.ZipFile(submission) as z:
        members = z.infolist()
        if len(members) > MAX_ZIP_MEMBERS:
            raise SubmissionError(f"submission zip has {len(members)} entries, more than {MAX_ZIP_MEMBERS}")
        for info in members:
            name = info.filename
            parts = Path(name).parts
            if info.is_dir() or name.startswith("/") or ".." in parts or stat.S_ISLNK(info.external_attr >> 16):
                continue
            if info.file_size > MAX_FILE or any(p in SKIP_DIRS for p in parts):
                continue
            with z.open(info) as src:
                data = src.read(MAX_FILE + 1)  # the declared size may lie: count what comes out
            if len(data) > MAX_FILE:
                continue
            total += len(data)
            if total > MAX_ZIP_TOTAL:
                raise SubmissionError(f"submission zip holds more than {MAX_ZIP_TOTAL} bytes")
            dst = into / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
    entries = [p for p in into.iterdir() if p.name != "__MACOSX"]
    # a zip of a folder: grade the folder
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else into


def _regular(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE


def find_file(root: Path, rel: str) -> Path | None:
    """Where the submission keeps the edited file ``rel`` (relative to assignments/), or None."""
    for candidate in (root / "assignments" / rel, root / rel):
        if _regular(candidate) and not any(p.is_symlink() for p in candidate.parents if root in p.parents):
            return candidate
    name = Path(rel).name
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        if name in filenames and _regular(Path(dirpath) / name):
            found.append(Path(dirpath) / name)
    return found[0] if len(found) == 1 else None


def collect(root: Path, edit: tuple[str, ...]) -> dict[str, Path] | str:
    """Every file of one task, or a message naming what is missing."""
    files, missing = {}, []
    for rel in edit:
        path = find_file(root, rel)
        if path is None:
            missing.append(rel)
        else:
            files[rel] = path
    if missing:
        return (f"missing file: the submission has no {', '.join(missing)} (looked for assignments/<file>, "
                "<file>, and a single file of that name anywhere; symlinks and files over 1 MiB are ignored)")
    return files
