"""Runs one task's pristine tests *in the grader's process*, with the student's modules replaced
by :class:`~autograder.remote.RemoteModule` proxies: the tests choose the inputs (Hypothesis,
derandomized), the child only computes the student's outputs, and the oracle, the comparison
and the pass/fail decision stay here.

A test earns its manifest points when every case of it passes (a parametrised test: every
parameter set). Tests may use ``@given``, ``@pytest.mark.parametrize``, ``tmp_path`` and test classes; a test
asking for other pytest fixtures cannot be graded and fails with a message saying so (the self-check's
"reference scores full marks" catches that before students do).
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import inspect
import itertools
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _pytest.assertion.rewrite import rewrite_asserts
from hypothesis import HealthCheck, Phase, Verbosity, settings

from autograder.remote import Child, Limits, RemoteModule, SubmissionFailed
from servelab.grading.hypothesis_profiles import PROFILES
from servelab.grading.manifest import Task

# the "grading" profile (derandomized, fixed example count), nothing written to disk, and no
# "explain" phase (it costs seconds per failing test and adds nothing a student needs)
settings.register_profile("autograder", **{**PROFILES["grading"], "database": None,
                                           "phases": [Phase.explicit, Phase.generate, Phase.shrink],
                                           "report_multiple_bugs": False, "verbosity": Verbosity.quiet,
                                           "suppress_health_check": list(HealthCheck)})
MAX_MESSAGE = 3000
GROUP = getattr(builtins, "BaseExceptionGroup", ())  # Python 3.11+
TEST_FILE_PREFIXES = ("test_", "conftest")
# modules the child refuses to import while it runs student code: the Rust oracle and the
# pure-Python references would answer for the student (a task that needs part of servelab in
# the child would have to allow it explicitly here, and then test something it cannot answer)
BLOCKED_MODULES = ("servelab", "servelab._core", "servelab.hw_model", "servelab.reference")


@dataclass(frozen=True)
class Outcome:
    passed: bool
    message: str


def build_sandbox(root: Path, task: Task, files: dict[str, Path], sandbox: Path) -> list[tuple[str, Path]]:
    """The child's folder: the task folders' non-test helpers from the pristine copy, then the
    student's edited files. Returns (module name, path) of each edited file."""
    assignments = root / "assignments"
    for folder in sorted({Path(rel).parent for rel in task.edit}):
        dst = sandbox / folder
        dst.mkdir(parents=True, exist_ok=True)
        for helper in sorted((assignments / folder).glob("*.py")):
            if not helper.name.startswith(TEST_FILE_PREFIXES) and f"{folder.as_posix()}/{helper.name}" not in task.edit:
                shutil.copyfile(helper, dst / helper.name)
    modules = []
    for rel in task.edit:
        dst = sandbox / rel
        shutil.copyfile(files[rel], dst)
        modules.append((Path(rel).stem, dst))
    return modules


def _import_test_module(path: Path, proxies: dict[str, RemoteModule], unique: str):
    """Imports a pristine test file with the proxies standing in for the student's modules; the
    helpers it imports from its own folder are forgotten afterwards (another task may have a
    helper of the same name)."""
    before = set(sys.modules)
    saved = {name: sys.modules.get(name) for name in proxies}
    sys.modules.update(proxies)
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
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file and Path(file).resolve().is_relative_to(path.parent.resolve()):
                del sys.modules[name]


def _cases(fn) -> list[dict]:
    """Keyword arguments of every case of a test: the product of its parametrize marks."""
    axes = []
    for mark in getattr(fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], list(mark.args[1])
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows = []
        for v in values:
            v = getattr(v, "values", v)  # pytest.param(...) keeps its values here
            if len(names) == 1:
                v = v[0] if type(v) is tuple and len(v) == 1 else v
                rows.append({names[0]: v})
            else:
                rows.append(dict(zip(names, v)))
        axes.append(rows)
    return [{k: v for row in combo for k, v in row.items()} for combo in itertools.product(*axes)] or [{}]


