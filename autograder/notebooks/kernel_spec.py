"""A notebook's kernel: its fresh folders and the kernel spec that starts it behind the OS
boundary (:mod:`autograder.sandbox.os_boundary`, :mod:`autograder.sandbox.kernel`).

Why fresh folders, outside nbgrader's course folder: nbgrader runs as root, and a kernel can
write its own folders; a link or a startup file it plants there must never be read by root nor
by a later notebook's kernel (README: threat model).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import servelab

from autograder.release import staff_wheel
from autograder.sandbox import os_boundary
from autograder.sandbox.remote import Limits

# whether a kernel may map new executable code once its walls stand: never in grading (a library
# the notebook carries into its writable folders would run); only the tests' control sets it
NEW_CODE = False
KERNEL_CPU_FACTOR = 4  # the kernel's CPU limit, in per-test CPU limits (see write_spec)


def kernel_forbidden(root: Path, extra: Sequence[Path] = ()) -> list[Path]:
    """What a notebook's kernel may not read or list: the course copy except the virtual
    environment and ``python/`` (the test cells import servelab from there; its references ship
    to students anyway), and ``extra``."""
    root = Path(root).resolve()
    venv = Path(sys.prefix).resolve()
    keep = {venv, *venv.parents, (root / "python").resolve()}
    out = [p.resolve() for p in sorted(root.iterdir()) if p.resolve() not in keep]
    out.extend(Path(p).resolve() for p in extra)
    return out


@dataclass(frozen=True)
class KernelFolders:
    """One notebook's kernel: the folders it may write (fresh, its uid's, outside the course
    folder that nbgrader reads as root) and the grader's folder holding its connection file."""

    base: Path  # the grader's folder holding the others: open only while this notebook runs
    home: Path  # HOME, IPython's and Jupyter's own folders beneath
    cwd: Path  # the working folder
    tmp: Path  # TMPDIR
    sockets: Path  # the folder of its Unix sockets (it binds them)
    runtime: Path  # the grader's: Jupyter writes the connection file here (readable to the kernel's group)

    @property
    def writable(self) -> list[Path]:
        return [self.home, self.cwd, self.tmp, self.sockets]


def kernel_folders(top: Path, name: str) -> KernelFolders:
    """Fresh folders for notebook ``name``'s kernel under ``top`` (the grader's, next to the
    course folder and never inside it): no kernel sees what an earlier notebook's kernel left,
    and no file nbgrader or the grader reads as root lies where a kernel can write. ``base`` is
    closed (mode 0700, the grader's) except while this notebook's kernel runs
    (:mod:`autograder.notebooks.runner` opens and closes it): without a mount namespace all
    kernels share one uid, and an earlier kernel must not plant files for a later one."""
    Path(top).mkdir(parents=True, exist_ok=True)
    base = Path(top) / name
    base.mkdir(mode=0o700)
    runtime = base / "connection"
    runtime.mkdir(mode=0o700)
    # "s": the kernel binds its sockets at their full path, which a Unix socket's 107 bytes
    # bound; every byte here is one less for the folders above (a user's TMPDIR)
    return KernelFolders(base, base / "home", base / "cwd", base / "tmp", base / "s", runtime)


def kernel_hidden(forbidden: list[Path], course: Path) -> list[Path]:
    """What a kernel may not read or list: ``forbidden`` and the whole course folder (nbgrader's
    database, the source notebooks, the submitted and autograded notebooks)."""
    return [*forbidden, course]


