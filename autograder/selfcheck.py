"""``selfcheck``: the grader proves itself on submissions whose grade is known.

* the reference solutions score full marks;
* the release grades without error and scores zero, and in the release ``pytest assignments/``
  shows 0 points with every task failing cleanly; pasting one task's reference back earns
  exactly that task's points (this runs the release's tests with this checkout's installed
  servelab: no second Rust build);
* every mutant (``autograder/mutants/*.toml``) loses points on its own task and only there;
* every hostile submission (``autograder/tests/hostile/<name>/``, its ``expect.toml`` giving
  ``max_points``) scores at most that, under tight limits, and leaves the course copy intact;
* every task's tests bound what they compute with: graded with every number the submission
  sends back made huge (:func:`check_bounds`), the grader's own process stays within
  :data:`BOUNDS_RSS_BYTES` and :data:`HOSTILE_SECONDS`, and the task loses points;
* notebooks: the source notebooks score their autograded points (inside "reference"), the
  released ones zero with every cell graded (inside "release"), and released notebooks whose
  test cells were edited or deleted still score zero (nbgrader restores them from the source).

* every graded test of the manifest is failed by at least one mutant (a test that no mutant
  fails could be passed by a lookup table without anyone noticing): the list of the others is
  the list of the others fails the self-check (:data:`SURVIVORS_FAIL`).

Each check grades one submission (or runs the release's pytest once) and returns a
:class:`Result`: its problems (empty: it holds), how long it took, and what the mutant checks
need. :func:`run_all` runs them in parallel, one check per worker process (``--jobs``); each
grading scales its time limits to the machine's load (:mod:`autograder.grading.calibrate`), so a busy
machine makes the self-check slower, never wrong. ``python -m autograder selfcheck`` prints
them as a table; ``autograder/tests/test_selfcheck.py`` runs them all once per pytest session
and asserts on each.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.grading.manifest import tomllib  # tomli on Python 3.10

from autograder.grading import calibrate
from autograder.grading.results import total_points
from autograder.notebooks import kept as nb_kept
from autograder.notebooks import nbgrader, recheck
from autograder.grading.grade import ROOT, grade, manifest_of
from autograder.release.repository import release
from autograder.sandbox.remote import Limits

HOSTILE = ROOT / "autograder" / "tests" / "hostile"
MUTANTS = ROOT / "autograder" / "mutants"
# hostile submissions are graded with tight limits so that the self-check stays short (but
# loose enough that the honest parts inside them pass on a busy 2-core machine)
SELFCHECK_SECRET = "servelab self-check: a fixed, public secret"
HOSTILE_LIMITS = Limits(wall_s=4.0, cpu_s=4, memory_bytes=1 << 30, output_bytes=256 << 10)
RELEASE_PYTEST_S = 600  # the release's pytest assignments/ may take this long (times the calibration factor)
HOSTILE_SECONDS = 60  # a hostile grading taking longer than this (times the calibration factor) is a problem
# every graded test is failed by some mutant; a survivor fails the self-check
SURVIVORS_FAIL = True


@dataclass
class Result:
    """What one check found: ``problems`` (empty: it holds), wall-clock ``seconds``, the CPU
    seconds of its worker and the processes it waited for (``cpu_seconds``: unlike wall-clock
    time, this does not grow with the machine's load), the calibration ``factor`` of its grading
    (1.0 when it graded nothing), and for a mutant the manifest tests it made fail (``killed``)."""

    name: str
    problems: list[str]
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    factor: float = 1.0
    killed: tuple[str, ...] = ()
    data: dict | None = field(default=None, repr=False)  # the results.json of its grading, if one


class _Factor:
    """The ``report`` callback of :func:`~autograder.grading.grade.grade`: keeps the largest
    calibration factor it was told of."""

    def __init__(self) -> None:
        self.value = 1.0

    def __call__(self, line: str) -> None:
        if line.startswith("time limits x"):
            self.value = max(self.value, float(line.split()[2][1:]))


def points_by_task(data: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for test in data["tests"]:
        task = test["extra_data"]["task"]
        out[task] = out.get(task, 0) + test["score"]
    return out


def full_marks() -> dict[str, int]:
    return {t.id: t.points for t in manifest_of(ROOT).tasks}


def reference_submission(into: Path, with_notebooks: bool = False, tasks: frozenset[str] | None = None) -> Path:
    """A submission folder holding the instructors' edit files (the reference solutions), of
    every task or of ``tasks`` only, and with ``with_notebooks`` the source notebooks (solutions
    in place) too."""
    rels = [rel for task in manifest_of(ROOT).tasks if tasks is None or task.id in tasks for rel in task.edit]
    if with_notebooks:
        rels += [nb.file for nb in nbgrader.notebooks_of(ROOT)]
    for rel in rels:
        dst = into / "assignments" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "assignments" / rel, dst)
    return into


def notebook_full_marks() -> dict[str, int]:
    """What the source notebooks earn when graded: their autograded points (manually graded
    cells wait for the instructor, so they add nothing yet)."""
    return {nb.id: sum(c.points for c in nbgrader.cell_points(ROOT / "assignments" / nb.file) if c.kind == "auto")
            for nb in nbgrader.notebooks_of(ROOT)}


def mutants() -> list[dict]:
    return [m for f in sorted(MUTANTS.glob("*.toml")) for m in tomllib.loads(f.read_text())["mutant"]]


def hostiles() -> list[Path]:
    return sorted(p for p in HOSTILE.iterdir() if (p / "expect.toml").is_file())


def course_fingerprint() -> str:
    """A hash of the files a submission must not be able to change."""
    h = hashlib.sha256()
    for folder in ("assignments", "autograder/answers", "autograder/mutants"):
        for p in sorted((ROOT / folder).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(p.relative_to(ROOT).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


# ---- the checks ---------------------------------------------------------------------------------

def check_reference(tmp: Path, report: Callable[[str], None] | None = None, keep: dict | None = None) -> list[str]:
    """``keep``: a dict that receives the results (``keep["data"]``)."""
    data = grade(reference_submission(tmp / "reference", with_notebooks=True), report=report)
    if keep is not None:
        keep["data"] = data
    got, want = points_by_task(data), {**full_marks(), **notebook_full_marks()}
    failing = [f"{t['name']}: {t['output'][:300]}" for t in data["tests"] if t.get("status") == "failed"]
    return [] if got == want else [f"reference scores {got}, not full marks {want}", *failing]


def make_release(tmp: Path) -> Path:
    out = tmp / "release"
    release(ROOT, out)
    return out


def check_release_grades_zero(release_dir: Path, report: Callable[[str], None] | None = None) -> list[str]:
    data = grade(release_dir, report=report)
    problems = []
    if total_points(data) != 0:
        problems.append(f"the release scores {total_points(data)}, not 0")
    for t in data["tests"]:
        if "notebook" in t["extra_data"]:  # graded by nbgrader: zero, but graded (not missing, no crash)
            kind = t["extra_data"]["kind"]
            if t["score"] != 0 or (kind == "manual") != t["output"].startswith("manually graded"):
                problems.append(f"{t['name']}: expected 0 points and a graded cell, got {t['score']}: {t['output'][:200]!r}")
            elif kind == "auto" and not t["output"].removeprefix(recheck.OWN_CHECK_FAILED).startswith(
                    ("not answered", "NotImplementedError", "NameError", "AssertionError")):
                problems.append(f"{t['name']}: expected a failing test cell, got {t['output'][:200]!r}")
            continue
        if "NotImplementedError" not in t["output"]:
            problems.append(f"{t['name']}: expected a NotImplementedError message, got {t['output'][:200]!r}")
    return problems


def run_release_pytest(release_dir: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    """``pytest assignments/ [extra]`` inside the release, with this checkout's servelab."""
    points = release_dir / "points.json"
    points.unlink(missing_ok=True)
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    # 10 minutes on a quiet machine, more on a busy one (599 s were seen at load 8)
    timeout = RELEASE_PYTEST_S * calibrate.measure().factor
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "assignments",
                          "--points-json", str(points), *extra], cwd=release_dir, capture_output=True, text=True,
                         timeout=timeout, env=env)
    summary = json.loads(points.read_text()) if points.exists() else {}
    return summary, run


