"""The OS boundary (autograder/sandbox/os_boundary.py): the child really is another user in other
namespaces, and the hostile submissions that walk past the audit hook are stopped by it (with
the boundary off, the same files do gain points)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from servelab.grading.manifest import tomllib  # tomli on Python 3.10

from autograder.sandbox import os_boundary
from autograder.grading.grade import ROOT, grade
from autograder.sandbox.remote import Child, Limits
from autograder.selfcheck import HOSTILE, HOSTILE_LIMITS, points_by_task

# hostile submissions the audit hook alone does not stop (README: threat model)
PAST_THE_HOOK = ["subinterpreter_reads_solution", "dir_fd_reads_solution", "hardlink_via_dir_fd",
                 "grader_proc_through_subinterpreter", "runtime_extension_reads_solution", "tmp_leftovers",
                 "neighbour_temp_folder"]
PROBE = '''
import os
def probe(course):
    import _xxsubinterpreters as interpreters
    code = f"""
try:
    found = repr(sorted(__import__('os').listdir({course!r})))
except OSError as exc:
    found = type(exc).__name__
open('listing.txt', 'w').write(found)
"""
    interpreters.run_string(interpreters.create(), code)
    return [os.getuid(), os.readlink("/proc/self/ns/pid"), open("listing.txt").read()]
'''


def test_the_child_is_another_user_in_other_namespaces_and_cannot_list_the_course(tmp_path):
    """Even from a subinterpreter (no audit hook), the course copy (its assignments, with the
    solutions and hidden tests) cannot be listed."""
    boundary = os_boundary.boundary()
    assert boundary.mode != "none"  # this machine runs as root with bubblewrap (.ci/run installs it)
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "probe.py").write_text(PROBE)
    child = Child([("probe", tmp_path / "mods" / "probe.py")], tmp_path / "scratch", [], [], Limits(wall_s=60),
                  time.monotonic() + 60)
    try:
        uid, pid_ns, listing = child.call("probe", "probe", (str(ROOT / "assignments"),), {})
    finally:
        child.close()
    assert listing in ("FileNotFoundError", "PermissionError"), listing
    assert uid != os.getuid() or pid_ns != os.readlink("/proc/self/ns/pid")
    if os.geteuid() == 0:
        assert uid == boundary.uid and uid >= os_boundary.ID_RANGE[0]
    if boundary.bwrap:
        assert pid_ns != os.readlink("/proc/self/ns/pid")


@pytest.fixture
def leftovers():
    """What the tricks look for: a reference ledger left in /tmp (mode 0755 folders, as any
    instructor's scratch copy), and a classmate's grading folder (0700, as the grader makes it)."""
    made = []
    for prefix, mode in (("servelab-leftover-", 0o755), ("servelab-grade-", 0o700)):
        top = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        os.chmod(top, mode)
        dst = top / "assignments" / "a1_ledger" / "ledger.py"
        dst.parent.mkdir(parents=True)
        shutil.copyfile(ROOT / "assignments" / "a1_ledger" / "ledger.py", dst)
        made.append(top)
    yield made
    for top in made:
        shutil.rmtree(top, ignore_errors=True)


# the tricks that look for what the `leftovers` fixture leaves in /tmp: the self-check grades
# them without it, so their boxed grading is here; the others' is the self-check's (0 points)
NEED_LEFTOVERS = ("tmp_leftovers", "neighbour_temp_folder")


@pytest.mark.parametrize("name", PAST_THE_HOOK)
def test_with_the_boundary_off_the_trick_gains_points(name, leftovers, monkeypatch):
    """The control: the same hostile files, graded with only the audit hook, earn points; the
    self-check grades them behind the boundary (0 points). So it is the boundary that stops them."""
    if name in NEED_LEFTOVERS:
        boxed = grade(HOSTILE / name, limits=HOSTILE_LIMITS, only_tasks=frozenset({"a1_ledger"}))
        assert points_by_task(boxed)["a1_ledger"] == 0
    else:  # graded once, by the self-check (test_selfcheck.py), which holds it to this
        assert tomllib.loads((HOSTILE / name / "expect.toml").read_text())["max_points"] == 0
    monkeypatch.setenv(os_boundary.MODE_VARIABLE, "none")
    exposed = grade(HOSTILE / name, limits=HOSTILE_LIMITS, only_tasks=frozenset({"a1_ledger"}))
    failing = [t["output"][:200] for t in exposed["tests"] if t["status"] != "passed"][:2]
    assert points_by_task(exposed)["a1_ledger"] > 0, failing


def test_without_root_or_bubblewrap_grade_refuses_unless_trusted(monkeypatch):
    monkeypatch.setattr(os_boundary, "BWRAP", None)
    monkeypatch.setattr(os_boundary, "_CHOSEN", {})
    monkeypatch.setattr(os_boundary.os, "geteuid", lambda: 1000)
    monkeypatch.delenv(os_boundary.TRUST_VARIABLE, raising=False)
    monkeypatch.delenv(os_boundary.MODE_VARIABLE, raising=False)
    with pytest.raises(os_boundary.Refused, match="--trust-submission"):
        os_boundary.require()
    monkeypatch.setenv(os_boundary.TRUST_VARIABLE, "1")
    assert os_boundary.require() == os_boundary.NONE


def test_the_cli_refuses_in_one_line(monkeypatch, capsys):
    from autograder.__main__ import main

    monkeypatch.setattr(os_boundary, "BWRAP", None)
    monkeypatch.setattr(os_boundary, "_CHOSEN", {})
    monkeypatch.setattr(os_boundary.os, "geteuid", lambda: 1000)
    monkeypatch.delenv(os_boundary.TRUST_VARIABLE, raising=False)
    monkeypatch.delenv(os_boundary.MODE_VARIABLE, raising=False)
    assert main(["grade", str(HOSTILE / "sys_exit_at_import")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autograder: refusing") and "\n" not in err


def test_a_free_id_is_used_by_no_process_and_no_account():
    n = os_boundary.free_id()
    assert n not in os_boundary._ids_in_use() and n >= os_boundary.ID_RANGE[0]


def test_the_command_line_binds_only_what_the_child_needs(tmp_path):
    b = os_boundary.Boundary(bwrap=True, uid=300000, gid=300000)
    secret = tmp_path / "mods" / "answers"
    secret.mkdir(parents=True)
    cmd = b.command(["python", "child.py"], readable=[tmp_path / "mods"], writable=[tmp_path / "scratch"],
                    hidden=[secret, ROOT / "assignments"])
    assert cmd[-2:] == ["python", "child.py"] and "--unshare-net" in cmd and "--unshare-pid" in cmd
    assert ["--tmpfs", str(secret)] == cmd[cmd.index(str(secret)) - 1:cmd.index(str(secret)) + 1]
    assert str(ROOT / "assignments") not in cmd  # not mounted at all, so nothing to hide
    assert "--reuid=300000" in cmd and cmd.index("--reuid=300000") > cmd.index("--")


def test_with_the_boundary_off_a_notebook_runs_nbgraders_source_solutions(monkeypatch):
    """The notebook control: nbgrader's source folder (solutions inside) is readable to a
    notebook that only the audit hook guards; behind the boundary the self-check gives it 0."""
    from autograder.notebooks import nbgrader

    nb = next(n for n in nbgrader.notebooks_of(ROOT) if n.name == "ex06_tail_fanout")
    monkeypatch.setenv(os_boundary.MODE_VARIABLE, "none")
    exposed = grade(HOSTILE / "nbgrader_source_folder", limits=Limits(wall_s=30, cpu_s=30),
                    only_tasks=frozenset({nb.id}))
    assert points_by_task(exposed)[nb.id] > 0, [t["output"][:200] for t in exposed["tests"]][-4:]


def test_without_namespaces_the_course_copy_is_locked_but_servelab_stays(tmp_path):
    """The uid drop alone: private folders become 0700; servelab's folder (a kernel imports it)
    and its ancestors keep their modes."""
    course = tmp_path / "course"
    for sub in ("assignments/a1_ledger", "autograder/answers", "python/servelab"):
        (course / sub).mkdir(parents=True)
        os.chmod(course / sub.split("/")[0], 0o755)
    b = os_boundary.Boundary(bwrap=False, uid=300001, gid=300001)
    b.lock([course / "assignments", course / "autograder", course / "python"], keep=[course / "python" / "servelab"])
    modes = {p: (course / p).stat().st_mode & 0o777 for p in ("assignments", "autograder", "python")}
    assert modes == {"assignments": 0o700, "autograder": 0o700, "python": 0o755}


def test_locking_keeps_the_launchers_readable(tmp_path, monkeypatch):
    """child.py, nb_kernel.py and os_boundary.py must stay readable: their folder stays open, and
    everything else in it (the answer key) is closed."""
    course = tmp_path / "course"
    (course / "autograder" / "answers").mkdir(parents=True)
    os.chmod(course / "autograder" / "answers", 0o755)
    launcher = course / "autograder" / "child.py"
    launcher.write_text("")
    os.chmod(launcher, 0o644)
    b = os_boundary.Boundary(bwrap=False, uid=300001, gid=300001)
    monkeypatch.setattr(os_boundary, "LAUNCHERS", (launcher,))
    b.lock([course / "autograder"])
    assert launcher.stat().st_mode & 0o777 == 0o644
    assert (course / "autograder" / "answers").stat().st_mode & 0o777 == 0o700
