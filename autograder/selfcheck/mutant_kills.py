"""The tests that some mutant already fails, shared by the self-check's workers, so that the
next mutant of a task stops as soon as it has lost a point.

A mutant has two things to prove: that it loses points (one failing test is enough), and,
with all the others, that every graded test is failed by some mutant (the survivor list). So a
mutant's grading runs its task's tests in order until one fails, and after that only the tests
that no mutant has failed yet (:class:`~autograder.grading.judge.Shortcut`); a test that fails
is written here at once, one empty file a test, where every worker sees it.

The verdicts do not depend on the order the workers finish in: a test that no mutant fails is
never written here, so every mutant of its task runs it, and the survivor list is the same as
with every test run; a mutant that loses no point runs every test. Only the tests listed as a
mutant's kills (``killed``) and the time it takes change (the mutants' CPU: 204 s before, 166 s).

>>> import tempfile
>>> kills = MutantKills(Path(tempfile.mkdtemp()))
>>> kills.skip("a1_ledger/test_a1_ledger.py::test_bytes_match_core") is None
True
>>> kills.failed("a1_ledger/test_a1_ledger.py::test_bytes_match_core")
>>> kills.skip("a1_ledger/test_a1_ledger.py::test_bytes_match_core")
'not run: another mutant fails this test (the self-check needs one failure per mutant)'
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SKIPPED = "not run: another mutant fails this test (the self-check needs one failure per mutant)"


class MutantKills:
    """The tests some mutant fails, as files in ``folder`` (named by a digest of the test id)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, test: str) -> Path:
        return self.folder / hashlib.sha256(test.encode()).hexdigest()

    def skip(self, test: str) -> str | None:
        return SKIPPED if self._path(test).exists() else None

    def failed(self, test: str) -> None:
        self._path(test).touch()