def _find_test(module, name: str, file_rel: str):
    """``test_x`` or ``TestClass::test_x`` (a fresh instance of the class, as pytest makes)."""
    obj = module
    for part in name.split("::"):
        obj = getattr(obj, part, None)
        if obj is None:
            raise LookupError(f"the grader found no test {name} in {file_rel}")
        if isinstance(obj, type):
            obj = obj()
    return obj


def _call_test(fn, kwargs: dict, sandbox: Path) -> None:
    """Calls one case; ``tmp_path`` is the one pytest fixture provided (a fresh folder)."""
    wanted = set(inspect.signature(fn).parameters) - set(kwargs)
    if "tmp_path" in wanted:
        folder = Path(tempfile.mkdtemp(prefix="tmp_path-", dir=sandbox.parent))
        kwargs = {**kwargs, "tmp_path": folder}
        wanted.discard("tmp_path")
    if wanted:
        raise TypeError(f"the grader cannot provide the pytest fixtures {sorted(wanted)}")
    fn(**kwargs)


def _message(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, (SubmissionFailed, AssertionError)) else str(exc)
    for note in getattr(exc, "__notes__", ()):
        text += f"\n{note}"
    if isinstance(exc, GROUP) and exc.exceptions:
        text += "\n" + _message(exc.exceptions[0])
    return text


def run_task(root: Path, task: Task, files: dict[str, Path] | str, workdir: Path, limits: Limits,
             forbidden: list[Path]) -> dict[str, Outcome]:
    """Outcome of every manifest test of ``task``. ``files`` maps each edited file to the copy
    taken from the submission, or is a message saying why there is none."""
    if isinstance(files, str):
        return {test: Outcome(False, files) for test in task.tests}
    sandbox = workdir / task.id
    sandbox.mkdir(parents=True)
    modules = build_sandbox(root, task, files, sandbox)
    proxies = {name: RemoteModule(name) for name, _ in modules}

    spawned = itertools.count(1)

    def new_child() -> Child:
        # each test has its own child, its own scratch folder (the student's modules stay
        # read-only) and its own wall-clock budget: a hang in one function costs the tests that
        # call it, not the honest ones after it
        scratch = sandbox / f"scratch-{next(spawned)}"
        return Child(modules, scratch, forbidden, list(BLOCKED_MODULES), limits, time.monotonic() + limits.wall_s)

    try:
        first: Child | None = new_child()
    except SubmissionFailed as exc:  # the module does not even import: every test fails alike
        return {test: Outcome(False, _clean(str(exc), sandbox, root)) for test in task.tests}

    outcomes: dict[str, Outcome] = {}
    test_modules: dict[str, object] = {}
    settings.load_profile("autograder")
    for n, test in enumerate(task.tests):
        file_rel, _, func_name = test.partition("::")
        try:
            child = first or new_child()
            first = None
            for proxy in proxies.values():
                proxy.bind(child)
            try:
                if file_rel not in test_modules:
                    test_modules[file_rel] = _import_test_module(root / "assignments" / file_rel, proxies,
                                                                 f"_autograder_{task.id}_{n}")
                fn = _find_test(test_modules[file_rel], func_name, file_rel)
                for kwargs in _cases(fn):
                    _call_test(fn, kwargs, sandbox)
                outcomes[test] = Outcome(True, "passed")
            finally:
                child.close()
        except (Exception, SubmissionFailed) as exc:
            outcomes[test] = Outcome(False, _clean(_message(exc), sandbox, root))
        except BaseException as exc:  # pytest.skip/fail inside a test: it did not pass
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            outcomes[test] = Outcome(False, _clean(_message(exc), sandbox, root))
        finally:
            for proxy in proxies.values():
                proxy.bind(None)
    return outcomes


def _clean(text: str, sandbox: Path, root: Path) -> str:
    """Messages name no temporary folder (a regrade must be byte-identical) and stay short."""
    text = text.replace(str(sandbox), "<submission>").replace(str(root), "<course>")
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "\n... (message cut)"
