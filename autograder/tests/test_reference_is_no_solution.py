"""The readable twins ship to students (``servelab.reference``, in the release and the wheel): so
no graded task may be passable by calling them.

The sandbox refuses servelab imports already; this checks that a reference is not a solution in
disguise. Each task is graded by the real judge on a submission whose edit modules answer every
name from ``servelab.reference`` (the first reference module that has it), with the boundary's
import refusal switched off: the task must lose a test. The control: the same delegating module
pointed at the task's own reference solution earns every test, so a reference that did solve a
task would be caught (planting a copy of ``assignments/a1_ledger/ledger.py`` into
``servelab/reference/`` makes the main test fail for a1).

Cheap on purpose: a task stops at its first failing test (it cannot be passed any more).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autograder.grading import judge
from autograder.grading.grade import ROOT, manifest_of
from autograder.sandbox.remote import Limits

LIMITS = Limits(wall_s=120.0, cpu_s=120)

# an edit module that forwards every name to the modules it lists (the first one having it)
DELEGATE = '''"""Answers every call from {what}."""
import importlib
import pkgutil
import sys

def _modules():
    out = []
    for target in {targets!r}:
        if target.endswith(".py"):  # a file (the control: the task's own reference solution)
            spec = importlib.util.spec_from_file_location("_delegate_" + str(len(out)), target)
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, target.rsplit("/", 1)[0])
            spec.loader.exec_module(module)
            out.append(module)
        else:  # a package: each of its modules
            package = importlib.import_module(target)
            out += [importlib.import_module(target + "." + m.name) for m in pkgutil.iter_modules(package.__path__)]
    return out

_MODULES = _modules()

def __getattr__(name):
    for module in _MODULES:
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(name)
'''


def delegating_submission(task, into: Path, targets: list[str], what: str) -> dict[str, Path]:
    files = {}
    for rel in task.edit:
        path = into / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(DELEGATE.format(targets=targets, what=what), encoding="utf-8")
        files[rel] = path
    return files


def first_failure(task, files: dict[str, Path], work: Path) -> tuple[int, str | None]:
    """Grades ``task``'s tests in order, each by the real judge with no boundary and no import
    refusal; returns the points earned before the first failing test and its message (None:
    every test passed)."""
    earned = 0
    for n, (test, points) in enumerate(task.tests.items()):
        one = dataclasses.replace(task, tests={test: points})
        outcome = judge.run_task(ROOT, one, files, work / str(n), LIMITS, forbidden=[])[test]
        if not outcome.passed:
            return earned, f"{test}: {outcome.message[:300]}"
        earned += points
    return earned, None


@pytest.fixture
def no_boundary(monkeypatch):
    """The child as on a student's machine: servelab importable (no import refusal, no OS
    boundary, nothing forbidden). Only ever for the trusted delegating modules above."""
    monkeypatch.setenv("SERVELAB_SANDBOX", "none")
    monkeypatch.setattr(judge, "BLOCKED_MODULES", ())


@pytest.mark.parametrize("task", manifest_of(ROOT).tasks, ids=lambda t: t.id)
def test_calling_the_references_passes_no_task(task, tmp_path, no_boundary):
    files = delegating_submission(task, tmp_path / "sub", ["servelab.reference"], "servelab.reference")
    earned, failed = first_failure(task, files, tmp_path / "work")
    assert failed is not None, f"{task.id}: servelab.reference passes every test ({earned} points): it is a solution"


def test_the_delegation_passes_a_task_when_its_target_is_the_solution(tmp_path, no_boundary):
    task = next(t for t in manifest_of(ROOT).tasks if t.id == "a1_ledger")
    targets = [str(ROOT / "assignments" / rel) for rel in task.edit]
    files = delegating_submission(task, tmp_path / "sub", targets, "the reference solution")
    assert first_failure(task, files, tmp_path / "work") == (task.points, None)
