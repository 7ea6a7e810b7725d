"""The self-check, one check per test: reference full marks, release zero (graded and under
pytest), each task's reference pasted back into the release, every mutant, every hostile."""

from __future__ import annotations

import pytest

from autograder import selfcheck
from autograder.grade import manifest_of, ROOT

MUTANTS = selfcheck.mutants()
HOSTILES = selfcheck.hostiles()
TASKS = [t.id for t in manifest_of(ROOT).tasks]


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory):
    return selfcheck.make_release(tmp_path_factory.mktemp("release"))


def test_reference_scores_full_marks(tmp_path):
    assert selfcheck.check_reference(tmp_path) == []


def test_release_grades_to_zero_without_error(release_dir):
    assert selfcheck.check_release_grades_zero(release_dir) == []


def test_release_pytest_shows_zero_and_fails_cleanly(release_dir):
    assert selfcheck.check_release_pytest_zero(release_dir) == []


@pytest.mark.parametrize("task_id", TASKS)
def test_pasting_one_reference_back_earns_that_task_only(release_dir, task_id):
    assert selfcheck.check_paste_back(release_dir, task_id) == []


def test_notebooks_with_edited_test_cells_gain_nothing(release_dir, tmp_path):
    assert selfcheck.check_notebook_tampering(release_dir, tmp_path) == []


def test_there_are_mutants_and_hostiles():
    assert len(MUTANTS) >= 4 and len(HOSTILES) >= 15


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["why"] for m in MUTANTS])
def test_each_mutant_loses_points_on_its_task(tmp_path, mutant):
    assert selfcheck.check_mutant(mutant, tmp_path) == []


@pytest.mark.parametrize("folder", HOSTILES, ids=[h.name for h in HOSTILES])
def test_each_hostile_submission_scores_no_more_than_its_honest_work(tmp_path, folder):
    assert selfcheck.check_hostile(folder, tmp_path) == []


# The tricks are real: outside the sandbox (same argv[0] as the grader's child), these hostile
# modules do get the right answer, so it is the sandbox that makes them score nothing.
CONTROL = """
import dataclasses, runpy, sys
from types import SimpleNamespace
from servelab.hw_model import LLAMA3_8B
sys.argv = [{child!r}]
module = runpy.run_path({path!r})
print(module[{func!r}](SimpleNamespace(**{{f.name: getattr(LLAMA3_8B, f.name) for f in dataclasses.fields(LLAMA3_8B)}})))
"""


@pytest.mark.parametrize("name, func, expected", [("read_answer_key", "param_count", "8030261248"),
                                                  ("load_core_by_path", "param_count", "8030261248"),
                                                  ("oracle_call", "weight_bytes", "16060522496.0"),
                                                  ("spawn_through_renamed_extension", "param_count", "8030261248")])
def test_the_trick_works_outside_the_sandbox(tmp_path, name, func, expected):
    import subprocess
    import sys

    code = CONTROL.format(child=str(ROOT / "autograder" / "child.py"), func=func,
                          path=str(selfcheck.HOSTILE / name / "a1_ledger" / "ledger.py"))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert run.stdout.strip().splitlines()[-1:] == [expected], run.stderr[-2000:]
