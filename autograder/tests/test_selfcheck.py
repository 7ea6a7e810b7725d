"""The self-check, one pytest test per check: reference full marks, release zero (graded and
under pytest), each task's reference pasted back into the release, every mutant, every hostile.

Every check grades its submission once per session, all of them side by side
(:func:`autograder.selfcheck.run_all`, ``SELFCHECK_JOBS`` workers, default the cores), started
by ``conftest.py`` as soon as the tests are collected; the tests below only read the results.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from autograder import selfcheck
from autograder.files import normal_mode
from autograder.grading.grade import manifest_of, ROOT

MUTANTS = selfcheck.mutants()
HOSTILES = selfcheck.hostiles()
CHECKS = selfcheck.checks()


@pytest.fixture(scope="session")
def results(selfcheck_run) -> dict[str, selfcheck.Result]:
    return selfcheck_run[0]


@pytest.fixture(scope="session")
def selfcheck_dir(selfcheck_run):
    return selfcheck_run[1]


@pytest.mark.parametrize("name", [c.name for c in CHECKS])
def test_check_holds(results, name):
    assert results[name].problems == []


def test_every_kind_of_check_is_there():
    kinds = [c.kind for c in CHECKS]
    assert {"reference", "release-grade", "release-pytest", "notebook-tampering"} <= set(kinds)
    assert kinds.count("paste-back") == len(manifest_of(ROOT).tasks)
    assert kinds.count("mutant") == len(MUTANTS) and kinds.count("hostile") == len(HOSTILES)
    assert kinds.count("bounds") == len(manifest_of(ROOT).tasks)  # every task, none left to opt in
    assert len(MUTANTS) >= 4 and len(HOSTILES) >= 15


def test_each_mutant_fails_some_test_of_its_own_task(results):
    for n, mutant in enumerate(MUTANTS):
        check = next(c for c in CHECKS if c.kind == "mutant" and c.arg == str(n))
        killed = results[check.name].killed
        assert killed, check.name
        own = next(t for t in manifest_of(ROOT).tasks if t.id == mutant["task"]).tests
        assert all(t in own for t in killed), (check.name, killed)


def test_the_graded_tests_no_mutant_fails_are_listed(results):
    """Each graded test is failed by at least one mutant. Until the mutants cover
    every test (``selfcheck.SURVIVORS_FAIL``), the list is a warning; either way it must be
    exactly the tests no mutant's grading failed."""
    survivors = selfcheck.survivors_of(results)
    killed = {t for r in results.values() for t in r.killed}
    every = [f"{task.id}: {t}" for task in manifest_of(ROOT).tasks for t in task.tests]
    assert survivors == [t for t in every if t.split(": ", 1)[1] not in killed]
    if selfcheck.SURVIVORS_FAIL:
        assert survivors == []


def test_the_reference_grading_ran_under_calibrated_limits(results):
    ref = results["reference: full marks"]
    assert ref.factor >= 1 and ref.data is not None and ref.data["score"] > 0


def test_the_reference_notebooks_manual_cells_are_pending(results):
    """In a real grading, a manually graded cell has no status (it has not failed),
    and results.json still follows Gradescope's schema."""
    data = results["reference: full marks"].data
    jsonschema.validate(data, json.loads((ROOT / "autograder" / "tests" / "gradescope_results.schema.json").read_text()))
    manual = [t for t in data["tests"] if t["extra_data"].get("kind") == "manual"]
    assert manual and all("status" not in t and t["output"].startswith("manually graded") for t in manual)
    assert all(t["status"] == "passed" for t in data["tests"] if t not in manual)


def test_a_regrade_in_another_process_is_identical(results, reference_regraded):
    """The reference and the source notebooks graded twice: by the self-check's worker and in
    this process (conftest.py's ``reference_regraded``: the notebooks and two tasks, the whole
    being a minute of CPU), under different loads and so different time-limit factors. What
    both graded is the same, message for message, and so is the total (a test drawing inputs
    from anything but the grading secret and the files would differ); what this process left
    out, it says was not graded. (Each task's tests are regraded byte for byte on a failing
    submission in test_results_schema.py and test_robustness.py.)"""
    ours, _ = reference_regraded
    theirs = results["reference: full marks"].data
    assert theirs is not None and len(ours["tests"]) == len(theirs["tests"])
    left_out = {t["extra_data"]["task"] for t in ours["tests"] if t["output"] == "not graded in this run"}
    graded = [t for t in ours["tests"] if t["extra_data"]["task"] not in left_out]
    same = [t for t in theirs["tests"] if t["extra_data"]["task"] not in left_out]
    assert len({t["extra_data"]["task"] for t in graded} - left_out) >= 2 and any("notebook" in t["extra_data"] for t in graded)
    assert json.dumps(graded, indent=2) == json.dumps(same, indent=2)
    assert all(t["score"] == 0 for t in ours["tests"] if t["extra_data"]["task"] in left_out)


def test_the_release_folder_has_normal_permissions(results, selfcheck_dir):
    assert (selfcheck_dir / "release").stat().st_mode & 0o777 == normal_mode(file=False)


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

    code = CONTROL.format(child=str(ROOT / "autograder" / "sandbox" / "child.py"), func=func,
                          path=str(selfcheck.HOSTILE / name / "a1_ledger" / "ledger.py"))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert run.stdout.strip().splitlines()[-1:] == [expected], run.stderr[-2000:]
