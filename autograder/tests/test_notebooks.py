"""The nbgrader notebooks: sources well formed, points in one place and equal to what nbgrader
stores, student versions from nbgrader's generate_assignment, the kernel's sandbox.

The grading checks proper (source notebooks score their autograded points, released ones zero,
edited test cells gain nothing) are in the self-check (test_selfcheck.py)."""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest

from autograder.notebooks import nbgrader, recheck
from autograder.release import repository
from autograder.grading.grade import ROOT, grade
from autograder.sandbox.remote import Limits
from autograder.selfcheck import course_fingerprint

NOTEBOOKS = nbgrader.notebooks_of(ROOT)


def source(nb: nbgrader.Notebook) -> dict:
    return json.loads((ROOT / "assignments" / nb.file).read_text(encoding="utf-8"))


def submit_with(into: Path, nb: nbgrader.Notebook, before: dict[str, str]) -> Path:
    """A submission folder holding ``nb``'s source notebook with ``before[grade_id]`` put at the
    start of that cell: the folder."""
    data = source(nb)
    for cell in data["cells"]:
        code = before.get(cell["metadata"]["nbgrader"]["grade_id"])
        if code:
            cell["source"] = code + "".join(cell["source"])
    path = into / "assignments" / nb.file
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    return into


def printed(executed: Path) -> str:
    """What the code cells of an executed notebook printed."""
    cells = json.loads(executed.read_text())["cells"]
    return "".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []))


def test_the_manifest_lists_the_four_notebooks():
    assert [nb.name for nb in NOTEBOOKS] == ["ex01_ledger_70b", "ex06_tail_fanout", "ex08_orca_card",
                                             "ex10_batch_invariance"]
    on_disk = sorted(p.name for p in (ROOT / "assignments" / "notebooks").glob("*.ipynb"))
    assert on_disk == sorted(Path(nb.file).name for nb in NOTEBOOKS), "a notebook the manifest does not list"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[nb.id for nb in NOTEBOOKS])
def test_sources_are_clean_and_carry_nbgrader_metadata(nb):
    data = source(nb)
    ids = [c["metadata"]["nbgrader"]["grade_id"] for c in data["cells"]]
    assert len(ids) == len(set(ids)), f"{nb.file}: grade ids repeat"
    for cell in data["cells"]:
        meta = cell["metadata"]["nbgrader"]
        assert cell["cell_type"] == "markdown" or cell["outputs"] == [], f"{nb.file}: {meta['grade_id']} has outputs"
        if meta["solution"]:
            assert "### BEGIN SOLUTION" in "".join(cell["source"]), f"{meta['grade_id']}: no solution region"
        if recheck.cell_kind(meta, cell["cell_type"]) == "auto":
            assert meta["locked"] and "assert" in "".join(cell["source"]), f"{meta['grade_id']}: not a locked test"
    kinds = {c.kind for c in nbgrader.cell_points(ROOT / "assignments" / nb.file)}
    assert kinds == {"ex01_ledger_70b": {"auto"}, "ex06_tail_fanout": {"auto", "manual"},
                     "ex08_orca_card": {"manual"}, "ex10_batch_invariance": {"auto", "manual"}}[nb.name]


def test_cell_points_reads_the_metadata_and_refuses_bad_points(tmp_path):
    nb = source(NOTEBOOKS[0])
    cells = nbgrader.cell_points(ROOT / "assignments" / NOTEBOOKS[0].file)
    assert sum(c.points for c in cells) == sum(c["metadata"]["nbgrader"].get("points", 0) for c in nb["cells"])
    first = next(c for c in nb["cells"] if c["metadata"]["nbgrader"]["grade"])
    first["metadata"]["nbgrader"]["points"] = 0
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps(nb))
    with pytest.raises(ValueError, match="must have positive whole points, got 0"):
        nbgrader.cell_points(bad)


@pytest.fixture(scope="module")
def generated():
    return nbgrader.generated(ROOT)


