"""Runs one task's pristine tests *in the grader's process*, with the student's modules replaced
by :class:`~autograder.sandbox.remote.RemoteModule` proxies: the tests choose the inputs (Hypothesis,
derandomized), the child only computes the student's outputs, and the oracle, the comparison
and the pass/fail decision stay here.

A test earns its manifest points when every case of it passes (a parametrised test: every
parameter set). Tests may use ``@given``, ``@pytest.mark.parametrize``, ``tmp_path`` and test
classes (:mod:`autograder.grading.testload`); a test asking for other pytest fixtures fails with a
message saying so (the self-check's "reference scores full marks" catches that early).
"""

from __future__ import annotations

import ast
import builtins
import itertools
import shutil
import time
from typing import Protocol, cast
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, settings

from autograder.sandbox.remote import Child, Limits, RemoteModule, SubmissionFailed
from autograder.grading.testload import call_test, cases, find_test, import_test_module
from servelab.harness.hypothesis_profiles import PROFILES, SettingsKwargs
from servelab.harness import submission_rules
from servelab.harness.manifest import Task

# the "grading" profile (derandomized, fixed example count), nothing written to disk, and no
# "explain" or "shrink" phase: each shrinking step is another round trip to the sandbox (a
# failing state-machine test spent a minute there), and pass/fail does not need it. The
# message shows the first failing example found; a local `pytest` run shrinks it.
AUTOGRADER_PROFILE: SettingsKwargs = {**PROFILES["grading"], "database": None,
                                      "phases": [Phase.explicit, Phase.generate],
                                      "report_multiple_bugs": False, "verbosity": Verbosity.quiet,
                                      "suppress_health_check": list(HealthCheck)}
settings.register_profile("autograder", **AUTOGRADER_PROFILE)
MAX_MESSAGE = 3000
GROUP = getattr(builtins, "BaseExceptionGroup", ())  # Python 3.11+
TEST_FILE_PREFIXES = ("test_", "conftest")
GIVEN = "given"  # assignments/given/: helpers several tasks use, each kept once (a5's and a6's event queue and step price)
# modules the child refuses to import while it runs student code: the Rust oracle and the
# pure-Python references would answer for the student. The rule is stated once, in the students'
# harness, whose `pytest assignments/` applies it to their files too (a refusal shows in `make
# check`, not first in the grade); a task that needs part of servelab in the child would have to
# allow it there, and then test something it cannot answer.
BLOCKED_MODULES = submission_rules.REFUSED_MODULES


@dataclass(frozen=True)
class Outcome:
    passed: bool
    message: str


class Shortcut(Protocol):
    """Tests a grading may leave out once its task has failed one (the self-check's mutants: a
    mutant only has to lose points, and a test another mutant already fails needs no second
    proof; autograder/selfcheck/mutant_kills.py). Never used for a student's grade."""

    def skip(self, test: str) -> str | None:
        """The message to record instead of running ``test`` (it scores 0), or None: run it."""

    def failed(self, test: str) -> None:
        """``test`` has just failed."""


def imported_names(path: Path) -> set[str]:
    """Top-level names of the modules ``path`` imports (none when it does not parse: the import
    of a broken file fails in the child, with the student's own error)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def build_sandbox(root: Path, task: Task, files: dict[str, Path], sandbox: Path) -> list[tuple[str, Path]]:
    """The child's folder: the task folders' non-test helpers from the pristine copy, the
    helpers of ``assignments/given/`` (one copy each in the repository, shared by tasks) that
    these files import, then the student's edited files. Returns (module name, path) of each
    edited file."""
    assignments = root / "assignments"
    given = {p.stem: p for p in sorted((assignments / GIVEN).glob("*.py"))}
    for folder in sorted({Path(rel).parent for rel in task.edit}):
        dst = sandbox / folder
        dst.mkdir(parents=True, exist_ok=True)
        sources = [files[rel] for rel in task.edit if Path(rel).parent == folder]
        for helper in sorted((assignments / folder).glob("*.py")):
            if not helper.name.startswith(TEST_FILE_PREFIXES) and f"{folder.as_posix()}/{helper.name}" not in task.edit:
                shutil.copyfile(helper, dst / helper.name)
                sources.append(helper)
        wanted = set().union(*map(imported_names, sources)) if sources else set()
        for name in sorted(wanted & given.keys() - {p.stem for p in dst.glob("*.py")}):
            shutil.copyfile(given[name], dst / f"{name}.py")
    modules = []
    for rel in task.edit:
        dst = sandbox / rel
        shutil.copyfile(files[rel], dst)
        modules.append((Path(rel).stem, dst))
    return modules


def _message(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, (SubmissionFailed, AssertionError)) else str(exc)
    for note in getattr(exc, "__notes__", ()):
        text += f"\n{note}"
    if isinstance(exc, GROUP) and exc.exceptions:
        text += "\n" + _message(exc.exceptions[0])
    return text


def not_run() -> str:
    """The message of a test that a task's spent budget kept from running (no number: the budget
    follows this machine's speed and load, and a regrade elsewhere must write the same words)."""
    return ("not run: this task's time budget (for all its tests) ran out before this test "
            "(earlier tests of the task took that long); it scores 0")


