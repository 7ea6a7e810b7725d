"""The checks that grade a known submission: the reference (full marks), the release (zero,
graded and under pytest), one task pasted back into the release, a mutant, a hostile
submission (:mod:`.catalogue` lists them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from servelab.harness.manifest import tomllib  # tomli on Python 3.10

from autograder.grading import calibrate
from autograder.grading.grade import ROOT, grade, manifest_of
from autograder.grading.results import total_points
from autograder.notebooks import kept as nb_kept
from autograder.notebooks import nbgrader, recheck
from autograder.sandbox import batch_leaks, ipc_objects, os_boundary
from autograder.release.repository import release
from autograder.selfcheck.mutant_kills import MutantKills
from autograder.selfcheck.catalogue import (HOSTILE_LIMITS, HOSTILE_SECONDS, RELEASE_PYTEST_S, Factor,
                                            course_fingerprint, full_marks, notebook_full_marks,
                                            points_by_task, reference_submission)


def check_reference(tmp: Path, report: Callable[[str], None] | None = None, keep: dict | None = None) -> list[str]:
    """``keep``: a dict that receives the results (``keep["data"]``). A test that sends the
    reference's answer to a call in the same batch as that call fails here
    (:mod:`autograder.sandbox.batch_leaks`: the replies are the right answers only in this grading)."""
    saved = os.environ.get(batch_leaks.VARIABLE)
    os.environ[batch_leaks.VARIABLE] = "1"  # the task workers inherit it, forked or spawned
    try:
        data = grade(reference_submission(tmp / "reference", with_notebooks=True), report=report)
    finally:
        if saved is None:
            os.environ.pop(batch_leaks.VARIABLE, None)
        else:
            os.environ[batch_leaks.VARIABLE] = saved
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


def run_release_pytest(release_dir: Path, *extra: str, profile: str = "ci") -> tuple[dict, subprocess.CompletedProcess]:
    """``pytest assignments/ [extra]`` inside the release, with this checkout's servelab, under
    the Hypothesis ``profile``."""
    points = release_dir / "points.json"
    points.unlink(missing_ok=True)
    env = {**os.environ, "HYPOTHESIS_PROFILE": profile, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
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
        # only that task runs (-m): the release check above already shows every stub at zero;
        # under compat (10 examples a property): what is checked is the release's files with the
        # solution in place, and the reference check grades the inputs (100 a property)
        summary, run = run_release_pytest(release_dir, "-m", task.marker, profile="compat")
    finally:
        for rel, data in saved.items():
            (release_dir / "assignments" / rel).write_bytes(data)
    got = {t["id"]: t["points"] for t in summary.get("tasks", [])}
    want = {t: (p if t == task_id else 0) for t, p in full_marks().items()}
    return [] if got == want else [f"after pasting {task_id} back: {got}, expected {want}\n{run.stdout[-1500:]}"]


def check_mutant(mutant: dict, tmp: Path, report: Callable[[str], None] | None = None,
                 keep: dict | None = None, kills: MutantKills | None = None) -> list[str]:
    """The mutant loses points on its task. ``keep``: a dict that receives the manifest tests
    it fails (``keep["killed"]``, a tuple of test ids). ``kills``: the tests other mutants
    already fail, left out once this one has failed a test (:mod:`.mutant_kills`)."""
    sub = reference_submission(tmp / "mutant")
    path = sub / "assignments" / mutant["file"]
    text = path.read_text()
    if text.count(mutant["find"]) != 1:
        return [f"mutant no longer applies ({mutant['why']}): {mutant['find']!r}"]
    path.write_text(text.replace(mutant["find"], mutant["replace"]))
    # only the mutant's task is graded: the others run in sandboxes of their own folders and
    # cannot see the changed file (tests/test_assignments_grading.py checks that no task
    # imports another's module)
    data = grade(sub, only_tasks=frozenset({mutant["task"]}), report=report, shortcut=kills)
    if keep is not None:
        keep["killed"] = tuple(t["extra_data"]["test"] for t in data["tests"]
                               if t["extra_data"]["task"] == mutant["task"] and t["score"] < t["max_score"])
    if points_by_task(data)[mutant["task"]] >= full_marks()[mutant["task"]]:
        return [f"mutant survived on {mutant['task']}: {mutant['why']}"]
    return []


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
    factor = Factor()
    # expect.toml's ``zip``: the submission is that zip inside the folder (a zip trick)
    kept_notebooks = tmp / "kept-notebooks"

    def log(line: str) -> None:
        factor(line)
        if report is not None:
            report(line)
    sandbox_uids = range(os_boundary.ID_RANGE[0], os_boundary.ID_RANGE[1] + 1)
    ipc_before = set(ipc_objects.owned_by(sandbox_uids))
    # expect.toml's ``jobs``: tasks in that many workers, the notebooks' rechecks beside them (as
    # `grade`'s command line does by default), for a trick that needs a task's child and a kernel at once
    data = grade(folder / expect["zip"] if "zip" in expect else folder, out=out, limits=HOSTILE_LIMITS,
                 report=log, notebooks_out=kept_notebooks, jobs=int(expect.get("jobs", 1)))
    # what a sandbox's uid made and no reap removed (without an IPC namespace: a channel to the
    # next grading)
    left = sorted(set(ipc_objects.owned_by(sandbox_uids)) - ipc_before)
    problems = _private_lines_shown(folder.name, data, kept_notebooks)
    score = total_points(data)  # hidden tests included (results.json's score may leave them out)
    if score > expect["max_points"]:
        problems.append(f"{folder.name} ({expect['why']}) scored {score} > {expect['max_points']}")
    if score < expect.get("min_points", 0):  # the honest part inside must keep its points
        problems.append(f"{folder.name} ({expect['why']}) scored {score} < {expect['min_points']}")
    if json.loads(out.read_text()) != data:
        problems.append(f"{folder.name}: results.json on disk is not the grader's")
    if left:
        problems.append(f"{folder.name}: {len(left)} IPC object(s) of the sandbox's uids outlived the grading: "
                        f"{', '.join(left[:5])}")
    if course_fingerprint() != before:
        problems.append(f"{folder.name}: the course copy changed while grading it")
    if time.monotonic() - start > HOSTILE_SECONDS * factor.value:
        problems.append(f"{folder.name}: grading took {time.monotonic() - start:.0f} s "
                        f"(limit {HOSTILE_SECONDS} s x{factor.value:g} for the load)")
    return problems
