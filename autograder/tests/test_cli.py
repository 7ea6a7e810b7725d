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
    out = tmp_path / "r.json"
    done = run("grade", str(reference_submission(tmp_path / "ref")), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    # the Python tasks in full; the notebooks, not in this submission, score nothing but count in max_score
    total = manifest_of(ROOT).total_points
    assert data["score"] == total and data["max_score"] > total
    assert f"total: {total} / {data['max_score']}" in done.stdout


def test_regenerate_check_agrees_with_the_committed_key():
    done = run("regenerate", "--check")
    assert done.returncode == 0 and "up to date" in done.stdout, done.stdout + done.stderr


def test_a_bad_limit_is_named(tmp_path):
    done = run("grade", str(tmp_path), "--timeout", "-1")
    assert done.returncode != 0 and "Limits.wall_s must be a positive number, got -1.0" in done.stderr
