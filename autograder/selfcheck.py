"""``selfcheck``: the grader proves itself on submissions whose grade is known.

* the reference solutions score full marks;
* the release grades without error and scores zero, and in the release ``pytest assignments/``
  shows 0 points with every task failing cleanly; pasting one task's reference back earns
  exactly that task's points (this runs the release's tests with this checkout's installed
  servelab: no second Rust build);
* every mutant (``autograder/mutants/*.toml``) loses points on its own task and only there;
* every hostile submission (``autograder/tests/hostile/<name>/``, its ``expect.toml`` giving
  ``max_points``) scores at most that, under tight limits, and leaves the course copy intact;
* notebooks: the source notebooks score their autograded points (inside "reference"), the
  released ones zero with every cell graded (inside "release"), and released notebooks whose
  test cells were edited or deleted still score zero (nbgrader restores them from the source).

Each check is a function returning a list of problems (empty: it holds); ``autograder/tests``
runs them one by one under pytest, ``python -m autograder selfcheck`` all at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from autograder import notebooks
from autograder.grade import ROOT, grade, manifest_of
from autograder.release import release
from autograder.remote import Limits

HOSTILE = ROOT / "autograder" / "tests" / "hostile"
MUTANTS = ROOT / "autograder" / "mutants"
# hostile submissions are graded with tight limits so that the self-check stays short (but
# loose enough that the honest parts inside them pass on a busy 2-core machine)
HOSTILE_LIMITS = Limits(wall_s=4.0, cpu_s=4, memory_bytes=1 << 30, output_bytes=256 << 10)


def points_by_task(data: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for test in data["tests"]:
        task = test["extra_data"]["task"]
        out[task] = out.get(task, 0) + test["score"]
    return out


def full_marks() -> dict[str, int]:
    return {t.id: t.points for t in manifest_of(ROOT).tasks}


def reference_submission(into: Path, with_notebooks: bool = False) -> Path:
    """A submission folder holding the instructors' edit files (the reference solutions), and
    with ``with_notebooks`` the source notebooks (solutions in place) too."""
    rels = [rel for task in manifest_of(ROOT).tasks for rel in task.edit]
    if with_notebooks:
        rels += [nb.file for nb in notebooks.notebooks_of(ROOT)]
    for rel in rels:
        dst = into / "assignments" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "assignments" / rel, dst)
    return into


def notebook_full_marks() -> dict[str, int]:
    """What the source notebooks earn when graded: their autograded points (manually graded
    cells wait for the instructor, so they add nothing yet)."""
    return {nb.id: sum(c.points for c in notebooks.cell_points(ROOT / "assignments" / nb.file) if c.kind == "auto")
            for nb in notebooks.notebooks_of(ROOT)}


def mutants() -> list[dict]:
    return [m for f in sorted(MUTANTS.glob("*.toml")) for m in tomllib.loads(f.read_text())["mutant"]]


def hostiles() -> list[Path]:
    return sorted(p for p in HOSTILE.iterdir() if (p / "expect.toml").is_file())


def course_fingerprint() -> str:
    """A hash of the files a submission must not be able to change."""
    h = hashlib.sha256()
    for folder in ("assignments", "autograder/answers", "autograder/mutants"):
        for p in sorted((ROOT / folder).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(p.relative_to(ROOT).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


# ---- the checks ---------------------------------------------------------------------------------

def check_reference(tmp: Path) -> list[str]:
    data = grade(reference_submission(tmp / "reference", with_notebooks=True))
    got, want = points_by_task(data), {**full_marks(), **notebook_full_marks()}
    failing = [f"{t['name']}: {t['output'][:300]}" for t in data["tests"] if t["status"] != "passed"]
    return [] if got == want else [f"reference scores {got}, not full marks {want}", *failing]


def make_release(tmp: Path) -> Path:
    out = tmp / "release"
    release(ROOT, out)
    return out


def check_release_grades_zero(release_dir: Path) -> list[str]:
    data = grade(release_dir)
    problems = []
    if data["score"] != 0:
        problems.append(f"the release scores {data['score']}, not 0")
    for t in data["tests"]:
        if "notebook" in t["extra_data"]:  # graded by nbgrader: zero, but graded (not missing, no crash)
            kind = t["extra_data"]["kind"]
            if t["score"] != 0 or (kind == "manual") != t["output"].startswith("manually graded"):
                problems.append(f"{t['name']}: expected 0 points and a graded cell, got {t['score']}: {t['output'][:200]!r}")
            elif kind == "auto" and not t["output"].startswith(("not answered", "NotImplementedError", "NameError",
                                                                "AssertionError")):
                problems.append(f"{t['name']}: expected a failing test cell, got {t['output'][:200]!r}")
            continue
        if "NotImplementedError" not in t["output"]:
            problems.append(f"{t['name']}: expected a NotImplementedError message, got {t['output'][:200]!r}")
    return problems


def run_release_pytest(release_dir: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    """``pytest assignments/ [extra]`` inside the release, with this checkout's servelab."""
    points = release_dir / "points.json"
    points.unlink(missing_ok=True)
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "assignments",
                          "--points-json", str(points), *extra], cwd=release_dir, capture_output=True, text=True,
                         timeout=600, env=env)
    summary = json.loads(points.read_text()) if points.exists() else {}
    return summary, run


