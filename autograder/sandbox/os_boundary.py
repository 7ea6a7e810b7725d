"""The OS boundary around student code: one place builds the command line of every process that
runs a submission (the Python tasks' child, a notebook's kernel, the notebook recheck's child).

The audit hook in :mod:`autograder.sandbox.child` is not a security boundary (PEP 578: a subinterpreter,
a compiled extension or a ``dir_fd`` walks past it). The boundary is the operating system:

* **another user.** As root, each grading process picks a numeric uid (and the same gid) that
  no process runs as and no account names, and every child drops to it (``setpriv``: real and
  effective ids, no supplementary groups, no capabilities, ``no_new_privs``). It owns only its
  scratch folder; the grader's temporary folders are mode 0700 (``tempfile.mkdtemp``), so other
  gradings' files, nbgrader's database and the course copy's private folders are not its to
  read. As a non-root user there is no other uid to become.
* **a mount namespace** (bubblewrap, ``/usr/bin/bwrap``): the child sees ``/usr``, the
  interpreter, its virtual environment (read-only), the grader's one launcher file, the folders
  named ``readable`` (read-only) and ``writable`` (read-write), and nothing else: no course copy,
  no ``/tmp`` of the host, no ``/proc`` of other processes (a PID namespace), no network (a
  network namespace: a kernel talks to nbgrader over Unix sockets), no System V IPC.

* **Landlock** (:mod:`autograder.sandbox.landlock`): a task's child confines its own files to
  the standard library, numpy, its task's folder (read) and its scratch folder (write), in
  every mode where the kernel offers it; without namespaces it is required.

Which boundary runs (:func:`boundary`): bubblewrap plus the uid drop as root; bubblewrap alone
as a user; the uid drop with Landlock as root where bubblewrap cannot make namespaces (a Docker
container without ``CAP_SYS_ADMIN``, as Gradescope's); otherwise none, and :func:`require`
refuses to grade unless the operator trusts the submission (``grade --trust-submission``).
Without namespaces the child's folders lie in the grading's own :func:`work_folder`, the only
place whose modes :meth:`Boundary.reach` changes.
``SERVELAB_SANDBOX`` in the grader's own environment forces a mode (``bwrap``, ``uid``, or
``none``: the self-check's controls grade with the OS boundary off to show it is what stops
the hostile submissions); a submission never sees the grader's environment.

>>> b = Boundary(bwrap=False, uid=None, gid=None)
>>> b.mode, b.command(["python", "child.py"], readable=[], writable=[])
('none', ['python', 'child.py'])
>>> u = Boundary(bwrap=False, uid=123456, gid=123456)
>>> u.mode, u.command(["python"], readable=[], writable=[])[1:3]
('uid', ['--reuid=123456', '--regid=123456'])
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from autograder.sandbox import ipc_objects

TOOLS_PATH = "/usr/bin:/bin:/usr/sbin:/sbin:/usr/local/bin"
BWRAP = shutil.which("bwrap", path=TOOLS_PATH)
SETPRIV = shutil.which("setpriv", path=TOOLS_PATH)
MOUNT = shutil.which("mount", path=TOOLS_PATH)  # util-linux, as setpriv
SHELL = shutil.which("sh", path=TOOLS_PATH) or "/bin/sh"
# the one writable place of a sealed child, when the sandbox starts as root: a small tmpfs that
# no program or extension can be mapped executable from (a plotting library wants a cache)
SCRATCH_TMPFS = "noexec,nosuid,nodev,size=64m,nr_inodes=4096,mode=0700"
ENV = shutil.which("env", path=TOOLS_PATH) or "/usr/bin/env"
MODE_VARIABLE = "SERVELAB_SANDBOX"  # auto (default), bwrap, uid, none: the grader's own setting
TRUST_VARIABLE = "SERVELAB_TRUST_SUBMISSION"  # set by `grade --trust-submission`
MODES = ("auto", "bwrap", "uid", "none")
ID_RANGE = (200_000, (1 << 31) - 2)  # far above any distribution's system and login accounts
# what every sandboxed interpreter needs from the host, read-only (each if it exists)
SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache", "/etc/ld.so.conf",
                "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives", "/etc/ssl")


# the grader's files a child runs (by path): they stay readable when the course copy is locked
CHILD = Path(__file__).resolve().with_name("child.py")  # a Python task's child, and the recheck's
KERNEL = Path(__file__).resolve().with_name("kernel.py")  # a notebook's kernel (loads this file and CHILD)
SYSCALL_FILTER = Path(__file__).resolve().with_name("syscall_filter.py")  # CHILD loads it
LANDLOCK = Path(__file__).resolve().with_name("landlock.py")  # CHILD loads it
LAUNCHERS = (CHILD, KERNEL, SYSCALL_FILTER, LANDLOCK, Path(__file__).resolve())
# where a private work folder goes when TMPDIR lies under a folder other users cannot pass
# (each must be one they can: a world-writable, sticky /tmp as a rule)
WORK_BASES = ("/tmp", "/var/tmp", "/dev/shm")


# run as root inside a sealed namespace, before the uid drop: "$1" tmpfs options, "$2" the folder
# that gets it (or ""), then the bound folders up to "--" (the submission's files among them)
# remounted noexec, so that no file the submission chose can be mapped executable; then the command
_SEAL_AS_ROOT = f'''set -e
if [ -n "$2" ]; then {MOUNT} -t tmpfs -o "$1" tmpfs "$2"; fi
shift 2
while [ "$1" != "--" ]; do {MOUNT} -o remount,bind,ro,noexec,nosuid,nodev "$1"; shift; done
shift
exec "$@"'''


# the size of each tmpfs bubblewrap mounts (/tmp, /dev/shm: a kernel's scratch, as the sealed
# child's SCRATCH_TMPFS; an empty one over a hidden folder)
NAMESPACE_TMPFS_BYTES = 64 << 20
HIDDEN_TMPFS_BYTES = 64 << 10


@functools.lru_cache(maxsize=None)
def _bwrap_sizes_tmpfs() -> bool:
    """Whether this bubblewrap has ``--size`` (0.5.0 and later)."""
    try:
        run = subprocess.run([BWRAP or "bwrap", "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in run.stdout + run.stderr


def _sized(size: int = NAMESPACE_TMPFS_BYTES) -> list[str]:
    """bubblewrap's options that size the next ``--tmpfs`` (none for a bubblewrap too old to)."""
    return ["--size", str(size)] if _bwrap_sizes_tmpfs() else []


