"""results.json follows Gradescope's schema, whatever the submission: full marks, a missing
file, a syntax error, a zip, a regrade (byte-identical)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import jsonschema
import pytest

from autograder.grading.grade import grade, manifest_of, ROOT
from autograder.notebooks.nbgrader import cell_points, notebooks_of
from autograder.sandbox.remote import Limits
from autograder.grading.submission import collect, unpack
from autograder.selfcheck import points_by_task, reference_submission

SCHEMA = json.loads((Path(__file__).with_name("gradescope_results.schema.json")).read_text())
MANIFEST = manifest_of(ROOT)
QUICK = Limits(wall_s=30.0, cpu_s=30)  # generous: a loaded CI machine must not turn a pass into a timeout


# the nbgrader notebooks: one test per graded cell, after the tasks' tests (autograder/notebooks/scores.py)
NB_CELLS = [(nb.file, c) for nb in notebooks_of(ROOT) for c in cell_points(ROOT / "assignments" / nb.file)]


def task_tests(data: dict) -> list[dict]:
    return [t for t in data["tests"] if "notebook" not in t["extra_data"]]


def validate(data: dict) -> None:
    jsonschema.validate(data, SCHEMA)
    assert sum(t["max_score"] for t in data["tests"]) == MANIFEST.total_points + sum(c.points for _, c in NB_CELLS)
    # graded before the due date: the totals a student sees count the visible tests only
    visible = [t for t in data["tests"] if t["visibility"] == "visible"]
    assert data["extra_data"]["hidden_points_counted"] is False
    assert (data["score"], data["max_score"]) == (sum(t["score"] for t in visible), sum(t["max_score"] for t in visible))
    assert [t["extra_data"]["test"] for t in task_tests(data)] == [x for task in MANIFEST.tasks for x in task.tests]
    assert [(t["extra_data"]["notebook"], t["extra_data"]["cell"], t["max_score"]) for t in data["tests"]
            if "notebook" in t["extra_data"]] == [(f, c.grade_id, c.points) for f, c in NB_CELLS]


def test_the_schema_rejects_what_gradescope_would():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"score": 1, "max_score": 1, "execution_time": 0,
                             "tests": [{"name": "x", "score": 1, "max_score": 1, "status": "ok",
                                        "output": "", "visibility": "visible"}]}, SCHEMA)


def test_reference_results_validate_and_written_atomically(reference_results, reference_regraded):
    # the self-check's grading of the reference (conftest.py), and this session's of a part of it
    # (test_selfcheck.py compares the two), written into a folder a few levels deep
    validate(reference_results)
    assert all(t["status"] == "passed" and t["visibility"] == "visible" for t in task_tests(reference_results))
    data, out = reference_regraded
    jsonschema.validate(data, SCHEMA)
    assert json.loads(out.read_text()) == data
    assert [p.name for p in out.parent.iterdir()] == ["results.json"]  # no temporary left behind


def test_missing_file_gives_zero_with_a_message(tmp_path):
    (tmp_path / "empty").mkdir()
    data = grade(tmp_path / "empty", limits=QUICK)
    validate(data)
    assert data["score"] == 0
    edit = {t.id: t.edit[0] for t in MANIFEST.tasks} | {nb.id: nb.file for nb in notebooks_of(ROOT)}
    for t in data["tests"]:
        assert "missing file" in t["output"] and edit[t["extra_data"]["task"]] in t["output"], t


def test_syntax_error_gives_zero_with_a_message(tmp_path):
    path = tmp_path / "sub" / "assignments" / "a1_ledger" / "ledger.py"
    path.parent.mkdir(parents=True)
    path.write_text("def param_count(model)\n    return 1\n")
    data = grade(tmp_path / "sub", limits=QUICK)
    validate(data)
    assert data["score"] == 0
    ledger = [t for t in data["tests"] if t["name"].startswith("a1_ledger:")]
    assert ledger and all("SyntaxError" in t["output"] and str(tmp_path) not in t["output"] for t in ledger)
    assert all("missing file" in t["output"] for t in data["tests"] if t not in ledger)


def test_a_zip_of_the_repository_grades_like_the_folder(tmp_path):
    ref = reference_submission(tmp_path / "ref")
    archive = tmp_path / "student.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in ref.rglob("*"):
            z.write(p, Path("student-repo") / p.relative_to(ref))
    # every task finds in the zip the very files the folder gives it...
    unpacked = unpack(archive, tmp_path / "unpacked")
    for task in MANIFEST.tasks:
        files = collect(unpacked, task.edit)
        assert isinstance(files, dict), files
        assert {rel: p.read_bytes() for rel, p in files.items()} == \
            {rel: (ref / "assignments" / rel).read_bytes() for rel in task.edit}, task.id
    # ...and grades to full marks from it (one task is enough: grading a task does not depend on
    # where its files came from, and the reference's full marks on every task is the self-check's)
    only = frozenset({MANIFEST.tasks[0].id})
    data = grade(archive, limits=QUICK, only_tasks=only)
    validate(data)
    assert points_by_task(data) == {t.id: (t.points if t.id in only else 0) for t in MANIFEST.tasks} | \
        {nb.id: 0 for nb in notebooks_of(ROOT)}


def test_not_a_submission_is_a_clear_error_in_the_results(tmp_path):
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello")
    data = grade(bogus, limits=QUICK)
    validate(data)
    assert data["score"] == 0 and all("folder or a .zip" in t["output"] for t in data["tests"])


def test_regrading_is_byte_identical(tmp_path):
    sub = reference_submission(tmp_path / "mutant")
    path = sub / "assignments" / "a1_ledger" / "ledger.py"
    # a partly wrong submission: Hypothesis finds, shrinks and reports a counterexample
    path.write_text(path.read_text().replace("lm_head = 0 if model.tie_embeddings else embedding", "lm_head = embedding"))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    # only the changed task: a regrade of every task is compared in test_selfcheck.py (the
    # self-check's grading of the reference against this session's, two processes, two loads)
    only = frozenset({"a1_ledger"})
    grade(sub, out=a, limits=QUICK, only_tasks=only)
    grade(sub, out=b, limits=QUICK, only_tasks=only)
    da = json.loads(a.read_text())
    ledger = [t for t in da["tests"] if t["extra_data"]["task"] == "a1_ledger"]
    assert 0 < sum(t["score"] for t in ledger) < sum(t["max_score"] for t in ledger) and "execution_time" not in da
    assert a.read_bytes() == b.read_bytes()


def test_an_honest_submission_may_use_numpy(tmp_path):
    sub = reference_submission(tmp_path / "np")
    path = sub / "assignments" / "a1_ledger" / "ledger.py"
    text = path.read_text().replace("import math\n", "import math\n\nimport numpy as np\n", 1)
    text = text.replace("return 2 * model.n_layers * model.n_kv_heads * model.d_head * model.bytes_per_param",
                        "return float(np.prod([2, model.n_layers, model.n_kv_heads, model.d_head])) * model.bytes_per_param")
    assert "np.prod" in text
    path.write_text(text)
    data = grade(sub, limits=Limits(wall_s=30, cpu_s=30), only_tasks=frozenset({"a1_ledger"}))  # the changed task
    assert points_by_task(data)["a1_ledger"] == next(t.points for t in MANIFEST.tasks if t.id == "a1_ledger"), \
        [t["output"] for t in data["tests"] if t["score"] == 0]


def test_regrading_a_crash_at_import_is_byte_identical_too(tmp_path):
    from autograder.selfcheck import HOSTILE

    a = grade(HOSTILE / "sys_exit_at_import", limits=QUICK)
    b = grade(HOSTILE / "sys_exit_at_import", limits=QUICK)
    assert "SystemExit" in a["tests"][0]["output"]
    assert json.dumps(a, indent=2) == json.dumps(b, indent=2)
