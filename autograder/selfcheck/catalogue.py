"""The self-check's catalogue: which checks exist (:func:`checks`, each a :class:`Check`), the
known submissions they grade (the reference, :func:`mutants`, :func:`hostiles`), their limits,
and what several checks share (full marks, the course's fingerprint, the calibration factor a
grading reports). The checks themselves: :mod:`.submissions`, :mod:`.bounds`,
:mod:`.tampering`; running them: :mod:`.runner`."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from servelab.harness.manifest import tomllib  # tomli on Python 3.10

from autograder.grading.grade import ROOT, manifest_of
from autograder.notebooks import nbgrader
from autograder.sandbox.remote import Limits

HOSTILE = ROOT / "autograder" / "tests" / "hostile"
MUTANTS = ROOT / "autograder" / "mutants"
# hostile submissions are graded with tight limits so that the self-check stays short (but
# loose enough that the honest parts inside them pass on a busy 2-core machine)
SELFCHECK_SECRET = "servelab self-check: a fixed, public secret"
HOSTILE_LIMITS = Limits(wall_s=4.0, cpu_s=4, memory_bytes=1 << 30, output_bytes=256 << 10)
RELEASE_PYTEST_S = 600  # the release's pytest assignments/ may take this long (times the calibration factor)
HOSTILE_SECONDS = 60  # a hostile grading taking longer than this (times the calibration factor) is a problem
# every graded test is failed by some mutant; a survivor fails the self-check
SURVIVORS_FAIL = True



class Factor:
    """The ``report`` callback of :func:`~autograder.grading.grade.grade`: keeps the largest
    calibration factor it was told of."""

    def __init__(self) -> None:
        self.value = 1.0

    def __call__(self, line: str) -> None:
        if line.startswith("time limits x"):
            self.value = max(self.value, float(line.split()[2][1:]))


def points_by_task(data: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for test in data["tests"]:
        task = test["extra_data"]["task"]
        out[task] = out.get(task, 0) + test["score"]
    return out


def full_marks() -> dict[str, int]:
    return {t.id: t.points for t in manifest_of(ROOT).tasks}


def reference_submission(into: Path, with_notebooks: bool = False, tasks: frozenset[str] | None = None) -> Path:
    """A submission folder holding the instructors' edit files (the reference solutions), of
    every task or of ``tasks`` only, and with ``with_notebooks`` the source notebooks (solutions
    in place) too."""
    rels = [rel for task in manifest_of(ROOT).tasks if tasks is None or task.id in tasks for rel in task.edit]
    if with_notebooks:
        rels += [nb.file for nb in nbgrader.notebooks_of(ROOT)]
    for rel in rels:
        dst = into / "assignments" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "assignments" / rel, dst)
    return into


def notebook_full_marks() -> dict[str, int]:
    """What the source notebooks earn when graded: their autograded points (manually graded
    cells wait for the instructor, so they add nothing yet)."""
    return {nb.id: sum(c.points for c in nbgrader.cell_points(ROOT / "assignments" / nb.file) if c.kind == "auto")
            for nb in nbgrader.notebooks_of(ROOT)}


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


def surviving_tests(killed: list[tuple[str, ...]]) -> list[str]:
    """The manifest's tests (``task: test id``) that no mutant fails, given each mutant's
    ``killed`` tests, in manifest order.

    >>> tests = [t for task in manifest_of(ROOT).tasks for t in task.tests]
    >>> surviving_tests([tuple(tests)])
    []
    >>> surviving_tests([tuple(tests[1:])]) == [f"{manifest_of(ROOT).tasks[0].id}: {tests[0]}"]
    True
    """
    dead = {t for k in killed for t in k}
    return [f"{task.id}: {test}" for task in manifest_of(ROOT).tasks for test in task.tests if test not in dead]


@dataclass(frozen=True)
class Check:
    """One check: its ``name`` (the table's row, the pytest id), its ``kind`` and the argument
    of that kind (a task id, a mutant's index in :func:`mutants`, a hostile folder's name)."""

    name: str
    kind: str
    arg: str = ""


def checks() -> list[Check]:
    """Every check, longest first (so that parallel workers finish together)."""
    out = [Check("reference: full marks", "reference"),
           Check("release: grades to zero", "release-grade"),
           Check("release: pytest assignments/ shows 0", "release-pytest")]
    if nbgrader.notebooks_of(ROOT):
        out.append(Check("notebooks: edited test cells gain nothing", "notebook-tampering"))
    out += [Check(f"hostile: {h.name}", "hostile", h.name) for h in hostiles()]
    out += [Check(f"release + reference {task.id}: that task only", "paste-back", task.id)
            for task in manifest_of(ROOT).tasks]
    out += [Check(f"bounds: {task.id} with huge numbers returned", "bounds", task.id)
            for task in manifest_of(ROOT).tasks]
    out += [Check(f"mutant: {m['task']}: {m['why']}", "mutant", str(i)) for i, m in enumerate(mutants())]
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError(f"two self-checks share a name: {sorted({n for n in names if names.count(n) > 1})}")
    return out
