"""The OS boundary (autograder/sandbox/os_boundary.py): the child really is another user in other
namespaces, and the hostile submissions that walk past the audit hook are stopped by it (with
the boundary off, the same files do gain points)."""

from __future__ import annotations

import ast
import json
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
                 "neighbour_temp_folder", "carried_native_code"]
PROBE = '''
import os
def probe(course):
    import _xxsubinterpreters as interpreters
    read, write = os.pipe()
    code = f"""
import os
def attempt(f):
    try:
        f()
        return "done"
    except OSError as exc:
        return type(exc).__name__ + " " + str(exc.errno)
import mmap
found = [attempt(lambda: os.listdir({course!r})), attempt(lambda: open("written", "w").write("x")),
         attempt(lambda: os.memfd_create("x")), attempt(lambda: os.posix_spawn("/bin/true", ["true"], {{}})),
         attempt(lambda: mmap.mmap(os.open({__file__!r}, os.O_RDONLY), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC))]
os.write({write}, repr(found).encode())
"""
    interpreters.run_string(interpreters.create(), code)
    return [os.getuid(), os.getpid(), os.path.exists("/proc/self"), os.read(read, 4096).decode()]
'''


def test_the_child_is_another_user_in_other_namespaces_and_cannot_list_the_course(tmp_path):
    """Even from a subinterpreter (no audit hook), the course copy (its assignments, with the
    solutions and hidden tests) cannot be listed; nothing can be written (so no carried binary
    can be put anywhere to load), there is no /proc, and the kernel refuses memory-only files
    and new processes (autograder/sandbox/syscall_filter.py)."""
    boundary = os_boundary.boundary()
    assert boundary.mode != "none"  # this machine runs as root with bubblewrap (.ci/run installs it)
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "probe.py").write_text(PROBE)
    child = Child([("probe", tmp_path / "mods" / "probe.py")], tmp_path / "scratch", [], [], Limits(wall_s=60),
                  time.monotonic() + 60)
    try:
        uid, pid, has_proc, found = child.call("probe", "probe", (str(ROOT / "assignments"),), {})
    finally:
        child.close()
    listing, write, memfd, spawn, exec_own_file = ast.literal_eval(found)
    assert listing.split()[0] in ("FileNotFoundError", "PermissionError"), listing
    assert (memfd, spawn) == ("PermissionError 1", "PermissionError 1")
    assert uid != os.getuid() or boundary.bwrap
    if os.geteuid() == 0:
        assert uid == boundary.uid and uid >= os_boundary.ID_RANGE[0]
    if boundary.bwrap:  # its own PID namespace (the first process is bubblewrap's), sealed
        assert pid <= 3 and not has_proc and write == "OSError 30", (pid, has_proc, write)
    if boundary.bwrap and os.geteuid() == 0:  # the submission's files are on a noexec mount
        assert exec_own_file == "PermissionError 1", exec_own_file


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


def test_a_sealed_command_line_has_nothing_writable_but_a_noexec_tmpfs(tmp_path):
    """A task's child: its scratch folder bound read-only, the root, /tmp and /dev remounted
    read-only, no /proc or /dev/shm; as root, its TMPDIR a tmpfs mounted noexec before the drop."""
    b = os_boundary.Boundary(bwrap=True, uid=300000, gid=300000)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cmd = b.command(["python", "child.py"], readable=[], writable=[scratch], sealed=True, noexec_tmp=scratch / "tmp")
    assert ["--ro-bind", str(scratch), str(scratch)] == cmd[cmd.index(str(scratch)) - 1:cmd.index(str(scratch)) + 2]
    assert "--proc" not in cmd and "/dev/shm" not in cmd and "--bind" not in cmd
    assert cmd[cmd.index("--") - 2:cmd.index("--")] == ["--remount-ro", "/"]
    if os.geteuid() == 0 and os_boundary.MOUNT:  # as root, before the drop: the noexec mounts
        wrapper = cmd[cmd.index("--") + 1:]
        assert "noexec" in wrapper[4] and "uid=300000" in wrapper[4] and wrapper[5] == str(scratch / "tmp")
        assert wrapper[6:8] == [str(scratch), "--"] and wrapper[8] == os_boundary.SETPRIV
    assert "--proc" in b.command(["python"], readable=[], writable=[scratch])  # a kernel keeps its /proc


KERNEL_QUOTES_HIDDEN_TESTS = '''
class _Quote:
    """Arithmetic gives itself back, no comparison holds, and its text is every cell the kernel
    ran so far: nbgrader ran the test cells above it with their hidden tests."""
    def __sub__(self, other): return self
    __rsub__ = __truediv__ = __add__ = __sub__
    def __abs__(self): return self
    def __lt__(self, other): return False
    def __format__(self, spec): return str(self)
    def __str__(self):
        import os
        os.write(2, repr(get_ipython().user_ns.get("In", [])).encode())  # into nbgrader's log too
        return " | ".join(s for s in get_ipython().user_ns.get("In", []) if "HIDDEN" in s)
int8_weight_gb = _Quote()
'''


def test_a_notebook_kernel_cannot_quote_hidden_tests_in_a_visible_message(tmp_path):
    """The kernel is the student's and runs every test cell, hidden tests included: a value
    whose text is the kernel's input history, failing a visible cell, used to put the hidden
    tests of the cells above into that cell's visible message. Messages now come from the
    grader's own check, and the kernel's stdout and stderr go nowhere; honest cells keep their points."""
    from autograder.notebooks import nbgrader

    nb = next(n for n in nbgrader.notebooks_of(ROOT) if n.name == "ex01_ledger_70b")
    data = json.loads((ROOT / "assignments" / nb.file).read_text())
    answer = next(c for c in data["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "ex01_e_answer")
    answer["source"] = "".join(answer["source"]) + KERNEL_QUOTES_HIDDEN_TESTS
    path = tmp_path / "sub" / "assignments" / nb.file
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    result = grade(tmp_path / "sub", limits=Limits(wall_s=30, cpu_s=30), only_tasks=frozenset({nb.id}))
    cells = {t["extra_data"]["cell"]: t for t in result["tests"] if t["extra_data"]["task"] == nb.id}
    # (ex01's cells all hold hidden tests now, so their results show after the due date: no
    # message, shown then or before, may quote a test)
    leaked = [c for c, t in cells.items() if "HIDDEN" in t["output"]]
    assert not leaked, {c: cells[c]["output"][:300] for c in leaked}
    assert cells["ex01_e_int8"]["score"] == 0 and cells["ex01_e_int8"]["visibility"] == "after_due_date"
    assert sum(t["score"] for t in cells.values()) == 10  # every other autograded cell
