"""What a sandboxed process may pile up where it writes: a bound in bytes and files on the
folders that lie on the grading machine's disk (autograder/sandbox/folder_budget.py: a task
child's scratch folder in uid-only mode, a notebook kernel's folders in every mode), and a size
on every tmpfs bubblewrap mounts (os_boundary: an unsized tmpfs is memory no rlimit counts).
Each with its control: without the defence the flood lands whole."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.sandbox import folder_budget, os_boundary
from autograder.sandbox.folder_budget import Budget, Watch

# a writer that piles up 1 MiB files (RLIMIT_FSIZE's size in grading) until it has 64 of them
WRITER = """
import os, sys
top = sys.argv[1]
for i in range(64):
    with open(os.path.join(top, f"f{i}"), "wb") as f:
        f.write(b"x" * (1 << 20))
print("wrote all", flush=True)
"""
SMALL = Budget(max_bytes=8 << 20, max_entries=1000)


def _writer(top: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(top)], stdout=subprocess.PIPE, text=True)


def _kill(proc: subprocess.Popen):
    return lambda words: proc.kill()


def test_a_writer_past_its_budget_is_killed_near_it(tmp_path):
    proc = _writer(tmp_path)
    with Watch([tmp_path], _kill(proc), SMALL, period_s=0.01) as watch:
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "wrote all" not in out
    assert watch.tripped is not None and "8 MiB or 1000 files" in watch.tripped, watch.tripped
    written = folder_budget.usage(tmp_path, Budget(max_bytes=1 << 40, max_entries=1 << 30))[0]
    assert written < 64 << 20, written  # stopped on its way, not after


def test_the_control_without_the_watch_the_flood_lands_whole(tmp_path):
    proc = _writer(tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "wrote all" in out
    assert folder_budget.over([tmp_path], SMALL) is not None


def test_check_judges_now_and_once(tmp_path):
    """The grader's own check before it takes a reply: no answer of a child past its budget
    counts, however fast it wrote (the thread's walk may come too late)."""
    calls = []
    watch = Watch([tmp_path], calls.append, Budget(max_bytes=1 << 30, max_entries=5), period_s=3600)
    assert watch.check() is None
    for i in range(6):
        (tmp_path / f"e{i}").touch()
    assert watch.check() == watch.check() == "wrote more than 5 files and folders into its folders " \
                                              "(the limit: 1024 MiB or 5 files)"
    assert len(calls) == 1


def test_links_are_not_followed_and_holes_cost_nothing(tmp_path):
    big = tmp_path / "outside"
    big.mkdir()
    (big / "f").write_bytes(b"x" * (2 << 20))
    inside = tmp_path / "inside"
    inside.mkdir()
    (inside / "link").symlink_to(big)
    with open(inside / "sparse", "wb") as f:
        f.truncate(1 << 30)  # a GiB long, no block written
    assert folder_budget.over([inside], Budget(max_bytes=1 << 20, max_entries=100)) is None
    assert folder_budget.over([big], Budget(max_bytes=1 << 20, max_entries=100)) is not None


def test_deep_folders_are_walked_without_recursion(tmp_path):
    path = tmp_path
    for _ in range(300):
        path = path / "d"
    path.mkdir(parents=True)
    assert folder_budget.over([tmp_path], Budget(max_bytes=1 << 30, max_entries=100)) == "more than 100 files and folders"


needs_bwrap = pytest.mark.skipif(os_boundary.BWRAP is None, reason="needs bubblewrap")
FILL = "head -c 100000000 /dev/zero > {0}/x && echo filled"


def _in_bwrap(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, timeout=120).stdout


@needs_bwrap
@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_a_kernels_tmpfs_in_bubblewrap_is_sized(where):
    """A notebook kernel's namespace (not sealed: a writable /tmp and /dev/shm) holds at most
    :data:`os_boundary.NAMESPACE_TMPFS_BYTES` in each; without ``--size`` (the control) 100 MB
    land in memory that no rlimit of the child's counts."""
    b = os_boundary.Boundary(bwrap=True, uid=None, gid=None)
    command = b.command(["sh", "-c", FILL.format(where)], readable=[], writable=[])
    assert "filled" not in _in_bwrap(command)
    unsized = [a for i, a in enumerate(command) if a != "--size" and (i == 0 or command[i - 1] != "--size")]
    assert "filled" in _in_bwrap(unsized)


@needs_bwrap
def test_every_tmpfs_bubblewrap_mounts_is_sized(tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    b = os_boundary.Boundary(bwrap=True, uid=None, gid=None)
    command = b.command(["true"], readable=[tmp_path], writable=[], hidden=[hidden])
    tmpfs = [i for i, a in enumerate(command) if a == "--tmpfs"]
    assert len(tmpfs) == 3  # /tmp, /dev/shm, the hidden folder
    assert all(command[i - 2] == "--size" for i in tmpfs), command


def test_a_grading_scratch_on_disk_is_watched(monkeypatch, tmp_path):
    """Where a task child's scratch lies on the disk (no bubblewrap), its Child starts a watch
    over it; the message names the budget. (Run with the OS boundary off, which has no watch:
    the watch is forced on here to see its verdict reach the student's message.)"""
    from autograder.sandbox import remote

    mod = tmp_path / "mods" / "flood.py"
    mod.parent.mkdir()
    mod.write_text("import os\n\ndef flood(n):\n    for i in range(n):\n        open(f'f{i}', 'w').close()\n"
                   "    return n\n")
    started = []
    real_watch = folder_budget.Watch

    def watch(folders, on_over, budget=folder_budget.DEFAULT, period_s=folder_budget.PERIOD_S):
        started.append(folders)
        return real_watch(folders, on_over, Budget(max_bytes=1 << 30, max_entries=50), period_s=3600)

    monkeypatch.setattr(folder_budget, "Watch", watch)
    monkeypatch.setenv(os_boundary.MODE_VARIABLE, "none")
    monkeypatch.setattr(os_boundary.Boundary, "mode", property(lambda self: "uid"))  # a boundary on disk
    child = remote.Child([("flood", mod)], tmp_path / "scratch", [], [], remote.Limits(wall_s=60, cpu_s=60),
                         time.monotonic() + 120)
    try:
        assert started == [[tmp_path / "scratch"]]
        assert child.call("flood", "flood", (10,), {}) == 10
        with pytest.raises(remote.SubmissionFailed, match="more than 50 files and folders"):
            child.call("flood", "flood", (60,), {})
    finally:
        child.close()
        shutil.rmtree(tmp_path / "scratch", ignore_errors=True)
