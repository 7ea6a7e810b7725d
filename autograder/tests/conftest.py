"""The hostile submissions are data, not tests: pytest must never load their conftest.py files.

The self-check (``test_selfcheck.py``) grades about a hundred submissions. It starts as soon as
the tests are collected, in a background thread that keeps ``SELFCHECK_JOBS`` worker processes
busy (default: the cores), while the other test files run here; its tests then only wait for
the results (:func:`selfcheck_run`). Each grading scales its time limits to the load
(``autograder/grading/calibrate.py``), so running side by side changes no verdict.

The grader's tests grade with a fixed, public secret (:mod:`autograder.grading.grading_secret`), so that
a run draws the same inputs as the last (a test that needs no secret removes it itself).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder.grading.grading_secret import ENV_SECRET, ENV_SECRET_FILE

collect_ignore = ["hostile"]

if not os.environ.get(ENV_SECRET_FILE):
    os.environ.setdefault(ENV_SECRET, "servelab self-check: a fixed, public secret")

SELFCHECK_TESTS = "test_selfcheck.py"
REFERENCE_CHECK = "reference: full marks"  # the self-check's grading of the reference (autograder/selfcheck/catalogue.py)


@dataclass(frozen=True)
class _Run:
    """The self-check of this session: its results to come, its folder, and what stops it."""

    future: Future
    folder: Path
    stop: threading.Event


_RUN: _Run | None = None  # started by the first test that needs it


def _start_selfcheck(names: set[str] | None = None) -> _Run:
    """Starts the self-check once: the checks called ``names``, or (None) all of them."""
    global _RUN
    if _RUN is None:
        from autograder import selfcheck

        folder = Path(tempfile.mkdtemp(prefix="servelab-selfcheck-tests-"))
        jobs = int(os.environ["SELFCHECK_JOBS"]) if os.environ.get("SELFCHECK_JOBS") else None
        future: Future = Future()
        stop = threading.Event()

        def run() -> None:
            try:
                only = None if names is None else [c for c in selfcheck.checks() if c.name in names]
                future.set_result(selfcheck.run_all(folder, jobs=jobs, only=only, stop=stop))
            except BaseException as exc:  # the fixture re-raises it in the tests that need it
                future.set_exception(exc)

        _RUN = _Run(future, folder, stop)
        threading.Thread(target=run, name="selfcheck", daemon=True).start()
    return _RUN


def pytest_collection_finish(session: pytest.Session) -> None:
    """Starts the checks the selected tests need: ``-k always_equal`` grades that submission
    only; a test that reads every result (the surviving-test list) needs them all, and one that
    reads the reference's grading (``reference_results``) needs that one."""
    if session.config.option.collectonly:
        return
    names: set[str] = set()
    everything = False
    for item in session.items:
        if "reference_results" in getattr(item, "fixturenames", ()):
            names.add(REFERENCE_CHECK)
        if Path(str(item.fspath)).name != SELFCHECK_TESTS:
            continue
        if isinstance(item, pytest.Function) and item.originalname == "test_check_holds":
            names.add(str(item.callspec.params["name"]))  # the check's name (test_selfcheck.py)
        elif {"results", "selfcheck_run", "selfcheck_dir"} & set(getattr(item, "fixturenames", ())):
            everything = True
    if names or everything:
        _start_selfcheck(None if everything else names)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The self-check's time-limit factors, and the graded tests no mutant fails (a warning
    until ``selfcheck.SURVIVORS_FAIL``)."""
    if _RUN is None or not _RUN.future.done() or _RUN.future.exception() is not None:
        return
    future = _RUN.future
    from autograder import selfcheck

    results = future.result()
    terminalreporter.write_sep("-", "autograder self-check")
    terminalreporter.write_line(f"{len(results)} checks; time limits scaled up to x{max(r.factor for r in results.values()):.2f} "
                                "for the machine's load (autograder/grading/calibrate.py)")
    # CPU time, unlike wall time, does not grow with the load: what to look at when CI is slow
    costly = sorted(results.values(), key=lambda r: -r.cpu_seconds)
    terminalreporter.write_line(f"{sum(r.cpu_seconds for r in costly):.0f} s CPU in all; the most: "
                                + ", ".join(f"{r.name} {r.cpu_seconds:.0f} s" for r in costly[:5]))
    if all(name in results for name in (c.name for c in selfcheck.checks() if c.kind == "mutant")):
        survivors = selfcheck.survivors_of(results)
        terminalreporter.write_line(f"{len(survivors)} graded tests no mutant fails" + (":" if survivors else ""))
        for name in survivors:
            terminalreporter.write_line(f"  {name}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _RUN is not None:
        _RUN.stop.set()  # an interrupted session: queued checks are dropped, running ones end
        try:
            _RUN.future.result(timeout=600)
        except Exception:
            pass
        shutil.rmtree(_RUN.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def reference_results() -> dict:
    """The results.json (as data) of the self-check's grading of the reference solutions and
    the source notebooks (its check :data:`REFERENCE_CHECK`): the schema and notebook tests read
    it, rather than grade the reference a second time (a minute of CPU)."""
    result = _start_selfcheck({REFERENCE_CHECK}).future.result()[REFERENCE_CHECK]
    assert result.data is not None, result.problems
    return result.data


# what this session grades again of the reference: the notebooks and two quick tasks, about 10 s
# of CPU where the whole is a minute (a passing test's message does not carry its inputs, so a
# regrade of the rest would show little; failing submissions are regraded byte for byte in
# test_results_schema.py and test_robustness.py)
REGRADED_TASKS = frozenset({"a1_ledger", "a11_speculative"})


@pytest.fixture(scope="session")
def reference_regraded(tmp_path_factory) -> tuple[dict, Path]:
    """The source notebooks and :data:`REGRADED_TASKS` of the reference graded in this process,
    and where its results.json was written (a folder of its own, a few levels deep):
    ``test_selfcheck.py`` compares it with the self-check's grading of the same submission (a
    regrade in another process, under another load)."""
    from autograder.grading.grade import ROOT, grade
    from autograder.notebooks import nbgrader
    from autograder.sandbox.remote import Limits
    from autograder.selfcheck import reference_submission

    tmp = tmp_path_factory.mktemp("reference")
    out = tmp / "deep" / "results.json"
    only = REGRADED_TASKS | {nb.id for nb in nbgrader.notebooks_of(ROOT)}
    # generous limits: a loaded CI machine must not turn a pass into a timeout (scaled by the load, too)
    return grade(reference_submission(tmp / "ref", with_notebooks=True), out=out, limits=Limits(wall_s=30.0, cpu_s=30),
                 only_tasks=only), out


@pytest.fixture(scope="session")
def selfcheck_run() -> tuple[dict, Path]:
    """The self-check's results (name -> :class:`autograder.selfcheck.Result`) and its folder."""
    run = _start_selfcheck()
    return run.future.result(), run.folder


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> dict[str, Path]:
    """``make sdist wheel`` into a temporary folder, once a session: the archives' tests
    (``test_artifacts.py``) list them and the staff wheel (``test_staff_wheel.py``) is built on
    the same abi3 wheel, as ``make staff-wheels`` does (one release build of the Rust crate is
    minutes of CPU: a second one would only repeat it)."""
    from autograder.grading.grade import ROOT

    out = tmp_path_factory.mktemp("dist")
    # not the MAKEFLAGS of a `make test` lane (a jobserver this process was not handed)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    run = subprocess.run(["make", "--no-print-directory", "sdist", "wheel", f"DIST={out}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=3600, env=env)  # a bound against a hang only
    assert run.returncode == 0, f"make sdist wheel failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, f"expected one wheel and one sdist, got {os.listdir(out)}"
    return {"wheel": wheels[0], "sdist": sdists[0]}


# a TMPDIR only root may enter, for the honest classes (test_mode_matrix.py, test_gradebook.py)
@pytest.fixture
def private_tmpdir(tmp_path):
    """A TMPDIR under a folder only root may enter (pytest's own is 0700), and the stat of
    every folder from / down to it, to compare after."""
    tmpdir = tmp_path / "private" / "tmp"
    tmpdir.mkdir(parents=True)
    os.chmod(tmp_path / "private", 0o700)
    ancestors = [tmpdir, *tmpdir.parents]
    before = {p: _stat(p) for p in ancestors}
    yield tmpdir
    assert {p: _stat(p) for p in ancestors} == before  # no owner, group or mode changed


def _stat(path: Path) -> tuple:
    st = path.stat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)
