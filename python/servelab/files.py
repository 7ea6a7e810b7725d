"""Writing an output file whole or not at all: the text goes to a temporary file in the same
folder, which is then renamed into place, so that a crash, a full disk or a bad argument never
leaves half a trace page, sweep table or calibration behind.

>>> import tempfile, pathlib
>>> path = write_text_atomic(pathlib.Path(tempfile.mkdtemp()) / "out" / "a.json", "{}\\n")
>>> path.read_text(), oct(path.stat().st_mode & 0o077)
('{}\\n', '0o44')
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_text_atomic"]


def write_text_atomic(path: Path, text: str) -> Path:
    """Writes ``text`` (UTF-8, newlines as given) to ``path``, making its folder when missing;
    returns ``path``. The file gets the mode a plain ``open`` would give it (``0666`` less the
    umask: an output holds no secret, and a web server or a TA must read a trace page), not
    ``mkstemp``'s 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
