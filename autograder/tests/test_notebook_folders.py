"""Root never follows a kernel's link, each kernel starts in fresh folders, and only the
grader's words reach results.json: the controls of the notebook hostile submissions.

The self-check grades ``hostile/nbgrader_planted_links``, ``kernel_plants_startup_files`` and
``hidden_tests_in_file_names`` behind every defence (0 points, no private line in results.json
or a kept notebook: ``selfcheck._private_lines_shown``). Here each trick is graded with its
defence off, as the grader was before (one shared, kernel-writable folder for HOME, the working
folder and the submitted notebooks; nbgrader's log in the messages; a kernel root phase that
copied the connection file into the kernel's folder), and must then reach what it aimed at: so
the defence is what stops it. Cost: three notebook gradings (about a minute each on 2 busy
cores) and a few cheap unit checks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import servelab
from autograder.grading.grade import ROOT, forbidden_paths, grade
from autograder.notebooks import autograding, instructors_log, kept, kernel_spec, nbgrader, runner, safe_files
from autograder.sandbox import folder_budget, os_boundary
from autograder.sandbox.remote import Limits

HOSTILE = ROOT / "autograder" / "tests" / "hostile"
LIMITS = Limits(wall_s=30, cpu_s=30)
ONLY = frozenset(nb.id for nb in nbgrader.notebooks_of(ROOT))


def shared_folders(top: Path, name: str) -> kernel_spec.KernelFolders:
    """The defence off: every notebook's kernel gets the same folders, its working folder is
    the course's submitted folder (which nbgrader, as root, reads for the next notebook), HOME
    and TMPDIR are shared, as before."""
    course = Path(top).parent / "course"
    shared = Path(top) / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    runtime = shared / f"connection-{name}"
    runtime.mkdir(mode=0o700)
    sub = course / "submitted" / nbgrader.STUDENT / nbgrader.ASSIGNMENT
    return kernel_spec.KernelFolders(shared, course / "home", sub, course / "tmp", course / "sockets", runtime)


def old_hidden(forbidden: list[Path], course: Path) -> list[Path]:
    """The defence off: the kernel may write the course's submitted folder, as before."""
    return [*forbidden, *(course / p for p in ("gradebook.db", "source", "release", "autograded", "jupyter"))]


@pytest.fixture
def defences_off(monkeypatch):
    monkeypatch.setattr(kernel_spec, "kernel_folders", shared_folders)
    monkeypatch.setattr(kernel_spec, "kernel_hidden", old_hidden)


def kept_text(folder: Path, name: str) -> str:
    path = folder / f"{name}.ipynb"
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def test_with_shared_folders_nbgrader_follows_a_planted_link_into_the_kept_notebook(defences_off, tmp_path):
    """ex01's kernel replaced ex06's submitted file with a link to the instructors' source
    notebook: nbgrader (root) autograded the source, and the kept ex06 holds its solutions."""
    data = grade(HOSTILE / "nbgrader_planted_links", limits=LIMITS, only_tasks=ONLY, notebooks_out=tmp_path / "kept")
    private = nbgrader.private_lines_of(ROOT)
    shown = kept.leaked(json.loads(kept_text(tmp_path / "kept", "ex06_tail_fanout") or "{}"), private)
    assert shown, "the planted link was not followed: the control shows nothing"
    assert data["score"] == 0  # the grader's own check still refuses the points


def test_with_shared_folders_a_startup_file_runs_in_the_next_kernel(defences_off, tmp_path):
    grade(HOSTILE / "kernel_plants_startup_files", limits=LIMITS, only_tasks=ONLY, notebooks_out=tmp_path / "kept")
    assert "PLANTED True" in kept_text(tmp_path / "kept", "ex06_tail_fanout")


