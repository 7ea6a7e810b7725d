"""``assignments/manifest.toml``: tasks, their tests, points and visibility (one source of truth).

>>> m = Manifest.from_toml('''
... [[task]]
... id = "a1_ledger"
... title = "Model ledger"
... lecture = "§2.4"
... edit = ["a1_ledger/ledger.py"]
... tests = { "a1_ledger/test_a1_ledger.py::test_params" = 2, "a1_ledger/test_a1_ledger.py::test_kv" = 3 }
... ''')
>>> m.tasks[0].points, m.total_points
(5, 5)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

# tomllib joined the standard library in Python 3.11; on 3.10 its model, tomli, stands in (a
# dependency there, see pyproject.toml). Other modules take it from here.
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by `make test-python310`
    import tomli as tomllib

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


@dataclass(frozen=True)
class Task:
    id: str
    title: str
    lecture: str
    edit: tuple[str, ...]  # files a student edits, relative to assignments/
    tests: dict[str, int]  # test node id (relative to assignments/) -> points
    visibility: str = "visible"

    @property
    def points(self) -> int:
        return sum(self.tests.values())

    @property
    def marker(self) -> str:
        """``pytest assignments/ -m task_<id>`` runs just this task."""
        return f"task_{self.id}"


@dataclass(frozen=True)
class Manifest:
    tasks: tuple[Task, ...]

    @property
    def total_points(self) -> int:
        return sum(t.points for t in self.tasks)

    def task_of(self, nodeid: str) -> Task | None:
        """The task a test belongs to, by its node id relative to ``assignments/``."""
        base = nodeid.split("[", 1)[0]  # parametrised ids share their function's points
        for task in self.tasks:
            if base in task.tests:
                return task
        return None

    @classmethod
    def from_toml(cls, text: str, source: str = "manifest") -> Manifest:
        data = tomllib.loads(text)
        tasks = []
        seen_ids: set[str] = set()
        seen_tests: set[str] = set()
        for i, raw in enumerate(data.get("task", [])):
            where = f"{source}: task[{i}]"
            for key in ("id", "title", "lecture", "edit", "tests"):
                if key not in raw:
                    raise ValueError(f"{where} lacks the key {key!r}")
            task = Task(id=raw["id"], title=raw["title"], lecture=raw["lecture"],
                        edit=tuple(raw["edit"]), tests=dict(raw["tests"]),
                        visibility=raw.get("visibility", "visible"))
            if not task.id.isidentifier():
                raise ValueError(f"{where}: id must be an identifier, got {task.id!r}")
            if task.id in seen_ids:
                raise ValueError(f"{where}: id {task.id!r} appears twice")
            if task.visibility not in VISIBILITIES:
                raise ValueError(f"{where}: visibility must be one of {VISIBILITIES}, got {task.visibility!r}")
            for test, points in task.tests.items():
                if not isinstance(points, int) or isinstance(points, bool) or points <= 0:
                    raise ValueError(f"{where}: points of {test!r} must be a positive integer, got {points!r}")
                if test in seen_tests:
                    raise ValueError(f"{where}: test {test!r} is listed twice")
                seen_tests.add(test)
            seen_ids.add(task.id)
            tasks.append(task)
        if not tasks:
            raise ValueError(f"{source} lists no [[task]]")
        return cls(tuple(tasks))

    @classmethod
    def load(cls, path: Path) -> Manifest:
        return cls.from_toml(path.read_text(encoding="utf-8"), str(path))