def test_points_equal_what_nbgrader_stores(generated, monkeypatch):
    """Points live in the notebooks' metadata only; nbgrader's gradebook holds the same."""
    from nbgrader.api import Gradebook

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # alembic
    with Gradebook(f"sqlite:///{generated / 'gradebook.db'}") as gb:
        stored = {(nb.name, cell.name): (cell.max_score, cell.cell_type)
                  for nb in gb.find_assignment(nbgrader.ASSIGNMENT).notebooks for cell in nb.grade_cells}
    ours = {(nb.name, c.grade_id): c.points for nb in NOTEBOOKS
            for c in nbgrader.cell_points(ROOT / "assignments" / nb.file)}
    assert {k: v[0] for k, v in stored.items()} == ours
    # 18 autograded + 19 by hand: a change here is a change of the course, say so in the README
    kinds = [c.kind for nb in NOTEBOOKS for c in nbgrader.cell_points(ROOT / "assignments" / nb.file)
             for _ in range(c.points)]
    assert (kinds.count("auto"), kinds.count("manual")) == (18, 19)


def test_student_versions_come_from_nbgrader_without_solutions_or_hidden_tests(generated):
    versions = nbgrader.student_versions(ROOT)
    assert sorted(versions) == sorted(f"assignments/{nb.file}" for nb in NOTEBOOKS)
    for nb in NOTEBOOKS:
        text = versions[f"assignments/{nb.file}"]
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
        released = json.loads(text)
        for cell in released["cells"]:
            meta = cell["metadata"]["nbgrader"]
            assert "checksum" in meta or not meta.get("locked", False) or meta.get("solution"), meta["grade_id"]
            if meta["solution"]:
                stub = "YOUR ANSWER HERE" if cell["cell_type"] == "markdown" else "raise NotImplementedError()"
                assert stub in "".join(cell["source"]), f"{meta['grade_id']}: not stubbed"
    # a few answers that must not travel with the release
    everything = "".join(versions.values())
    for answer in ("1.0 - (1.0 - q) ** n", "2 * VOCAB * D_MODEL", "iteration-level scheduling (the scheduler",
                   "a, b, c = 1e16", "simulate 200 000 agents"):
        assert answer not in everything


def test_release_refuses_a_notebook_the_manifest_does_not_list():
    with pytest.raises(ValueError, match="no \\[\\[notebook\\]\\] of the manifest lists"):
        repository.stub_notebook("assignments/notebooks/extra.ipynb", {})