def check_release_pytest_zero(release_dir: Path) -> list[str]:
    summary, run = run_release_pytest(release_dir)
    problems = []
    if not summary:
        return [f"no points table:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"]
    if run.returncode != 1:
        problems.append(f"pytest assignments/ in the release exits {run.returncode}, not 1 (tests failing)")
    if "ERROR collecting" in run.stdout or "INTERNALERROR" in run.stdout + run.stderr:
        problems.append(f"collection errors in the release:\n{run.stdout[-2000:]}")
    if summary["points"] != 0:
        problems.append(f"the release's points table shows {summary['points']}, not 0")
    problems += [f"task {t['id']}: status {t['status']!r}, not 'not started'" for t in summary["tasks"]
                 if t["status"] != "not started"]
    return problems


def check_paste_back(release_dir: Path, task_id: str, tmp: Path | None = None) -> list[str]:
    """Pasting one task's reference into the release earns exactly that task's points. With
    ``tmp``, into a copy of the release made there (checks running side by side each have their
    own); without, into ``release_dir`` itself, restored afterwards."""
    task = next(t for t in manifest_of(ROOT).tasks if t.id == task_id)
    if tmp is not None:
        release_dir = Path(shutil.copytree(release_dir, tmp / "release", symlinks=True))
    saved = {rel: (release_dir / "assignments" / rel).read_bytes() for rel in task.edit}
    try:
        for rel in task.edit:
            shutil.copyfile(ROOT / "assignments" / rel, release_dir / "assignments" / rel)
        # only that task runs (-m): the release check above already shows every stub at zero
        summary, run = run_release_pytest(release_dir, "-m", task.marker)
    finally:
        for rel, data in saved.items():
            (release_dir / "assignments" / rel).write_bytes(data)
    got = {t["id"]: t["points"] for t in summary.get("tasks", [])}
    want = {t: (p if t == task_id else 0) for t, p in full_marks().items()}
    return [] if got == want else [f"after pasting {task_id} back: {got}, expected {want}\n{run.stdout[-1500:]}"]


