"""An endless loop in a student's file ends fast and says why (servelab.harness.time_limit under
assignments/conftest.py, with the reference's example times of assignments/example_times.json): an
a5 whose static batching never leaves the instant it waits at spins in three tests; the first is
stopped at its fitted limit, the next two as the same loop, each message showing the input that
was running; the run goes on and the tests that do not spin still pass. No assertion is on a
duration (a loop that never ends exceeds every limit); the subprocess's bound is the backstop."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from servelab.harness.example_times import FILE_NAME, ExampleTimes
from servelab.harness.manifest import Manifest

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"
MANIFEST = Manifest.load(ASSIGNMENTS / "manifest.toml")

# `>` for `>=`, and a wake-up pushed every time: at the deadline itself the batch never starts
# and the same wake-up comes back at the same instant, for ever
SPIN = [("if len(waiting) >= batch_size or now >= deadline:", "if len(waiting) >= batch_size or now > deadline:"),
        ("elif deadline != woken_for:", "else:")]


def test_the_table_has_every_manifest_test_and_nothing_else():
    times = ExampleTimes.load(ASSIGNMENTS / FILE_NAME)
    assert times is not None, f"assignments/{FILE_NAME}: python -m servelab.harness.example_times assignments"
    assert set(times.slowest_s) == {t for task in MANIFEST.tasks for t in task.tests}, (
        "a test was added or renamed: python -m servelab.harness.example_times assignments")


def test_an_endless_loop_in_a5_ends_fast_showing_each_input(tmp_path):
    copy = tmp_path / "assignments"
    shutil.copytree(ASSIGNMENTS, copy, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    batching = copy / "a5_batching" / "batching.py"
    text = batching.read_text()
    for find, replace in SPIN:
        assert text.count(find) == 1, find
        text = text.replace(find, replace)
    batching.write_text(text)
    out = tmp_path / "points.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(copy), "-m", "task_a5",
                          "--points-json", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env={**os.environ, "HYPOTHESIS_PROFILE": "compat"})
    assert run.returncode == 1, run.stdout[-3000:]
    a5 = next(t for t in json.loads(out.read_text())["tasks"] if t["id"] == "a5_batching")
    assert a5["status"] == "failing" and 0 < a5["points"] < a5["max_points"], run.stdout[-3000:]
    stops = re.findall(r"TimeLimitExceeded: \S+::(\w+) (ran one example past|was stopped after)(.*)", run.stdout)
    stuck = {test: (how, rest) for test, how, rest in stops}
    assert set(stuck) == {"test_static_batching_matches_core", "test_no_ride_along_matches_core",
                          "test_hand_checked"}, run.stdout[-3000:]
    # one limit waited out; the others stopped as the same loop in the same function
    assert [how for how, _ in stuck.values()].count("ran one example past") == 1, stops
    for test, (how, rest) in stuck.items():
        assert "simulate_static() at batching.py line" in rest, (test, rest)
        assert "the input: " in rest, (test, rest)
        if how == "was stopped after":
            assert "the same endless loop?" in rest, (test, rest)
    # Hypothesis's example for a property, the call with its arguments for the test by hand
    assert re.search(r"the input: r=Requests\(", stuck["test_static_batching_matches_core"][1])
    assert "the input: simulate_static(arrival_s=array([0. , 0. , 0. , 0.3])" in stuck["test_hand_checked"][1]