def check_release_pytest_zero(release_dir: Path) -> list[str]:
    summary, run = run_release_pytest(release_dir)
    problems = []
    if not summary:
        return [f"no points table:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"]
    if run.returncode != 1:
        problems.append(f"pytest assignments/ in the release exits {run.returncode}, not 1 (tests failing)")
    if "ERROR collecting" in run.stdout or "INTERNALERROR" in run.stdout + run.stderr:
        problems.append(f"collection errors in the release:\n{run.stdout[-2000:]}")
    if summary["points"] != 0:
        problems.append(f"the release's points table shows {summary['points']}, not 0")
    problems += [f"task {t['id']}: status {t['status']!r}, not 'not started'" for t in summary["tasks"]
                 if t["status"] != "not started"]
    return problems


def check_paste_back(release_dir: Path, task_id: str) -> list[str]:
    """Pasting one task's reference into the release earns exactly that task's points."""
    task = next(t for t in manifest_of(ROOT).tasks if t.id == task_id)
    saved = {rel: (release_dir / "assignments" / rel).read_bytes() for rel in task.edit}
    try:
        for rel in task.edit:
            shutil.copyfile(ROOT / "assignments" / rel, release_dir / "assignments" / rel)
        # only that task runs (-m): the release check above already shows every stub at zero
        summary, run = run_release_pytest(release_dir, "-m", task.marker)
    finally:
        for rel, data in saved.items():
            (release_dir / "assignments" / rel).write_bytes(data)
    got = {t["id"]: t["points"] for t in summary.get("tasks", [])}
    want = {t: (p if t == task_id else 0) for t, p in full_marks().items()}
    return [] if got == want else [f"after pasting {task_id} back: {got}, expected {want}\n{run.stdout[-1500:]}"]


def check_mutant(mutant: dict, tmp: Path) -> list[str]:
    sub = reference_submission(tmp / "mutant")
    path = sub / "assignments" / mutant["file"]
    text = path.read_text()
    if text.count(mutant["find"]) != 1:
        return [f"mutant no longer applies ({mutant['why']}): {mutant['find']!r}"]
    path.write_text(text.replace(mutant["find"], mutant["replace"]))
    # only the mutant's task is graded: the others run in sandboxes of their own folders and
    # cannot see the changed file (tests/test_assignments_grading.py checks that no task
    # imports another's module)
    got = points_by_task(grade(sub, only_tasks=frozenset({mutant["task"]})))
    if got[mutant["task"]] >= full_marks()[mutant["task"]]:
        return [f"mutant survived on {mutant['task']}: {mutant['why']}"]
    return []


