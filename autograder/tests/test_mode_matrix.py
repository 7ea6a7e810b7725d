"""The grader as Gradescope runs it, and the other modes: a course copy and a virtual
environment under /opt (as /autograder/source), graded (1) with the uid-only mode forced, (2)
under an emulated Docker default (no namespaces: ``auto`` must pick uid-only by itself), and
(3) as a non-root user (bubblewrap in a user namespace). Under (2) and (3) every hostile fixture of the
self-check (the default mode's, bubblewrap + uid as root: test_selfcheck.py) scores within its
points (but endless_call, whose defence is endless_loop's once per test: mode_matrix.py),
graded four at a time (most of a hostile grading waits on a limit). The honest class
grades two tasks (one of them numpy's) rather than all, which is what the private TMPDIR could
break.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from autograder.grading.grade import ROOT, manifest_of
from autograder.notebooks import nbgrader
from autograder.selfcheck import notebook_full_marks, reference_submission
SYSTEM_PYTHON = Path("/usr/bin/python3")
HONEST_TASKS = frozenset({"a1_ledger", "a4_kv_cache"})
HONEST_NOTEBOOK = "nb01_ledger_70b"
NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not SYSTEM_PYTHON.exists(),
                                reason="needs root and a system Python (Gradescope's layout)")


def _same_minor(python: Path) -> bool:
    run = subprocess.run([str(python), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    return run.stdout.strip() == str(sys.version_info[:2])


def make_opt_course() -> Path:
    """/opt/servelab-XXXX/source: this work tree's files (tracked and new, as make_zip.sh packs
    the tracked ones) and the built core, with a virtual environment of the system Python
    that holds this one's packages (hard links where it can: nothing is downloaded). The copy
    is the course's own, as Gradescope's is: nothing it runs reaches back into this checkout,
    which may lie in a folder the grading uid cannot enter (``mktemp -d`` makes one 0700).
    Returns the source folder; the caller removes its parent."""
    if not _same_minor(SYSTEM_PYTHON):
        pytest.skip("the system Python is not this one's minor version (numpy and the core are built for it)")
    top = Path(tempfile.mkdtemp(prefix="servelab-", dir="/opt"))
    os.chmod(top, 0o755)
    source = top / "source"
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.split(b"\0")
    for rel in [f.decode() for f in files if f] + [str(p.relative_to(ROOT)) for p in (ROOT / "python" / "servelab").glob("_core*.so")]:
        if (ROOT / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, source / rel)
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(source / ".venv")], check=True)
    site = next((source / ".venv" / "lib").glob("python3*/site-packages"))
    _link_tree(Path(sysconfig.get_paths()["purelib"]), site, leave_out={"servelab.pth"})
    (site / "servelab_course.pth").write_text(f"{source / 'python'}\n")
    # the packages' console scripts (nbgrader runs `alembic`), started by this venv's python
    python = source / ".venv" / "bin" / "python"
    for script in Path(sys.prefix, "bin").iterdir():
        target = source / ".venv" / "bin" / script.name
        if script.is_file() and not target.exists():
            head = script.read_bytes()[:256]
            if head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]:
                body = script.read_text(encoding="utf-8", errors="replace").split("\n", 1)[1]
                target.write_text(f"#!{python}\n{body}", encoding="utf-8")
                target.chmod(0o755)
    for folder, _, names in os.walk(top):  # as a zip unpacks: readable by all
        os.chmod(folder, 0o755)
        if Path(folder) == site or site in Path(folder).parents:
            continue  # linked files share their inode with this venv's: _link_tree saw to them
        for n in names:
            p = Path(folder) / n
            if not p.is_symlink():
                os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)
    return source


def _link_tree(src: Path, dst: Path, leave_out: frozenset[str] | set[str] = frozenset()) -> None:
    """``dst`` gets ``src``'s files: a hard link to each one that all may read (so the checkout
    loses nothing and no mode of its changes), a copy readable by all of any other or where a
    link cannot be made (another file system); links inside are made again as links."""
    for folder, dirs, names in os.walk(src):
        here = dst / Path(folder).relative_to(src)
        here.mkdir(parents=True, exist_ok=True)
        for n in [*names, *(d for d in dirs if (Path(folder) / d).is_symlink())]:
            if n in leave_out and Path(folder) == src:
                continue
            s, d = Path(folder) / n, here / n
            if s.is_symlink():
                d.symlink_to(os.readlink(s))
                continue
            if s.stat().st_mode & 0o004:
                try:
                    os.link(s, d)
                    continue
                except OSError:
                    pass
            shutil.copy2(s, d)
            os.chmod(d, 0o755 if os.access(s, os.X_OK) else 0o644)


@pytest.fixture(scope="module")
def opt_course():
    """The course copy the uid-only gradings share (as root they lock its private folders
    0700, for good, as on Gradescope: the user mode gets a copy of its own)."""
    source = make_opt_course()
    yield source
    shutil.rmtree(source.parent, ignore_errors=True)


def run_matrix(source: Path, args: list[str], env: dict, prefix: tuple[str, ...] | list[str] = ()) -> dict:
    run = subprocess.run([*prefix, str(source / ".venv" / "bin" / "python"), "-m", "autograder.tests.mode_matrix", *args],
                         cwd=source, env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def grader_env(tmpdir: Path, mode: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVELAB_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(TMPDIR=str(tmpdir), SERVELAB_GRADING_SECRET="mode matrix", HYPOTHESIS_PROFILE="ci")
    if mode is not None:
        env["SERVELAB_SANDBOX"] = mode
    return env


def assert_contained(found: dict, mode: str) -> None:
    assert found["mode"] == mode, found
    assert found["core"] != "read" and found["exec_mapping"] != "mapped", found
    assert found["course"] != "read" and found["tmp"] != "read", found


def test_uid_only_a_child_reads_no_core_course_or_tmp_and_maps_no_code(opt_course, private_tmpdir):
    assert_contained(run_matrix(opt_course, ["probe"], grader_env(private_tmpdir, "uid")), "uid")


def test_uid_only_without_its_new_walls_carried_native_code_gains_points(opt_course, private_tmpdir):
    """The control: the same grading with Landlock and the no-new-code rule off (the uid-only
    mode as it was) lets carried native code load from its scratch folder and answer."""
    got = run_matrix(opt_course, ["hostile-walls-off", "carried_native_code"], grader_env(private_tmpdir, "uid"))
    assert got["mode"] == "uid" and got["carried_native_code"]["score"] > 0, got
    print("uid-only, walls off (control):", got["carried_native_code"]["score"])


def test_a_docker_default_makes_auto_choose_uid_only_and_the_hostile_set_scores_zero(opt_course, private_tmpdir):
    """No namespaces (a seccomp filter refuses them, as Docker's default profile does without
    CAP_SYS_ADMIN): ``auto`` picks the uid drop with Landlock, and every hostile fixture (carried
    native code, the oracle loaded by path, the tricks past the audit hook, the notebooks'...)
    scores within its points."""
    launcher = [sys.executable, str(Path(__file__).with_name("docker_default.py"))]
    env = grader_env(private_tmpdir, None)
    assert_contained(run_matrix(opt_course, ["probe"], env, launcher), "uid")
    got = run_matrix(opt_course, ["hostile", "all"], env, launcher)
    assert got.pop("mode") == "uid"
    assert {name: r["problems"] for name, r in got.items() if r["problems"]} == {}, got
    print("uid-only (docker default) scores:", {name: r["score"] for name, r in got.items()})


AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


@pytest.fixture(scope="module")
def user_course():
    """A course copy of its own under /opt for the grader as a non-root user, and that user's
    TMPDIR (its HOME too): (source, tmpdir)."""
    source = make_opt_course()
    user_tmp = source.parent / "user-tmp"
    user_tmp.mkdir()
    os.chown(user_tmp, NOBODY, NOBODY)
    yield source, user_tmp
    shutil.rmtree(source.parent, ignore_errors=True)


def user_env(user_tmp: Path) -> dict:
    return {**grader_env(user_tmp, None), "HOME": str(user_tmp)}


def test_bubblewrap_as_a_user_holds_the_file_and_code_tricks(user_course):
    """The grader as a non-root user (no uid to drop to): bubblewrap in a user namespace, on
    a course copy of its own under /opt, with a TMPDIR of that user's; every hostile fixture
    scores within its points."""
    source, user_tmp = user_course
    env = user_env(user_tmp)
    assert_contained(run_matrix(source, ["probe"], env, AS_NOBODY), "bwrap")
    got = run_matrix(source, ["hostile", "all"], env, AS_NOBODY)
    assert got.pop("mode") == "bwrap"
    assert {name: r["problems"] for name, r in got.items() if r["problems"]} == {}, got
    print("bubblewrap as a user, scores:", {name: r["score"] for name, r in got.items()})


TWO_STUDENTS = ("ada", "grace")  # side by side under grade-all (uid-only: their uids and folders)


def honest_class(into: Path, students: Sequence[str] = TWO_STUDENTS) -> Path:
    """``students`` handing in the reference of :data:`HONEST_TASKS` and the notebook
    :data:`HONEST_NOTEBOOK` (its kernel: the notebooks' own boundary in each mode)."""
    notebook = next(nb for nb in nbgrader.notebooks_of(ROOT) if nb.id == HONEST_NOTEBOOK)
    for student in students:
        reference_submission(into / student, tasks=HONEST_TASKS)
        dst = into / student / "assignments" / notebook.file
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "assignments" / notebook.file, dst)
    return into


def assert_honest_points(gradebook: Path, students: Sequence[str] = TWO_STUDENTS) -> None:
    rows = list(csv.DictReader((gradebook / "gradebook.csv").open()))
    want = {t.id: t.points for t in manifest_of(ROOT).tasks if t.id in HONEST_TASKS}
    want[HONEST_NOTEBOOK] = notebook_full_marks()[HONEST_NOTEBOOK]
    assert [r["submission"] for r in rows] == list(students)
    for row in rows:
        assert {task: int(row[task]) for task in want} == want, row


def grade_all(python: Path, course: Path, subs: Path, out: Path, env: dict, prefix: Sequence[str] = ()) -> None:
    """An instructor's ``grade-all DIR --out OUT``, with its default options (every core)."""
    run = subprocess.run([*prefix, str(python), "-m", "autograder", "grade-all", str(subs), "--out", str(out)],
                         cwd=course, env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stderr[-3000:]


def test_an_honest_class_under_a_private_tmpdir_keeps_its_points_in_uid_only(opt_course, private_tmpdir, tmp_path):
    """The reference twice, ``grade-all`` with its defaults, uid-only, TMPDIR under a 0700 folder: both
    students get the reference's points on the tasks and the notebook they handed in (each
    worker has its own uid and work folder; before, both rewrote the group of TMPDIR's
    ancestors and one lost its own files; the notebook's kernel is confined by Landlock), and
    no folder above TMPDIR changed (the fixture checks)."""
    subs = honest_class(tmp_path / "class")
    grade_all(opt_course / ".venv" / "bin" / "python", opt_course, subs, tmp_path / "gradebook",
              grader_env(private_tmpdir, "uid"))
    assert_honest_points(tmp_path / "gradebook")


def readable_by_all(folder: Path) -> Path:
    for here, _, names in os.walk(folder):
        os.chmod(here, 0o755)
        for n in names:
            os.chmod(Path(here) / n, 0o644)
    return folder


def test_an_honest_class_keeps_its_points_as_a_user(user_course):
    """The class of two graded by a non-root user (bubblewrap in a user namespace), ``grade-all``
    with its defaults (every core: both side by side), on a course copy of its own under /opt,
    with a TMPDIR of that user's."""
    source, user_tmp = user_course
    subs = readable_by_all(honest_class(source.parent / "class"))
    out = user_tmp / "gradebook"
    grade_all(source / ".venv" / "bin" / "python", source, subs, out, user_env(user_tmp), AS_NOBODY)
    assert_honest_points(out)


def points_lost(data: dict) -> dict[str, str]:
    """Every test of a results.json that did not get its full points, with its output, but the
    manually graded notebook cells (pending: the instructor grades them by hand)."""
    return {t["name"]: t["output"][:300] for t in data["tests"]
            if t["score"] != t["max_score"] and not t["name"].endswith("(manually graded)")}


def run_autograder(course: Path, submission: Path, env: dict, prefix: Sequence[str] = ()) -> dict:
    """Gradescope's entry point on the /opt copy (AUTOGRADER_ROOT is its parent, as
    /autograder) with ``submission`` as the upload: its results.json."""
    top = course.parent
    shutil.rmtree(top / "submission", ignore_errors=True)
    shutil.rmtree(top / "results", ignore_errors=True)
    shutil.copytree(submission, top / "submission")
    run = subprocess.run([*prefix, "bash", str(course / "autograder" / "gradescope" / "run_autograder")],
                         env={**env, "AUTOGRADER_ROOT": str(top)}, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stderr[-3000:]
    print(run.stdout[-6000:], run.stderr[-6000:])  # the instructors' log, shown on a failure
    return json.loads((top / "results" / "results.json").read_text())


def grade_once(course: Path, submission: Path, out: Path, env: dict, options: Sequence[str] = (),
               prefix: Sequence[str] = ()) -> dict:
    """``grade SUBMISSION --out OUT [options]`` with the course's interpreter: its results.json."""
    run = subprocess.run([*prefix, str(course / ".venv" / "bin" / "python"), "-m", "autograder", "grade",
                          str(submission), "--out", str(out), *options],
                         cwd=course, env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stderr[-3000:]
    print(run.stderr[-6000:])  # the instructors' log (why a notebook could not run), shown on a failure
    return json.loads(out.read_text())


def test_gradescope_with_its_defaults_gives_the_reference_every_point(opt_course, tmp_path):
    """``run_autograder`` as Gradescope calls it (no option but the metadata), namespaces
    refused as in its container, so ``auto`` picks uid-only; TMPDIR is the world's /tmp, as
    there. The tasks are graded side by side (every core, the default): each worker adopts
    the work folder its grader made for it, or the sandbox's uid is refused it (and every test
    of a Python task scores 0)."""
    sub = reference_submission(tmp_path / "reference", with_notebooks=True)
    env = grader_env(Path("/tmp"), None)
    launcher = [sys.executable, str(Path(__file__).with_name("docker_default.py"))]
    data = run_autograder(opt_course, sub, env, launcher)
    assert points_lost(data) == {}


def test_an_instructors_grade_with_its_defaults_gives_the_reference_every_point(opt_course, tmp_path):
    """``grade SUBMISSION --out OUT`` as root with bubblewrap (the default mode), every core."""
    sub = reference_submission(tmp_path / "reference", with_notebooks=True)
    data = grade_once(opt_course, sub, tmp_path / "results.json", grader_env(Path("/tmp"), None))
    assert points_lost(data) == {}


def test_the_classroom_step_as_a_user_gives_the_reference_every_point(user_course):
    """The Classroom workflow's grading step (``grade ../submission --out ../results.json
    --trust-submission``) as a non-root user, as a runner runs it: bubblewrap in a user namespace."""
    source, user_tmp = user_course
    sub = readable_by_all(reference_submission(source.parent / "reference", with_notebooks=True))
    data = grade_once(source, sub, user_tmp / "results.json", user_env(user_tmp), ["--trust-submission"], AS_NOBODY)
    assert points_lost(data) == {}


def test_run_autograder_under_a_docker_default_gives_carried_native_code_nothing(opt_course, private_tmpdir):
    """Gradescope's own entry point on the /opt copy (AUTOGRADER_ROOT is its parent, as
    /autograder), namespaces refused: results.json gives the carried extension 0 points."""
    from autograder.selfcheck import HOSTILE

    launcher = [sys.executable, str(Path(__file__).with_name("docker_default.py"))]
    data = run_autograder(opt_course, HOSTILE / "carried_native_code", grader_env(private_tmpdir, None), launcher)
    a1 = [t for t in data["tests"] if t.get("extra_data", {}).get("task") == "a1_ledger"]
    assert a1 and data["score"] == 0 and sum(t["score"] for t in a1) == 0, [t["output"][:200] for t in a1][:3]
    # graded, not refused: a grader that could not reach its own work folder gives 0 too
    assert not [t["name"] for t in data["tests"] if "could not grade" in t["output"]]



# Every entry point's options in every mode. The rest of the 3 x 3 is above, on the whole
# reference or the class of two: Gradescope's (``grade SUB --out R``, run_autograder's and an
# instructor's) in uid-only and as root with bubblewrap; the Classroom step's as a user;
# grade-all's in all three (test_gradebook.py's as root). Here, the three missing, on one honest
# student's hand-in (the two tasks and the notebook of :func:`honest_class`).
OPTIONS = {"gradescope": [], "classroom": ["--trust-submission"]}
DOCKER_DEFAULT = [sys.executable, str(Path(__file__).with_name("docker_default.py"))]


def honest_points_lost(data: dict) -> dict[str, str]:
    """:func:`points_lost` on the honest student's tasks and notebook, which must all be graded."""
    honest = HONEST_TASKS | {HONEST_NOTEBOOK}
    graded = {t["extra_data"]["task"] for t in data["tests"]}
    assert honest <= graded, graded
    lost = points_lost(data)
    return {t["name"]: lost[t["name"]] for t in data["tests"] if t["extra_data"]["task"] in honest and t["name"] in lost}


@pytest.mark.parametrize("entry, mode", [("classroom", "uid"), ("classroom", "bwrap"), ("gradescope", "user")])
def test_every_entry_points_options_give_an_honest_student_every_point_in_every_mode(entry, mode, request, tmp_path):
    """``uid``: namespaces refused as in Docker's default, so ``auto`` picks uid-only; ``bwrap``:
    root with namespaces, the default mode; ``user``: a non-root user, bubblewrap in a user
    namespace. Each on the course copy under /opt, ``grade`` with the entry point's options."""
    if mode == "user":
        course, user_tmp = request.getfixturevalue("user_course")
        sub = readable_by_all(honest_class(Path(tempfile.mkdtemp(dir=course.parent)), ("ada",))) / "ada"
        out, env, prefix = user_tmp / f"{entry}.json", user_env(user_tmp), AS_NOBODY
    else:
        course = request.getfixturevalue("opt_course")
        sub = honest_class(tmp_path / "class", ("ada",)) / "ada"
        out, env = tmp_path / "results.json", grader_env(Path("/tmp"), None)
        prefix = DOCKER_DEFAULT if mode == "uid" else []
    assert honest_points_lost(grade_once(course, sub, out, env, OPTIONS[entry], prefix)) == {}