def students_library(home: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """What a kernel may see of servelab's ``home`` folder (``python/``, or site-packages):
    what the students' build has, never the readable twins of the Rust core or the lecture's
    answers (:data:`autograder.release.staff_wheel.LEFT_OUT`). Returns (readable: every entry
    of ``home`` and of the package but those; listed: ``home`` and the package folder, whose
    names the import system reads; left out: the paths that exist of those).

    >>> readable, listed, left_out = students_library(Path(servelab.__file__).resolve().parent.parent)
    >>> sorted(p.name for p in left_out), any(p.name in ("reference", "lecture_key.py") for p in readable)
    (['lecture_key.py', 'reference'], False)
    """
    package = home / "servelab"
    left_out = [home / rel.rstrip("/") for rel in staff_wheel.LEFT_OUT]
    readable = [p for p in sorted(home.iterdir()) if p != package] + \
        [p for p in sorted(package.iterdir()) if p not in left_out]
    return readable, [home, package], [p for p in left_out if p.exists()]


def kernel_packages(forbidden: list[Path]) -> list[Path]:
    """The folders of this interpreter's import path (the venv's site-packages and what its
    .pth files add: ipykernel, zmq, IPython...) that neither lie in ``forbidden`` nor hold any
    of it (the course copy's own folder is on the grader's path): what a kernel imports while
    it starts and while it runs."""
    hidden = [Path(p).resolve() for p in forbidden]
    out = []
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        if path.is_dir() and not any(path == h or h in path.parents or path in h.parents for h in hidden):
            out.append(path)
    return out


def write_spec(data: Path, spec_name: str, folders: KernelFolders, forbidden: list[Path], limits: Limits,
                 boundary: os_boundary.Boundary) -> None:
    """Writes the sandboxed kernel's spec ``spec_name`` into the Jupyter data folder ``data``.

    The kernel runs behind the OS boundary (:mod:`autograder.sandbox.os_boundary`), started as
    the grading's uid (``setpriv`` drops root before Python starts): it sees the interpreter,
    the venv and servelab (read-only: the test cells import it), its connection file
    (read-only), its own fresh folders (writable), and nothing else of the course; no network
    (nbgrader talks to it over Unix sockets in its sockets folder: ``transport = "ipc"`` in
    :mod:`autograder.notebooks.runner`)."""
    spec = data / "kernels" / spec_name
    spec.mkdir(parents=True)
    for folder in folders.writable:
        boundary.give(folder)
    if boundary.gid is not None:  # the connection file's folder: the grader's, the kernel's group may enter
        os.chown(folders.runtime, -1, boundary.gid, follow_symlinks=False)
        os.chmod(folders.runtime, 0o710)
    nproc = boundary.nproc_limit(limits.nproc)
    writable = folders.writable
    cfg = {"forbidden": [str(p) for p in forbidden], "writable": [str(p) for p in writable],
           # CPU seconds for the whole kernel (every cell, the imports): an endless cell must meet
           # its per-cell wall-clock timeout first, and the cells after it must still run. So they
           # count in wall-clock limits too: a spinning cell may have a core to itself for its
           # whole timeout, and the wall-clock limit grows with the load where the CPU one does
           # not (autograder/grading/calibrate.py)
           "blocked_modules": [], "cpu_s": KERNEL_CPU_FACTOR * max(1, int(limits.cpu_s), math.ceil(limits.wall_s)),
           "memory_bytes": int(limits.memory_bytes),
           "output_bytes": int(limits.output_bytes), "nproc": nproc,
           "uid": boundary.uid, "gid": boundary.gid, "cwd": str(folders.cwd), "bwrap": boundary.bwrap,
           "syscall_filter": boundary.mode != "none",  # no network, no processes (sandbox/syscall_filter.py)
           "new_code": NEW_CODE}
    servelab_home = Path(servelab.__file__).resolve().parent.parent  # python/ (or site-packages)
    library, listed, left_out = students_library(servelab_home)
    if not boundary.bwrap and boundary.mode != "none":
        # no mount namespace: Landlock is the kernel's file boundary, as it is a task child's
        # (sandbox/landlock.py): it reads its machinery (the interpreter's library, the venv's
        # packages, servelab as students have it) and its connection file, and writes its own
        # folders only
        packages = [p for p in kernel_packages(forbidden) if p.resolve() != servelab_home]
        cfg["landlock"] = boundary.confinement(readable=[*library, folders.runtime, *packages], writable=writable,
                                               listed=listed)
    for folder in (*writable, folders.runtime, servelab_home):
        boundary.reach(folder)
    if boundary.gid is not None:  # closed until the runner opens it to the kernel's group
        os.chown(folders.base, -1, boundary.gid, follow_symlinks=False)
    os.chmod(folders.base, 0o700)
    boundary.lock(forbidden, keep=[servelab_home / "servelab"])  # only without namespaces
    argv = boundary.command([sys.executable, "-s", str(os_boundary.KERNEL), "-f", "{connection_file}"],
                            # its packages too: a venv may reach them through a .pth file, outside the
                            # interpreter's folders that the boundary shows anyway
                            readable=[servelab_home, *os_boundary.LAUNCHERS, folders.runtime,
                                      *os_boundary.beyond_interpreter(kernel_packages(forbidden))],
                            writable=writable,
                            hidden=[*forbidden, *left_out], ignore_sigint=True, cwd=folders.cwd)
    home = folders.home
    # the kernel's own HOME and tools' folders (nbgrader's are the grader's: not inherited)
    env = {"SERVELAB_SANDBOX": json.dumps(cfg), "HOME": str(home), "TMPDIR": str(folders.tmp),
           "PWD": str(folders.cwd), "IPYTHONDIR": str(home / ".ipython"),
           "JUPYTER_CONFIG_DIR": str(home / ".jupyter"), "JUPYTER_DATA_DIR": str(home / ".local/share/jupyter"),
           "JUPYTER_RUNTIME_DIR": str(home / ".local/share/jupyter/runtime"),
           "MPLCONFIGDIR": str(home / ".config/matplotlib")}
    (spec / "kernel.json").write_text(json.dumps({
        "argv": argv, "display_name": "servelab sandbox", "language": "python", "env": env}), encoding="utf-8")
