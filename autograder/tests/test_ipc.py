"""No IPC between gradings: the seccomp filter refuses System V and POSIX IPC, a grading's reap
removes what its sandbox uid owns, and a task's child cannot make a subinterpreter (which has no
audit hook and would reach ctypes). Each defence with its control: the trick works without it.
The hostile submission ``ipc_left_behind`` is graded in every mode by the self-check and the
mode matrix (no object may outlive it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.grading.grade import grade
from autograder.sandbox import ipc_objects, os_boundary
from autograder.sandbox.remote import Child, Limits
from autograder.selfcheck import HOSTILE, HOSTILE_LIMITS

FILTER = Path(os_boundary.__file__).with_name("syscall_filter.py")
ATTEMPT = '''
import ctypes, json, sys
if sys.argv[1] == "filtered":
    import importlib.util
    spec = importlib.util.spec_from_file_location("syscall_filter", sys.argv[2])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install(True)
libc = ctypes.CDLL(None, use_errno=True)
found = {}
for name, call in (("shmget", lambda: libc.shmget(0, 4096, 0o1000 | 0o600)),
                   ("semget", lambda: libc.semget(0, 1, 0o1000 | 0o600)),
                   ("msgget", lambda: libc.msgget(0, 0o1000 | 0o600)),
                   ("mq_open", lambda: libc.mq_open(b"/servelab-ipc-test", 0o100 | 0o2, 0o600, None))):
    got = call()
    found[name] = "made" if got >= 0 else ctypes.get_errno()
    if got >= 0:  # not left behind by the test itself
        {"shmget": lambda: libc.shmctl(got, 0, None), "semget": lambda: libc.semctl(got, 0, 0, 0),
         "msgget": lambda: libc.msgctl(got, 0, None), "mq_open": lambda: libc.mq_unlink(b"/servelab-ipc-test")}[name]()
print(json.dumps(found))
'''

linux_x86 = pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                               reason="the seccomp filter's numbers are x86-64 Linux's")
as_root = pytest.mark.skipif(os.geteuid() != 0 or not os_boundary.SETPRIV, reason="needs root and setpriv")


def attempt(filtered: bool) -> dict:
    run = subprocess.run([sys.executable, "-c", ATTEMPT, "filtered" if filtered else "open", str(FILTER)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@linux_x86
def test_the_filter_refuses_system_v_and_posix_ipc():
    assert attempt(filtered=True) == {"shmget": 1, "semget": 1, "msgget": 1, "mq_open": 1}  # EPERM


@linux_x86
def test_control_without_the_filter_each_ipc_object_is_made():
    made = attempt(filtered=False)
    assert {made["shmget"], made["semget"], made["msgget"]} == {"made"}, made


LEAVE = '''
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
key = int(sys.argv[1])
ids = [libc.shmget(key, 4096, 0o1000 | 0o600), libc.semget(key, 1, 0o1000 | 0o600), libc.msgget(key, 0o1000 | 0o600)]
assert min(ids) >= 0, ids
'''


@as_root
def test_a_reap_removes_every_ipc_object_its_uid_left():
    """A process of a fresh sandbox uid makes a segment, a semaphore set and a queue and exits:
    they outlive it (the control), until the boundary of that uid reaps."""
    uid = os_boundary.free_id()
    boundary = os_boundary.Boundary(bwrap=False, uid=uid, gid=uid)
    run = subprocess.run([os_boundary.SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
                          sys.executable, "-c", LEAVE, str(0x5E1AC000)], capture_output=True, text=True, timeout=60)
    try:
        assert run.returncode == 0, run.stderr
        left = ipc_objects.owned_by({uid})
        assert sorted(kind.split(":")[0] for kind in left) == ["msg", "sem", "shm"], left
        assert uid in os_boundary._ids_in_use()  # no new grading takes that uid while they stand
        boundary.reap()
        assert ipc_objects.owned_by({uid}) == []
    finally:
        ipc_objects.remove_owned_by(uid)


SUBINTERPRETER = '''
def make():
    try:
        import _xxsubinterpreters as interpreters
        interpreters.run_string(interpreters.create(), "import ctypes")
        return "made"
    except BaseException as exc:
        return type(exc).__name__
'''


def subinterpreter_in_a_child(tmp_path: Path, preload: tuple[str, ...]) -> str:
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "sub.py").write_text(SUBINTERPRETER)
    child = Child([("sub", tmp_path / "mods" / "sub.py")], tmp_path / "scratch", [], [], Limits(wall_s=60),
                  time.monotonic() + 60, preload=preload)
    try:
        return child.call("sub", "make", (), {})
    finally:
        child.close()


@linux_x86
def test_a_task_child_cannot_make_a_subinterpreter(tmp_path):
    """Behind the boundary no new executable mapping is allowed once the child's walls stand,
    and the subinterpreters' extension is not mapped before: its import fails."""
    assert os_boundary.boundary().mode != "none"
    assert subinterpreter_in_a_child(tmp_path, ()) != "made"


@linux_x86
def test_control_with_its_extension_loaded_before_the_walls_a_subinterpreter_reaches_ctypes(tmp_path):
    assert subinterpreter_in_a_child(tmp_path, ("_xxsubinterpreters",)) == "made"


def test_control_with_the_boundary_off_the_ipc_trick_leaves_its_objects(monkeypatch):
    """The hostile submission, graded with the audit hook alone: its segments, semaphore set
    and queue outlive the grading (removed here, by id)."""
    monkeypatch.setenv(os_boundary.MODE_VARIABLE, "none")
    before = ipc_objects.sysv_objects()
    grade(HOSTILE / "ipc_left_behind", limits=HOSTILE_LIMITS, only_tasks=frozenset({"a1_ledger"}))
    new = {kind: [row for row in rows if row not in before[kind]] for kind, rows in ipc_objects.sysv_objects().items()}
    try:
        assert new["shm"] and new["sem"] and new["msg"], new
    finally:
        for kind, rows in new.items():
            for ident, _, _ in rows:
                ipc_objects.remove(kind, ident)
