"""A bound on what a sandboxed process may pile up in the folders it may write, where no mount
namespace gives it a sized tmpfs (the uid-only mode of Gradescope's container, a notebook
kernel's own folders in every mode).

``RLIMIT_FSIZE`` bounds one file, not how many: a child writing 1 MiB files for its whole time
limit fills gigabytes of the grading machine's disk (every grading under ``grade-all`` shares
it, and a full disk loses the results of all of them). So the grader watches: a thread of the
grader's process walks the folders every :data:`PERIOD_S` and, the first time they hold more
than the budget's bytes or entries, calls ``on_over`` (which kills the writer). The walk never
follows a link, counts what the disk really allocates (a sparse file costs what it holds), and
stops as soon as it is over, so the grader's own work per walk is bounded by the entries budget.

>>> import tempfile, pathlib
>>> top = pathlib.Path(tempfile.mkdtemp())
>>> _ = (top / "a").write_bytes(b"x" * 5000)
>>> usage(top, Budget(max_bytes=1 << 20, max_entries=10))
(8192, 1)
>>> (top / "b").mkdir(); _ = (top / "b" / "c").write_bytes(b"")
>>> over(top, Budget(max_bytes=1 << 20, max_entries=2))
'more than 2 files and folders'
>>> over(top, Budget(max_bytes=4096, max_entries=100))
'more than 4096 bytes'
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PERIOD_S = 0.05  # between walks: a writer at page-cache speed (~2 GB/s) gets ~100 MB past the budget


@dataclass(frozen=True)
class Budget:
    """What a child's writable folders may hold at once, all of them together."""

    max_bytes: int = 256 << 20  # a plotting library's caches and an honest notebook's files are a few MB
    max_entries: int = 10_000

    def words(self) -> str:
        return f"{self.max_bytes >> 20} MiB or {self.max_entries} files"


DEFAULT = Budget()


def usage(top: Path, budget: Budget, start: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """(bytes the disk allocates, entries) under ``top``, added to ``start``; the walk stops once
    either passes the budget (what it returns is then past it, not the whole)."""
    size, entries = start
    stack = [str(top)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:  # gone since the listing
                        continue
                    size += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    if size > budget.max_bytes or entries > budget.max_entries:
                        return size, entries
        except OSError:  # gone, or not a folder (the budget still counts what was seen)
            continue
    return size, entries


def over(folders: Path | Sequence[Path], budget: Budget) -> str | None:
    """What ``folders`` hold past ``budget``, in words, or None while within it."""
    seen = (0, 0)
    for top in [folders] if isinstance(folders, Path) else folders:
        seen = usage(top, budget, seen)
    if seen[1] > budget.max_entries:
        return f"more than {budget.max_entries} files and folders"
    if seen[0] > budget.max_bytes:
        return f"more than {budget.max_bytes} bytes"
    return None


class Watch:
    """Walks ``folders`` in a thread while it runs (``with Watch(...):`` or start/stop); the first
    time they are over ``budget``, calls ``on_over(words)`` once and stops watching (so does
    :meth:`check`, called by the grader's own thread). ``tripped`` then holds the words (what a
    message to the student can say)."""

    def __init__(self, folders: Sequence[Path], on_over: Callable[[str], None], budget: Budget = DEFAULT,
                 period_s: float = PERIOD_S) -> None:
        self.folders, self.on_over, self.budget, self.period_s = list(folders), on_over, budget, period_s
        self.tripped: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> Watch:
        self._thread = threading.Thread(target=self._run, name="folder-budget", daemon=True)
        self._thread.start()
        return self

    def check(self) -> str | None:
        """A walk now (the grader's own thread: before it takes a reply, so that no answer of a
        child past its budget counts, however fast it wrote); the words once it is over."""
        if self.tripped is None:
            found = over(self.folders, self.budget)
            with self._lock:
                if found is not None and self.tripped is None:
                    self.tripped = f"wrote {found} into its folders (the limit: {self.budget.words()})"
                    self.on_over(self.tripped)
        return self.tripped

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            if self.check() is not None:
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Watch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
