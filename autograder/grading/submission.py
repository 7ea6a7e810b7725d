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
from pathlib import Path, PurePosixPath

MAX_FILE = 1 << 20
MAX_ZIP_TOTAL = 200 << 20
MAX_ZIP_MEMBERS = 20_000
SKIP_DIRS = {".git", ".venv", "target", "node_modules", "__pycache__", ".hypothesis"}


class SubmissionError(ValueError):
    """The submission as a whole cannot be read (not a folder, a bad zip)."""


def unpack(submission: Path, into: Path) -> Path:
    """The folder to grade: ``submission`` itself, or a zip's contents extracted into ``into``
    (regular files only, bounded in count and size). A zip holding a link, an absolute name, a
    ``..``, or two entries for one path (a file ``notes`` and a file ``notes/a.py``, or the same
    name twice) is refused with a message naming the entry: what it means is ambiguous.

    >>> import io, tempfile
    >>> z = Path(tempfile.mkdtemp()) / "s.zip"
    >>> with zipfile.ZipFile(z, "w") as f:
    ...     f.writestr("notes", "x"); f.writestr("notes/a1_ledger/ledger.py", "y")
    >>> unpack(z, z.parent / "out")
    Traceback (most recent call last):
    autograder.grading.submission.SubmissionError: submission zip: entry 'notes/a1_ledger/ledger.py' lies inside 'notes', which is a file in the same zip
    """
    if submission.is_dir():
        return submission
    if not submission.is_file():
        raise SubmissionError(f"submission must be a folder or a .zip file, got {submission.name!r} (not found)")
    if not zipfile.is_zipfile(submission):
        raise SubmissionError(f"submission must be a folder or a .zip file, got {submission.name!r}")
    into.mkdir(parents=True, exist_ok=True)
    total = 0
    try:
        z = zipfile.ZipFile(submission)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise SubmissionError(f"submission zip cannot be read: {exc}") from None
    with z:
        members = z.infolist()
        if len(members) > MAX_ZIP_MEMBERS:
            raise SubmissionError(f"submission zip has {len(members)} entries, more than {MAX_ZIP_MEMBERS}")
        _refuse_ambiguous(members)
        for info in members:
            name = info.filename
            parts = PurePosixPath(name).parts
            if info.is_dir() or info.file_size > MAX_FILE or any(p in SKIP_DIRS for p in parts):
                continue
            try:
                with z.open(info) as src:
                    data = src.read(MAX_FILE + 1)  # the declared size may lie: count what comes out
            except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as exc:
                raise SubmissionError(f"submission zip: entry {_shown(name)} cannot be read: {exc}") from None
            if len(data) > MAX_FILE:
                continue
            total += len(data)
            if total > MAX_ZIP_TOTAL:
                raise SubmissionError(f"submission zip holds more than {MAX_ZIP_TOTAL} bytes")
            dst = into.joinpath(*parts)
            try:
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(data)
            except OSError as exc:  # a name this file system cannot hold
                raise SubmissionError(f"submission zip: entry {_shown(name)} cannot be written: "
                                      f"{exc.strerror or exc}") from None
    entries = [p for p in into.iterdir() if p.name != "__MACOSX"]
    # a zip of a folder: grade the folder
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else into


def _shown(name: str) -> str:
    """An entry's name for a message: quoted, surrogates escaped, at most 200 characters."""
    text = repr(name.encode("utf-8", "backslashreplace").decode("utf-8"))
    return text if len(text) <= 200 else text[:200] + "...'"


def _refuse_ambiguous(members: list[zipfile.ZipInfo]) -> None:
    """SubmissionError naming the first entry that is a link, absolute, climbs out with ``..``,
    holds a NUL or a backslash, or collides with another entry."""
    files: dict[str, str] = {}
    dirs: dict[str, str] = {}
    for info in members:
        name = info.filename
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise SubmissionError(f"submission zip: entry {_shown(name)} is a symbolic link")
        if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
            raise SubmissionError(f"submission zip: entry {_shown(name)} has an absolute name")
        if "\0" in name or "\\" in name:
            raise SubmissionError(f"submission zip: entry {_shown(name)} has a NUL or a backslash in its name")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise SubmissionError(f"submission zip: entry {_shown(name)} climbs out of the folder with '..'")
        if not parts:
            continue
        key = "/".join(parts)
        if info.is_dir():
            if key in files:
                raise SubmissionError(f"submission zip: entry {_shown(name)} is a folder, and "
                                      f"{_shown(files[key])} a file of the same name")
            dirs.setdefault(key, name)
            continue
        if key in files:
            raise SubmissionError(f"submission zip: entry {_shown(name)} appears twice")
        if key in dirs:
            raise SubmissionError(f"submission zip: entry {_shown(name)} is a file, and {_shown(dirs[key])} "
                                  "a folder of the same name")
        files[key] = name
        for i in range(1, len(parts)):
            dirs.setdefault("/".join(parts[:i]), name)
    for key, name in files.items():
        for i in range(1, len(key.split("/"))):
            parent = "/".join(key.split("/")[:i])
            if parent in files:
                raise SubmissionError(f"submission zip: entry {_shown(name)} lies inside {_shown(files[parent])}, "
                                      "which is a file in the same zip")


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