def check_mutant(mutant: dict, tmp: Path, report: Callable[[str], None] | None = None,
                 keep: dict | None = None) -> list[str]:
    """The mutant loses points on its task. ``keep``: a dict that receives the manifest tests
    it fails (``keep["killed"]``, a tuple of test ids)."""
    sub = reference_submission(tmp / "mutant")
    path = sub / "assignments" / mutant["file"]
    text = path.read_text()
    if text.count(mutant["find"]) != 1:
        return [f"mutant no longer applies ({mutant['why']}): {mutant['find']!r}"]
    path.write_text(text.replace(mutant["find"], mutant["replace"]))
    # only the mutant's task is graded: the others run in sandboxes of their own folders and
    # cannot see the changed file (tests/test_assignments_grading.py checks that no task
    # imports another's module)
    data = grade(sub, only_tasks=frozenset({mutant["task"]}), report=report)
    if keep is not None:
        keep["killed"] = tuple(t["extra_data"]["test"] for t in data["tests"]
                               if t["extra_data"]["task"] == mutant["task"] and t["score"] < t["max_score"])
    if points_by_task(data)[mutant["task"]] >= full_marks()[mutant["task"]]:
        return [f"mutant survived on {mutant['task']}: {mutant['why']}"]
    return []


def surviving_tests(killed: list[tuple[str, ...]]) -> list[str]:
    """The manifest's tests (``task: test id``) that no mutant fails, given each mutant's
    ``killed`` tests, in manifest order.

    >>> tests = [t for task in manifest_of(ROOT).tasks for t in task.tests]
    >>> surviving_tests([tuple(tests)])
    []
    >>> surviving_tests([tuple(tests[1:])]) == [f"{manifest_of(ROOT).tasks[0].id}: {tests[0]}"]
    True
    """
    dead = {t for k in killed for t in k}
    return [f"{task.id}: {test}" for task in manifest_of(ROOT).tasks for test in task.tests if test not in dead]


