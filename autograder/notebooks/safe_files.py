"""Copying files as root without following a link someone else could have planted.

The grader runs as root, and a notebook's kernel (another uid) can write its own folders. Every
file the grader copies for nbgrader, or keeps for the instructors, is read and written here: each
path is walked one folder at a time from a descriptor, with ``O_NOFOLLOW`` on every step, and
the copy is created ``O_EXCL`` in a folder the grader made. A link anywhere on the way is an
error, never a detour (lecture §12's grading rules: the grader reads only what it chose to).
``openat2(RESOLVE_NO_SYMLINKS)`` would say the same in one call; the walk below needs nothing
newer than POSIX and behaves the same on every kernel Gradescope runs.

>>> import tempfile
>>> top = Path(tempfile.mkdtemp())
>>> _ = (top / "a.txt").write_text("hello")
>>> (top / "link.txt").symlink_to(top / "a.txt")
>>> copy_file(top / "a.txt", top / "b.txt", limit=100)
>>> (top / "b.txt").read_text()
'hello'
>>> copy_file(top / "link.txt", top / "c.txt", limit=100)
Traceback (most recent call last):
    ...
autograder.notebooks.safe_files.Unsafe: not a plain file (a link, a folder, a device): link.txt
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Unsafe(OSError):
    """A path that holds a link, or is no plain file, or is too large: not copied."""


def _open_dir(path: Path) -> int:
    """A descriptor on the folder ``path`` (absolute), opened one component at a time with
    ``O_NOFOLLOW``: a link on the way raises :class:`Unsafe`."""
    path = Path(os.path.abspath(path))
    fd = os.open("/", _DIR)
    try:
        for part in path.parts[1:]:
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Unsafe(f"a link or a file on the way to a folder: {part}") from None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(path: Path, limit: int) -> bytes:
    """The bytes of the plain file ``path``, read without following any link on its way;
    :class:`Unsafe` when it is a link, no plain file, or larger than ``limit`` bytes."""
    path = Path(os.path.abspath(path))
    folder = _open_dir(path.parent)
    try:
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Unsafe(f"not a plain file (a link, a folder, a device): {path.name}") from None
            raise
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block, a device never end
            raise Unsafe(f"not a plain file (a link, a folder, a device): {path.name}")
        if st.st_size > limit:
            raise Unsafe(f"larger than {limit} bytes: {path.name}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Unsafe(f"larger than {limit} bytes: {path.name}")
    return data


def write_new(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Creates ``path`` (which must not exist) holding ``data``, in a folder reached without
    following links."""
    path = Path(os.path.abspath(path))
    folder = _open_dir(path.parent)
    try:
        fd = os.open(path.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=folder)
    finally:
        os.close(folder)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def copy_file(src: Path, dst: Path, limit: int) -> None:
    """``src`` copied to the new file ``dst``, neither path followed through a link."""
    write_new(dst, read_file(src, limit))
