"""Running pristine test functions without pytest's runner: import a test file with proxies
standing in for the student's modules (and pytest's assertion rewriting, so that a bare
``assert a == b`` explains itself), find a test (``test_x`` or ``TestClass::test_x``), expand its
``@pytest.mark.parametrize`` marks, and call each case (``tmp_path`` is the one fixture given).

Seeds: inside :func:`seeded`, every Hypothesis test (and state machine) of a test file imported
here takes the seed ``seed_of(test_id)`` instead of the one derandomization derives from its
code (:mod:`autograder.grading.grading_secret`: a secret the student cannot know).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import itertools
import sys
import types
from collections.abc import Mapping
from pathlib import Path

from _pytest.assertion.rewrite import rewrite_asserts

_SEED_OF: list = [None]  # the seeding in force (set by :func:`seeded`), a callable test id -> int


@contextlib.contextmanager
def seeded(seed_of):
    """Test files imported in this block seed their Hypothesis tests with ``seed_of(test id)``,
    and Hypothesis draws no constants from the modules this process happened to load (it
    mines every local module in ``sys.modules`` for "interesting" numbers, and caches them in
    an LRU: the inputs would depend on what the process did before, and a regrade in another
    process, or a grade of one task alone, would draw others)."""
    before = _SEED_OF[0]
    _SEED_OF[0] = seed_of
    try:
        with _no_local_constants():
            yield
    finally:
        _SEED_OF[0] = before


@contextlib.contextmanager
def _no_local_constants():
    try:
        import copy

        from hypothesis.internal.cache import LRUCache
        from hypothesis.internal.conjecture import providers

        empty = copy.deepcopy(providers._local_constants)
        for name in ("integers", "floats", "bytes", "strings"):
            getattr(empty, name).clear()
        saved = providers._get_local_constants, providers.CONSTANTS_CACHE
    except (ImportError, AttributeError):  # another Hypothesis: nothing of the kind to turn off
        yield
        return
    providers._get_local_constants, providers.CONSTANTS_CACHE = (lambda: empty), LRUCache(1024)
    try:
        yield
    finally:
        providers._get_local_constants, providers.CONSTANTS_CACHE = saved


def seed_hypothesis(module, file_rel: str, seed_of) -> list[str]:
    """Sets the seed of every ``@given`` test and ``RuleBasedStateMachine`` defined in
    ``module`` (test classes' methods included) to ``seed_of("<file_rel>::<name>")``; returns
    the ids seeded. What the module imported from elsewhere is left alone."""
    from hypothesis.stateful import RuleBasedStateMachine

    done = []

    def own(obj) -> bool:
        return getattr(obj, "__module__", None) == module.__name__

    for name, obj in sorted(vars(module).items()):
        targets = [(name, obj)]
        if isinstance(obj, type) and own(obj) and not issubclass(obj, RuleBasedStateMachine):
            targets = [(f"{name}::{k}", v) for k, v in sorted(vars(obj).items())]
        for test_name, target in targets:
            if isinstance(target, (staticmethod, classmethod)):
                target = target.__func__
            is_machine = isinstance(target, type) and issubclass(target, RuleBasedStateMachine)
            if own(target) and (is_machine or getattr(target, "is_hypothesis_test", False)):
                test_id = f"{file_rel}::{test_name}"
                target._hypothesis_internal_use_seed = seed_of(test_id)
                done.append(test_id)
    return done


def import_test_module(path: Path, proxies: Mapping[str, types.ModuleType], unique: str) -> types.ModuleType:
    """Imports a pristine test file with the proxies standing in for the student's modules; the
    helpers it imports from its own folder are forgotten afterwards (another task may have a
    helper of the same name). Modules shared by every task's tests (``assignments/*.py``, such
    as the Hypothesis strategies) are importable too, as under pytest's rootdir conftest."""
    before = set(sys.modules)
    saved = {name: sys.modules.get(name) for name in proxies}
    sys.modules.update(proxies)
    shared = str(path.parent.parent)
    sys.path.insert(0, shared)
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(unique, path)
        if spec is None:
            raise ImportError(f"{path} is not a loadable module")
        module = importlib.util.module_from_spec(spec)
        source = path.read_bytes()
        tree = ast.parse(source, filename=str(path))
        # pytest's assertion rewriting, so that a bare ``assert a == b`` explains itself here too
        rewrite_asserts(tree, source, str(path))
        exec(compile(tree, str(path), "exec", dont_inherit=True), module.__dict__)
        if _SEED_OF[0] is not None:
            seed_hypothesis(module, f"{path.parent.name}/{path.name}", _SEED_OF[0])
        return module
    finally:
        sys.path.remove(str(path.parent))
        sys.path.remove(shared)
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file and Path(file).resolve().is_relative_to(path.parent.resolve()):
                del sys.modules[name]


def cases(fn) -> list[dict]:
    """Keyword arguments of every case of a test: the product of its parametrize marks."""
    axes = []
    for mark in getattr(fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], list(mark.args[1])
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows = []
        for v in values:
            if hasattr(v, "values") and hasattr(v, "marks"):  # pytest.param(...): always a tuple
                v = v.values[0] if len(names) == 1 else v.values
            rows.append({names[0]: v} if len(names) == 1 else dict(zip(names, v)))
        axes.append(rows)
    return [{k: v for row in combo for k, v in row.items()} for combo in itertools.product(*axes)] or [{}]


def find_test(module, name: str, file_rel: str):
    """``test_x`` or ``TestClass::test_x`` (a fresh instance of the class, as pytest makes)."""
    obj = module
    for part in name.split("::"):
        obj = getattr(obj, part, None)
        if obj is None:
            raise LookupError(f"the grader found no test {name} in {file_rel}")
        if isinstance(obj, type):
            obj = obj()
    return obj


def call_test(fn, kwargs: dict, new_folder) -> None:
    """Calls one case; ``tmp_path`` is the one pytest fixture provided (``new_folder()``)."""
    wanted = set(inspect.signature(fn).parameters) - set(kwargs)
    if "tmp_path" in wanted:
        kwargs = {**kwargs, "tmp_path": new_folder()}
        wanted.discard("tmp_path")
    if wanted:
        raise TypeError(f"the grader cannot provide the pytest fixtures {sorted(wanted)}")
    fn(**kwargs)
