"""The OS boundary (autograder/sandbox/os_boundary.py): the child really is another user in other
namespaces, and the hostile submissions that walk past the audit hook are stopped by it (with
the boundary off, the same files do gain points)."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from servelab.harness.manifest import tomllib  # tomli on Python 3.10

from autograder.sandbox import os_boundary
from autograder.grading.grade import ROOT, grade
from autograder.sandbox.remote import Child, Limits
from autograder.selfcheck import HOSTILE, HOSTILE_LIMITS, points_by_task

from autograder.tests.mode_matrix import PAST_THE_HOOK  # the tricks the audit hook alone does not stop
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
    # the subinterpreters' extension loaded before the walls: a task's child could not map it
    # afterwards (test_ipc.py), and this probe needs an interpreter with no audit hook
    child = Child([("probe", tmp_path / "mods" / "probe.py")], tmp_path / "scratch", [], [], Limits(wall_s=60),
                  time.monotonic() + 60, preload=("_xxsubinterpreters",))
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
    # no new executable mapping once the child's own libraries are mapped, in every mode
    # (as root behind bubblewrap the submission's files are on a noexec mount as well)
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
    # an honest grading's time limits: what the control shows is the trick's gain, so a busy
    # machine (make test's suites side by side) must not run the stolen answers out of time
    exposed = grade(HOSTILE / name, limits=dataclasses.replace(HOSTILE_LIMITS, wall_s=60.0, cpu_s=60),
                    only_tasks=frozenset({"a1_ledger"}))
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
    """The notebook control: nbgrader's source folder (solutions inside) in the temporary
    folder, where it is made when the course folder cannot keep it, is readable to a notebook
    that only the audit hook guards; behind the boundary the self-check gives it 0. (The course
    kept in the course folder is one of the paths the audit hook refuses too.)"""
    from autograder.notebooks import generation, nbgrader

    nb = next(n for n in nbgrader.notebooks_of(ROOT) if n.name == "ex06_tail_fanout")
    monkeypatch.setattr(generation, "_GENERATED", {})
    monkeypatch.setattr(generation, "_cache_folder", lambda root: None)  # a course folder it may not write
    nbgrader.generated(ROOT)  # the source folder exists before the grading starts, as under grade-all
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


CAPABILITIES = "import re; print(re.findall(r'^Cap(?:Inh|Prm|Eff|Bnd|Amb):\\s*(\\S+)', open('/proc/self/status').read(), re.M))"


@pytest.mark.skipif(os.geteuid() != 0 or not os_boundary.BWRAP, reason="bubblewrap as root")
def test_bubblewrap_drops_every_capability_with_or_without_a_uid(tmp_path):
    """``--cap-drop ALL`` in every mode: the child holds no capability (inheritable,
    permitted, effective, ambient); with a uid, bubblewrap keeps only what the drop needs,
    and the dropped process has an empty bounding set as well."""
    import subprocess
    import sys

    for uid in (None, os_boundary.free_id()):
        b = os_boundary.Boundary(bwrap=True, uid=uid, gid=uid)
        cmd = b.command([sys.executable, "-c", CAPABILITIES], readable=[], writable=[])
        assert cmd[cmd.index("--cap-drop") + 1] == "ALL"
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        inh, prm, eff, bnd, amb = (int(v, 16) for v in ast.literal_eval(run.stdout))
        assert inh == prm == eff == amb == 0, (uid, run.stdout)  # none held, none to pass on
        if uid is not None:  # setpriv clears the bounding set too
            assert bnd == 0, run.stdout
    sealed = os_boundary.Boundary(bwrap=True, uid=300000, gid=300000).command(
        ["python"], readable=[], writable=[tmp_path], sealed=True, noexec_tmp=tmp_path)
    kept = [sealed[i + 1] for i, a in enumerate(sealed) if a == "--cap-add"]
    assert "--cap-drop" in sealed and set(kept) <= {"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_SYS_ADMIN", "CAP_DAC_READ_SEARCH"}


def _mode_of(path: Path) -> tuple:
    st = path.stat()
    return st.st_uid, st.st_gid, st.st_mode & 0o7777


def test_reach_opens_only_the_graders_own_work_folder(tmp_path):
    """Without namespaces the child's uid must reach its folders: inside a work folder of the
    grader's the 0700 folders get its group and g+x; a closed folder outside (here pytest's
    own 0700 folder, as a private TMPDIR's parent) is never changed, and reaching under it
    is refused."""
    b = os_boundary.Boundary(bwrap=False, uid=300002, gid=300002)
    outside = tmp_path / "private" / "sub"
    outside.mkdir(parents=True)
    os.chmod(tmp_path / "private", 0o700)
    before = {p: _mode_of(p) for p in (outside, *outside.parents)}
    with pytest.raises(os_boundary.Refused, match="not the grader's own"):
        b.reach(outside)
    assert {p: _mode_of(p) for p in before} == before
    work = os_boundary.work_folder("servelab-test-reach-")
    try:
        (work / "task").mkdir(mode=0o700)
        above = {p: _mode_of(p) for p in work.parents}
        b.reach(work / "task")
        assert _mode_of(work)[1:] == (300002, 0o710) and _mode_of(work / "task")[1:] == (300002, 0o710)
        assert {p: _mode_of(p) for p in above} == above
    finally:
        shutil.rmtree(work)


def test_a_work_folder_avoids_a_private_tmpdir(tmp_path, monkeypatch):
    private = tmp_path / "private" / "tmp"
    private.mkdir(parents=True)
    os.chmod(tmp_path / "private", 0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    work = os_boundary.work_folder("servelab-test-work-")
    try:
        assert private not in work.parents and os_boundary._world_reachable(str(work.parent)) is None
        assert work.stat().st_mode & 0o777 == 0o700
    finally:
        work.rmdir()
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")  # others may pass: the work goes there, as before
    work = os_boundary.work_folder("servelab-test-work-")
    work.rmdir()
    assert work.parent == Path("/tmp")


LANDLOCKED = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("landlock", sys.argv[1])
landlock = importlib.util.module_from_spec(spec); spec.loader.exec_module(landlock)
readable, writable, outside = sys.argv[2:5]
landlock.restrict([readable], [writable])
def attempt(f):
    try:
        f(); return "ok"
    except OSError as exc:
        return type(exc).__name__
print([attempt(lambda: open(os.path.join(readable, "f")).read()),
       attempt(lambda: open(os.path.join(readable, "new"), "w")),
       attempt(lambda: open(os.path.join(writable, "new"), "w").write("x")),
       attempt(lambda: open(outside).read()), attempt(lambda: os.listdir("/tmp"))])
"""


