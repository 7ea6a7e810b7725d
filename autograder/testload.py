"""Running pristine test functions without pytest's runner: import a test file with proxies
standing in for the student's modules (and pytest's assertion rewriting, so that a bare
``assert a == b`` explains itself), find a test (``test_x`` or ``TestClass::test_x``), expand its
``@pytest.mark.parametrize`` marks, and call each case (``tmp_path`` is the one fixture given).
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import itertools
import sys
import types
from pathlib import Path

from _pytest.assertion.rewrite import rewrite_asserts


def import_test_module(path: Path, proxies: dict[str, types.ModuleType], unique: str):
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
        module = importlib.util.module_from_spec(spec)
        source = path.read_bytes()
        tree = ast.parse(source, filename=str(path))
        # pytest's assertion rewriting, so that a bare ``assert a == b`` explains itself here too
        rewrite_asserts(tree, source, str(path))
        exec(compile(tree, str(path), "exec", dont_inherit=True), module.__dict__)
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
