"""A pytest plugin that turns a run of ``assignments/`` into a per-task points table.

A test earns its manifest points only when it ran and passed in every phase (a parametrised
test only when every case passed). Skipped, failed, erroring, deselected or uncollected tests
earn nothing, and a task with no collected test says so. ``assignments/conftest.py`` registers
the plugin for students; the autograder loads it with ``-p`` (it runs with ``--noconftest``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from servelab.grading.manifest import Manifest, Task


@dataclass
class TaskScore:
    task: Task
    collected: set[str] = field(default_factory=set)  # manifest test ids seen at collection
    failed: set[str] = field(default_factory=set)  # any case failed, errored or was skipped
    passed_cases: dict[str, int] = field(default_factory=dict)
    case_count: dict[str, int] = field(default_factory=dict)

    def earned(self, test: str) -> bool:
        n = self.case_count.get(test, 0)
        return n > 0 and test not in self.failed and self.passed_cases.get(test, 0) == n

    @property
    def points(self) -> int:
        return sum(p for t, p in self.task.tests.items() if self.earned(t))

    @property
    def status(self) -> str:
        if not self.collected:
            return "not collected"
        if self.points == self.task.points:
            return "full marks"
        missing = set(self.task.tests) - self.collected
        return "some tests missing" if missing else "failing"


class GradingPlugin:
    """Collects outcomes per manifest test and prints the table at the end of the run."""

    def __init__(self, manifest_path: Path) -> None:
        self.root = manifest_path.parent.resolve()
        self.manifest = Manifest.load(manifest_path)
        self.scores = {t.id: TaskScore(t) for t in self.manifest.tasks}
        self._task_of_node: dict[str, tuple[str, str]] = {}

    def _key(self, item: pytest.Item) -> str:
        path = Path(str(item.path)).resolve()
        try:
            rel = path.relative_to(self.root).as_posix()
        except ValueError:
            return item.nodeid
        return rel + "::" + item.nodeid.split("::", 1)[1] if "::" in item.nodeid else rel

    def pytest_configure(self, config: pytest.Config) -> None:
        for task in self.manifest.tasks:
            config.addinivalue_line("markers", f"{task.marker}: tests of task {task.id} ({task.title})")

    # tryfirst: the task markers must be on the items before `-m` deselects by them
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        for item in items:
            key = self._key(item)
            task = self.manifest.task_of(key)
            if task is None:
                continue
            item.add_marker(getattr(pytest.mark, task.marker))
            base = key.split("[", 1)[0]
            self._task_of_node[item.nodeid] = (task.id, base)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # after -m / -k deselection: only what will run counts as collected
        for item in session.items:
            if item.nodeid in self._task_of_node:
                task_id, base = self._task_of_node[item.nodeid]
                score = self.scores[task_id]
                score.collected.add(base)
                score.case_count[base] = score.case_count.get(base, 0) + 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self._task_of_node:
            return
        task_id, base = self._task_of_node[report.nodeid]
        score = self.scores[task_id]
        if report.failed or report.skipped:
            score.failed.add(base)
        elif report.when == "call" and report.passed:
            score.passed_cases[base] = score.passed_cases.get(base, 0) + 1

    def summary(self) -> dict:
        tasks = [{"id": s.task.id, "title": s.task.title, "lecture": s.task.lecture,
                  "points": s.points, "max_points": s.task.points, "status": s.status}
                 for s in self.scores.values()]
        return {"points": sum(t["points"] for t in tasks),
                "max_points": self.manifest.total_points, "tasks": tasks}

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        from rich.console import Console
        from rich.table import Table

        summary = self.summary()
        table = Table(title="servelab assignments: points by task")
        for col in ("task", "lecture", "points", "status"):
            table.add_column(col, justify="right" if col == "points" else "left")
        for t in summary["tasks"]:
            colour = "green" if t["status"] == "full marks" else "red"
            table.add_row(f"{t['id']}  {t['title']}", t["lecture"], f"{t['points']} / {t['max_points']}",
                          f"[{colour}]{t['status']}[/{colour}]")
        table.add_row("[bold]total", "", f"[bold]{summary['points']} / {summary['max_points']}", "")
        Console(file=terminalreporter._tw._file, force_terminal=False, width=110).print(table)
        out = config.getoption("servelab_points_json", None) or os.environ.get("SERVELAB_POINTS_JSON")
        if out:
            tmp = Path(out).with_suffix(".tmp")
            tmp.write_text(json.dumps(summary, indent=2, sort_keys=True))
            tmp.replace(out)  # never a half-written file


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--points-json", dest="servelab_points_json", default=None,
                     help="also write the points table as JSON to this path")
