"""Who submitted, and whether the due date has passed: read from Gradescope's
``/autograder/submission_metadata.json`` (or given on the command line under ``grade-all``).

Two decisions hang on it:

* the generated inputs are seeded from the student's **identity** (the grading secret, the
  identity and the test id: :func:`autograder.grading.grading_secret.seed_for`), so that a
  resubmission, a whitespace change included, sees the same inputs and shopping for easier
  ones gains nothing. On Gradescope the identity is the sorted user ids of the submission (a
  group submits once for all its members); under ``grade-all`` it is the submission folder's
  (or zip's) name, which names the student there.
* before the due date, results.json's ``score`` counts only the tests a student can see
  (:func:`autograder.grading.results.count_visible`); a grading after it counts every test.

>>> meta = parse({"users": [{"id": 7}, {"id": "3"}],
...               "assignment": {"due_date": "2026-03-01T23:59:00-08:00", "late_due_date": None}})
>>> meta.identity
'gradescope-users:3,7'
>>> from datetime import datetime, timezone
>>> meta.past_due(datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc))
True
>>> meta.past_due(datetime(2026, 3, 2, 7, 58, tzinfo=timezone.utc))
False
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

GRADESCOPE = Path("/autograder/submission_metadata.json")
MAX_BYTES = 1 << 20  # the metadata lists previous submissions; a bigger file is not Gradescope's


@dataclass(frozen=True)
class Metadata:
    """``identity``: who submitted (None: unknown); ``due``: the last moment a submission is
    accepted (the late due date when there is one; None: unknown)."""

    identity: str | None = None
    due: datetime | None = None

    def past_due(self, now: datetime | None = None) -> bool:
        """Whether ``now`` (default: the current time) lies after the due date; False when the
        due date is unknown (hidden points stay out of the total: the safe side)."""
        if self.due is None:
            return False
        return (now or datetime.now(timezone.utc)) > self.due


def _when(text) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def parse(data) -> Metadata:
    """The identity and due date in Gradescope's metadata (a dict); missing or malformed
    fields give None, never an error (the grading must go on)."""
    if not isinstance(data, dict):
        return Metadata()
    users = data.get("users")
    ids = sorted(str(u["id"]) for u in users if isinstance(u, dict) and isinstance(u.get("id"), (int, str))) \
        if isinstance(users, list) else []
    found = data.get("assignment")
    assignment: dict = found if isinstance(found, dict) else {}
    due = _when(assignment.get("late_due_date")) or _when(assignment.get("due_date"))
    return Metadata(identity=f"gradescope-users:{','.join(ids)}" if ids else None, due=due)


def read(path: Path) -> Metadata:
    """:func:`parse` of the JSON file at ``path``; an empty :class:`Metadata` when it is missing,
    too big or not JSON."""
    try:
        raw = Path(path).read_bytes()[:MAX_BYTES + 1]
        return parse(json.loads(raw)) if len(raw) <= MAX_BYTES else Metadata()
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return Metadata()


def folder_identity(submission: Path) -> str:
    """The identity of a submission graded from a folder or zip (``grade-all``): its name, as
    ``grade-all`` names the student (``alice.zip`` and ``alice/`` are the same student)."""
    path = Path(submission)
    return f"submission:{path.stem if path.suffix == '.zip' else path.name}"