def test_kernel_sandbox_refuses_the_course_copy_and_processes(tmp_path):
    """A notebook's code runs in a kernel under the child's sandbox: it cannot read the grader's
    files, nor what the students' build of servelab leaves out, nor write into the course copy,
    nor start processes; the course copy stays unchanged."""
    nb = next(n for n in NOTEBOOKS if n.name == "ex06_tail_fanout")
    attack = (
        "import os, subprocess\n"
        "def read_some(path):\n"
        "    with open(path) as f:\n"
        "        if not f.read():\n"
        "            raise FileNotFoundError(path)  # an empty stand-in: nothing of it there\n"
        "results = []\n"
        f"for attempt in (lambda: open({str(ROOT / 'assignments' / 'manifest.toml')!r}, 'a'),\n"
        f"                lambda: open({str(ROOT / 'autograder' / 'answers' / 'answer_key.json')!r}).read(),\n"
        "                lambda: subprocess.run(['true']),\n"
        "                lambda: open('../../../gradebook.db', 'rb').read(),\n"  # nbgrader's database
        f"                lambda: os.listdir({str(ROOT / 'autograder')!r}),\n"
        # fork_exec raises no audit event: the kernel's loaded copies must be disarmed
        "                lambda: subprocess._fork_exec(*[None] * 23),\n"
        "                lambda: __import__('_posixsubprocess').fork_exec(*[None] * 23),\n"
        # what the students' build leaves out: the readable twins of the core, the lecture's answers
        f"                lambda: read_some({str(ROOT / 'python' / 'servelab' / 'reference' / 'sim.py')!r}),\n"
        f"                lambda: read_some({str(ROOT / 'python' / 'servelab' / 'lecture_key.py')!r})):\n"
        "    try:\n"
        "        attempt()\n"
        "        results.append('allowed')\n"
        "    except Exception as exc:\n"
        "        results.append(type(exc).__name__)\n"
        "print('SANDBOX', results)\n")
    before = course_fingerprint()
    result = grade(submit_with(tmp_path / "sub", nb, {"ex06_a_answer": attack}), limits=Limits(wall_s=30, cpu_s=30),
                   only_tasks=frozenset({nb.id}), notebooks_out=tmp_path / "executed")
    assert course_fingerprint() == before
    text = printed(tmp_path / "executed" / f"{nb.name}.ipynb")
    # refused by the audit hook (PermissionError), or not there at all behind bubblewrap's mount
    # namespace (nbgrader's database: FileNotFoundError)
    line = next(ln for ln in text.splitlines() if ln.startswith("SANDBOX "))
    outcomes = ast.literal_eval(line[len("SANDBOX "):])
    assert len(outcomes) == 9 and set(outcomes) <= {"PermissionError", "FileNotFoundError"}, line
    # the honest work next to the attack still earns its autograded points
    earned = {t["extra_data"]["cell"]: t["score"] for t in result["tests"] if t["extra_data"]["task"] == nb.id}
    assert earned == {"ex06_a_test": 2, "ex06_b_test": 2, "ex06_c_test": 1, "ex06_d_answer": 0}


def test_the_source_notebooks_earn_their_autograded_points_and_manual_cells_wait(reference_results):
    """The source notebooks as a submission (graded with the reference by the self-check,
    conftest.py): every autograded point, manual cells pending. A regrade is identical:
    test_selfcheck.py compares that grading with one made in this process."""
    a = reference_results
    cells = [t for t in a["tests"] if "notebook" in t["extra_data"]]
    assert {t["extra_data"]["notebook"] for t in cells} == {nb.file for nb in NOTEBOOKS}
    assert all(t["score"] == t["max_score"] and t["output"] == "passed" for t in cells if t["extra_data"]["kind"] == "auto")
    assert all(t["score"] == 0 and "pending" in t["output"] for t in cells if t["extra_data"]["kind"] == "manual")
    # a test cell with hidden tests is shown after the due date (its message may quote them)
    shown = {t["extra_data"]["cell"]: t["visibility"] for t in cells}
    # (every autograded cell but ex10 (a) checks its values in hidden tests: test_notebook_visible_tests.py)
    assert shown["ex01_a_total"] == shown["ex06_a_test"] == shown["ex01_b_weights"] == "after_due_date"
    assert shown["ex10_a_test"] == shown["ex08_flaw"] == "visible"


