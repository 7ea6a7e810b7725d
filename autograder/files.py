"""Output files written whole or not at all, with the permissions any other file would get.

``tempfile.mkstemp`` and ``mkdtemp`` create their files 0600 and folders 0700 (right for
secrets, wrong for a results.json or a release the instructor will share): what this module
writes ends up as ``open()`` and ``mkdir`` would have made it, 0644 and 0755 under the usual
umask 022.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> path = write_text_atomic(folder / "a" / "notes.md", "hello\\n")
>>> path.read_text(), oct(path.stat().st_mode & 0o777) == oct(normal_mode(file=True))
('hello\\n', True)
>>> sorted(p.name for p in path.parent.iterdir())  # no temporary left behind
['notes.md']
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def normal_mode(file: bool) -> int:
    """The mode a new file (0666) or folder (0777) gets from ``open``/``mkdir`` under the umask."""
    return (0o666 if file else 0o777) & ~umask()


def write_text_atomic(path: Path, text: str) -> Path:
    """Writes ``text`` (UTF-8, newlines as given) to ``path`` through a temporary file in the
    same folder and a rename, so that a reader never sees half a file; the file gets
    :func:`normal_mode`. Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, normal_mode(file=True))
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