def _private_lines_shown(name: str, data: dict, kept_notebooks: Path) -> list[str]:
    """A solution, hidden-test or model-answer line of the source notebooks in results.json or
    in a notebook kept for the instructors' manual grading (autograder/notebooks/kept.py)."""
    private = nbgrader.private_lines_of(ROOT)
    problems = [f"{name}: results.json shows a private line: {line[:120]!r}" for line in nb_kept.leaked(data, private)]
    for path in sorted(kept_notebooks.glob("*.ipynb")) if kept_notebooks.is_dir() else []:
        problems += [f"{name}: the kept {path.name} holds a private line: {line[:120]!r}"
                     for line in nb_kept.leaked(json.loads(path.read_text(encoding="utf-8")), private)]
    return problems


def check_hostile(folder: Path, tmp: Path, report: Callable[[str], None] | None = None) -> list[str]:
    expect = tomllib.loads((folder / "expect.toml").read_text())
    before = course_fingerprint()
    out = tmp / "results.json"
    start = time.monotonic()
    factor = _Factor()
    # expect.toml's ``zip``: the submission is that zip inside the folder (a zip trick)
    kept_notebooks = tmp / "kept-notebooks"

    def log(line: str) -> None:
        factor(line)
        if report is not None:
            report(line)
    data = grade(folder / expect["zip"] if "zip" in expect else folder, out=out, limits=HOSTILE_LIMITS,
                 report=log, notebooks_out=kept_notebooks)
    problems = _private_lines_shown(folder.name, data, kept_notebooks)
    score = total_points(data)  # hidden tests included (results.json's score may leave them out)
    if score > expect["max_points"]:
        problems.append(f"{folder.name} ({expect['why']}) scored {score} > {expect['max_points']}")
    if score < expect.get("min_points", 0):  # the honest part inside must keep its points
        problems.append(f"{folder.name} ({expect['why']}) scored {score} < {expect['min_points']}")
    if json.loads(out.read_text()) != data:
        problems.append(f"{folder.name}: results.json on disk is not the grader's")
    if course_fingerprint() != before:
        problems.append(f"{folder.name}: the course copy changed while grading it")
    if time.monotonic() - start > HOSTILE_SECONDS * factor.value:
        problems.append(f"{folder.name}: grading took {time.monotonic() - start:.0f} s "
                        f"(limit {HOSTILE_SECONDS} s x{factor.value:g} for the load)")
    return problems


# ---- bounded grader-side work -------------------------------------------------------------------
# Every value a submission returns must be checked against a bound before the grader computes
# with it (a9's split_count went into np.array_split: 1.7 GB at 6 million). A test author cannot
# opt out of this check: it runs for every task of the manifest, and the inflation happens in the
# grader's reply path (Child.request), so every value of every test is inflated, whatever
# function, attribute or handle it came from; and it measures the grader process itself (its
# peak RSS, under an address-space cap), so a test that catches MemoryError does not hide it.
INFLATE_BY = 10_000_000  # added to every number a reply holds (bools stay bools)
BOUNDS_RSS_BYTES = 512 << 20  # the grader's own peak RSS for one inflated task (it needs about 100 MiB)
BOUNDS_AS_BYTES = 8 << 30  # the address space the inflated grading may map at all (a safety net)