def test_a_hanging_a_memory_hungry_and_a_dying_notebook_are_contained(tmp_path):
    """An endless cell is interrupted after the per-cell timeout and the cells after it still
    run; a memory bomb meets RLIMIT_AS; a notebook that kills its kernel scores 0 with the
    reason, and the other notebook keeps its points."""
    fanout, invariance = (next(n for n in NOTEBOOKS if n.name == name)
                          for name in ("ex06_tail_fanout", "ex10_batch_invariance"))
    attacks = {(fanout, "ex06_a_answer"): "try:\n    bomb = bytearray(3 << 30)\nexcept MemoryError:\n"
                                          "    print('MEMORY LIMIT')\n",
               (fanout, "ex06_b_answer"): "while True:\n    pass\n",
               (invariance, "ex10_a_answer"): "import os\nos._exit(0)\n"}
    for nb in (fanout, invariance):
        data = source(nb)
        for cell in data["cells"]:
            code = attacks.get((nb, cell["metadata"]["nbgrader"]["grade_id"]))
            if code:
                cell["source"] = code + "".join(cell["source"])
        path = tmp_path / "sub" / "assignments" / nb.file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
    result = grade(tmp_path / "sub", limits=Limits(wall_s=5, cpu_s=5, memory_bytes=1 << 30),
                   only_tasks=frozenset({fanout.id, invariance.id}), notebooks_out=tmp_path / "executed")
    got = {t["extra_data"]["cell"]: (t["score"], t["output"]) for t in result["tests"] if "notebook" in t["extra_data"]}
    assert {c: got[c][0] for c in ("ex06_a_test", "ex06_b_test", "ex06_c_test")} == {
        "ex06_a_test": 2, "ex06_b_test": 0, "ex06_c_test": 1}
    assert "per_call_budget" in got["ex06_b_test"][1]  # the loop was stopped before the definition
    assert "MEMORY LIMIT" in (tmp_path / "executed" / "ex06_tail_fanout.ipynb").read_text()
    assert all(got[cell][0] == 0 for cell in ("ex10_a_test", "ex10_b_test", "ex10_why")), got
    # the kernel's death is told only where hidden tests are (after the due date): a visible
    # cell is the grader's own check's (its child died too), a manual one waits
    assert "Kernel died" in got["ex10_b_test"][1] and "Kernel died" not in got["ex10_a_test"][1], got
    assert "pending" in got["ex10_why"][1]


HIDDEN_BIT = """import os
def _watch(info, bit={bit}):
    # a kernel sees each cell before it runs, hidden tests included: it dies on one iff the bit is 1
    if bit and "BEGIN HIDDEN TESTS" in (info.raw_cell or ""):
        os._exit(1)
eval("get_" + "ipython")().events.register("pre_run_cell", _watch)
"""


def test_nothing_visible_before_the_due_date_depends_on_the_kernels_run(tmp_path):
    """A notebook whose kernel dies at the first hidden test when a chosen bit is 1: the visible
    part of results.json (each visible test, the summary) is the same for both bits, so no bit
    of a hidden test reaches a student before the due date. The control: the hidden cells'
    results (shown after it) do differ, so the kernel did die."""
    nb = next(n for n in NOTEBOOKS if n.name == "ex01_ledger_70b")
    seen = [grade(submit_with(tmp_path / f"bit{bit}", nb, {"ex01_a_answer": HIDDEN_BIT.format(bit=bit)}),
                  limits=Limits(wall_s=30, cpu_s=30), only_tasks=frozenset({nb.id})) for bit in (0, 1)]
    visible = [([t for t in r["tests"] if t["visibility"] == "visible"], r["output"]) for r in seen]
    assert visible[0] == visible[1]
    later = [[(t["score"], t["output"]) for t in r["tests"] if t["visibility"] != "visible" and t["extra_data"]["task"] == nb.id]
             for r in seen]
    assert later[0] != later[1] and any("Kernel died" in out for _, out in later[1])


def test_a_notebook_that_patches_its_kernel_gains_nothing(tmp_path):
    """nbgrader's test cells share the student's kernel: a notebook that makes ``math.isclose``
    always true passes them with a wrong answer. The grader's own check (notebooks.recheck) runs the
    source test cells in its process on the values the child hands back, and refuses it; the
    honest cells of the same notebook keep their points."""
    nb = next(n for n in NOTEBOOKS if n.name == "ex06_tail_fanout")
    data = source(nb)
    cheat = ("import math\nmath.isclose = lambda *args, **kwargs: True\n"
             "def all(values):\n    return True\n")
    for cell in data["cells"]:
        if cell["metadata"]["nbgrader"]["grade_id"] == "ex06_a_answer":
            # the function is right (the hidden simulation passes), the headline number wrong
            cell["source"] = cheat + "".join(cell["source"]).replace("p_any_slow_20 = p_any_slow(20, 0.01)",
                                                                     "p_any_slow_20 = 0.5")
    path = tmp_path / "sub" / "assignments" / nb.file
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    result = grade(tmp_path / "sub", limits=Limits(wall_s=30, cpu_s=30), only_tasks=frozenset({nb.id}))
    got = {t["extra_data"]["cell"]: (t["score"], t["output"]) for t in result["tests"] if t["extra_data"]["task"] == nb.id}
    # the message comes only from a cell nbgrader passed and the grader did not
    assert got["ex06_a_test"][0] == 0 and "grader's own check" in got["ex06_a_test"][1], got["ex06_a_test"]
    assert "p_any_slow_20: got 0.5" in got["ex06_a_test"][1]
    assert (got["ex06_b_test"][0], got["ex06_c_test"][0]) == (2, 1), got


