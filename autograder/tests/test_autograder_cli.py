"""The command line: grade writes results.json and prints the total; regenerate --check agrees
with the committed key; bad arguments are named."""

from __future__ import annotations

import json
import subprocess
import sys

from autograder.grading import calibrate
from autograder.grading.grade import ROOT, manifest_of
from autograder.selfcheck import reference_submission


def run(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    # 5 minutes on a quiet machine, more on a loaded one (the grading's limits scale the same way)
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300 * calibrate.measure().factor)


def test_grade_writes_results_and_prints_the_total(tmp_path):
    # the reference's first task only (the reference's full marks on every task is the
    # self-check's, graded once per session): the others are missing, and score nothing
    first = manifest_of(ROOT).tasks[0]
    ref = reference_submission(tmp_path / "ref", tasks=frozenset({first.id}))
    out = tmp_path / "r.json"
    done = run("grade", str(ref), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    # that task in full; the other tasks and the notebooks, not in this submission, score nothing
    # but count in max_score
    assert data["score"] == first.points and data["max_score"] > manifest_of(ROOT).total_points
    assert f"total: {first.points} / {data['max_score']}" in done.stdout
    assert all("missing file" in t["output"] for t in data["tests"] if t["extra_data"]["task"] != first.id)


def test_regenerate_check_agrees_with_the_committed_key():
    done = run("regenerate", "--check")
    assert done.returncode == 0 and "up to date" in done.stdout, done.stdout + done.stderr


def test_a_bad_limit_is_named(tmp_path):
    done = run("grade", str(tmp_path), "--timeout", "-1")
    assert done.returncode != 0 and "Limits.wall_s must be a positive number, got -1.0" in done.stderr