def run_task(root: Path, task: Task, files: dict[str, Path] | str, workdir: Path, limits: Limits,
             forbidden: list[Path], budget_s: float | None = None,
             shortcut: Shortcut | None = None) -> dict[str, Outcome]:
    """Outcome of every manifest test of ``task``. ``files`` maps each edited file to the copy
    taken from the submission, or is a message saying why there is none. ``budget_s``: the
    wall-clock seconds the whole task may take (:func:`autograder.grading.grade.task_budget`);
    a child still running when it ends is stopped, and the tests not yet run score 0 with
    :func:`not_run`'s message. ``shortcut``: once a test has failed, the later tests it says to
    skip score 0 with its message, unrun (the self-check's mutants only)."""
    end = None if budget_s is None else time.monotonic() + budget_s
    if isinstance(files, str):
        return {test: Outcome(False, files) for test in task.tests}
    sandbox = workdir / task.id
    sandbox.mkdir(parents=True)
    modules = build_sandbox(root, task, files, sandbox)
    proxies = {name: RemoteModule(name) for name, _ in modules}

    spawned, folders = itertools.count(1), itertools.count(1)

    def new_folder() -> Path:  # tmp_path: numbered, so that messages naming it stay identical
        folder = sandbox / f"tmp_path-{next(folders)}"
        folder.mkdir()
        return folder

    def new_child() -> Child:
        # one child serves the task's tests one after another while it behaves; a test that
        # kills it, hangs it or breaks the protocol costs only itself, since the next test gets
        # a new child (and its own scratch folder: the student's modules stay read-only). Each
        # test has its own wall-clock limit (Child.renew). A sandboxed interpreter takes about
        # 0.1 s to start (1.5 s for a task of 15 tests), so a task pays that once.
        scratch = sandbox / f"scratch-{next(spawned)}"
        return Child(modules, scratch, forbidden, list(BLOCKED_MODULES), limits, time.monotonic() + limits.wall_s,
                     budget_end=end, serves=len(task.tests))

    try:
        child: Child | None = new_child()
    except SubmissionFailed as exc:  # the module does not even import: every test fails alike
        return {test: Outcome(False, _clean(str(exc), sandbox, root)) for test in task.tests}
    fresh = True  # the child has served no test yet: its limit runs from its start, import included

    outcomes: dict[str, Outcome] = {}
    test_modules: dict[str, object] = {}
    settings.load_profile("autograder")
    try:
        for n, test in enumerate(task.tests):
            file_rel, _, func_name = test.partition("::")
            why = shortcut.skip(test) if shortcut is not None and not all(o.passed for o in outcomes.values()) \
                else None
            if why is not None:
                outcomes[test] = Outcome(False, why)
                continue
            if end is not None and time.monotonic() >= end:
                if child is not None:
                    child.close()
                    child = None
                outcomes[test] = Outcome(False, not_run())
                continue
            try:
                if child is None or not child.alive():
                    if child is not None:
                        child.close()
                    child, fresh = new_child(), True
                if not fresh:
                    child.renew(time.monotonic() + limits.wall_s)
                fresh = False
                for proxy in proxies.values():
                    proxy.bind(child)
                if file_rel not in test_modules:
                    test_modules[file_rel] = import_test_module(root / "assignments" / file_rel, proxies,
                                                                f"_autograder_{task.id}_{n}")
                fn = find_test(test_modules[file_rel], func_name, file_rel)
                for kwargs in cases(fn):
                    call_test(fn, kwargs, new_folder)
                outcomes[test] = Outcome(True, "passed")
            except SubmissionFailed as exc:  # the child died, hung or broke the protocol: not kept
                if child is not None:
                    child.close()
                    child = None
                outcomes[test] = Outcome(False, _clean(_message(exc), sandbox, root))
            except Exception as exc:
                outcomes[test] = Outcome(False, _clean(_message(exc), sandbox, root))
            except BaseException as exc:  # pytest.skip/fail inside a test: it did not pass
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                outcomes[test] = Outcome(False, _clean(_message(exc), sandbox, root))
            finally:
                for proxy in proxies.values():
                    proxy.bind(None)
            if shortcut is not None and not outcomes[test].passed:
                shortcut.failed(test)
    finally:
        if child is not None:
            child.close()
    return outcomes


def _clean(text: str, sandbox: Path, root: Path) -> str:
    """Messages name no temporary folder (a regrade must be byte-identical) and stay short."""
    text = text.replace(str(sandbox), "<submission>").replace(str(root), "<course>")
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "\n... (message cut)"