def test_the_recheck_takes_no_builtin_and_no_object_from_the_notebook(tmp_path):
    """A notebook's ``all`` or ``abs`` never replaces the builtin in a test cell, and an object
    that is not plain data (an always-equal one) passes no comparison or truth test."""
    def test(grade_id, code):
        return {"cell_type": "code", "source": code,
                "metadata": {"nbgrader": {"grade": True, "solution": False, "points": 1, "grade_id": grade_id}}}

    tests = [test("uses_all", "assert all([answer == 42])"), test("truth", "assert answer")]
    honest = {"cell_type": "code", "metadata": {}, "source": "answer = 6 * 7"}
    forged = {"cell_type": "code", "metadata": {},
              "source": "class Yes:\n    def __eq__(self, other): return True\n    def __bool__(self): return True\n"
                        "answer = Yes()\ndef all(values): return True\n"}
    src = tmp_path / "source.ipynb"
    src.write_text(json.dumps({"cells": [honest, *tests], "nbformat": 4}))
    outcomes = []
    for i, cell in enumerate((honest, forged)):
        sub = tmp_path / f"sub{i}.ipynb"
        sub.write_text(json.dumps({"cells": [cell, *tests], "nbformat": 4}))
        outcomes.append(recheck.recheck(src, sub, tmp_path / f"scratch{i}", [], Limits(wall_s=20, cpu_s=20)))
    assert outcomes[0] == {"uses_all": (True, "passed"), "truth": (True, "passed")}
    assert outcomes[1]["uses_all"][0] is False, outcomes[1]
    assert outcomes[1]["truth"][0] is False and "Yes object from your notebook" in outcomes[1]["truth"][1], outcomes[1]