def test_with_shared_folders_and_nbgraders_log_shown_the_hidden_tests_reach_results(defences_off, monkeypatch,
                                                                                     tmp_path):
    """The kernel wrote the hidden tests it ran into ex06's file: nbgrader's error quotes a
    non-JSON file's first characters, which the old message passed on."""
    monkeypatch.setattr(autograding, "failure_message",  # where autograde() looks it up
                        lambda kind, log: f"nbgrader could not run this notebook: {log[-3000:]}")
    data = grade(HOSTILE / "hidden_tests_in_file_names", limits=LIMITS, only_tasks=ONLY)
    assert kept.leaked(data, nbgrader.private_lines_of(ROOT)), [t["output"][:300] for t in data["tests"]][7:9]


def test_failures_are_the_graders_words_and_the_details_go_to_the_instructors_log(caplog, tmp_path):
    """A non-JSON notebook: results.json names no byte of it, the instructors' log has the
    parser's error; each failure kind nbgrader reports maps to a fixed message."""
    bad = tmp_path / "ex06_tail_fanout.ipynb"
    bad.write_text("SECRET-FIRST-CHARACTERS and more")
    with caplog.at_level("WARNING", logger=instructors_log.LOGGER.name):
        why = nbgrader.why_unreadable(bad)
    assert why == nbgrader.NOT_READABLE and "SECRET" not in why
    assert any("JSONDecodeError" in r.getMessage() for r in caplog.records)
    assert {runner.failure_kind(f"x {w} y") for _, words in runner.FAILURES for w in words} == {
        k for k, _ in runner.FAILURES}
    for kind in (*nbgrader.FAILED, "unknown"):
        assert nbgrader.failure_message(kind, "LOG LINE a kernel chose") in nbgrader.FAILED.values()


