"""grade-all: a folder of submissions -> one results.json each and a CSV gradebook in name order."""

from __future__ import annotations

import csv
import json
import shutil
import tempfile

import pytest

from autograder.grading.grade import ROOT, manifest_of
from autograder.grading.feedback import publish
from autograder.grading.gradebook import grade_all
from autograder.sandbox.remote import Limits
from autograder.notebooks.nbgrader import cell_points, notebooks_of
from autograder.selfcheck import notebook_full_marks, reference_submission


def test_grade_all_writes_a_gradebook(tmp_path, private_tmpdir, monkeypatch, capsys):
    """Two students and an empty hand-in, ``--jobs 2``, in the default mode, under a TMPDIR only
    root may enter: the reference's points for both (the honest class of this mode:
    test_mode_matrix.py has the others), and no folder above TMPDIR changes (the fixture)."""
    monkeypatch.setenv("TMPDIR", str(private_tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", None)  # the grader's own folders go there too
    subs = tmp_path / "subs"
    # the first task's reference (the reference's full marks on every task is the self-check's),
    # and the notebooks: autograded, merged in
    first = manifest_of(ROOT).tasks[0]
    reference_submission(subs / "bob", with_notebooks=True, tasks=frozenset({first.id}))
    shutil.make_archive(str(subs / "alice"), "zip", subs / "bob")
    (subs / "carol").mkdir()  # submitted nothing
    out = tmp_path / "out"
    path = grade_all(subs, out, root=ROOT, limits=Limits(wall_s=30, cpu_s=30), jobs=2)
    rows = list(csv.reader(path.open()))
    said = capsys.readouterr().out  # the instructor's line: how fast the class went
    assert "throughput: 3 submissions in " in said and " a minute, 2 at a time" in said, said
    nb_auto = notebook_full_marks()
    nb_all = {nb.id: sum(c.points for c in cell_points(ROOT / "assignments" / nb.file)) for nb in notebooks_of(ROOT)}
    total = first.points + sum(nb_auto.values())
    max_total = manifest_of(ROOT).total_points + sum(nb_all.values())
    assert rows[0][0] == "submission" and rows[0][-3:] == ["manual_pending", "score", "max_score"]
    assert rows[0][1:-3] == [*(t.id for t in manifest_of(ROOT).tasks), *nb_auto]
    assert [r[0] for r in rows[1:]] == ["alice", "bob", "carol"]
    assert [int(r[-2]) for r in rows[1:]] == [total, total, 0]
    assert [int(r[1]) for r in rows[1:]] == [first.points, first.points, 0] and {r[2] for r in rows[1:]} == {"0"}
    assert [int(r[-1]) for r in rows[1:]] == [max_total] * 3
    assert [int(r[-3]) for r in rows[1:]] == [sum(nb_all.values()) - sum(nb_auto.values())] * 3
    assert sorted(p.name for p in (out / "results").iterdir()) == ["alice.json", "bob.json", "carol.json"]
    # the executed notebooks stay for manual grading
    assert sorted(p.name for p in (out / "notebooks" / "bob").iterdir()) == sorted(
        f"{nb.name}.ipynb" for nb in notebooks_of(ROOT))
    pages = publish(out, tmp_path / "feedback")
    assert [p.name for p in pages] == ["alice.md", "bob.md", "carol.md"]
    # a student's page before the due date: the visible tests' total (the gradebook counts all)
    alice = json.loads((out / "results" / "alice.json").read_text())
    shown = [t for t in alice["tests"] if t["visibility"] == "visible"]
    seen = f"{sum(t['score'] for t in shown)} / {sum(t['max_score'] for t in shown)}"
    assert (alice["score"], alice["max_score"]) == tuple(int(x) for x in seen.split(" / "))
    assert "missing file" in pages[2].read_text() and seen in pages[0].read_text()
    after = publish(out, tmp_path / "feedback-after", after_due_date=True)
    assert f"{total} / {max_total}" in after[0].read_text()
    assert "manually graded" in pages[0].read_text()
    # the similarity report, for instructors only (autograder/tests/test_similarity.py): alice
    # and bob hand in the same reference file; carol nothing
    alike = {(r["kind"], r["a"], r["b"]) for r in csv.DictReader((out / "similarity.csv").open())}
    assert alike == {("classmate", "alice", "bob"), ("reference", "alice", "reference"), ("reference", "bob", "reference")}
    assert "similarity" not in (out / "results" / "alice.json").read_text()


def test_grade_all_names_a_bad_folder(tmp_path):
    with pytest.raises(NotADirectoryError, match="folder of submissions"):
        grade_all(tmp_path / "nope", tmp_path / "out", root=ROOT)
