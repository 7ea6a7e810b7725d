"""The self-check's shortcut for mutants (autograder/selfcheck/mutant_kills.py): a mutant's
task runs until a test fails, then only the tests no mutant fails yet; a grading that fails no
test runs them all; a failing test is recorded for the next mutant."""

from __future__ import annotations

from pathlib import Path

from autograder.grading.grade import ROOT, grade, manifest_of
from autograder.selfcheck import mutants, reference_submission
from autograder.selfcheck.mutant_kills import SKIPPED, MutantKills

A1 = next(t for t in manifest_of(ROOT).tasks if t.id == "a1_ledger")


def a1_outputs(data: dict) -> list[tuple[str, bool, str]]:
    return [(t["extra_data"]["test"], t["score"] == t["max_score"], t["output"]) for t in data["tests"]
            if t["extra_data"]["task"] == "a1_ledger"]


def mutated(tmp: Path) -> Path:
    mutant = next(m for m in mutants() if m["task"] == "a1_ledger")
    sub = reference_submission(tmp / "sub")
    path = sub / "assignments" / mutant["file"]
    path.write_text(path.read_text().replace(mutant["find"], mutant["replace"]))
    return sub


def test_after_the_first_failure_only_the_tests_no_mutant_fails_yet_run(tmp_path):
    sub = mutated(tmp_path)
    full = a1_outputs(grade(sub, only_tasks=frozenset({"a1_ledger"})))
    first = next(i for i, (_, ok, _) in enumerate(full) if not ok)
    kills = MutantKills(tmp_path / "kills")
    for test in A1.tests:  # every test already failed by some other mutant
        kills.failed(test)
    short = a1_outputs(grade(sub, only_tasks=frozenset({"a1_ledger"}), shortcut=kills))
    # up to its first failure the mutant runs as without the shortcut (the failure is real)
    assert short[:first + 1] == full[:first + 1] and SKIPPED not in short[first][2]
    # after it, every test is left out, scoring 0 with the shortcut's message
    assert short[first + 1:] and all(not ok and out == SKIPPED for _, ok, out in short[first + 1:])


def test_a_grading_that_fails_nothing_runs_every_test(tmp_path):
    kills = MutantKills(tmp_path / "kills")
    for test in A1.tests:
        kills.failed(test)
    got = a1_outputs(grade(reference_submission(tmp_path / "ref"), only_tasks=frozenset({"a1_ledger"}),
                           shortcut=kills))
    assert got and all(ok and out == "passed" for _, ok, out in got)


def test_each_failing_test_is_recorded_and_no_other(tmp_path):
    kills = MutantKills(tmp_path / "kills")
    got = a1_outputs(grade(mutated(tmp_path), only_tasks=frozenset({"a1_ledger"}), shortcut=kills))
    failed = {test for test, ok, _ in got if not ok}
    assert failed and all(SKIPPED not in out for _, _, out in got)  # nothing known yet: all ran
    assert {test for test in A1.tests if kills.skip(test)} == failed