@pytest.mark.skipif(os_boundary.landlock_abi() < 1, reason="the kernel offers no Landlock")
def test_landlock_reads_only_what_it_was_given_and_writes_only_the_scratch_folder(tmp_path):
    import subprocess
    import sys

    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "f").write_text("given")
    (tmp_path / "rw").mkdir()
    (tmp_path / "secret").write_text("solution")
    run = subprocess.run([sys.executable, "-S", "-c", LANDLOCKED, str(os_boundary.LANDLOCK), str(tmp_path / "ro"),
                          str(tmp_path / "rw"), str(tmp_path / "secret")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert ast.literal_eval(run.stdout) == ["ok", "PermissionError", "ok", "PermissionError", "PermissionError"]


def test_without_namespaces_or_landlock_grade_refuses(monkeypatch):
    """Root, but bubblewrap cannot make namespaces and the kernel has no Landlock: the uid drop
    alone would leave every world-readable file and every writable folder to carried code."""
    monkeypatch.setattr(os_boundary, "BWRAP", None)
    monkeypatch.setattr(os_boundary, "_CHOSEN", {})
    monkeypatch.setattr(os_boundary, "landlock_abi", lambda: 0)
    monkeypatch.setattr(os_boundary, "_world_reachable", lambda path: None)
    monkeypatch.setattr(os_boundary.os, "geteuid", lambda: 0)
    monkeypatch.delenv(os_boundary.TRUST_VARIABLE, raising=False)
    monkeypatch.setenv(os_boundary.MODE_VARIABLE, "uid")
    with pytest.raises(os_boundary.Refused, match="Landlock"):
        os_boundary.require()
    monkeypatch.setenv(os_boundary.TRUST_VARIABLE, "1")
    assert os_boundary.require() == os_boundary.NONE


def test_uid_only_refuses_packages_the_uid_cannot_reach(monkeypatch):
    """Root, no namespaces: numpy in a folder under one closed to others (a venv in a 0700 home,
    reached through a .pth) is named up front, instead of every test failing to import it."""
    top = Path(tempfile.mkdtemp(prefix="servelab-closed-home-"))  # pytest's own folders are 0700
    os.chmod(top, 0o755)
    try:
        _refused_then_chosen(monkeypatch, top / "home")
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _refused_then_chosen(monkeypatch, closed: Path) -> None:
    (closed / "venv" / "numpy").mkdir(parents=True)
    os.chmod(closed, 0o700)
    monkeypatch.setattr(os_boundary, "BWRAP", None)
    monkeypatch.setattr(os_boundary, "_CHOSEN", {})
    monkeypatch.setattr(os_boundary, "landlock_abi", lambda: 1)
    monkeypatch.setattr(os_boundary, "interpreter_paths", lambda: ["/usr"])
    monkeypatch.setattr(os_boundary, "library_paths", lambda: ["/usr/lib", str(closed / "venv" / "numpy")])
    monkeypatch.setattr(os_boundary.os, "geteuid", lambda: 0)
    monkeypatch.delenv(os_boundary.TRUST_VARIABLE, raising=False)
    monkeypatch.setenv(os_boundary.MODE_VARIABLE, "uid")
    with pytest.raises(os_boundary.Refused, match=f"the folder {closed}, on the way to the interpreter or its packages"):
        os_boundary.require()
    os.chmod(closed, 0o755)  # the control: the same folders, open, and the uid-only mode is chosen
    if os_boundary.SETPRIV and os_boundary.free_id() is not None:
        assert os_boundary.require().mode == "uid"


def test_in_this_machines_mode_a_child_reads_no_core_course_or_tmp_and_maps_no_code():
    """The probe of the mode matrix (autograder/tests/mode_matrix.py) in the default mode
    (bubblewrap + uid here); test_mode_matrix.py runs it uid-only and as a user."""
    from autograder.tests.mode_matrix import probe

    assert os_boundary.boundary().mode != "none"
    found = probe()
    assert found["core"] != "read" and found["course"] != "read" and found["tmp"] != "read", found
    assert found["exec_mapping"] == "PermissionError", found


def _outlives_its_grader(argv: list[str]) -> bool:
    """Starts ``argv`` from a stand-in grader process, kills that grader (SIGKILL, as grade-all
    stops a worker past the class's budget) and says whether ``argv``'s process lived on for
    10 s (it is then killed here)."""
    grader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               "print(subprocess.Popen(sys.argv[1:]).pid, flush=True)\ntime.sleep(600)", *argv],
                              stdout=subprocess.PIPE, text=True)
    assert grader.stdout is not None
    pid = int(grader.stdout.readline())
    time.sleep(1.0)  # setpriv has dropped the uid and started the sleeper
    grader.kill()
    grader.wait()

    def alive() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return False

    end = time.monotonic() + 10
    while time.monotonic() < end:
        if not alive():
            return False
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return True


@pytest.mark.skipif(os.geteuid() != 0 or os_boundary.SETPRIV is None, reason="the uid drop needs root and setpriv")
def test_without_namespaces_a_child_dies_with_the_grader_that_started_it(monkeypatch):
    """The uid-only mode has no PID namespace to take a child down with its grader: setpriv's
    parent-death signal does. The control: the same command without it outlives the grader."""
    uid = os_boundary.free_id()
    assert uid is not None
    mode = os_boundary.Boundary(bwrap=False, uid=uid, gid=uid)
    sleeper = ["/bin/sleep", "600"]
    assert not _outlives_its_grader(mode.command(sleeper, [], []))
    monkeypatch.setattr(os_boundary, "_die_with_grader", lambda: ())
    assert _outlives_its_grader(mode.command(sleeper, [], []))