@pytest.mark.parametrize("a, b, c, passes", [
    (1e16, -1e16, 1.0, True),  # the reference's answer
    (1.0, 2.0, 3.0, False),  # associative here
    (float("nan"), 1.0, 2.0, False),  # unequal to itself, whatever the order
    (float("inf"), float("-inf"), 1.0, False),  # nan both ways
])
def test_ex10_a_is_earned_only_by_finite_numbers_that_do_not_associate(a, b, c, passes):
    # the test cell alone, run in this process: cheap, and a NaN used to pass it (1 point)
    nb = next(n for n in NOTEBOOKS if n.name == "ex10_batch_invariance")
    cell = next(c for c in source(nb)["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "ex10_a_test")
    scope = {"a": a, "b": b, "c": c}
    try:
        exec("".join(cell["source"]), scope)
    except AssertionError:
        assert not passes
    else:
        assert passes


CARRY = """import glob, importlib.util, os, shutil, sysconfig
def carried():
    # a compiled extension the notebook carries into its own folder (here a copy of one the
    # grader never maps for a notebook), loaded from there
    original = glob.glob(os.path.join(sysconfig.get_config_var("DESTSHARED"), "xxlimited.cpython-*.so"))[0]
    shutil.copyfile(original, "carried_extension.so")
    try:
        spec = importlib.util.spec_from_file_location("xxlimited", os.path.abspath("carried_extension.so"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return "loaded"
    except Exception as exc:
        return type(exc).__name__
print("NATIVE", carried())
"""


def native_outcome(tmp_path) -> str:
    nb = next(n for n in NOTEBOOKS if n.name == "ex06_tail_fanout")
    grade(submit_with(tmp_path / "sub", nb, {"ex06_a_answer": CARRY}), limits=Limits(wall_s=30, cpu_s=30),
          only_tasks=frozenset({nb.id}), notebooks_out=tmp_path / "executed")
    text = printed(tmp_path / "executed" / f"{nb.name}.ipynb")
    return next(ln for ln in text.splitlines() if ln.startswith("NATIVE "))[len("NATIVE "):]


def test_a_kernel_cannot_run_a_compiled_extension_it_carries(tmp_path):
    """As a task's child: once the kernel's libraries are mapped, no new executable mapping."""
    assert native_outcome(tmp_path) != "loaded"


def test_control_a_kernel_allowed_new_code_runs_the_extension_it_carries(tmp_path, monkeypatch):
    from autograder.notebooks import kernel_spec

    monkeypatch.setattr(kernel_spec, "NEW_CODE", True)
    assert native_outcome(tmp_path) == "loaded"



READ_THE_LEFT_OUT = f"""def read_some(path):
    try:
        with open(path) as f:
            return "read" if f.read() else "empty"
    except Exception as exc:
        return type(exc).__name__
print("LEFT_OUT", [read_some(p) for p in ({str(ROOT / 'python' / 'servelab' / 'reference' / 'sim.py')!r},
                                           {str(ROOT / 'python' / 'servelab' / 'lecture_key.py')!r})])
"""


def test_control_a_kernel_shown_all_of_servelab_reads_the_references_and_the_lecture_key(tmp_path, monkeypatch):
    """The control of the kernel's library view (kernel_spec.students_library): with the whole
    of servelab's folder readable, as before, the same cell reads both files."""
    from autograder.notebooks import kernel_spec

    monkeypatch.setattr(kernel_spec, "students_library", lambda home: ([home], [], []))
    nb = next(n for n in NOTEBOOKS if n.name == "ex06_tail_fanout")
    grade(submit_with(tmp_path / "sub", nb, {"ex06_a_answer": READ_THE_LEFT_OUT}), limits=Limits(wall_s=30, cpu_s=30),
          only_tasks=frozenset({nb.id}), notebooks_out=tmp_path / "executed")
    line = next(ln for ln in printed(tmp_path / "executed" / f"{nb.name}.ipynb").splitlines() if ln.startswith("LEFT_OUT "))
    assert ast.literal_eval(line[len("LEFT_OUT "):]) == ["read", "read"], line


FLOOD = """import os, time
os.makedirs("flood", exist_ok=True)
for i in range(12000):  # empty files: no byte limit meets them, only a count
    open(os.path.join("flood", str(i)), "w").close()
time.sleep(1)  # the grader's watch walks every 50 ms
print("FLOOD SURVIVED")
"""


def flood_outcome(tmp_path) -> str:
    """What the flooding notebook's kernel printed (the grader's own recheck of its cells runs in
    a sealed child, where the flood fails at its first file, whatever the kernel's fate)."""
    nb = next(n for n in NOTEBOOKS if n.name == "ex06_tail_fanout")
    grade(submit_with(tmp_path / "sub", nb, {"ex06_a_answer": FLOOD}), limits=Limits(wall_s=30, cpu_s=30),
          only_tasks=frozenset({nb.id}), notebooks_out=tmp_path / "executed")
    executed = tmp_path / "executed" / f"{nb.name}.ipynb"
    return printed(executed) if executed.exists() else ""


def test_a_kernel_that_floods_its_folders_is_killed(tmp_path):
    """A notebook kernel's folders lie on the grading machine's disk in every mode: past
    folder_budget's count of files the kernel is killed (its notebook then fails)."""
    assert "FLOOD SURVIVED" not in flood_outcome(tmp_path)


def test_control_a_kernel_with_a_larger_budget_floods_its_folders(tmp_path, monkeypatch):
    from autograder.sandbox import folder_budget

    monkeypatch.setattr(folder_budget, "DEFAULT", folder_budget.Budget(max_entries=1 << 30))
    assert "FLOOD SURVIVED" in flood_outcome(tmp_path)