def check_hostile(folder: Path, tmp: Path) -> list[str]:
    expect = tomllib.loads((folder / "expect.toml").read_text())
    before = course_fingerprint()
    out = tmp / "results.json"
    start = time.monotonic()
    data = grade(folder, out=out, limits=HOSTILE_LIMITS)
    problems = []
    if data["score"] > expect["max_points"]:
        problems.append(f"{folder.name} ({expect['why']}) scored {data['score']} > {expect['max_points']}")
    if data["score"] < expect.get("min_points", 0):  # the honest part inside must keep its points
        problems.append(f"{folder.name} ({expect['why']}) scored {data['score']} < {expect['min_points']}")
    if json.loads(out.read_text()) != data:
        problems.append(f"{folder.name}: results.json on disk is not the grader's")
    if course_fingerprint() != before:
        problems.append(f"{folder.name}: the course copy changed while grading it")
    if time.monotonic() - start > 60:
        problems.append(f"{folder.name}: grading took {time.monotonic() - start:.0f} s")
    return problems


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not (HOSTILE.is_dir() and MUTANTS.is_dir()):
        console.print("selfcheck needs the instructors' copy: autograder/tests/hostile and autograder/mutants "
                      "are not in a student release")
        return 2
    table = Table(title="autograder self-check")
    table.add_column("check")
    table.add_column("result")
    table.add_column("seconds", justify="right")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="servelab-selfcheck-") as t:
        tmp = Path(t)
        release_dir = make_release(tmp)
        checks = [("reference: full marks", lambda d: check_reference(d)),
                  ("release: grades to zero", lambda d: check_release_grades_zero(release_dir)),
                  ("release: pytest assignments/ shows 0", lambda d: check_release_pytest_zero(release_dir))]
        checks += [(f"release + reference {task.id}: that task only",
                    lambda d, i=task.id: check_paste_back(release_dir, i)) for task in manifest_of(ROOT).tasks]
        checks += [(f"mutant: {m['why']}", lambda d, m=m: check_mutant(m, d)) for m in mutants()]
        checks += [(f"hostile: {h.name}", lambda d, h=h: check_hostile(h, d)) for h in hostiles()]
        if notebooks.notebooks_of(ROOT):
            checks.append(("notebooks: edited test cells gain nothing",
                           lambda d: check_notebook_tampering(release_dir, d)))
        for n, (name, fn) in enumerate(checks):
            d = tmp / f"check{n}"
            d.mkdir()
            start = time.monotonic()
            problems = fn(d)
            failed += bool(problems)
            table.add_row(name, "[green]ok" if not problems else "[red]" + "\n".join(problems)[:500],
                          f"{time.monotonic() - start:.1f}")
    console.print(table)
    console.print(f"{len(checks) - failed} of {len(checks)} checks hold")
    return 1 if failed else 0


# ---- notebooks (autograder/notebooks.py) ---------------------------------------------------------

def tamper(text: str, delete: frozenset[str] = frozenset()) -> str:
    """A notebook whose autograded test cells were edited to pass (``pass``, hidden tests gone)
    and whose cells in ``delete`` were removed: what a student who cannot answer might try."""
    nb = json.loads(text)
    cells = []
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade_id") in delete:
            continue
        if notebooks.cell_kind(meta, cell["cell_type"]) == "auto":
            cell["source"] = "assert True  # edited by the student\n"
        cells.append(cell)
    nb["cells"] = cells
    return json.dumps(nb)


def check_notebook_tampering(release_dir: Path, tmp: Path) -> list[str]:
    """The released notebooks with every test cell edited to pass (and one deleted) score 0:
    nbgrader restores test cells from the checksummed source before it runs them."""
    problems = []
    sub = tmp / "tampered"
    deleted: set[str] = set()
    for i, nb in enumerate(notebooks.notebooks_of(ROOT)):
        text = (release_dir / "assignments" / nb.file).read_text(encoding="utf-8")
        auto = [c.grade_id for c in notebooks.cell_points(ROOT / "assignments" / nb.file) if c.kind == "auto"]
        dst = sub / "assignments" / nb.file
        dst.parent.mkdir(parents=True, exist_ok=True)
        gone = frozenset(auto[:1]) if i == 0 else frozenset()  # a deleted test cell earns nothing either
        deleted |= gone
        dst.write_text(tamper(text, gone), encoding="utf-8")
    data = grade(sub, notebooks_out=tmp / "executed")
    for t in data["tests"]:
        if "notebook" in t["extra_data"] and t["score"] != 0:
            problems.append(f"tampered notebook earned {t['score']} on {t['name']}: {t['output'][:200]}")
    if not any("notebook" in t["extra_data"] for t in data["tests"]):
        problems.append("no notebook was graded")
    # the executed notebooks hold the source's test cells (hidden tests included), not the edits
    for nb in notebooks.notebooks_of(ROOT):
        source = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in
                  json.loads((ROOT / "assignments" / nb.file).read_text(encoding="utf-8"))["cells"]
                  if notebooks.cell_kind(c["metadata"].get("nbgrader", {}), c["cell_type"]) == "auto"}
        executed = tmp / "executed" / Path(nb.file).name
        if not executed.is_file():
            problems.append(f"{nb.id}: nbgrader left no executed notebook")
            continue
        ran = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in
               json.loads(executed.read_text(encoding="utf-8"))["cells"]
               if c["metadata"].get("nbgrader", {}).get("grade_id") in source}
        for grade_id, src in source.items():
            if grade_id not in deleted and "".join(ran.get(grade_id, "")) != "".join(src):
                problems.append(f"{nb.id}: test cell {grade_id} ran as {''.join(ran.get(grade_id, ''))[:80]!r}, "
                                "not as the source")
    return problems
