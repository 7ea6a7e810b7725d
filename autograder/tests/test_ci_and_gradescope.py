"""The GitHub Classroom workflow (one autograding step per task, with the manifest's points, a
template repository or a refusal) and its verdict script, and Gradescope's zip (tracked files
only)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from autograder.notebooks import nbgrader
from autograder.grading import results
from autograder.ci import workflow
from autograder.grading.grade import ROOT, manifest_of

TASK_PASSED = ROOT / "autograder" / "ci" / "task_passed.py"
MAKE_ZIP = ROOT / "autograder" / "gradescope" / "make_zip.sh"


def steps_of(text: str) -> list[dict[str, str]]:
    """The workflow's steps as flat dicts of their ``key: value`` lines (``with:`` and ``env:``
    entries included): enough of YAML for the shape that workflow.py writes."""
    body = text.split("\n    steps:\n", 1)[1]
    steps = []
    for chunk in re.split(r"^      - ", body, flags=re.M)[1:]:
        step = {}
        for line in ("  " + chunk).splitlines():
            m = re.match(r"^\s+([A-Za-z0-9_-]+):\s?(.*)$", line)
            if m:
                step[m.group(1)] = m.group(2).strip()
        steps.append(step)
    return steps


def classroom_steps(text: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    steps = steps_of(text)
    graders = [s for s in steps if s.get("uses") == workflow.COMMAND_GRADER]
    reporters = [s for s in steps if s.get("uses") == workflow.REPORTER]
    assert len(reporters) == 1, reporters
    return graders, reporters[0]


def autograded_notebook_points() -> dict[str, int]:
    return {nb.id: sum(c.points for c in nbgrader.cell_points(ROOT / "assignments" / nb.file) if c.kind == "auto")
            for nb in nbgrader.notebooks_of(ROOT)}


def test_workflow_has_one_step_per_task_with_its_points_and_reports_them_all():
    manifest = manifest_of(ROOT)
    nb_points = autograded_notebook_points()
    text = workflow.classroom_workflow(manifest, {nb.id: (nb.title, nb_points[nb.id])
                                                  for nb in nbgrader.notebooks_of(ROOT)})
    graders, reporter = classroom_steps(text)
    want = {t.id: t.points for t in manifest.tasks} | {k: v for k, v in nb_points.items() if v > 0}
    assert {g["id"]: int(g["max-score"]) for g in graders} == want
    assert [g["id"] for g in graders] == list(want)  # the manifest's order
    for g in graders:
        assert g["test-name"] == json.dumps(g["id"])
        assert g["command"] == f"python3 course/autograder/ci/task_passed.py results.json {g['id']}"
    assert reporter["runners"] == ",".join(want)
    for task_id in want:
        assert reporter[f"{task_id.upper()}_RESULTS"] == f'"${{{{ steps.{task_id}.outputs.result }}}}"'


def test_workflow_grades_against_the_template_repository_or_refuses():
    text = workflow.classroom_workflow(manifest_of(ROOT), {})
    steps = steps_of(text)
    assert "github.repository" not in text  # never the student's own repository as the pristine copy
    course = next(s for s in steps if s.get("path") == "course")
    assert course["repository"] == "${{ vars.SERVELAB_TEMPLATE }}"
    guard = steps[0]  # before anything is checked out or graded
    assert guard["SERVELAB_TEMPLATE"] == "${{ vars.SERVELAB_TEMPLATE }}"
    script = text.split("run: |\n", 1)[1].split("\n      - ", 1)[0]
    assert "exit 1" in script
    for value, code in (("", 1), ("course/servelab-2027", 0)):
        run = subprocess.run(["bash", "-c", script], env={**os.environ, "SERVELAB_TEMPLATE": value},
                             capture_output=True, text=True)
        assert run.returncode == code, (value, run.stdout)
    assert "::error::SERVELAB_TEMPLATE is not set" in subprocess.run(
        ["bash", "-c", script], env={**os.environ, "SERVELAB_TEMPLATE": ""}, capture_output=True, text=True).stdout


def test_workflow_refuses_a_task_id_that_cannot_name_a_step():
    manifest = SimpleNamespace(tasks=[SimpleNamespace(id="a1-ledger", title="t", points=3)])
    with pytest.raises(ValueError, match="a1-ledger"):
        workflow.grading_steps(manifest, {})  # type: ignore[arg-type]


def fake_results(outcomes: dict[str, bool], manual_cell: bool = True) -> dict:
    """results.json as the grader builds it, for the manifest's tasks, with ``outcomes`` (test
    id -> passed) and every other test passing, plus a notebook with a pending manual cell."""
    manifest = manifest_of(ROOT)
    got = {t.id: {test: SimpleNamespace(passed=outcomes.get(test, True), message="m") for test in t.tests}
           for t in manifest.tasks}
    data = results.build(manifest, got, set(), 1.0)
    if manual_cell:
        data["tests"].append({"name": "nb: essay (manually graded)", "score": 0, "max_score": 4, "status": "failed",
                              "visibility": "visible", "output": "", "extra_data": {"task": "nb", "kind": "manual"}})
        data["tests"].append({"name": "nb: sum", "score": 2, "max_score": 2, "status": "passed",
                              "visibility": "visible", "output": "", "extra_data": {"task": "nb", "kind": "auto"}})
    return data


def run_task_passed(tmp_path: Path, data: dict | None, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "results.json"
    if data is not None:
        path.write_text(json.dumps(data))
    return subprocess.run([sys.executable, str(TASK_PASSED), str(path), *args], capture_output=True, text=True)


def test_task_passed_awards_a_task_only_when_all_its_tests_passed(tmp_path):
    task = manifest_of(ROOT).tasks[0]
    first, *_ = task.tests
    other = manifest_of(ROOT).tasks[1].id
    data = fake_results({first: False})
    failed = run_task_passed(tmp_path, data, task.id)
    assert failed.returncode == 1 and f"{task.id}: {first.split('::')[1]}: 0 / {task.tests[first]} failed" in failed.stdout
    assert run_task_passed(tmp_path, data, other).returncode == 0
    # a notebook's manual cells wait for the instructor: the autograded ones decide
    assert run_task_passed(tmp_path, data, "nb").returncode == 0
    # no verdict (exit 2) without results, or for a task the results do not know
    assert run_task_passed(tmp_path, data, "a0_nothing").returncode == 2
    (tmp_path / "results.json").unlink()
    assert run_task_passed(tmp_path, None, task.id).returncode == 2


def test_task_passed_summary_lists_every_visible_test(tmp_path):
    data = fake_results({})
    run = run_task_passed(tmp_path, data, "--summary")
    assert run.returncode == 0
    assert f"## servelab: {data['score']} / {data['max_score']} points" in run.stdout
    assert run.stdout.count("\n| ") == len(data["tests"]) + 1  # header row, then one per test


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def course_repo(tmp_path: Path) -> Path:
    """A committed course repository with Gradescope's two scripts and a private file."""
    repo = tmp_path / "course"
    (repo / "autograder" / "gradescope").mkdir(parents=True)
    (repo / "autograder" / "answers").mkdir()
    for name in ("setup.sh", "run_autograder"):
        shutil.copy2(ROOT / "autograder" / "gradescope" / name, repo / "autograder" / "gradescope" / name)
    (repo / "autograder" / "answers" / "answer_key.json").write_text("{}")  # private, tracked: goes in
    (repo / "Makefile").write_text("all:\n")
    (repo / ".gitignore").write_text("/out/\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "course")
    return repo


def make_zip(repo: Path, out: Path, secret_file: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_GRADING_SECRET")}
    if secret_file is not None:
        env["SERVELAB_GRADING_SECRET_FILE"] = str(secret_file)
    return subprocess.run(["bash", str(MAKE_ZIP), str(out)], cwd=repo, capture_output=True, text=True, env=env)


def test_make_zip_packs_tracked_files_only(tmp_path):
    repo = course_repo(tmp_path)
    (repo / "scratch.py").write_text("print('not for Gradescope')\n")  # untracked, not ignored
    (repo / "out").mkdir()
    (repo / "out" / "results.json").write_text("{}")  # untracked, ignored
    (repo / "Makefile").write_text("all:\n\ttrue\n")  # tracked, edited: the work tree's version

    run = make_zip(repo, tmp_path / "autograder.zip")
    assert run.returncode == 0, run.stderr
    with zipfile.ZipFile(tmp_path / "autograder.zip") as z:
        names = sorted(n for n in z.namelist() if not n.endswith("/"))
        makefile = z.read("Makefile").decode()
    tracked = git(repo, "ls-files").split()
    assert names == sorted(tracked + ["setup.sh", "run_autograder", "grading.grading-secret"])
    assert "scratch.py" not in names and "out/results.json" not in names
    assert makefile == "all:\n\ttrue\n"


def test_make_zip_packs_one_grading_secret_and_keeps_it_for_the_next_zip(tmp_path):
    repo = course_repo(tmp_path)
    out = tmp_path / "autograder.zip"
    sidecar = tmp_path / "autograder.zip.grading-secret"
    assert make_zip(repo, out).returncode == 0
    made = sidecar.read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", made) and sidecar.stat().st_mode & 0o777 == 0o600
    assert make_zip(repo, out).returncode == 0  # a rebuilt zip keeps the inputs: the same secret
    with zipfile.ZipFile(out) as z:
        assert z.read("grading.grading-secret").decode().strip() == made == sidecar.read_text().strip()

    mine = tmp_path / "course.grading-secret"
    mine.write_text("the instructors' own secret\n")
    assert make_zip(repo, out, secret_file=mine).returncode == 0
    with zipfile.ZipFile(out) as z:
        assert z.read("grading.grading-secret").decode() == "the instructors' own secret\n"
    out.unlink()
    missing = make_zip(repo, out, secret_file=tmp_path / "typo.grading-secret")
    assert missing.returncode == 2 and "typo.grading-secret" in missing.stderr and not out.exists()


def fake_gradescope(tmp_path: Path, python_body: str) -> tuple[Path, dict[str, str]]:
    """/autograder with the real run_autograder, a packed secret and a stand-in for the venv's
    python (``python_body``: a bash script given the grader's arguments)."""
    top = tmp_path / "autograder"
    (top / "source" / ".venv" / "bin").mkdir(parents=True)
    (top / "submission").mkdir()
    (top / "source" / "grading.grading-secret").write_text("packed secret\n")
    fake = top / "source" / ".venv" / "bin" / "python"
    fake.write_text("#!/usr/bin/env bash\n" + python_body)
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_GRADING_SECRET")}
    return top, {**env, "AUTOGRADER_ROOT": str(top)}


def test_run_autograder_grades_with_the_packed_secret_out_of_the_course_copy(tmp_path):
    # the stand-in grader writes, as its output, which secret file it was given
    body = 'out="${@: -1}"; printf \'{"score": 0, "output": "%s", "tests": []}\' "$SERVELAB_GRADING_SECRET_FILE" > "$out"\n'
    top, env = fake_gradescope(tmp_path, body)
    for _ in range(2):  # the second run finds the secret already moved
        run = subprocess.run(["bash", str(ROOT / "autograder" / "gradescope" / "run_autograder")], env=env,
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert json.loads((top / "results" / "results.json").read_text())["output"] == str(top / "grading-secret")
    assert not (top / "source" / "grading.grading-secret").exists()
    assert (top / "grading-secret").read_text() == "packed secret\n"
    assert (top / "grading-secret").stat().st_mode & 0o777 == 0o600


def test_run_autograder_leaves_a_valid_results_file_when_the_grader_fails(tmp_path):
    top, env = fake_gradescope(tmp_path, "exit 3\n")
    subprocess.run(["bash", str(ROOT / "autograder" / "gradescope" / "run_autograder")], env=env,
                   capture_output=True, text=True)
    data = json.loads((top / "results" / "results.json").read_text())
    assert data["score"] == 0 and data["tests"] == [] and "autograder failed" in data["output"]
