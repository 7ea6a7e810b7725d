"""A pytest plugin that turns a run of ``assignments/`` into a per-task points table.

A test earns its manifest points only when it ran and passed in every phase (a parametrised
test only when every case passed). Skipped, failed, erroring, deselected or uncollected tests
earn nothing. Each task gets a status: ``full marks``, ``failing``, ``some tests missing``,
``not started`` (every failure is a stub's ``NotImplementedError``: :mod:`.fail_fast`), ``import
refused`` (a test met an import the grader refuses: :mod:`.submission_guard`), ``not
selected`` (``-m``/``-k`` deselected all its tests: it counts nothing), ``not collected``, or
``not run`` (collected, but the run stopped first: pytest stops at a collection error).

``-m task_a2`` (what ``make check TASK=a2`` passes) selects the one task whose id starts so
(:func:`resolve_tasks`); a ``task_`` name that fits none, or several, stops the run listing the
tasks. The run ends with a one-line-per-failure summary (a task not started is one line; a long
message wraps, its end, what was expected and what came out, kept), then the
table, as the last thing printed: after pytest's own tally, so that a student never scrolls up
for it. ``assignments/conftest.py`` registers the plugin for students; the autograder's own
self-check runs it in a release with ``--points-json``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from servelab.harness.manifest import Manifest, Task
from servelab.harness.failure_line import one_line, shorten, summary_of

# the kinds of a summary line (GradingPlugin.failure_lines)
NOT_STARTED, REFUSED, FAILING = "not started", "refused", "failing"


@dataclass
class TaskScore:
    task: Task
    collected: set[str] = field(default_factory=set)  # manifest test ids seen at collection
    failed: set[str] = field(default_factory=set)  # any case failed, errored or was skipped
    passed_cases: dict[str, int] = field(default_factory=dict)
    case_count: dict[str, int] = field(default_factory=dict)
    deselected: set[str] = field(default_factory=set)  # manifest test ids that -m / -k left out
    failures: dict[str, str] = field(default_factory=dict)  # test id -> its one-line message
    not_started: dict[str, str] = field(default_factory=dict)  # test id -> the stub that raised
    refused: dict[str, str] = field(default_factory=dict)  # test id -> the grader's refusal it met
    ran: bool = False  # any of its tests reported (a collection error elsewhere stops the whole run)

    def earned(self, test: str) -> bool:
        n = self.case_count.get(test, 0)
        return n > 0 and test not in self.failed and self.passed_cases.get(test, 0) == n

    @property
    def points(self) -> int:
        return sum(p for t, p in self.task.tests.items() if self.earned(t))

    @property
    def status(self) -> str:
        if not self.collected:
            return "not selected" if self.deselected else "not collected"
        if self.points == self.task.points:
            return "full marks"
        if not self.ran:
            return "not run"
        if self.points == 0 and self.failures and set(self.failures) <= set(self.not_started):
            return "not started"
        if self.refused:  # the grader refuses the same: these tests score 0 there too
            return "import refused"
        missing = set(self.task.tests) - self.collected - self.deselected
        return "some tests missing" if missing else "failing"


class GradingPlugin:
    """Collects outcomes per manifest test and prints the table at the end of the run."""

    def __init__(self, manifest_path: Path) -> None:
        self.root = manifest_path.parent.resolve()
        self.manifest = Manifest.load(manifest_path)
        self.scores = {t.id: TaskScore(t) for t in self.manifest.tasks}
        self._task_of_node: dict[str, tuple[str, str]] = {}
        self._other_failures: dict[str, str] = {}  # failing tests the manifest does not list

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
        if getattr(config.option, "markexpr", ""):
            config.option.markexpr = resolve_tasks(config.option.markexpr, [t.id for t in self.manifest.tasks])

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

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        for item in items:
            if item.nodeid in self._task_of_node:
                task_id, base = self._task_of_node[item.nodeid]
                self.scores[task_id].deselected.add(base)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # the summary below lists every failure in one line: pytest's own FAILED lines would
        # repeat it (unless the command line asks for them with -r)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        asked = any(a.startswith(("-r", "--report-chars")) for a in session.config.invocation_params.args)
        if reporter is not None and not asked:
            reporter.reportchars = reporter.reportchars.replace("f", "")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # after -m / -k deselection: only what will run counts as collected
        for item in session.items:
            if item.nodeid in self._task_of_node:
                task_id, base = self._task_of_node[item.nodeid]
                score = self.scores[task_id]
                score.collected.add(base)
                score.case_count[base] = score.case_count.get(base, 0) + 1

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if report.failed and call.excinfo is not None:  # from the exception, not its printout
            report.servelab_summary = summary_of(call.excinfo.value, report.nodeid)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self._task_of_node:
            if report.failed:
                self._other_failures.setdefault(report.nodeid, one_line(report))
            return
        task_id, base = self._task_of_node[report.nodeid]
        score = self.scores[task_id]
        score.ran = True
        if report.failed or report.skipped:
            score.failed.add(base)
        elif report.when == "call" and report.passed:
            score.passed_cases[base] = score.passed_cases.get(base, 0) + 1
        if report.failed:
            score.failures.setdefault(base, one_line(report))
            refused = getattr(report, "servelab_refused", None)
            if refused:
                score.refused.setdefault(base, refused)
            stub = getattr(report, "servelab_not_started", None)
            if stub and base not in score.not_started and score.failures[base].startswith("not started"):
                score.not_started[base] = stub
            elif not stub:
                score.not_started.pop(base, None)  # another case or phase failed otherwise

    def summary(self) -> dict:
        tasks = [{"id": s.task.id, "title": s.task.title, "lecture": s.task.lecture,
                  "points": s.points, "max_points": s.task.points, "status": s.status}
                 for s in self.scores.values()]
        selected = [t for t in tasks if t["status"] != "not selected"]
        return {"points": sum(t["points"] for t in tasks), "max_points": self.manifest.total_points,
                "selected_max_points": sum(t["max_points"] for t in selected), "tasks": tasks}

    def failure_lines(self) -> list[tuple[str, str]]:
        """(kind, line) per failure: one line per task not started, one per task whose tests all
        met the same refused import, else one per failing test; tests outside the manifest
        last. The kinds are :data:`NOT_STARTED`, :data:`REFUSED` and :data:`FAILING`."""
        lines = []
        for score in self.scores.values():
            if score.status == "not started":  # one line: where the first test met a stub
                func, _, where = next(iter(score.not_started.values())).partition(" in ")
                lines.append((NOT_STARTED, f"{score.task.id}: not started ({func} in {Path(where).name})"))
                continue
            refusals = set(score.refused.values())
            if len(refusals) == 1 and set(score.failures) <= set(score.refused):
                n = len(score.failures)
                lines.append((REFUSED, f"{score.task.id}: {n} test{'s' * (n != 1)} fail here as in grading: "
                                       f"{score.failures[next(iter(score.refused))]}"))
                continue
            for test, message in score.failures.items():
                kind = REFUSED if test in score.refused else NOT_STARTED if test in score.not_started else FAILING
                lines.append((kind, f"{score.task.id}: {test.split('::', 1)[-1]}: {message}"))
        lines += [(FAILING, f"{nodeid}: {message}") for nodeid, message in self._other_failures.items()]
        return lines

    def headline(self, lines: list[tuple[str, str]]) -> str:
        """The line above the failures, its counts those of the lines below it."""
        counts = {kind: sum(k == kind for k, _ in lines) for kind in (NOT_STARTED, REFUSED, FAILING)}
        parts = [f"{counts[NOT_STARTED]} not started (a stub raises NotImplementedError)"]
        if counts[REFUSED]:
            parts.append(f"{counts[REFUSED]} refused (an import the grader refuses: 0 points there too)")
        parts.append(f"{counts[FAILING]} failing")
        return "servelab: " + ", ".join(parts) + (" (details above):" if counts[FAILING] else ":")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        out = session.config.getoption("servelab_points_json", None) or os.environ.get("SERVELAB_POINTS_JSON")
        if out:
            tmp = Path(out).with_suffix(".tmp")
            tmp.write_text(json.dumps(self.summary(), indent=2, sort_keys=True))
            tmp.replace(out)  # never a half-written file

    # unconfigure: after pytest's "N failed in Ts" line, so that the table is the last thing printed
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or not any(s.collected or s.deselected for s in self.scores.values()):
            return
        self.print_table(reporter._tw)

    def print_table(self, tw) -> None:
        from rich import box
        from rich.console import Console
        from rich.padding import Padding
        from rich.table import Table

        width = max(80, min(tw.fullwidth, 120))
        console = Console(file=tw._file, force_terminal=False, width=width, highlight=False)
        failures = self.failure_lines()
        if failures:
            console.print(self.headline(failures), markup=False)
            for _, line in failures:  # wrapped, not cut: "expected ..., got ..." comes last
                console.print(Padding(shorten(line, 4 * (width - 4)), (0, 0, 0, 4), expand=False), markup=False)
        summary = self.summary()
        table = Table(title="servelab assignments: points by task", box=box.SIMPLE_HEAD)
        wide = width >= 110  # the lecture sections only when they fit beside the rest
        for col in ("task", "title", *(["lecture"] if wide else []), "points", "status"):
            table.add_column(col, justify="right" if col == "points" else "left")
        colours = {"full marks": "green", "not selected": "dim", "not started": "yellow"}
        for t in summary["tasks"]:
            colour = colours.get(t["status"], "red")
            points = "-" if t["status"] == "not selected" else f"{t['points']} / {t['max_points']}"
            table.add_row(t["id"], t["title"], *([t["lecture"]] if wide else []), points,
                          f"[{colour}]{t['status']}[/{colour}]")
        total = f"[bold]{summary['points']} / {summary['selected_max_points']}"
        selected = sum(t["status"] != "not selected" for t in summary["tasks"])
        note = "" if selected == len(summary["tasks"]) else f"of {selected} selected task(s)"
        table.add_row("[bold]total", note, *([""] if wide else []), total, "")
        console.print(table)


def resolve_tasks(markexpr: str, task_ids: list[str]) -> str:
    """``-m`` with each ``task_X`` naming a task: an unambiguous prefix (``task_a2``) becomes
    the task's marker; a name that is no task is a usage error listing the tasks (``make check
    TASK=...`` passes ``-m task_<TASK>``).

    >>> ids = ["a1_ledger", "a2_roofline", "a10_prefix_caching"]
    >>> resolve_tasks("task_a2", ids), resolve_tasks("task_a1 or not task_a10", ids)
    ('task_a2_roofline', 'task_a1_ledger or not task_a10_prefix_caching')
    >>> resolve_tasks("task_b7", ids)
    Traceback (most recent call last):
    ...
    pytest.UsageError: TASK=b7 is no task; the tasks are: a1_ledger, a2_roofline, a10_prefix_caching (a prefix such as a2 is enough when only one task starts with it)
    """
    def one(match: re.Match) -> str:
        name = match.group(1)
        if name in task_ids:
            return match.group(0)
        # a1 is a1_ledger, not a10_...: a prefix counts up to an underscore, or as a whole id
        found = [t for t in task_ids if t.startswith(name + "_")] or [t for t in task_ids if t.startswith(name)]
        if len(found) == 1:
            return "task_" + found[0]
        what = f"is the start of {len(found)} tasks" if found else "is no task"
        raise pytest.UsageError(f"TASK={name} {what}; the tasks are: {', '.join(task_ids)} "
                                "(a prefix such as a2 is enough when only one task starts with it)")
    return re.sub(r"\btask_(\w+)", one, markexpr)


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--points-json", dest="servelab_points_json", default=None,
                     help="also write the points table as JSON to this path")
