"""The instructors' side of grading: time limits calibrated to the machine, pending manual cells,
feedback from a single grade, helps that show their defaults, and outputs with normal
permissions."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import jsonschema
import pytest

from autograder.grading import calibrate, feedback, results
from autograder import files
from autograder.notebooks import nbgrader
from autograder.__main__ import HELP, build_parser
from autograder.grading.grade import ROOT, grade, manifest_of
from autograder.sandbox.remote import Limits

SCHEMA = json.loads((ROOT / "autograder" / "tests" / "gradescope_results.schema.json").read_text())


# ---- calibration (autograder/grading/calibrate.py) --------------------------------------------------------

@pytest.mark.parametrize("seconds", [0.0, 0.05, 0.2, 0.21, 0.5, 1.7, 3.0, 50.0])
def test_the_factor_follows_the_time_within_its_bounds(seconds):
    f = calibrate.factor_of(seconds)
    assert 1.0 <= f <= calibrate.MAX_FACTOR
    # never below the ratio (the limits must cover the slowdown), unless capped
    assert f >= min(seconds / calibrate.REFERENCE_S, calibrate.MAX_FACTOR) - 1e-9
    assert f <= max(1.0, seconds / calibrate.REFERENCE_S + 0.01)


@pytest.mark.parametrize("factor", [1.0, 1.01, 2.5, 10.0])
def test_scaled_limits_never_go_below_the_given_ones(factor):
    given = Limits(wall_s=4.0, cpu_s=3, memory_bytes=1 << 30, output_bytes=1 << 10)
    big = calibrate.scaled(given, factor)
    assert big.wall_s == pytest.approx(4.0 * factor) and big.cpu_s >= 3 * factor and big.cpu_s >= given.cpu_s
    assert (big.memory_bytes, big.output_bytes, big.nproc) == (given.memory_bytes, given.output_bytes, given.nproc)


@pytest.mark.parametrize("bad", [0.5, 0, -1, float("nan"), float("inf")])
def test_a_factor_below_one_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="factor must be a finite number >= 1"):
        calibrate.scaled(Limits(), bad)
    with pytest.raises(ValueError, match="cpu_factor must be a finite number >= 1"):
        calibrate.scaled(Limits(), 2.0, cpu_factor=bad)


def test_the_calibration_runs_the_workload_in_a_child():
    cal = calibrate.measure()
    # its CPU time is the child's own (not zero, not this process's), and the wall time covers it
    assert 0 < cal.cpu_s <= cal.wall_s + 0.05
    # the factor comes from the unrounded wall time; the record keeps it to the millisecond
    assert abs(cal.factor - calibrate.factor_of(cal.wall_s)) <= 0.01 + 1e-9
    # the CPU limits' factor from the CPU time alone
    assert abs(cal.cpu_factor - calibrate.factor_of(cal.cpu_s, calibrate.REFERENCE_CPU_S)) <= 0.01 + 1e-9


def test_grade_hands_the_scaled_limits_to_every_task_and_says_so(tmp_path, monkeypatch):
    from autograder.grading import grade as grade_module

    seen = []
    real = grade_module.run_task
    monkeypatch.setattr(grade_module, "run_task", lambda *a: (seen.append(a[4]), real(*a))[1])
    # a loaded machine (wall-clock x4) that is also slower (its CPU time x1.5)
    monkeypatch.setattr(calibrate, "measure", lambda side_by_side=1: calibrate.Calibration(0.8, 0.255, 4.0, 1.5))
    said = []
    (tmp_path / "empty").mkdir()
    data = grade(tmp_path / "empty", limits=Limits(wall_s=2.0, cpu_s=2), report=said.append)
    assert seen and all((limits.wall_s, limits.cpu_s) == (8.0, 3) for limits in seen)
    assert said[0].startswith("time limits x4.00") and "8 s wall-clock, 3 s CPU (x1.50" in said[0]
    # the tasks' time budget (4 s a test x4, and one 8 s limit), the notebooks' (each one's recheck
    # of KERNEL_CPU_FACTOR 8 s limits, then nbgrader: a minute and two 8 s limits a notebook),
    # each at most its cap (Gradescope's timeout), then the time, which results.json leaves out
    from autograder.notebooks.nbgrader import KERNEL_CPU_FACTOR, notebooks_of
    tasks = min(grade_module.TASKS_CAP_S,
                4 * 4 * sum(len(t.tests) for t in grade_module.manifest_of(grade_module.ROOT).tasks) + 8)
    count = len(notebooks_of(grade_module.ROOT))
    books = min(grade_module.NOTEBOOKS_CAP_S, count * KERNEL_CPU_FACTOR * 8 + 60 + count * 2 * 8)
    assert said[1] == (f"time budget: at most {tasks + books:.0f} s (under Gradescope's default timeout of 600 s, at "
                       f"any load): {tasks:.0f} s for the tasks (4 s a test x4, and a reserve of 1 per-test limit; at "
                       f"most 330 s), {books:.0f} s for {count} notebooks (at most 210 s)"), said[1]
    assert len(said) == 3 and said[2].startswith("graded in ")
    assert "x4" not in json.dumps(data) and "calibration" not in json.dumps(data)


def test_the_factor_changes_no_byte_of_results_json(tmp_path):
    """A grade must not depend on the load: the same submission graded with limits scaled x1 and
    x3 writes the same results.json, byte for byte."""
    from autograder.selfcheck import HOSTILE

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    grade(HOSTILE / "sys_exit_at_import", out=a, time_factor=1.0)
    grade(HOSTILE / "sys_exit_at_import", out=b, time_factor=3.0)
    assert a.read_bytes() == b.read_bytes()


# ---- pending manual cells (autograder/notebooks/scores.py merge, autograder/grading/results.py) -------------------

def _graded_notebooks(message_for_manual: str) -> dict:
    """results.json of no Python task, with every notebook cell scored by hand-made outcomes:
    autograded cells passed, manual cells with ``message_for_manual``."""
    data = results.build(manifest_of(ROOT), {t.id: {test: _Outcome() for test in t.tests} for t in manifest_of(ROOT).tasks},
                         set(), 0.0)
    scores: dict[str, dict[str, tuple[float, str]]] = {}
    for nb in nbgrader.notebooks_of(ROOT):
        cells = nbgrader.cell_points(ROOT / "assignments" / nb.file)
        scores[nb.id] = {c.grade_id: ((c.points, "passed") if c.kind == "auto" else
                                      (0, message_for_manual.format(points=c.points))) for c in cells}
    return nbgrader.merge(data, ROOT, scores)


class _Outcome:
    passed, message = True, "passed"


def test_manual_cells_are_pending_not_failed():
    data = _graded_notebooks(nbgrader.PENDING)
    jsonschema.validate(data, SCHEMA)
    manual = [t for t in data["tests"] if t["extra_data"].get("kind") == "manual"]
    assert manual and all("status" not in t and t["score"] == 0 and "pending" in t["output"] for t in manual)
    assert all(t.get("status") == "passed" for t in data["tests"] if t not in manual)
    assert {results.status_of(t) for t in manual} == {"pending"}


def test_a_manual_cell_that_could_not_be_graded_has_failed():
    """Pending means "waits for the instructor": a manual cell of a missing notebook fails."""
    data = _graded_notebooks("missing file: the submission has no notebook ({points})")
    manual = [t for t in data["tests"] if t["extra_data"].get("kind") == "manual"]
    assert manual and all(t["status"] == "failed" for t in manual)


def test_feedback_shows_pending_cells_as_pending(tmp_path):
    data = _graded_notebooks(nbgrader.PENDING)
    text = feedback.page("ada", data, after_due_date=True)
    rows = [line for line in text.splitlines() if "(manually graded)" in line and line.startswith("|")]
    assert rows and all(line.endswith("| pending |") for line in rows)
    assert "failed" not in text  # and no failure section for them


# ---- feedback on a single grade (autograder/grading/feedback.py) ------------------------------------------

@pytest.fixture()
def one_grade(tmp_path):
    data = _graded_notebooks(nbgrader.PENDING)
    out = tmp_path / "ada" / "results.json"
    results.write_json_atomic(data, out)
    return out


def test_feedback_takes_the_folder_of_one_grade(tmp_path, one_grade):
    pages = feedback.publish(one_grade.parent, tmp_path / "fb")
    assert [p.name for p in pages] == ["ada.md"]
    assert "# servelab feedback: ada" in pages[0].read_text()


def test_feedback_takes_one_results_json(tmp_path, one_grade):
    other = one_grade.with_name("bob.json")
    other.write_bytes(one_grade.read_bytes())
    assert [p.name for p in feedback.publish(one_grade, tmp_path / "fb")] == ["ada.md"]
    assert [p.name for p in feedback.publish(other, tmp_path / "fb")] == ["bob.md"]


def test_feedback_on_anything_else_is_a_one_line_error(tmp_path):
    (tmp_path / "nothing").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    for target, says in ((tmp_path / "nothing", "must be grade-all's --out folder"),
                         (tmp_path / "bad.json", "is not a results.json written by the grader")):
        run = subprocess.run([sys.executable, "-m", "autograder", "feedback", str(target), "--out", str(tmp_path / "fb")],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert run.returncode == 2 and says in run.stderr, run.stderr
        assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


# ---- the command line's help (autograder/__main__.py) ----------------------------------------------

def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_help_shows_every_default():
    parser = build_parser()
    for name, sub in {"": parser, **_subparsers(parser)}.items():
        for action in sub._actions:
            if not action.option_strings or action.default == argparse.SUPPRESS:
                continue  # positionals have no default; --help has none
            text = HELP(name)._get_help_string(action) or ""
            assert "default" in text, (name, action.option_strings, text)


def test_the_timeout_help_says_what_it_bounds(capsys):
    for command in ("grade", "grade-all"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--timeout TIMEOUT per test: the seconds of wall-clock time, and of CPU time" in text
        assert "(default: 60.0)" in text and "(default: 2048)" in text


def test_selfcheck_refuses_no_jobs():
    run = subprocess.run([sys.executable, "-m", "autograder", "selfcheck", "--jobs", "0"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 2 and "--jobs must be at least 1, got 0" in run.stderr


# ---- permissions of outputs -----------------------------------------------------------------------

@pytest.fixture()
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_results_json_and_feedback_pages_are_0644(tmp_path, one_grade, umask_022):
    assert one_grade.stat().st_mode & 0o777 == 0o644
    page = feedback.publish(one_grade, tmp_path / "fb")[0]
    assert page.stat().st_mode & 0o777 == 0o644 and page.parent.stat().st_mode & 0o777 == 0o755


def test_atomic_writes_follow_the_umask(tmp_path):
    old = os.umask(0o077)  # an instructor who keeps everything private gets that
    try:
        path = files.write_text_atomic(tmp_path / "x.csv", "a\n")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600


# ---- `grade .` on the instructors' checkout (autograder/grading/grade.py) ---------------------------------

def test_grading_the_course_copy_grades_a_copy_of_its_answers(monkeypatch):
    """``grade .`` in the instructors' checkout: the tasks and notebooks get copies of its edit
    files and notebooks, and no sandbox is told to refuse the virtual environment that runs it
    (it lies inside the checkout when it is the in-repo .venv: every kernel died of that)."""
    from pathlib import Path

    from autograder.grading import grade as grade_module
    from autograder.grading.judge import Outcome

    seen = {}

    def record(key, files, forbidden):  # the copies go with the grading's temporary folder: read them now
        seen[key] = ({rel: (Path(p), Path(p).read_bytes()) for rel, p in files.items()}, list(forbidden))

    def fake_task(root, task, files, workdir, limits, forbidden):
        record(task.id, files, forbidden)
        return {test: Outcome(True, "passed") for test in task.tests}

    def fake_notebooks(root, files, work, limits, forbidden, keep=None):
        record("notebooks", files, forbidden)
        return nbgrader.not_graded(root, "not graded here")

    monkeypatch.setattr(grade_module, "run_task", fake_task)
    monkeypatch.setattr(nbgrader, "autograde", fake_notebooks)
    said = []
    grade(ROOT, time_factor=1.0, report=said.append)
    venv = Path(sys.prefix).resolve()
    assert any("course copy itself" in line for line in said)
    for key, (files, forbidden) in seen.items():
        assert isinstance(files, dict) and files, key
        for rel, (path, content) in files.items():
            assert ROOT not in path.resolve().parents, (key, rel, path)
            assert content == (ROOT / "assignments" / rel).read_bytes()
        assert not any(p == venv or p in venv.parents for p in map(Path, forbidden)), (key, forbidden)