def inflate(value):
    """``value`` (decoded from a reply) with every number made huge: what a submission that
    returns huge counts, sizes, ids and times would send.

    >>> from types import SimpleNamespace
    >>> inflate([1, (True, 2.5), {"n": 3}, SimpleNamespace(k=-1), "s"])
    [10000001, (True, 10000002.5), {'n': 10000003}, namespace(k=9999999), 's']
    """
    import math

    import numpy as np
    from types import SimpleNamespace

    if type(value) is int:
        return value + INFLATE_BY
    if type(value) is float:
        return value + INFLATE_BY if math.isfinite(value) else value
    if type(value) in (list, tuple):
        return type(value)(inflate(v) for v in value)
    if type(value) is dict:
        return {k: inflate(v) for k, v in value.items()}
    if type(value) is SimpleNamespace:
        return SimpleNamespace(**{k: inflate(v) for k, v in vars(value).items()})
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        return value.astype(np.int64 if value.dtype.kind in "iu" else value.dtype) + INFLATE_BY
    if isinstance(value, np.integer):  # as int64: a small dtype cannot hold the huge value
        return np.int64(value) + INFLATE_BY
    if isinstance(value, np.floating):
        return value + INFLATE_BY
    return value


def _bounds_worker(task_id: str, submission: str, out: str) -> None:
    """In a fresh process (so that its peak RSS is this grading's alone): grades ``task_id`` of
    ``submission`` with every reply inflated, writes the results and the peak RSS to ``out``."""
    import resource as res

    from autograder.sandbox import remote

    real = remote.Child.request

    def inflated(self, req, what):
        return inflate(real(self, req, what))

    setattr(remote.Child, "request", inflated)  # this process only: it grades once, then ends
    start = time.monotonic()
    factor = _Factor()
    data = grade(Path(submission), only_tasks=frozenset({task_id}), limits=HOSTILE_LIMITS, report=factor)
    Path(out).write_text(json.dumps({"data": data, "seconds": time.monotonic() - start, "factor": factor.value,
                                     "rss_bytes": res.getrusage(res.RUSAGE_SELF).ru_maxrss << 10}))


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (BOUNDS_AS_BYTES, BOUNDS_AS_BYTES))


def check_bounds(task_id: str, tmp: Path, report: Callable[[str], None] | None = None) -> list[str]:
    """The reference of ``task_id`` graded with every number it returns made huge
    (:func:`inflate`): the grader's process must stay under :data:`BOUNDS_RSS_BYTES` and finish
    within :data:`HOSTILE_SECONDS` (times the load factor), no test may fail for the grader's
    own want of memory, and the task must lose points (the inflation reached its tests)."""
    sub = reference_submission(tmp / "inflated", tasks=frozenset({task_id}))
    out = tmp / "bounds.json"
    code = f"from autograder.selfcheck import _bounds_worker; _bounds_worker({task_id!r}, {str(sub)!r}, {str(out)!r})"
    limit = HOSTILE_SECONDS * calibrate.measure().factor
    try:
        run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                             timeout=limit * 2, preexec_fn=_cap_address_space)
    except subprocess.TimeoutExpired:
        return [f"{task_id}: the inflated grading ran past {limit * 2:.0f} s (a test computes with an unbounded value)"]
    if run.returncode != 0 or not out.is_file():
        return [f"{task_id}: the inflated grading failed (exit {run.returncode}): {run.stderr[-1500:]}"]
    got = json.loads(out.read_text())
    if report is not None:
        report(f"time limits x{got['factor']:g} (the inflated grading's)")
    problems = []
    if got["rss_bytes"] > BOUNDS_RSS_BYTES:
        problems.append(f"{task_id}: with huge numbers returned the grader's process grew to "
                        f"{got['rss_bytes'] >> 20} MiB (bound {BOUNDS_RSS_BYTES >> 20} MiB): a test computes with "
                        "a value it did not bound first")
    if got["seconds"] > limit:
        problems.append(f"{task_id}: with huge numbers returned the grading took {got['seconds']:.0f} s "
                        f"(limit {limit:.0f} s): a test computes with a value it did not bound first")
    tests = [t for t in got["data"]["tests"] if t["extra_data"]["task"] == task_id]
    for t in tests:
        if "MemoryError" in t["output"] or "the grader could not grade" in t["output"]:
            problems.append(f"{t['name']}: the grader itself failed on a huge value: {t['output'][:300]}")
    if sum(t["score"] for t in tests) >= full_marks()[task_id]:
        problems.append(f"{task_id}: the inflated reference kept full marks: the inflation did not reach its tests")
    return problems


