"""The students' side of grading: under plain ``pytest assignments/`` with the
points plugin, the reference scores full marks, stubs score zero without a crash and fail fast
("not started", one line a task, no Hypothesis report), a planted bug still prints its shrunk
counterexample, a skipped test earns nothing, ``-m task_<id>`` runs one task and shows the
others as "not selected", and the points table is the last thing printed. Each case runs pytest on a temporary copy of
assignments/ in a child process. (That every mutant loses points is the autograder self-check's
job, through the real grader: ``autograder/selfcheck/``.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.harness.manifest import Manifest, tomllib  # tomli on Python 3.10
from autograder.markers import count_regions, strip_solutions

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"
MANIFEST = Manifest.load(ASSIGNMENTS / "manifest.toml")
MUTANTS = [m for f in sorted((ROOT / "autograder" / "mutants").glob("*.toml"))
           for m in tomllib.loads(f.read_text())["mutant"]]


def copy_assignments(tmp_path: Path) -> Path:
    dst = tmp_path / "assignments"
    shutil.copytree(ASSIGNMENTS, dst, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    return dst


def grade(copy: Path, *extra: str, profile: str = "compat") -> tuple[dict, subprocess.CompletedProcess]:
    """``pytest`` on ``copy`` with the points plugin, under Hypothesis' ``profile``: compat (10
    examples a property) where what is checked is the students' path (points, statuses, the
    table), since the grader's run of the reference (the self-check, 100 examples a property)
    explores the inputs; ci where a bug must be found and shrunk."""
    out = copy.parent / "points.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(copy),
                          "--points-json", str(out), *extra], capture_output=True, text=True, cwd=copy.parent,
                         timeout=600, env={**os.environ, "HYPOTHESIS_PROFILE": profile})
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
    statuses = {t["id"]: t["status"] for t in summary["tasks"]}
    assert statuses == {t.id: "full marks" if t is task else "not selected" for t in MANIFEST.tasks}
    assert summary["selected_max_points"] == task.points
    assert re.search(rf"total\s+of 1 selected task\(s\)\s+{task.points} / {task.points}", run.stdout), run.stdout[-1500:]


def stub_all(copy: Path, keep: str | None = None) -> None:
    """Every task's edited files as a release ships them, except task ``keep``'s (solved)."""
    for task in MANIFEST.tasks:
        for rel in task.edit if task.id != keep else ():
            path = copy / rel
            path.write_text(strip_solutions(path.read_text(), rel))


def last_lines(stdout: str) -> list[str]:
    """The run's output from pytest's tally line ("... in 1.23s") on."""
    lines = stdout.splitlines()
    tally = max(i for i, line in enumerate(lines) if re.search(r"\bin [0-9.]+s\b", line))
    return lines[tally:]


def test_every_edited_file_has_solution_regions():
    for task in MANIFEST.tasks:
        for rel in task.edit:
            assert count_regions((ASSIGNMENTS / rel).read_text()) > 0, rel


def test_stubs_score_zero_and_fail_fast(tmp_path):
    copy = copy_assignments(tmp_path)
    stub_all(copy)
    summary, run = grade(copy)
    assert run.returncode == 1, f"expected test failures only (exit 1), got {run.returncode}"
    assert "ERROR collecting" not in run.stdout and "INTERNALERROR" not in run.stdout + run.stderr
    assert summary["points"] == 0
    assert all(t["status"] == "not started" for t in summary["tasks"])
    # one line a task, no Hypothesis report, no traceback: the probe stopped at the first example
    assert "Falsifying example" not in run.stdout and "Traceback" not in run.stdout
    assert "FAILURES" not in run.stdout, run.stdout[:3000]
    tail = last_lines(run.stdout)
    assert re.match(r"\d+ not started in ", tail[0]), tail[0]
    assert tail[1].startswith(f"servelab: {len(MANIFEST.tasks)} not started (a stub raises NotImplementedError)")
    for task, line in zip(MANIFEST.tasks, tail[2:], strict=False):
        assert re.fullmatch(rf"\s*{task.id}: not started \(\w+\(\) in [\w.]+\.py\)", line), line
    # the table comes last: nothing but its rows after the header
    header = next(i for i, line in enumerate(tail) if "points by task" in line)
    assert header == 2 + len(MANIFEST.tasks)
    assert re.search(r"total\s+0 / " + str(MANIFEST.total_points), "\n".join(tail[header:]))
    assert [line for line in tail[header:] if line.strip()][-1].strip().startswith("total")


def test_one_solved_task_scores_as_before_and_a_planted_bug_is_shrunk(tmp_path):
    copy = copy_assignments(tmp_path)
    stub_all(copy, keep="a1_ledger")
    ledger = copy / "a1_ledger" / "ledger.py"
    summary, run = grade(copy, "-m", "task_a1_ledger or task_a2_roofline", profile="ci")
    assert points_by_task(summary)["a1_ledger"] == MANIFEST.tasks[0].points == summary["points"], run.stdout[-2000:]
    assert {t["id"]: t["status"] for t in summary["tasks"]}["a2_roofline"] == "not started"
    # a bug: one RMSNorm per layer instead of two. Every model with n_layers * d_model > 0 shows
    # it; the shrunk one is the smallest, with one layer of width 1.
    text = ledger.read_text()
    planted = text.replace("per_layer = attention + mlp + 2 * model.d_model", "per_layer = attention + mlp + model.d_model")
    assert planted != text
    ledger.write_text(planted)
    summary, run = grade(copy, "-m", "task_a1_ledger", profile="ci")
    a1 = MANIFEST.tasks[0]
    # every a1 test catches it: the 70B and no-GQA tests, whose lecture numbers are rounded,
    # also check a generated neighbour against the core (no lookup passes them)
    caught = ["test_llama3_8b_numbers", "test_exercise1_llama3_70b", "test_exercise3_no_gqa",
              "test_param_count_matches_core", "test_bytes_match_core", "test_capacity_and_batch_match_core"]
    lost = sum(p for t, p in a1.tests.items() if t.split("::")[1] in caught)
    assert points_by_task(summary)["a1_ledger"] == a1.points - lost, run.stdout[-2000:]
    assert {t["id"]: t["status"] for t in summary["tasks"]}["a1_ledger"] == "failing"
    # its section of pytest's FAILURES: from its header to the next test's
    section = re.search(r"_{3,} test_param_count_matches_core _{3,}\n(.*?)(?:\n_{3,} \w|\Z)", run.stdout, re.S)
    assert section, run.stdout[-3000:]
    report = section.group(1)
    assert "Falsifying example" in report or "Failing test case" in report, report[:3000]
    assert re.search(r"n_layers=1,\s+d_model=1,", report), report[:3000]
    assert re.search(r"param_count of ModelSpec\(.*\): expected \d+, got \d+", report)
    # the one-line summary names each failing test, before the table
    tail = last_lines(run.stdout)
    assert any(line.strip().startswith("a1_ledger: test_param_count_matches_core: param_count of") for line in tail)
    # ... to its end, what was expected and what came out (wrapped, not cut at 80 columns)
    lines = " ".join(line.strip() for line in tail[:next(i for i, line in enumerate(tail) if "points by task" in line)])
    assert re.search(r"test_param_count_matches_core: param_count of ModelSpec\(.*?\): expected \d+, got \d+", lines), lines
    # a bug the simplest model does not show (a layer lost from the third on): the probe's first
    # example passes, so only the full run's shrinking can bring the report down to 3 layers
    ledger.write_text(text.replace("return model.n_layers * per_layer",
                                   "return (model.n_layers - (model.n_layers >= 3)) * per_layer"))
    summary, run = grade(copy, "-m", "task_a1_ledger", profile="ci")
    section = re.search(r"_{3,} test_param_count_matches_core _{3,}\n(.*?)(?:\n_{3,} \w|\Z)", run.stdout, re.S)
    assert section, run.stdout[-3000:]
    assert re.search(r"n_layers=3,\s+d_model=1,\s+n_heads=1,\s+n_kv_heads=1,\s+d_head=1,\s+d_ff=1,\s+vocab_size=1,",
                     section.group(1)), section.group(1)[:3000]


def test_a_skipped_test_earns_nothing(tmp_path):
    """One task's run (the points of a task depend on its own tests only): the reference's full
    marks for it, less the skipped test's."""
    copy = copy_assignments(tmp_path)
    task = MANIFEST.tasks[0]
    test_id = next(iter(task.tests))
    path_rel, func = test_id.split("::")
    path = copy / path_rel
    text = path.read_text().replace(f"\ndef {func}(", f"\n@__import__('pytest').mark.skip\ndef {func}(", 1)
    path.write_text(text)
    summary, run = grade(copy, "-m", task.marker)
    assert points_by_task(summary)[task.id] == task.points - task.tests[test_id], run.stdout[-2000:]


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


