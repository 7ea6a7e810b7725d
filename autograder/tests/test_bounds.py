"""Bounded grader-side work: a test checks a value the submission returned before it computes
with it. The self-check's ``bounds`` checks prove it for every task (``selfcheck.check_bounds``,
graded with every returned number made huge); here, the control: a9's split-K test with its bound
taken out makes the grader's own process allocate for a huge ``split_count``, and with it the
test fails at once.

Cost: two short subprocesses, about 10 s.
"""

from __future__ import annotations

import json
import subprocess
import sys

from autograder.grading.grade import ROOT
from autograder.selfcheck import HOSTILE, inflate

A9 = ROOT / "assignments" / "a9_batch_invariance" / "test_a9_batch_invariance.py"
BOUND = '''    assert 1 <= s <= k, f"split_count({b}, {k}) must cut K={k} into 1 to {k} pieces, got {s}"\n'''
PIECES = 2_000_000

# runs a9's split-K test once, in the grader's way (the test file imported with a stand-in for the
# student's module, here the hostile one with split_count returning PIECES), and prints how much
# the process grew and what the test raised
RUN_ONE = """
import json, resource, sys, types
from pathlib import Path
import numpy as np
sys.path.insert(0, {root!r})
from autograder.grading import testload
mine = types.ModuleType("batch_invariance")
exec(Path({hostile!r}).read_text(), mine.__dict__)
mine.split_count = lambda b, k, *a, **kw: {pieces}
module = testload.import_test_module(Path({test!r}), {{"batch_invariance": mine}}, "_bounds_control")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    x = np.ones((1, 16), np.float32)
    module.test_split_k_follows_its_split_rule.hypothesis.inner_test((x, np.ones((16, 2), np.float32)))
    raised = None
except BaseException as exc:
    raised = type(exc).__name__ + ": " + str(exc)[:200]
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({{"grew_mib": grew / 1024, "raised": raised}}))
"""


def run_a9_split_test(test_file) -> dict:
    code = RUN_ONE.format(root=str(ROOT), hostile=str(HOSTILE / "huge_split_count" / "a9_batch_invariance" / "batch_invariance.py"),
                          pieces=PIECES, test=str(test_file))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a9_bounds_split_count_before_splitting():
    got = run_a9_split_test(A9)
    assert got["raised"].startswith("AssertionError: split_count(1, 16) must cut K=16 into 1 to 16 pieces"), got
    assert got["grew_mib"] < 50, got


def test_control_an_unbounded_split_count_makes_the_grader_allocate(tmp_path):
    """The same test without its bound: the grader's own process splits by two million (6
    million took 1.7 GB) before anything fails."""
    text = A9.read_text()
    assert BOUND in text, "the bound's line changed: update this control"
    folder = tmp_path / "a9_batch_invariance"
    folder.mkdir()
    (folder / A9.name).write_text(text.replace(BOUND, ""))
    (tmp_path / "assignment_strategies.py").write_text((ROOT / "assignments" / "assignment_strategies.py").read_text())
    got = run_a9_split_test(folder / A9.name)
    # about 300 MiB here; 165 once on a busy machine: twice the bounded test's ceiling is the line
    assert got["grew_mib"] > 100, got


def test_inflation_reaches_every_number_of_a_reply():
    import numpy as np

    big = inflate({"a": [np.arange(3, dtype=np.int8), np.float32(1.5)], "b": (0, 0.0, False)})
    assert big["a"][0].tolist() == [10_000_000, 10_000_001, 10_000_002] and big["a"][1] > 1e7
    assert big["b"] == (10_000_000, 1e7, False)
