"""Removing a folder that sandboxed code wrote in, however deep it made it.

Why: ``shutil.rmtree`` recurses once a level (Python 3.11), and a notebook's kernel, whose
folders lie on the machine's disk in every mode, made a chain of 1500 folders one inside the
other (each ``mkdir`` relative to the last, so no path was ever long): the grader's clean-up of
its work folder raised ``RecursionError`` even with ``ignore_errors``, ``grade`` wrote no
results.json, and the folder stayed behind. :func:`remove_tree` keeps its own stack of names and
one open folder at a time (descending by descriptor, climbing by ``..``: no path grows with the
depth, no descriptor count either), never follows a link, and ignores what it cannot remove.

>>> import tempfile
>>> top = Path(tempfile.mkdtemp())
>>> here = os.open(top, os.O_RDONLY)
>>> for _ in range(3000):  # deeper than the recursion limit, longer than PATH_MAX
...     os.mkdir("d", dir_fd=here)
...     inner = os.open("d", os.O_RDONLY, dir_fd=here)
...     os.close(here)
...     here = inner
>>> os.close(here)
>>> (top / "link").symlink_to("/")
>>> (top / "closed" / "inner").mkdir(parents=True)
>>> (top / "closed").chmod(0)
>>> remove_tree(top)
>>> top.exists()
False
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _folder_id(name: str, parent: int) -> tuple[int, int] | None:
    """(device, inode) of ``name`` in ``parent`` when it is a folder (not a link to one)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _enter(name: str, parent: int) -> int:
    """A descriptor of the folder ``name`` in ``parent``, made readable first where it was not
    (sandboxed code running as the grader's own user, in a user namespace, may have closed it;
    the sandbox has ended, so the folder checked by :func:`_folder_id` is still that folder)."""
    try:
        return os.open(name, FOLDER, dir_fd=parent)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=parent)
        return os.open(name, FOLDER, dir_fd=parent)


def remove_tree(path: Path | str) -> None:
    """Removes ``path`` and everything under it (links themselves, never what they point at);
    errors are ignored, as ``shutil.rmtree(path, ignore_errors=True)`` would (a file that cannot
    go stays, with its folders)."""
    try:
        here = os.open(path, FOLDER)
    except OSError:
        try:
            os.unlink(path)  # a file or a link where a folder was expected
        except OSError:
            pass
        return
    names: list[str] = []  # the folders entered below ``path``, one name a level
    stuck: set[tuple[int, int]] = set()  # (device, inode) of folders that would not go
    try:
        while True:
            try:
                entries = sorted(os.listdir(here))
            except OSError:
                entries = []
            down = None
            for name in entries:
                folder = _folder_id(name, here)
                if folder is not None:
                    if folder not in stuck:
                        down = name
                        break
                    continue
                try:
                    os.unlink(name, dir_fd=here)
                except OSError:
                    pass
            if down is not None:
                try:
                    inner = _enter(down, here)
                except OSError:
                    stuck.add(_folder_id(down, here) or (-1, -1))
                    continue
                os.close(here)
                here = inner
                names.append(down)
                continue
            if not names:
                break
            parent = os.open("..", FOLDER, dir_fd=here)
            os.close(here)
            here = parent
            name = names.pop()
            folder = _folder_id(name, here)
            try:
                os.rmdir(name, dir_fd=here)
            except OSError:
                stuck.add(folder or (-1, -1))
    finally:
        os.close(here)
    try:
        os.rmdir(path)
    except OSError:
        pass
