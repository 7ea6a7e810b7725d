"""The students' side of grading (issue 6): under plain ``pytest assignments/`` with the points
plugin, the reference scores full marks, stubs score zero without a crash, a skipped test earns
nothing, and ``-m task_<id>`` runs one task. Each case runs pytest on a temporary copy of
assignments/ in a child process. (That every mutant loses points is the autograder self-check's
job, through the real grader: ``autograder/selfcheck.py``.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.grading.manifest import Manifest, tomllib  # tomli on Python 3.10
from servelab.grading.solutions import count_regions, strip_solutions

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"
MANIFEST = Manifest.load(ASSIGNMENTS / "manifest.toml")
MUTANTS = [m for f in sorted((ROOT / "autograder" / "mutants").glob("*.toml"))
           for m in tomllib.loads(f.read_text())["mutant"]]


def copy_assignments(tmp_path: Path) -> Path:
    dst = tmp_path / "assignments"
    shutil.copytree(ASSIGNMENTS, dst, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    return dst


def grade(copy: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    out = copy.parent / "points.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(copy),
                          "--points-json", str(out), *extra], capture_output=True, text=True, cwd=copy.parent,
                         timeout=600, env={**os.environ, "HYPOTHESIS_PROFILE": "ci"})
    assert out.exists(), f"no points table written:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(out.read_text()), run


def points_by_task(summary: dict) -> dict[str, int]:
    return {t["id"]: t["points"] for t in summary["tasks"]}


@pytest.fixture(scope="module")
def reference_points(tmp_path_factory) -> dict[str, int]:
    summary, run = grade(copy_assignments(tmp_path_factory.mktemp("ref")))
    assert run.returncode == 0, run.stdout[-3000:]
    return points_by_task(summary)


def test_reference_scores_full_marks(reference_points):
    assert reference_points == {t.id: t.points for t in MANIFEST.tasks}
    assert sum(reference_points.values()) == MANIFEST.total_points


def test_marker_selects_one_task(tmp_path):
    task = MANIFEST.tasks[-1]
    summary, run = grade(copy_assignments(tmp_path), "-m", task.marker)
    got = points_by_task(summary)
    assert got[task.id] == task.points, run.stdout[-2000:]
    assert all(v == 0 for k, v in got.items() if k != task.id)


def test_every_edited_file_has_solution_regions():
    for task in MANIFEST.tasks:
        for rel in task.edit:
            assert count_regions((ASSIGNMENTS / rel).read_text()) > 0, rel


def test_stubs_score_zero_and_fail_cleanly(tmp_path):
    copy = copy_assignments(tmp_path)
    for task in MANIFEST.tasks:
        for rel in task.edit:
            path = copy / rel
            path.write_text(strip_solutions(path.read_text(), rel))
    summary, run = grade(copy)
    assert run.returncode == 1, f"expected test failures only (exit 1), got {run.returncode}"
    assert "ERROR collecting" not in run.stdout and "INTERNALERROR" not in run.stdout + run.stderr
    assert "NotImplementedError" in run.stdout
    assert summary["points"] == 0
    assert all(t["status"] == "failing" for t in summary["tasks"])


def test_a_skipped_test_earns_nothing(tmp_path, reference_points):
    copy = copy_assignments(tmp_path)
    task = MANIFEST.tasks[0]
    test_id = next(iter(task.tests))
    path_rel, func = test_id.split("::")
    path = copy / path_rel
    text = path.read_text().replace(f"\ndef {func}(", f"\n@__import__('pytest').mark.skip\ndef {func}(", 1)
    path.write_text(text)
    summary, _ = grade(copy)
    assert points_by_task(summary)[task.id] == reference_points[task.id] - task.tests[test_id]


def test_every_mutant_still_applies():
    # the self-check (python -m autograder selfcheck, in make test) grades each mutant with the
    # real grader and demands it loses points; here only that each still names real code
    for m in MUTANTS:
        text = (ASSIGNMENTS / m["file"]).read_text()
        assert text.count(m["find"]) == 1, f"mutant no longer applies ({m['why']}): {m['find']!r}"
        assert m["file"] in next(t for t in MANIFEST.tasks if t.id == m["task"]).edit


def test_tasks_do_not_import_each_other():
    # why a mutant in one task cannot cost points in another: no task's files name another
    # task's module, so a task's score depends on its own edited files only
    modules = {t.id: {Path(rel).stem for rel in t.edit} for t in MANIFEST.tasks}
    for task in MANIFEST.tasks:
        own_files = [ASSIGNMENTS / rel for rel in task.edit] + [ASSIGNMENTS / t.split("::")[0] for t in task.tests]
        text = "\n".join(p.read_text() for p in own_files)
        for other, names in modules.items():
            if other == task.id:
                continue
            for name in names:
                assert not re.search(rf"^\s*(import|from)\s+{name}\b", text, re.M), (task.id, name)


def test_every_task_has_at_least_two_mutants():
    counts = {t.id: 0 for t in MANIFEST.tasks}
    for m in MUTANTS:
        counts[m["task"]] += 1
    assert all(n >= 2 for n in counts.values()), counts
