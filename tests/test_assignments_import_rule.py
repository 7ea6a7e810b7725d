"""The grader's import rule in a student's ``pytest assignments/`` (servelab.harness.submission_guard):
an edited file that imports servelab, at its top or inside a function, fails its task's tests with
the grader's own message and the points table says "import refused"; the other tasks still run; a
module the grader's child cannot see (another task's) is refused too; the
given helpers, numpy and the standard library stay allowed, and so does a student's fallback
that catches the ImportError. Each case runs pytest on a copy of assignments/ in a child process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from autograder.markers import strip_solutions
from servelab.harness.manifest import Manifest
from servelab.harness.submission_rules import refused_message

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"
MANIFEST = Manifest.load(ASSIGNMENTS / "manifest.toml")
A1 = next(t for t in MANIFEST.tasks if t.id == "a1_ledger")

# a1 answered by the library: full marks before the rule ran locally, 0 in grading
TOP_LEVEL = '''
import dataclasses
from servelab import hw_model as hw


def _spec(model):
    return hw.ModelSpec(**{f.name: getattr(model, f.name) for f in dataclasses.fields(hw.ModelSpec)})


def param_count(model):
    return _spec(model).param_count


def weight_bytes(model):
    return _spec(model).weight_bytes


def kv_bytes_per_token(model):
    return _spec(model).kv_bytes_per_token


def kv_capacity_tokens(model, gpu, mem_util=0.9):
    return hw.kv_capacity_tokens(_spec(model), gpu, mem_util)


def max_batch(model, gpu, context_len, mem_util=0.9):
    return hw.max_batch(_spec(model), gpu, context_len, mem_util)


def fits(model, gpu, mem_util=0.9):
    return _spec(model).weight_bytes < gpu.memory_bytes * mem_util
'''


def copy_assignments(tmp_path: Path) -> Path:
    dst = tmp_path / "assignments"
    shutil.copytree(ASSIGNMENTS, dst, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    return dst


def run(copy: Path, *tasks: str) -> tuple[dict, str]:
    out = copy.parent / "points.json"
    expr = " or ".join(f"task_{t}" for t in tasks)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(copy), "-m", expr,
                           "--points-json", str(out)], capture_output=True, text=True, cwd=copy.parent,
                          timeout=600, env={**os.environ, "HYPOTHESIS_PROFILE": "compat"})
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ERROR collecting" not in proc.stdout, proc.stdout[-3000:]
    return {t["id"]: t for t in json.loads(out.read_text())["tasks"]}, proc.stdout


def summary_lines(stdout: str) -> str:
    """The one-line summaries under pytest's tally, joined (rich wraps them)."""
    tail = stdout[stdout.index("servelab: "):stdout.index("points by task")]
    return " ".join(line.strip() for line in tail.splitlines())


def test_a_library_import_at_the_top_fails_locally_with_the_graders_words(tmp_path):
    copy = copy_assignments(tmp_path)
    (copy / "a1_ledger" / "ledger.py").write_text(TOP_LEVEL)
    tasks, stdout = run(copy, "a1", "a2")
    assert tasks["a1_ledger"]["points"] == 0 and tasks["a1_ledger"]["status"] == "import refused", stdout[-3000:]
    # the refusal stays in a1: a2's reference is collected and scores as ever
    assert tasks["a2_roofline"]["status"] == "full marks", stdout[-3000:]
    lines = summary_lines(stdout)
    grader = f"importing ledger raised ImportError: {refused_message('servelab')}"
    assert f"a1_ledger: {len(A1.tests)} tests fail here as in grading: {grader}" in lines, lines
    assert "ledger.py, line 3: from servelab import hw_model as hw" in lines, lines
    assert "1 refused" in lines and "0 failing" in lines, lines
    # each test's section is that one line, not a traceback through the harness
    assert stdout.count(f"ImportError: {grader}") >= len(A1.tests), stdout[:3000]


def test_a_library_import_inside_a_function_is_refused_when_it_runs(tmp_path):
    copy = copy_assignments(tmp_path)
    ledger = copy / "a1_ledger" / "ledger.py"
    reference = ledger.read_text()
    cheat = reference.replace("def param_count(model) -> int:", "def param_count(model) -> int:\n"
                              "    from servelab.hw_model import ModelSpec  # noqa: F401\n", 1)
    assert cheat != reference
    ledger.write_text(cheat)
    tasks, stdout = run(copy, "a1")
    assert tasks["a1_ledger"]["status"] == "import refused" and tasks["a1_ledger"]["points"] == 0, stdout[-3000:]
    assert f"ImportError: {refused_message('servelab.hw_model')}" in summary_lines(stdout)


def test_what_the_graders_child_cannot_see_is_refused_and_what_it_can_is_not(tmp_path):
    copy = copy_assignments(tmp_path)
    # a5's reference imports the given event queue and numpy; here it also catches a refused
    # import (a fallback works in both places) and imports from the standard library
    batching = copy / "a5_batching" / "batching.py"
    batching.write_text(batching.read_text() + "\ntry:\n    import servelab.serving_core as _fast\n"
                        "except ImportError:\n    _fast = None\nimport heapq, statistics  # noqa: E401\n")
    # a2 leans on a1's module, which is not in a2's grading sandbox
    roofline = copy / "a2_roofline" / "roofline.py"
    roofline.write_text(roofline.read_text() + "\nimport ledger  # noqa: E402,F401\n")
    tasks, stdout = run(copy, "a2", "a5")
    assert tasks["a5_batching"]["status"] == "full marks", stdout[-3000:]
    assert tasks["a2_roofline"]["status"] == "import refused", stdout[-3000:]
    assert "No module named 'ledger' where the autograder runs a submission" in summary_lines(stdout)


def test_a_stubbed_release_is_still_not_started(tmp_path):
    """The guard changes nothing for an untouched stub: it imports only what the grader allows."""
    copy = copy_assignments(tmp_path)
    ledger = copy / "a1_ledger" / "ledger.py"
    ledger.write_text(strip_solutions(ledger.read_text(), "a1_ledger/ledger.py"))
    tasks, _ = run(copy, "a1")
    assert tasks["a1_ledger"]["status"] == "not started"
