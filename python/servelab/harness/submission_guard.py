"""The grader's import rule (:mod:`.submission_rules`), applied in ``pytest assignments/`` to the
files a student edits, so that a refused import fails ``make check`` with the grader's own
message instead of scoring locally and 0 in the grade.

Locally a student's module shares its process with the tests, which import servelab for their
oracle: a module already in ``sys.modules`` is found again without any import event, so an audit
hook (the grader's child uses one) would see nothing. Instead each edited file (the manifest's
``edit``) is executed with builtins of its own whose ``__import__`` applies the rule: every
``import`` statement of that file, at its top or inside a function called later, passes through
it, and nothing else does (the tests, the library, the given helpers import as they like).

A refusal raises :class:`RefusedImport` (an ``ImportError``, as the grader's, so a student's
``try: ... except ImportError`` fallback behaves the same in both). Raised while the module
itself is imported, the module becomes a stand-in whose every name raises it again: each of the
task's tests then fails with the grader's message ("importing ledger raised ImportError: ..."),
as each does in grading, and the other tasks still run (a collection error would stop them all).

This is a mirror for honest students, not a boundary: ``importlib.import_module`` or
``sys.modules`` reach past it; the grader's child and its OS boundary do not let them.
"""

from __future__ import annotations

import builtins
import importlib.abc
import linecache
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Sequence

import pytest

from servelab.harness.submission_rules import absent_message, is_refused, is_visible, refused_message

TEST_FILE_PREFIXES = ("test_", "conftest")


class RefusedImport(ImportError):
    """An import the grader's child would refuse, or could not find."""


def guarded_import(task_modules: frozenset[str]) -> Any:
    """An ``__import__`` that applies the grader's rule to absolute imports (a relative one
    fails in the grader as here: a submission's modules are top-level there).

    >>> imp = guarded_import(frozenset({"event_queue"}))
    >>> imp("math").__name__, imp("numpy").__name__
    ('math', 'numpy')
    >>> imp("servelab.blocks", None, None, ("BlockAllocator",))
    Traceback (most recent call last):
    ...
    servelab.harness.submission_guard.RefusedImport: the autograder does not let submissions import servelab.blocks
    """
    real = builtins.__import__

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - the builtin's signature
        if level == 0 and is_refused(name):
            raise RefusedImport(refused_message(name), name=name)
        if level == 0 and not is_visible(name, task_modules):
            raise RefusedImport(absent_message(name), name=name)
        return real(name, globals, locals, fromlist, level)
    return __import__


def guarded_builtins(task_modules: frozenset[str]) -> dict[str, Any]:
    table = dict(builtins.__dict__)
    table["__import__"] = guarded_import(task_modules)
    return table


def refusal_in(exc: BaseException | None) -> RefusedImport | None:
    """The :class:`RefusedImport` behind ``exc``: itself, its cause or context, or a member of
    an exception group (Hypothesis reports several failures as one)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, RefusedImport):
            return e
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
    return None


def _where_frame(path: str, lineno: int) -> str:
    """``ledger.py, line 5: from servelab import hw_model``."""
    line = linecache.getline(path, lineno).strip()
    return f"{Path(path).name}, line {lineno}" + (f": {line}" if line else "")


def _where(exc: BaseException, path: str) -> str:
    """The innermost line of ``path`` in ``exc``'s traceback (the import that was refused)."""
    tb, found = exc.__traceback__, ""
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            found = _where_frame(path, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _stand_in(module: ModuleType, exc: RefusedImport) -> None:
    """``module`` emptied: each of its names raises the refusal that stopped its import."""
    name = module.__name__
    where = _where(exc, getattr(module, "__file__", "") or "")
    text = f"importing {name} raised ImportError: {exc}" + (f" ({where})" if where else "")
    for key in [k for k in vars(module) if not k.startswith("__")]:
        delattr(module, key)

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):  # pytest and Hypothesis look for dunders on every module
            raise AttributeError(attr)
        raise RefusedImport(text, name=exc.name)
    module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _GuardedLoader(importlib.abc.Loader):
    """Executes a student's module with the guarded builtins; everything else is its own
    loader's (the source for tracebacks, the bytecode cache)."""

    def __init__(self, inner: Any, task_modules: frozenset[str]) -> None:
        self._inner = inner
        self._task_modules = task_modules

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__["__builtins__"] = guarded_builtins(self._task_modules)
        try:
            self._inner.exec_module(module)
        except RefusedImport as exc:
            _stand_in(module, exc)


class SubmissionFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: a module whose file is one a student edits gets the guarded
    loader; every other module is left to the finders after it."""

    def __init__(self, files: dict[Path, frozenset[str]]) -> None:
        self._files = files  # resolved edited file -> the modules its grading sandbox holds
        self._names = {p.stem for p in files}

    def line_of(self, exc: BaseException) -> str:
        """Where in a student's file ``exc`` was raised: its innermost frame there."""
        files = {str(p) for p in self._files}
        tb, found = exc.__traceback__, ""
        while tb is not None:
            if tb.tb_frame.f_code.co_filename in files:
                found = _where_frame(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
            tb = tb.tb_next
        return found

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in self._names:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        origin = Path(spec.origin).resolve() if spec.origin else None
        if origin in self._files and spec.loader is not None:
            spec.loader = _GuardedLoader(spec.loader, self._files[origin])
        return spec


def sandbox_modules(assignments: Path, folder: Path) -> frozenset[str]:
    """What the grader's child of a task with files in ``folder`` can import besides the
    standard library and numpy: the folder's modules (tests aside) and ``given/``'s."""
    local = {p.stem for p in (assignments / folder).glob("*.py") if not p.name.startswith(TEST_FILE_PREFIXES)}
    return frozenset(local | {p.stem for p in (assignments / "given").glob("*.py")})


def finder_for(assignments: Path, edits: Iterator[str]) -> SubmissionFinder:
    """The finder for the edited files ``edits`` (paths relative to ``assignments``)."""
    files = {(assignments / rel).resolve(): sandbox_modules(assignments, Path(rel).parent) for rel in edits}
    return SubmissionFinder(files)


class SubmissionGuard:
    """The pytest plugin: the finder on ``sys.meta_path`` for the session, and each report of a
    refused import marked, for the points table (``report.servelab_refused``)."""

    def __init__(self, finder: SubmissionFinder) -> None:
        self.finder = finder
        sys.meta_path.insert(0, finder)

    def pytest_unconfigure(self) -> None:
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        report = yield
        refused = refusal_in(call.excinfo.value) if call.excinfo is not None and report.failed else None
        if refused is not None:
            # one line, as a task not started gets: the grader's words and the student's line
            # (the traceback would run through this module's stand-in, not their code)
            where = self.finder.line_of(refused)
            report.servelab_refused = str(refused) + (f" ({where})" if where and where not in str(refused) else "")
            report.longrepr = f"ImportError: {report.servelab_refused}"
        return report