class Refused(RuntimeError):
    """No OS boundary is available here and the submission is not trusted: grading stops."""


@dataclass(frozen=True)
class Boundary:
    """How children start. ``uid``/``gid``: the identity they drop to (None: stay as the grader);
    ``bwrap``: inside a bubblewrap mount, PID, IPC, UTS (and network) namespace."""

    bwrap: bool
    uid: int | None
    gid: int | None

    @property
    def mode(self) -> str:
        """``bwrap+uid``, ``bwrap``, ``uid`` or ``none``."""
        parts = (["bwrap"] if self.bwrap else []) + (["uid"] if self.uid is not None else [])
        return "+".join(parts) or "none"

    def command(self, argv: list[str], readable: Sequence[Path], writable: Sequence[Path], hidden: Sequence[Path] = (),
                cwd: Path | None = None, share_net: bool = False, ignore_sigint: bool = False,
                sealed: bool = False, noexec_tmp: Path | None = None) -> list[str]:
        """``argv`` wrapped in the boundary. ``readable``/``writable``: the folders or files the
        child needs besides the interpreter and its environment (the same paths inside);
        ``hidden``: paths under those that must stay out of sight (an empty folder is mounted
        over each). ``share_net``: keep the host's network namespace (nothing needs it today:
        a Jupyter kernel talks to nbgrader over Unix sockets). ``ignore_sigint``: bubblewrap's own process ignores
        SIGINT (Jupyter interrupts a cell by signalling the kernel's whole process group; that
        must reach Python, not end bubblewrap). ``cwd``: the child's working folder inside.
        ``sealed``: nothing in the namespace is writable (``writable`` is bound read-only, the
        root, ``/tmp`` and ``/dev`` are remounted read-only, no ``/dev/shm``) and there is no
        ``/proc``: a submission cannot write a compiled program or extension it carries (the
        release's oracle, say) anywhere to load it, nor patch its own code through
        ``/proc/self/mem`` (the syscall filter of :mod:`autograder.sandbox.syscall_filter`
        refuses memory-only files and executable anonymous memory). ``noexec_tmp``: with
        ``sealed``, an existing folder inside that becomes the child's own writable tmpfs,
        mounted ``noexec``, and ``readable`` and ``writable`` are remounted ``noexec`` (only where
        the sandbox starts as root, before the uid drop: bubblewrap has no such option; as a user
        the folder stays read-only, and the seccomp filter's W^X rules remain)."""
        argv = [str(a) for a in argv]
        # bubblewrap, without CAP_DAC_OVERRIDE, cannot enter a folder given to the uid: the
        # dropped process enters it itself
        cd_after_drop = self.bwrap and self.uid is not None and cwd is not None and os.geteuid() == 0
        if cd_after_drop:
            argv = [SHELL, "-c", 'cd "$0" && exec "$@"', str(cwd), *argv]
        if self.uid is not None:
            argv = [SETPRIV or "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", *_die_with_grader(), "--", *argv]
            if self.bwrap and sealed and MOUNT and os.geteuid() == 0:
                argv = [SHELL, "-c", _SEAL_AS_ROOT, "sh", f"{SCRATCH_TMPFS},uid={self.uid},gid={self.gid}",
                        # folders only: the grader's own files (child.py) hold no code of the student's
                        str(noexec_tmp or ""), *[str(f) for f in (*readable, *writable) if Path(f).is_dir()],
                        "--", *argv]
        if not self.bwrap:
            return argv
        cmd = [BWRAP or "bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--hostname", "sandbox"]
        if not share_net:
            cmd.append("--unshare-net")
        if os.geteuid() != 0:
            cmd.append("--unshare-user")  # a user's bubblewrap needs a user namespace for the rest
        else:  # every capability dropped; the uid drop keeps only what the drop itself needs
            cmd += ["--cap-drop", "ALL"]
            for cap in self.kept_capabilities(sealed):
                cmd += ["--cap-add", cap]
        for system in SYSTEM_PATHS:
            if os.path.islink(system):
                cmd += ["--symlink", os.readlink(system), system]
            elif os.path.exists(system):
                cmd += ["--ro-bind", system, system]
        # the fresh /proc, /dev and /tmp first: a folder bound later may lie under /tmp
        # every tmpfs sized: its pages are memory that no rlimit of the child's counts (an
        # unsized one may take half the machine's RAM)
        cmd += ["--dev", "/dev", *_sized(), "--tmpfs", "/tmp"] + \
            ([] if sealed else ["--proc", "/proc", *_sized(), "--tmpfs", "/dev/shm"])
        mounted: list[Path] = [Path("/usr")]
        made = {Path("/")}
        read_only: list[str | Path] = [*interpreter_paths(), *readable]
        binds = ([("--ro-bind", Path(p)) for p in read_only] +
                 [("--ro-bind" if sealed else "--bind", Path(p)) for p in writable])
        for flag, path in binds:
            # bubblewrap makes missing parents mode 0700: the child (another uid) could not pass
            for parent in reversed(path.parents):
                if parent not in made and not any(parent == m or m in parent.parents for m in mounted):
                    cmd += ["--perms", "0755", "--dir", str(parent)]
                    made.add(parent)
            cmd += [flag, str(path), str(path)]
            mounted.append(path)
        for one in hidden:  # e.g. servelab installed inside the venv, the references under python/
            path = Path(one)
            if path.exists() and any(path == m or m in path.parents for m in mounted):
                cmd += [*_sized(HIDDEN_TMPFS_BYTES), "--tmpfs", str(path)] if path.is_dir() else \
                    ["--ro-bind", "/dev/null", str(path)]
        if sealed:  # last: the folders above were made in these tmpfs
            cmd += ["--remount-ro", "/tmp", "--remount-ro", "/dev", "--remount-ro", "/"]
        cmd += ["--chdir", str(cwd)] if cwd is not None and not cd_after_drop else []
        cmd += ["--", *argv]
        return [ENV, "--ignore-signal=INT", *cmd] if ignore_sigint else cmd

    def kept_capabilities(self, sealed: bool = False) -> list[str]:
        """What bubblewrap keeps, as root, of the capabilities it otherwise drops: none without
        a uid; ``CAP_SETUID``/``CAP_SETGID``/``CAP_SETPCAP`` for ``setpriv``'s drop to it, and ``CAP_SYS_ADMIN`` with
        ``CAP_DAC_READ_SEARCH`` for the grader's own mount script of a sealed child (its
        ``noexec`` tmpfs, in the folder given to the uid) before the drop. ``setpriv`` then
        clears the bounding set: the child itself holds none."""
        if self.uid is None or not self.bwrap or os.geteuid() != 0:
            return []
        keep = ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"]  # SETPCAP: setpriv empties the bounding set
        if sealed and MOUNT:  # its mount points lie in the folder given to the uid
            keep += ["CAP_SYS_ADMIN", "CAP_DAC_READ_SEARCH"]
        return keep

    def confinement(self, readable: list[Path], writable: list[Path], listed: Sequence[Path] = ()) -> dict | None:
        """The child's Landlock rules (:mod:`autograder.sandbox.landlock`): it may read the
        standard library, numpy, ``readable`` (the task's folder: its files and the given
        ones), write ``writable`` (its scratch folder) and list the folders ``listed``,
        nothing else. ``required`` without a mount namespace (it is then the only file
        boundary); with one, a second wall where the kernel offers it. None with no boundary
        at all (the self-check's controls)."""
        if self.mode == "none":
            return None
        return {"read": sorted({*library_paths(), *(str(Path(p).resolve()) for p in readable)}),
                "write": [str(Path(p).resolve()) for p in writable], "required": not self.bwrap,
                "list": [str(Path(p).resolve()) for p in listed]}

    def give(self, folder: Path) -> Path:
        """Makes ``folder`` the child's own (created if needed): owned by the child's uid, mode
        0700, so that nobody else's children can read it. Returns it."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if self.uid is not None:
            for dirpath, dirnames, filenames in os.walk(folder):
                for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                    os.chown(name, self.uid, -1 if self.gid is None else self.gid, follow_symlinks=False)
            os.chmod(folder, 0o700)
        return folder

    def reach(self, path: Path) -> None:
        """Without a mount namespace, the child must be able to walk down to ``path``. Inside a
        work folder of :func:`work_folder` (the grader's own), each folder that others cannot
        enter gets the child's group and ``g+x`` (0700 becomes 0710, for this grading's
        children only). No folder outside it ever changes: one there that the child cannot
        pass raises :class:`Refused` (grade from a :func:`work_folder`)."""
        if self.bwrap or self.uid is None:
            return
        path = Path(path).resolve()
        own = next((w for w in _WORK_FOLDERS if w == path or w in path.parents), None)
        for folder in [*reversed(path.parents), path]:
            if not folder.is_dir():
                continue
            st = folder.stat()
            if st.st_mode & stat.S_IXOTH:
                continue
            if own is None or not (folder == own or own in folder.parents):
                if st.st_gid == self.gid and st.st_mode & stat.S_IXGRP:
                    continue
                raise Refused(f"{folder} is closed to the sandbox's uid, and it is not the grader's own to open: "
                              f"grade from a folder made by os_boundary.work_folder()")
            if st.st_uid != os.geteuid():
                continue
            if self.gid is not None and st.st_gid != self.gid:
                os.chown(folder, -1, self.gid)
            os.chmod(folder, stat.S_IMODE(st.st_mode) | stat.S_IXGRP)

    def lock(self, paths: Sequence[Path], keep: Sequence[Path] = ()) -> None:
        """Without a mount namespace, the folders the child must not read (the course copy's
        private parts) lose every permission of group and others: mode 0700, the grader's. A
        path holding one of ``keep`` (servelab's folder: a kernel imports it), or the
        interpreter's folders, is left alone."""
        if self.bwrap or self.uid is None:
            return
        kept = [Path(k).resolve() for k in [*keep, *LAUNCHERS, *map(Path, interpreter_paths())]]

        def close(path: Path) -> None:
            if path in kept:
                return
            if any(path in k.parents for k in kept):  # e.g. autograder/, which holds child.py
                try:
                    for entry in sorted(path.iterdir()):
                        close(entry)
                except OSError:
                    pass
                return
            try:
                st = path.lstat()
                if st.st_uid == os.geteuid() and not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                    os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
            except OSError:
                pass

        for path in paths:
            close(Path(path))

    def nproc_limit(self, allowance: int) -> int:
        """``RLIMIT_NPROC`` for a child allowed ``allowance`` processes (and threads) of its own,
        0 for none. The limit counts every thread of the child's uid: a fresh uid runs nothing
        else. A child that stays this user (bubblewrap as a user) gets none: the count would
        take in whatever the grader starts after the limit was set (tasks graded side by side
        while a notebook's kernel runs), so the child's allowance would shrink with the grader's
        own work; there the seccomp filter already refuses every new process, and ``RLIMIT_AS``
        bounds the threads' stacks. Without any boundary (trusted code), the allowance plus what
        this user runs."""
        if self.uid is not None:
            return int(allowance)
        return 0 if self.bwrap else int(allowance) + _user_processes()

    def reap(self) -> None:
        """Kills every process still running as the child's uid (one that left its process
        group), then removes every IPC object it owns (:mod:`autograder.sandbox.ipc_objects`:
        without an IPC namespace, a segment outlives its maker). Nothing else runs as that
        uid: it was chosen free."""
        if self.uid is None:
            return
        for pid in _pids_of(self.uid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not self.bwrap:  # bubblewrap's IPC namespace took them with it
            ipc_objects.remove_owned_by(self.uid)


NONE = Boundary(bwrap=False, uid=None, gid=None)


@functools.cache
def _die_with_grader() -> tuple[str, ...]:
    """setpriv's option that kills the dropped process when the grader that started it dies
    (util-linux 2.33 and later; set after the uid changes, which would clear it). Without a PID
    namespace nothing else ends a child whose grader was killed (grade-all stopping a worker
    past the class's budget): a child asleep in a test would outlive it for good. Behind
    bubblewrap, ``--die-with-parent`` does the same for the whole namespace."""
    try:
        usage = subprocess.run([SETPRIV or "setpriv", "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return ("--pdeathsig=SIGKILL",) if "--pdeathsig" in usage else ()


_WORK_FOLDERS: set[Path] = set()


def work_folder(prefix: str = "servelab-") -> Path:
    """A new private folder (mode 0700, the grader's) for one grading's files, which the
    sandbox's uid can be let into (:meth:`Boundary.reach`) without changing any folder above
    it: under ``TMPDIR`` when every folder on the way lets others pass (``/tmp``, as a rule),
    else under the first of :data:`WORK_BASES` that does. The caller removes it.

    >>> w = work_folder("servelab-doc-")
    >>> oct(w.stat().st_mode & 0o777), _world_reachable(str(w.parent))
    ('0o700', None)
    >>> w.rmdir()
    """
    import tempfile

    bases = [tempfile.gettempdir(), *WORK_BASES]
    base = next((b for b in bases if os.path.isdir(b) and _world_reachable(b) is None), None)
    if base is None:
        raise Refused(f"no folder that other users can pass to put a grading's work in (tried {', '.join(bases)})")
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base)).resolve()
    _WORK_FOLDERS.add(folder)
    return folder


def adopt_work_folder(folder: Path) -> Path:
    """Takes ``folder``, made by :func:`work_folder` in the grading process that started this
    one, as this process's own: a spawned worker (a task graded side by side) starts with no
    work folder, and :meth:`Boundary.reach` would refuse to open the one it was handed. Only a
    real folder of this user that others cannot enter is adopted (else :class:`Refused`).
    Returns it, resolved.

    >>> w = work_folder("servelab-doc-")
    >>> _WORK_FOLDERS.discard(w); adopt_work_folder(w) == w and w in _WORK_FOLDERS
    True
    >>> w.rmdir()
    """
    folder = Path(folder)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o007:
        raise Refused(f"{folder} is not a work folder of this grader's (a folder of its own that others cannot enter)")
    folder = folder.resolve()
    _WORK_FOLDERS.add(folder)
    return folder


def library_paths() -> list[str]:
    """What a child reads besides its task's folder: the standard library (its compiled
    modules included) and numpy (its package and the libraries it ships). Never servelab,
    wherever it is installed, nor anything else of the virtual environment."""
    import importlib.util
    import sysconfig

    # pyvenv.cfg: a subinterpreter's start reads it (and fails hard without it)
    out = {sysconfig.get_paths()["stdlib"], os.path.join(sys.prefix, "pyvenv.cfg")}
    dynload = sysconfig.get_config_var("DESTSHARED")
    if dynload:
        out.add(dynload)
    spec = importlib.util.find_spec("numpy")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        out |= {folder, folder + ".libs"}
    return sorted(os.path.realpath(p) for p in out if os.path.exists(p))


def interpreter_paths() -> list[str]:
    """The folders the interpreter runs from: its installation (a pyenv's under /root, a
    system Python's /usr) and its virtual environment, outside ``/usr``."""
    out: list[str] = []
    for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        real = os.path.realpath(p)
        if not any(real == s or real.startswith(s + os.sep) for s in ("/usr", *out)):
            out = [o for o in out if not o.startswith(real + os.sep)] + [real]
    return out


def beyond_interpreter(paths: Sequence[str | Path]) -> list[Path]:
    """Those of ``paths`` that the boundary does not show already with the interpreter's folders
    (:func:`interpreter_paths`, ``/usr``): a venv's packages reached through a .pth file, say.
    Mounting a folder again inside one already mounted would only cost its exec mapping.

    >>> [str(p) for p in beyond_interpreter([sys.prefix, "/usr/lib", "/nowhere/else"])]
    ['/nowhere/else']
    """
    shown = [*interpreter_paths(), "/usr"]
    out = []
    for p in paths:
        real = os.path.realpath(p)
        if not any(real == s or real.startswith(s.rstrip(os.sep) + os.sep) for s in shown):
            out.append(Path(p))
    return out


def _user_processes() -> int:
    """Processes (and threads) this user already runs (root ignores RLIMIT_NPROC altogether)."""
    uid, count = os.getuid(), 0
    try:
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if entry.stat().st_uid == uid:
                        count += len(os.listdir(f"/proc/{entry.name}/task"))
                except OSError:
                    pass
    except OSError:
        return 0
    return count


def _pids_of(uid: int) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _ids_in_use() -> set[int]:
    """uids and gids of running processes, of /etc/passwd and /etc/group, and the owners of
    System V IPC objects (a grader killed before its reap left them: a new child of that uid
    could read them)."""
    used = {ident for rows in ipc_objects.sysv_objects().values() for _, uid, cuid in rows for ident in (uid, cuid)}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                st = entry.stat()
                used |= {st.st_uid, st.st_gid}
            except OSError:
                pass
    for table in ("/etc/passwd", "/etc/group"):
        try:
            for line in Path(table).read_text(encoding="utf-8", errors="replace").splitlines():
                fields = line.split(":")
                if len(fields) > 2 and fields[2].isdigit():
                    used.add(int(fields[2]))
        except OSError:
            pass
    return used


def free_id() -> int:
    """A uid (and gid) that no process uses and no account names, drawn at random from a range
    this user namespace maps (two graders choosing at once will not meet)."""
    low, high = ID_RANGE
    try:
        start, _, count = (int(x) for x in Path("/proc/self/uid_map").read_text().split()[:3])
        low, high = max(low, start), min(high, start + count - 1)
    except (OSError, ValueError):
        pass
    if high - low < 1000:
        raise Refused(f"no free uid range to run submissions as another user (user namespace maps {low}..{high})")
    used, rng = _ids_in_use(), random.SystemRandom()
    while True:
        n = rng.randrange(low, high + 1)
        if n not in used:
            return n


def _world_reachable(path: str) -> str | None:
    """The first ancestor of ``path`` (or itself) that other users cannot enter, or None."""
    p = Path(path).resolve()
    for folder in [*reversed(p.parents), p]:
        try:
            if folder.is_dir() and not folder.stat().st_mode & stat.S_IXOTH:
                return str(folder)
        except OSError:
            return str(folder)
    return None


_PROBED: dict[tuple, bool] = {}


def _bwrap_works(candidate: Boundary) -> bool:
    key = (candidate, os.getpid())
    if key not in _PROBED:
        ok = False
        if BWRAP and os.access(BWRAP, os.X_OK):
            try:
                run = subprocess.run(candidate.command([sys.executable, "-c", "pass"], readable=[], writable=[]),
                                     stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
                ok = run.returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _PROBED[key] = ok
    return _PROBED[key]


def landlock_abi() -> int:
    """The Landlock ABI a child started from here would get (0: none)."""
    from autograder.sandbox import landlock

    try:
        return landlock.abi()
    except OSError:
        return 0


_CHOSEN: dict[int, Boundary] = {}


def boundary() -> Boundary:
    """The boundary this grading process uses (chosen once per process: a grade-all worker gets
    a uid of its own). Raises :class:`Refused` when there is none and the submission is not
    trusted, with the reason and what to do."""
    mode = os.environ.get(MODE_VARIABLE, "auto") or "auto"
    if mode not in MODES:
        raise Refused(f"{MODE_VARIABLE} must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "none":
        return NONE
    if os.getpid() in _CHOSEN:
        return _CHOSEN[os.getpid()]
    root = os.geteuid() == 0
    ident = free_id() if root and SETPRIV else None
    why = []
    chosen = None
    if mode in ("auto", "bwrap"):
        candidate = Boundary(bwrap=True, uid=ident, gid=ident)
        if root and not SETPRIV:
            why.append("setpriv (util-linux) is missing, so children cannot drop root")
        elif not BWRAP:
            why.append("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
        elif _bwrap_works(candidate):
            chosen = candidate
        else:
            why.append("bubblewrap cannot create namespaces here")
    if chosen is None and mode in ("auto", "uid"):
        if not root or ident is None:
            why.append("not root, so there is no other user to run submissions as" if not root else
                       "setpriv (util-linux) is missing")
        else:
            # the child runs as that uid: it must be able to walk to the interpreter and to the
            # packages it imports (numpy reached through a .pth into a venv under a 0700 home
            # would fail every test with "No module named 'numpy'", and score 0)
            needed = [*interpreter_paths(), *map(str, beyond_interpreter(library_paths()))]
            blocked = next((b for b in map(_world_reachable, needed) if b), None)
            if blocked:
                why.append(f"the folder {blocked}, on the way to the interpreter or its packages, is closed to other users")
            elif landlock_abi() < 1:  # the uid alone leaves every world-readable file in reach
                why.append("the kernel offers no Landlock (Linux 5.13 or later, enabled), so without namespaces "
                           "nothing would confine a child's files")
            else:
                chosen = Boundary(bwrap=False, uid=ident, gid=ident)
    if chosen is None:
        if os.environ.get(TRUST_VARIABLE) == "1":
            return NONE
        raise Refused("refusing to run an untrusted submission without an OS boundary (" + "; ".join(why) +
                      "): grade as root or install bubblewrap, or pass --trust-submission for your own code")
    _CHOSEN[os.getpid()] = chosen
    return chosen


def require() -> Boundary:
    """Called before a grading starts: the boundary, or :class:`Refused` (see :func:`boundary`)."""
    return boundary()