# ---- running them ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """One check: its ``name`` (the table's row, the pytest id), its ``kind`` and the argument
    of that kind (a task id, a mutant's index in :func:`mutants`, a hostile folder's name)."""

    name: str
    kind: str
    arg: str = ""


def checks() -> list[Check]:
    """Every check, longest first (so that parallel workers finish together)."""
    out = [Check("reference: full marks", "reference"),
           Check("release: grades to zero", "release-grade"),
           Check("release: pytest assignments/ shows 0", "release-pytest")]
    if nbgrader.notebooks_of(ROOT):
        out.append(Check("notebooks: edited test cells gain nothing", "notebook-tampering"))
    out += [Check(f"hostile: {h.name}", "hostile", h.name) for h in hostiles()]
    out += [Check(f"release + reference {task.id}: that task only", "paste-back", task.id)
            for task in manifest_of(ROOT).tasks]
    out += [Check(f"bounds: {task.id} with huge numbers returned", "bounds", task.id)
            for task in manifest_of(ROOT).tasks]
    out += [Check(f"mutant: {m['task']}: {m['why']}", "mutant", str(i)) for i, m in enumerate(mutants())]
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError(f"two self-checks share a name: {sorted({n for n in names if names.count(n) > 1})}")
    return out


def _cpu_seconds() -> float:
    """CPU time (user and system) of this process and of the children it has waited for."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def run_one(check: Check, tmp: Path, release_dir: Path, pristine: Path | None = None) -> Result:
    """Runs ``check`` in the new folder ``tmp``; a check that raises is a problem, not a crash.
    ``pristine``: a copy of the release that no check runs in (paste-back checks copy it while
    others run pytest in ``release_dir``); default ``release_dir``."""
    tmp.mkdir(parents=True, exist_ok=True)
    factor = _Factor()
    keep: dict[str, Any] = {}  # what the check hands back (check_reference's data, a mutant's killed tests)
    start, cpu = time.monotonic(), _cpu_seconds()
    try:
        if check.kind == "reference":
            problems = check_reference(tmp, factor, keep)
        elif check.kind == "release-grade":
            problems = check_release_grades_zero(release_dir, factor)
        elif check.kind == "release-pytest":
            problems = check_release_pytest_zero(release_dir)
        elif check.kind == "notebook-tampering":
            problems = check_notebook_tampering(release_dir, tmp, factor)
        elif check.kind == "hostile":
            problems = check_hostile(HOSTILE / check.arg, tmp, factor)
        elif check.kind == "paste-back":
            problems = check_paste_back(pristine or release_dir, check.arg, tmp)
        elif check.kind == "mutant":
            problems = check_mutant(mutants()[int(check.arg)], tmp, factor, keep)
        elif check.kind == "bounds":
            problems = check_bounds(check.arg, tmp, factor)
        else:
            raise ValueError(f"unknown self-check kind {check.kind!r}")
    except Exception as exc:  # the grader or the check itself broke: that is what we are here to find
        problems = [f"the check raised {type(exc).__name__}: {exc}"]
    return Result(check.name, problems, round(time.monotonic() - start, 1), round(_cpu_seconds() - cpu, 1),
                  factor.value, keep.get("killed", ()), keep.get("data"))


def _worker_init(nb_course: str | None) -> None:
    if nb_course is not None:  # nbgrader's generate step ran once, in the parent
        nbgrader.adopt(ROOT, Path(nb_course))