def test_safe_copies_refuse_links_on_the_way(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("x")
    (tmp_path / "via").symlink_to(tmp_path / "real")
    with pytest.raises(safe_files.Unsafe):
        safe_files.read_file(tmp_path / "via" / "f", limit=10)
    with pytest.raises(safe_files.Unsafe):
        safe_files.read_file(tmp_path / "real" / "f", limit=0)
    (tmp_path / "dst").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        safe_files.write_new(tmp_path / "dst", b"y")
    assert not (tmp_path / "elsewhere").exists()


OLD_ROOT_PHASE = '''
import os, sys
# the kernel's root phase as it was: copy the connection file into the kernel's own folder
own, src, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(src, "rb") as s, open(os.path.join(own, "connection.json"), "wb") as d:
    d.write(s.read())
os.chown(os.path.join(own, "connection.json"), uid, uid)
os.chmod(os.path.join(own, "connection.json"), 0o600)
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="the root phase exists only when the grader runs as root")
def test_a_connection_file_link_took_the_old_root_phase_and_the_kernel_has_none():
    """Control: the old root phase, given a planted ``connection.json`` link, rewrote the target
    and gave it to the sandbox's uid. Now the kernel starts as that uid (``setpriv`` in its
    command line) and refuses to run as anyone else, before it touches a file. (In a folder of
    the grader's own, as a grading's: the sandbox's uid may be let into no other.)"""
    tmp_path = os_boundary.work_folder("servelab-test-root-phase-")
    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(os_boundary.Boundary, "reach", _anywhere)
            _connection_file_link(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _anywhere(self: os_boundary.Boundary, path: Path) -> None:
    """The spec is what these tests read, not whether the uid may walk to this checkout's
    packages: a clone in a folder closed to others (``mktemp -d``) is refused that walk, as it
    should be (the mode matrix grades from a course copy under /opt, as Gradescope does)."""


def _connection_file_link(tmp_path: Path) -> None:
    uid = os_boundary.free_id()
    own = tmp_path / "own"
    own.mkdir()
    os.chown(own, uid, uid)
    target = tmp_path / "answer_key.json"
    target.write_text("the answers")
    (own / "connection.json").symlink_to(target)
    conn = tmp_path / "conn.json"
    conn.write_text("{}")
    subprocess.run([sys.executable, "-c", OLD_ROOT_PHASE, str(own), str(conn), str(uid)], check=True)
    assert target.stat().st_uid == uid and target.read_text() == "{}"  # the trick worked
    # the kernel now: started as root with a sandbox uid, it stops at once
    env = {**os.environ, "SERVELAB_SANDBOX": json.dumps({"uid": uid, "gid": uid, "forbidden": []})}
    run = subprocess.run([sys.executable, "-s", str(os_boundary.KERNEL), "-f", str(own / "connection.json")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and f"must run as uid {uid}" in run.stderr
    b = os_boundary.Boundary(bwrap=False, uid=uid, gid=uid)
    folders = kernel_spec.kernel_folders(tmp_path / "kernels", "nb")
    kernel_spec.write_spec(tmp_path / "jupyter", "k", folders, [], Limits(), b)
    argv = json.loads((tmp_path / "jupyter" / "kernels" / "k" / "kernel.json").read_text())["argv"]
    assert f"--reuid={uid}" in argv and argv.index(f"--reuid={uid}") < argv.index(str(os_boundary.KERNEL))
    assert (folders.base.stat().st_mode & 0o777) == 0o700  # closed until the runner opens it


def test_each_notebooks_kernel_gets_fresh_folders_outside_the_course(tmp_path):
    """Two notebooks' kernel specs: HOME, IPython's folder, the working folder and TMPDIR are
    each notebook's own, none lies in the course folder nbgrader reads as root, and the
    kernel's command line enters its own working folder."""
    course = tmp_path / "course"
    course.mkdir()
    specs = []
    for name in ("one", "two"):
        folders = kernel_spec.kernel_folders(tmp_path / "kernels", name)
        kernel_spec.write_spec(course / "jupyter", f"k-{name}", folders, [], Limits(), os_boundary.NONE)
        specs.append(json.loads((course / "jupyter" / "kernels" / f"k-{name}" / "kernel.json").read_text()))
    envs = [s["env"] for s in specs]
    for key in ("HOME", "IPYTHONDIR", "TMPDIR", "PWD", "JUPYTER_CONFIG_DIR"):
        assert envs[0][key] != envs[1][key], key
        assert all(course not in Path(e[key]).parents for e in envs), key
    assert all(json.loads(e["SERVELAB_SANDBOX"])["cwd"] == e["PWD"] for e in envs)


def test_without_namespaces_the_kernel_is_confined_by_landlock_to_its_machinery_and_folders(monkeypatch):
    """uid-only (no mount namespace): the kernel's spec carries Landlock rules, required, that
    let it read its packages, servelab and its connection file and write its own folders only;
    nothing it may read holds the course copy (on the grader's import path) or lies in what is
    hidden from it. Behind bubblewrap the mount namespace is the wall, and there is no rule.
    (End to end: test_mode_matrix.py grades a notebook in each mode.)"""
    tmp_path = os_boundary.work_folder("servelab-kernel-walls-")  # the uid may be let in
    # the uid-only mode closes what is hidden (0700, for good, as on Gradescope): not this checkout
    monkeypatch.setattr(os_boundary.Boundary, "lock", lambda self, paths, keep=(): None)
    monkeypatch.setattr(os_boundary.Boundary, "reach", _anywhere)
    try:
        uid = os_boundary.free_id()
        course = tmp_path / "course"  # nbgrader's folder of this grading
        course.mkdir()
        hidden = [*forbidden_paths(ROOT), course]
        folders = kernel_spec.kernel_folders(tmp_path / "kernels", "nb")
        b = os_boundary.Boundary(bwrap=False, uid=uid, gid=uid)
        kernel_spec.write_spec(tmp_path / "jupyter", "k", folders, hidden, Limits(), b)
        env = json.loads((tmp_path / "jupyter" / "kernels" / "k" / "kernel.json").read_text())["env"]
        rules = json.loads(env["SERVELAB_SANDBOX"])["landlock"]
        assert rules["required"] is True
        assert sorted(rules["write"]) == sorted(str(p.resolve()) for p in folders.writable)
        read = [Path(p) for p in rules["read"]]
        servelab_home = Path(servelab.__file__).resolve().parent.parent
        package = servelab_home / "servelab"
        assert folders.runtime.resolve() in read and package / "serving_core.py" in read
        assert any((p / "ipykernel").is_dir() for p in read)
        # servelab as the students' build has it: listed, its modules readable, never the
        # readable twins of the core or the lecture's answers
        assert sorted(Path(p) for p in rules["list"]) == [servelab_home, package]
        assert not {servelab_home, package, package / "reference", package / "lecture_key.py"} & set(read)
        venv = Path(sys.prefix).resolve()
        assert not [p for p in read if p == ROOT or p in ROOT.parents or p == course or course in p.parents]
        assert not [p for p in read if ROOT in p.parents and servelab_home not in p.parents and p != venv
                    and venv not in p.parents]
        bwrap = os_boundary.Boundary(bwrap=True, uid=uid, gid=uid)
        folders = kernel_spec.kernel_folders(tmp_path / "kernels", "nb2")
        kernel_spec.write_spec(tmp_path / "jupyter2", "k", folders, hidden, Limits(), bwrap)
        env = json.loads((tmp_path / "jupyter2" / "kernels" / "k" / "kernel.json").read_text())["env"]
        assert "landlock" not in json.loads(env["SERVELAB_SANDBOX"])
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _connections_after_the_kernel_swaps_its_sockets(manager_class, tmp_path: Path) -> tuple[int, int]:
    """Starts a kernel of this venv on Unix sockets under ``manager_class``; a cell replaces each
    socket file with a link to a listening socket of root's (the trick) and ends the kernel, so
    ZeroMQ reconnects; returns how many connections that listening socket then took, and how
    many links the cell planted (5: it ran)."""
    import asyncio
    import socket
    import threading

    # the runtime folder deep, as the grader's are: a path to a socket may not exceed 107 bytes
    sockets, runtime = tmp_path / "sockets", tmp_path / ("deep-" * 16) / "runtime"
    sockets.mkdir(parents=True)
    runtime.mkdir(mode=0o700, parents=True)
    target = tmp_path / "roots.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(target))
    listener.listen(64)
    listener.settimeout(0.2)
    taken: list[socket.socket] = []
    planted: list[Path] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                taken.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    cell = (f"import glob, os\nfor p in glob.glob({str(sockets / 'kernel')!r} + '-*'):\n"
            f"    os.unlink(p); os.symlink({str(target)!r}, p)\nos._exit(0)\n")

    async def run() -> None:
        km = manager_class(kernel_name="python3", transport="ipc", ip=str(sockets / "kernel"),
                           connection_file=str(runtime / "kernel.json"))
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            kc.execute(cell)
            await asyncio.sleep(2.0)  # ZeroMQ reconnects every 0.1 s
            planted.extend(p for p in sockets.iterdir() if p.is_symlink() and os.readlink(p) == str(target))
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)

    try:
        asyncio.run(run())
    finally:
        stop.set()
        thread.join()
        listener.close()
        for conn in taken:
            conn.close()
    return len(taken), len(planted)


def test_the_grader_reaches_a_kernel_through_the_sockets_it_bound_not_links_its_cells_plant(tmp_path):
    """nbgrader's process (root) talks to a kernel over the Unix sockets in the kernel's own
    folder. The control: with jupyter_client's manager, a cell that swaps them for links makes
    root connect wherever the links point; the grader's manager holds descriptors of the sockets
    the kernel bound before any cell ran, and connects to nothing else."""
    pytest.importorskip("ipykernel", reason="the notebooks extra brings the kernel")
    from jupyter_client.manager import AsyncKernelManager

    taken, planted = _connections_after_the_kernel_swaps_its_sockets(AsyncKernelManager, tmp_path / "plain")
    assert planted == 5 and taken > 0
    pinned = runner._kernel_manager(None, str(tmp_path / "pinned" / ("deep-" * 16) / "runtime"), str(tmp_path / "pinned"),
                                    [folder_budget.DEFAULT.max_bytes, folder_budget.DEFAULT.max_entries])
    assert _connections_after_the_kernel_swaps_its_sockets(pinned, tmp_path / "pinned") == (0, 5)
