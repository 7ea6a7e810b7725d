"""The committed answer key is current; the release leaves out what would give answers away."""

from __future__ import annotations

import copy
import re
import subprocess

import pytest

from autograder.release import answer_key
from autograder.grading.grade import ROOT, manifest_of
from autograder.release.repository import PRIVATE, SOURCE_ONLY, SOURCE_TARGETS, plan, release


@pytest.fixture(scope="module")
def computed() -> dict:
    """The answer key computed once from the reference solutions (seconds of CPU each time)."""
    return answer_key.compute()


def test_the_committed_answer_key_is_not_stale(computed, monkeypatch):
    monkeypatch.setattr(answer_key, "compute", lambda root=ROOT: copy.deepcopy(computed))
    assert answer_key.stale() is None


def test_a_changed_value_makes_the_key_stale(computed, monkeypatch):
    fresh = copy.deepcopy(computed)
    task = next(iter(fresh["tasks"]))
    fresh["tasks"][task][0]["value"] = -1
    monkeypatch.setattr(answer_key, "compute", lambda root=ROOT: fresh)
    assert "differ" in answer_key.stale()


def test_the_key_has_provenance():
    import json
    key = json.loads((ROOT / "autograder/answers/answer_key.json").read_text())
    assert {"servelab", "git_commit", "numpy", "hypothesis", "grading_profile"} <= set(key["provenance"])
    assert key["tasks"]["a1_ledger"][0] == {"exercise": "Llama-3-8B (§2.4)", "quantity": "parameters",
                                            "value": 8_030_261_248}


def test_the_a6_key_is_the_rust_simulators_table():
    """The answer key's §5.5 and exercise 9 rows come from the pure-Python reference solution;
    servelab's Rust simulator (demo 04 parts 3-4) must give the same counts."""
    import json
    from servelab.demos import demo04
    key = json.loads((ROOT / "autograder/answers/answer_key.json").read_text())
    rows = {(r["exercise"], r["quantity"]): r["value"] for r in key["tasks"]["a6_admission"]}
    part3 = demo04.part3()
    rust = {"§5.5: mean estimate": part3["mean length"], "§5.5: oracle": part3["oracle"],
            **{f"ex. 9: sigma {s:g}": r for s, r in demo04.exercise9().items()}}
    for label, r in rust.items():
        assert rows[(label, "on time (of 600)")] == r.on_time, label
        assert rows[(label, "rejected")] == r.rejected, label
        assert rows[(label, "late share of accepted")] == pytest.approx(r.late_share_of_accepted, abs=1e-12), label
        assert rows[(label, "false rejection share")] == pytest.approx(r.false_rejection_share, abs=1e-12), label


@pytest.fixture(scope="module")
def files():
    return plan(ROOT)


@pytest.fixture(scope="module")
def readable_files():
    return plan(ROOT, readable=True)


def test_release_leaves_out_the_private_parts(files, readable_files):
    for kind in (files, readable_files):
        assert not [f for f in kind if f.startswith(PRIVATE)]
    # the readable release: the grader and its Classroom workflow, the readable twins, and the
    # tests that hold them equal to the Rust core
    assert "autograder/grading/grade.py" in readable_files and ".github/workflows/classroom.yml" in readable_files
    assert {"python/servelab/reference/step_cost.py", "python/servelab/reference/blocks.py",
            "tests/test_cost_parity.py"} <= set(readable_files)


def test_the_staff_release_ships_no_source_no_grader_and_a_devcontainer(files):
    assert not [f for f in files if f.startswith(SOURCE_ONLY)]
    tops = {f.split("/")[0] for f in files}
    # (tools/: what make build runs before .venv exists, the check that a wheel fits the Python)
    assert tops == {"assignments", ".devcontainer", ".gitattributes", ".gitignore", "LICENSE", "Makefile",
                    "README.md", "pyproject.toml", "tools"}, tops
    assert {"assignments/given/pricing.py", "assignments/scheduler_harness.py", "assignments/conftest.py",
            "assignments/notebooks/ex01_ledger_70b.ipynb", ".devcontainer/devcontainer.json"} <= set(files)
    readme = files["README.md"]
    first_screen = "\n".join(readme.splitlines()[:12])
    assert ".devcontainer/" in first_screen and "macOS" in first_screen and "Windows" in first_screen
    assert "no Rust" in readme and "python/servelab/reference" not in readme
    makefile = files["Makefile"]
    assert "wheels/" in makefile and not re.search(r"^\s*@?flock\b", makefile, re.M)
    defined = set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", makefile, re.M))
    assert not defined & set(SOURCE_TARGETS) and {"build", "check", "test", "demo"} <= defined