def default_jobs() -> int:
    """Worker processes by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def run_all(tmp: Path, jobs: int | None = None, only: list[Check] | None = None,
            done: Callable[[Result], None] | None = None, stop: threading.Event | None = None) -> dict[str, Result]:
    """Makes the release in ``tmp`` and runs ``only`` (default: every check), ``jobs`` at a
    time (default :func:`default_jobs`), each in its own worker process and folder. ``done``
    is called with each result as it arrives. Returns name -> result, in :func:`checks` order.
    Setting ``stop`` (an interrupted test session) drops the checks not yet started and raises
    :class:`InterruptedError` once the running ones end."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    todo = checks() if only is None else list(only)
    tmp = Path(tmp)
    release_dir = make_release(tmp)
    pristine = Path(shutil.copytree(release_dir, tmp / "release-pristine", symlinks=True))
    nb_course = str(nbgrader.generated(ROOT)) if nbgrader.notebooks_of(ROOT) else None
    results: dict[str, Result] = {}
    # spawn, not fork: a forked copy of a process that runs threads (rich, pytest) is unsafe
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs or default_jobs(), mp_context=context,
                             initializer=_worker_init, initargs=(nb_course,)) as pool:
        futures = {pool.submit(run_one, c, tmp / f"check{n}", release_dir, pristine): c for n, c in enumerate(todo)}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            if stop is not None and stop.is_set():
                pool.shutdown(wait=True, cancel_futures=True)
                raise InterruptedError("the self-check was stopped")
            for future in finished:
                check = futures[future]
                try:
                    result = future.result()
                except Exception as exc:  # the worker itself died
                    result = Result(check.name, [f"the worker running it failed: {type(exc).__name__}: {exc}"])
                results[check.name] = result
                if done is not None:
                    done(result)
    return {c.name: results[c.name] for c in todo}


def survivors_of(results: dict[str, Result]) -> list[str]:
    """The manifest tests no mutant in ``results`` fails (every mutant must have run)."""
    return surviving_tests([r.killed for name, r in results.items() if name.startswith("mutant: ")])


def boundary_line() -> str:
    """Which OS boundary the hostile set is graded behind here (the mode matrix: on Gradescope,
    where setup.sh runs the self-check, it is uid-only with Landlock; autograder/README.md)."""
    from autograder.sandbox import os_boundary

    try:
        mode = os_boundary.boundary().mode
    except os_boundary.Refused as exc:
        return f"no OS boundary ({exc})"
    return f"OS boundary {mode}" + (f", Landlock ABI {os_boundary.landlock_abi()}" if mode != "none" else "")