def test_a_pytest_outside_the_venv_gets_a_one_line_hint(tmp_path):
    # what a student's bare `pytest` (another environment's, no servelab) meets: a servelab that
    # cannot be imported, simulated by a package that raises as a missing module does
    fake = tmp_path / "fake" / "servelab"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'servelab'\", name='servelab')\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ASSIGNMENTS), "-m",
                          "task_a1_ledger"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(fake.parent)})
    assert run.returncode == 4, run.stdout + run.stderr
    assert run.stderr.splitlines() == ["No module named 'servelab': this pytest runs outside the project's .venv; "
                                       "run `make check` (or .venv/bin/pytest assignments/) instead"], run.stderr
    assert "Traceback" not in run.stdout + run.stderr


def test_a_collection_error_leaves_the_other_tasks_not_run(tmp_path):
    # pytest stops before running anything when a test file cannot be imported: the table must
    # not call the untouched tasks "failing" or "not started"
    copy = copy_assignments(tmp_path)
    stub_all(copy)
    broken = copy / MANIFEST.tasks[0].edit[0]
    broken.write_text(broken.read_text() + "\ndef broken(:\n")
    summary, run = grade(copy)
    assert run.returncode == 2 and "ERROR collecting" in run.stdout, run.stdout[-2000:]
    statuses = {t["id"]: t["status"] for t in summary["tasks"]}
    assert statuses == {t.id: "not collected" if t is MANIFEST.tasks[0] else "not run" for t in MANIFEST.tasks}