def test_no_makefile_calls_a_bare_flock(files, readable_files):
    for makefile in ((ROOT / "Makefile").read_text(), files["Makefile"], readable_files["Makefile"]):
        assert not re.search(r"^\t@?flock\b|\bflock \$", makefile, re.M)


def test_a_staff_release_writes_its_wheels_and_a_readable_one_refuses_them(tmp_path):
    wheel = tmp_path / "servelab-0.1.0-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: release copies it, nothing more
    written = release(ROOT, tmp_path / "staff", wheels=[wheel])
    assert f"wheels/{wheel.name}" in written and (tmp_path / "staff" / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    with pytest.raises(ValueError, match="takes no wheels"):
        release(ROOT, tmp_path / "readable", readable=True, wheels=[wheel])
    with pytest.raises(ValueError, match="must be .whl files"):
        release(ROOT, tmp_path / "bad", wheels=[tmp_path / "nothing.txt"])


def test_release_stubs_every_solution(files):
    for task in manifest_of(ROOT).tasks:
        for rel in task.edit:
            text = files[f"assignments/{rel}"]
            assert "### BEGIN SOLUTION" not in text and "raise NotImplementedError" in text
    assert "2 * model.n_layers * model.n_kv_heads" not in files["assignments/a1_ledger/ledger.py"]
    assert re.search(r"^ASSIGNMENTS_MAY_FAIL \?= 1$", files["Makefile"], re.M)


def test_release_refuses_a_non_empty_folder(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(FileExistsError, match="new or empty"):
        release(ROOT, tmp_path)


def test_release_takes_the_files_git_tracks_only(tmp_path):
    from autograder.release.repository import course_files
    (tmp_path / "assignments").mkdir()
    (tmp_path / "assignments" / "ledger.py").write_text("tracked\n")
    (tmp_path / "gone.py").write_text("tracked, then deleted\n")
    (tmp_path / ".gitignore").write_text("/out/\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    (tmp_path / "gone.py").unlink()
    (tmp_path / "assignments" / "ledger_solution_draft.py").write_text("untracked, not ignored\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.json").write_text("untracked, ignored\n")
    assert course_files(tmp_path) == [".gitignore", "assignments/ledger.py"]


def test_release_keeps_no_test_that_imports_a_left_out_module():
    # e.g. a test importing tests/test_assignments_grading.py, which grades the reference solutions
    from autograder.release.repository import _imported, _module_of, course_files, plan
    out = plan(ROOT, readable=True)  # the staff release has no tests/ at all
    code = lambda rel: rel.startswith(("tests/", "benchmarks/")) and rel.endswith(".py")  # noqa: E731
    gone = {_module_of(rel) for rel in course_files(ROOT) if code(rel) and rel not in out}
    assert gone, "the release leaves out the test that grades the reference solutions"
    for rel, text in out.items():
        if code(rel):
            body = text if text is not None else (ROOT / rel).read_text(encoding="utf-8")
            assert not _imported(body) & gone, rel


def test_the_key_answers_all_ten_exercises_and_says_why_it_misses():
    import json
    key = json.loads((ROOT / "autograder/answers/answer_key.json").read_text())
    rows = key["exercises"]
    assert sorted({r["exercise"] for r in rows}) == list(range(1, 11))
    misses = [r for r in rows if r["matches"] is False]
    assert misses and all(r["reason"] for r in misses)
    two_h100s = next(r for r in rows if r["quantity"] == "(d) fewest H100s with tensor parallelism")
    assert (two_h100s["lecture"], two_h100s["ours"], two_h100s["matches"]) == (2, 2, True)
    assert "## The lecture's exercises" in (ROOT / "autograder/answers/answer_key.md").read_text()


def test_a_changed_exercise_figure_makes_the_key_stale(computed, monkeypatch):
    fresh = copy.deepcopy(computed)
    fresh["exercises"][0]["ours"] = -1
    monkeypatch.setattr(answer_key, "compute", lambda root=ROOT: fresh)
    assert "exercises differ" in answer_key.stale()