def main(jobs: int | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    # a fixed, public secret unless the instructors set theirs: the same inputs run after run
    os.environ.setdefault("SERVELAB_GRADING_SECRET", SELFCHECK_SECRET)
    if not (HOSTILE.is_dir() and MUTANTS.is_dir()):
        console.print("selfcheck needs the instructors' copy: autograder/tests/hostile and autograder/mutants "
                      "are not in a student release")
        return 2
    todo = checks()
    start = time.monotonic()
    console.print(f"self-check: {len(todo)} checks, {jobs or default_jobs()} at a time, {boundary_line()}")

    def done(r: Result) -> None:
        console.print(f"  {'ok ' if not r.problems else 'FAILED'} {r.name} ({r.seconds:.0f} s, {r.cpu_seconds:.0f} s CPU)",
                      highlight=False)

    with tempfile.TemporaryDirectory(prefix="servelab-selfcheck-") as t:
        results = run_all(Path(t), jobs, todo, done)
    table = Table(title="autograder self-check")
    table.add_column("check")
    table.add_column("result")
    table.add_column("seconds", justify="right")
    table.add_column("CPU s", justify="right")
    table.add_column("limits x", justify="right")
    for r in results.values():
        table.add_row(r.name, "[green]ok" if not r.problems else "[red]" + "\n".join(r.problems)[:500],
                      f"{r.seconds:.1f}", f"{r.cpu_seconds:.1f}", f"{r.factor:.2f}")
    survivors = survivors_of(results)
    failed = sum(bool(r.problems) for r in results.values())
    if survivors:
        failed += SURVIVORS_FAIL
        colour, verdict = ("red", "FAILED") if SURVIVORS_FAIL else ("yellow", "warning")
        table.add_row("every graded test fails under some mutant",
                      f"[{colour}]{verdict}: {len(survivors)} tests no mutant fails (listed below)", "", "", "")
    console.print(table)
    for name in survivors:
        console.print(f"  no mutant fails {name}", highlight=False, soft_wrap=True)
    console.print(f"{len(results) - sum(bool(r.problems) for r in results.values())} of {len(results)} checks hold"
                  + (f"; {len(survivors)} graded tests no mutant fails" if survivors else "")
                  + f" ({time.monotonic() - start:.0f} s)")
    return 1 if failed else 0


# ---- notebooks (autograder/notebooks/nbgrader.py) ---------------------------------------------------------

def tamper(text: str, delete: frozenset[str] = frozenset()) -> str:
    """A notebook whose autograded test cells were edited to pass (``pass``, hidden tests gone)
    and whose cells in ``delete`` were removed: what a student who cannot answer might try."""
    nb = json.loads(text)
    cells = []
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade_id") in delete:
            continue
        if nbgrader.cell_kind(meta, cell["cell_type"]) == "auto":
            cell["source"] = "assert True  # edited by the student\n"
        cells.append(cell)
    nb["cells"] = cells
    return json.dumps(nb)


def check_notebook_tampering(release_dir: Path, tmp: Path, report: Callable[[str], None] | None = None) -> list[str]:
    """The released notebooks with every test cell edited to pass (and one deleted) score 0:
    nbgrader restores test cells from the checksummed source before it runs them."""
    problems = []
    sub = tmp / "tampered"
    deleted: set[str] = set()
    for i, nb in enumerate(nbgrader.notebooks_of(ROOT)):
        text = (release_dir / "assignments" / nb.file).read_text(encoding="utf-8")
        auto = [c.grade_id for c in nbgrader.cell_points(ROOT / "assignments" / nb.file) if c.kind == "auto"]
        dst = sub / "assignments" / nb.file
        dst.parent.mkdir(parents=True, exist_ok=True)
        gone = frozenset(auto[:1]) if i == 0 else frozenset()  # a deleted test cell earns nothing either
        deleted |= gone
        dst.write_text(tamper(text, gone), encoding="utf-8")
    data = grade(sub, notebooks_out=tmp / "executed", report=report)
    for t in data["tests"]:
        if "notebook" in t["extra_data"] and t["score"] != 0:
            problems.append(f"tampered notebook earned {t['score']} on {t['name']}: {t['output'][:200]}")
    if not any("notebook" in t["extra_data"] for t in data["tests"]):
        problems.append("no notebook was graded")
    # the executed notebooks hold the source's test cells, not the edits (as kept for the TAs:
    # hidden-test regions out, notebooks/kept.py)
    for nb in nbgrader.notebooks_of(ROOT):
        source_nb = nb_kept.student_view(json.loads((ROOT / "assignments" / nb.file).read_text(encoding="utf-8")), set())
        source = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in source_nb["cells"]
                  if nbgrader.cell_kind(c["metadata"].get("nbgrader", {}), c["cell_type"]) == "auto"}
        executed = tmp / "executed" / Path(nb.file).name
        if not executed.is_file():
            problems.append(f"{nb.id}: nbgrader left no executed notebook")
            continue
        ran = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in
               json.loads(executed.read_text(encoding="utf-8"))["cells"]
               if c["metadata"].get("nbgrader", {}).get("grade_id") in source}
        for grade_id, src in source.items():
            if grade_id not in deleted and "".join(ran.get(grade_id, "")) != "".join(src):
                problems.append(f"{nb.id}: test cell {grade_id} ran as {''.join(ran.get(grade_id, ''))[:80]!r}, "
                                "not as the source")
    return problems
