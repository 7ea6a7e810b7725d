"""The nbgrader process: ``python -s runner.py CONFIG_JSON``, started by
:mod:`autograder.notebooks.nbgrader` in a temporary course folder, as the grader (root where
the grader is), with a HOME of its own.

It runs nbgrader's own ``generate_assignment`` or ``autograde`` (through ``NbGraderAPI``, the
same code as the ``nbgrader`` command) and writes what the gradebook then holds as JSON to
``CONFIG["out"]``: scores and which notebooks failed (a kind from :data:`FAILURES`), never a
line of nbgrader's log, which goes to this process's stderr (the grader's instructors' log).
It never reads a score from the student's notebook: nbgrader restores every locked cell (test
cells included) from the checksummed source in its database before it executes, and scores a
test cell by whether it raised. Student code runs only in the kernel that nbgrader starts,
under the sandbox of :mod:`autograder.sandbox.kernel`, whose folders lie outside the course
folder: nothing this process reads or writes can be a kernel's link, and it reaches the kernel's
sockets through descriptors it opened before any cell ran (:func:`pin_sockets`).

Config keys: ``action`` (``generate`` or ``autograde``), ``course`` (the course folder, holding
``source/<assignment>/``), ``assignment``, ``student``, ``cell_timeout`` (seconds per cell),
``memory_bytes`` (this process's address space), ``out`` (the JSON to write); for
``autograde``, ``notebooks`` (one entry per notebook: ``name``, ``kernel`` its kernel spec,
``runtime`` the folder for its connection file, ``sockets`` the prefix of its socket files,
``base`` the grader's folder holding its folders, opened while it runs, ``budget`` the bytes and
entries those may hold: autograder/sandbox/folder_budget.py, ``execute`` false for a notebook
whose source runs no code, ``course`` its lane's course folder: the notebooks of different
course folders run side by side, :func:`_side_by_side`) and
``gid`` (the sandbox's group, or None).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path


# why a notebook could not be graded, as the grader says it (results.json): a fixed message for
# each kind of failure, chosen from nbgrader's log; the log itself goes to the instructors' log
FAILURES = (
    ("kernel_died", ("DeadKernelError", "Kernel died")),
    ("timeout", ("CellTimeoutError", "timed out")),
    ("memory", ("MemoryError",)),
    ("not_a_notebook", ("is not a valid notebook", "NotJSONError", "ValidationError", "does not appear to be JSON")),
)


def failure_kind(log: str) -> str:
    """Which of :data:`FAILURES` nbgrader's ``log`` tells of (``other`` when none).

    >>> failure_kind("[AutogradeApp | ERROR] ... nbclient.exceptions.DeadKernelError: Kernel died")
    'kernel_died'
    >>> failure_kind("something else went wrong")
    'other'
    """
    for kind, words in FAILURES:
        if any(word in log for word in words):
            return kind
    return "other"


def _scores(cfg: dict, db_url: str, names: set[str]) -> dict:
    """notebook name (of ``names``) -> grade_id -> what nbgrader's gradebook holds for that cell
    (numbers and flags only: no text of the kernel's)."""
    from nbgrader.api import Gradebook, MissingEntry

    assignment, student = cfg["assignment"], cfg["student"]
    notebooks = {}
    with Gradebook(db_url) as gb:
        for nb in gb.find_assignment(assignment).notebooks:
            if nb.name not in names:  # another lane's (its course folder's gradebook holds it)
                continue
            try:
                sub = gb.find_submission_notebook(nb.name, assignment, student)
            except MissingEntry:
                continue
            notebooks[nb.name] = {g.name: {"auto_score": g.auto_score, "max_score": g.max_score,
                                           "needs_manual_grade": bool(g.needs_manual_grade),
                                           "cell_type": g.cell_type}
                                  for g in sub.grades}
    return notebooks


KERNEL_BIND_S = 60.0  # how long a kernel may take to bind its sockets (nbclient's own start-up timeout)


def pin_sockets(prefix: str, ports: list[int], pins: str) -> tuple[str, list[int]]:
    """Opens the kernel's socket files ``{prefix}-{port}`` without following a link (each must be
    a socket), and makes links ``{pins}/k-{port}`` to ``/proc/self/fd/N`` of those descriptors,
    in ``pins``, a folder of this process's own: the prefix to connect to instead (through a
    descriptor of ``pins``: a Unix socket's path may not exceed 107 bytes, and the grader's
    folders are deep), and the descriptors (keep them open). ZeroMQ opens a socket's path again
    at every reconnection; a path in the kernel's folder could then be a link the kernel's code
    planted since (to another socket of this machine, which root would connect to), while a
    descriptor stays on the socket the kernel bound before any cell ran. Raises
    FileNotFoundError while a socket is not bound yet, and OSError for anything but a socket at
    one of the paths."""
    folder, name = os.path.split(prefix)
    fds: list[int] = []
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for port in ports:
            fd = os.open(f"{name}-{port}", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            fds.append(fd)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                raise OSError(f"the kernel's {name}-{port} is not a socket")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        os.close(dfd)
    for port, fd in zip(ports, fds):
        os.symlink(f"/proc/self/fd/{fd}", os.path.join(pins, f"k-{port}"))
    fds.append(os.open(pins, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC))
    return f"/proc/self/fd/{fds[-1]}/k", fds


def _folder_budget():
    """autograder/sandbox/folder_budget.py by path (this script runs without the package)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "sandbox" / "folder_budget.py"
    spec = importlib.util.spec_from_file_location("_servelab_folder_budget", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a loadable module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _kernel_manager(gid: int | None, runtime: str, base: str, budget: list[int]):
    """Jupyter's kernel manager, but the connection file is written in ``runtime`` (a folder of
    the grader's; Jupyter would use this process's TMPDIR) and made readable to the sandbox's
    group: the kernel then starts as that uid and reads it itself, so nothing runs as root
    inside the sandbox (autograder/sandbox/kernel.py)."""
    import uuid

    from jupyter_client.manager import AsyncKernelManager

    class SandboxKernelManager(AsyncKernelManager):
        connection_file: str  # a traitlet of KernelManager's (jupyter_client has no stubs)

        def write_connection_file(self, **kwargs) -> None:
            if not self.connection_file:
                self.connection_file = os.path.join(runtime, f"kernel-{uuid.uuid4()}.json")
            super().write_connection_file(**kwargs)
            if gid is None:
                return
            # the grader's own folder (JUPYTER_RUNTIME_DIR, made by the grader): a descriptor
            # opened without following links, changed through the descriptor
            fd = os.open(self.connection_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchown(fd, -1, gid)
                os.fchmod(fd, 0o640)
            finally:
                os.close(fd)

        async def _async_post_start_kernel(self, **kw) -> None:
            # the kernel's folders lie on this machine's disk, bounded by a watch that kills it
            # (RLIMIT_FSIZE bounds one file, not how many: autograder/sandbox/folder_budget.py)
            module = _folder_budget()
            self._watch = module.Watch([Path(base)], self._over_budget, module.Budget(*budget)).start()
            # before the first connection (the control socket's, in the parent's method): from
            # here on this process reaches the kernel through descriptors, never its folder
            if self.transport == "ipc":
                self.ip = await self._pinned()
            await super()._async_post_start_kernel(**kw)

        def _over_budget(self, words: str) -> None:
            # the kernel is its session's leader (jupyter_client starts it in a new session);
            # nbgrader then sees a dead kernel, whose fixed text the student reads
            print(f"---- the kernel {words}: killed", file=sys.stderr)
            process = getattr(self.provisioner, "process", None)  # the local provisioner's Popen
            pid = getattr(process, "pid", None)
            if pid is not None:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass

        async def _pinned(self) -> str:
            ports = [self.shell_port, self.iopub_port, self.stdin_port, self.hb_port, self.control_port]
            pins = tempfile.mkdtemp(prefix="pinned-", dir=runtime)  # this process's own, 0700
            end = time.monotonic() + KERNEL_BIND_S
            while True:
                try:
                    ip, self._pinned_fds = pin_sockets(self.ip, ports, pins)
                    return ip
                except FileNotFoundError:  # not bound yet
                    if time.monotonic() > end or not await self.is_alive():
                        raise RuntimeError("the kernel did not bind its sockets") from None
                    await asyncio.sleep(0.05)

        def cleanup_ipc_files(self) -> None:
            if getattr(self, "_watch", None) is not None:
                self._watch.stop()
            super().cleanup_ipc_files()  # the links to the descriptors (self.ip leads to the pins)
            for fd in getattr(self, "_pinned_fds", ()):
                os.close(fd)
            self._pinned_fds = []

    return SandboxKernelManager


IRI_GRAMMAR = "rfc3987_syntax"


def skip_iri_grammar() -> None:
    """Keeps jsonschema (which nbgrader imports through nbformat) from loading its optional IRI
    checker: ``rfc3987_syntax`` builds a parser for RFC 3987 when imported, 1.7 s of CPU in each
    grading, more than all of nbgrader's own start. jsonschema imports it only to check the
    ``iri`` format, which no notebook schema uses (nbformat's validation is the same without
    it), and goes on without it when the import fails, as a ``None`` in ``sys.modules`` makes it.

    >>> import subprocess, sys
    >>> code = ("from autograder.notebooks import runner; runner.skip_iri_grammar(); import nbformat, sys; "
    ...         "print(sys.modules['rfc3987_syntax'], nbformat.validate(nbformat.v4.new_notebook()))")
    >>> subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2], capture_output=True,
    ...                text=True).stdout
    'None None\\n'
    """
    sys.modules.setdefault(IRI_GRAMMAR, None)  # type: ignore[arg-type]


def _course_of(cfg: dict, job: dict | None) -> str:
    """The nbgrader course folder of ``job`` (its lane's), else the run's."""
    return str(Path((job or {}).get("course") or cfg["course"]).resolve())


def _db_of(cfg: dict, job: dict | None) -> str:
    return f"sqlite:///{_course_of(cfg, job)}/gradebook.db"


def _write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _autograde_lane(cfg: dict, jobs: list[dict], api_for) -> dict:
    """nbgrader's autograde of ``jobs`` (notebooks of one course folder), one notebook at a
    time: a notebook that kills its kernel fails alone (nbgrader gives up on the whole batch it
    is processing)."""
    failed = {}
    for job in jobs:
        api = api_for(job)
        api.coursedir.notebook_id = job["name"]
        # this kernel's folders are open to its uid only while it runs: without a mount
        # namespace every kernel has the same uid, and a later one's must be out of reach
        os.chmod(job["base"], 0o710 if cfg.get("gid") is not None else 0o755)
        try:
            result = api.autograde(cfg["assignment"], cfg["student"], force=True, create=True)
        finally:
            os.chmod(job["base"], 0o700)
        if not result.get("success"):
            log = str(result.get("log") or "") + str(result.get("error") or "")
            failed[job["name"]] = failure_kind(log)
            # the details: the grader hands them to the instructors' log, never to students
            print(f"---- nbgrader could not autograde {job['name']}:\n{log[-8000:]}", file=sys.stderr)
    scores = _scores(cfg, _db_of(cfg, jobs[0]) if jobs else _db_of(cfg, None), {job["name"] for job in jobs})
    return {"success": True, "failed": failed,
            "notebooks": {name: cells for name, cells in scores.items() if name not in failed}}


def _side_by_side(cfg: dict, lanes: list[list[dict]], api_for) -> dict:
    """:func:`_autograde_lane` of each lane at once, each in a process forked from this one
    (nbgrader already imported; this process has no thread but its own yet), and their results
    merged. A lane that ends without its results fails the whole run (as this process's own
    death would): the grader then says the notebooks could not be graded."""
    children = {}
    for index, jobs in enumerate(lanes):
        out = f"{cfg['out']}.lane{index}"
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _write_json(out, _autograde_lane(cfg, jobs, api_for))
                code = 0
            except BaseException:  # noqa: BLE001 - told to the instructors' log, the lane's results missing
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = out
    merged: dict = {"success": True, "failed": {}, "notebooks": {}}
    for pid, out in children.items():
        os.waitpid(pid, 0)
        try:
            with open(out, encoding="utf-8") as f:
                part = json.load(f)
        except (OSError, ValueError):
            raise SystemExit("a lane of notebooks ended without its results") from None
        merged["failed"].update(part["failed"])
        merged["notebooks"].update(part["notebooks"])
    return merged


def main() -> None:
    # started as a script, this folder leads sys.path: its modules (nbgrader.py among them)
    # must not stand in for the real packages of that name
    here = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != here]
    cfg = json.loads(sys.argv[1])
    # the notebook's outputs pile up in this process while it runs (nbgrader trims them only
    # afterwards): an output flood must end in a MemoryError here, not in the grader's machine
    # swapping. The kernel, a child of this process, sets its own lower limits.
    limit = int(cfg.get("memory_bytes", 4 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    skip_iri_grammar()
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    def api_for(job: dict | None) -> NbGraderAPI:
        c = Config()
        c.CourseDirectory.root = _course_of(cfg, job)
        c.CourseDirectory.db_url = _db_of(cfg, job)
        c.Execute.timeout = int(cfg.get("cell_timeout", 60))
        # the student's kernel is killed once its notebook has run: a graceful shutdown (a
        # request, then polling until the process ends) only waits on the student's code
        c.Execute.shutdown_kernel = "immediate"
        if job is not None and not job.get("execute", True):
            c.Execute.enabled = False  # written answers only: nbgrader restores and records, no kernel
        if job is not None:
            # each notebook its own kernel spec (its own fresh folders), connection file and sockets
            c.Execute.kernel_name = job["kernel"]
            c.Execute.kernel_manager_class = _kernel_manager(cfg.get("gid"), job["runtime"], job["base"], job["budget"])
            os.environ["JUPYTER_RUNTIME_DIR"] = job["runtime"]
            # Unix sockets instead of TCP on loopback: the kernel then needs no network at all,
            # and runs in a network namespace of its own (autograder/sandbox/os_boundary.py)
            c.KernelManager.transport = "ipc"
            c.KernelManager.ip = job["sockets"]  # the socket files' prefix, in the kernel's own folder
        return NbGraderAPI(config=c)

    if cfg["action"] == "generate":
        result = api_for(None).generate_assignment(cfg["assignment"], force=True, create=True)
        data: dict = {"success": bool(result.get("success"))}
        if not data["success"]:
            print(str(result.get("log") or "") + str(result.get("error") or ""), file=sys.stderr)
    elif cfg["action"] == "autograde":
        # started early, nbgrader imported: no kernel before the grader says go (the grading's
        # task children have ended: launch.run_nbgrader's ``before``); anything else, stop
        if cfg.get("go") and sys.stdin.readline() != cfg["go"]:
            raise SystemExit("the grader did not say go")
        lanes: dict[str, list[dict]] = {}
        for job in cfg["notebooks"]:  # a lane: the notebooks of one course folder
            lanes.setdefault(_course_of(cfg, job), []).append(job)
        if len(lanes) > 1:
            data = _side_by_side(cfg, list(lanes.values()), api_for)
        else:
            data = _autograde_lane(cfg, cfg["notebooks"], api_for)
    else:
        raise ValueError(f"action must be 'generate' or 'autograde', got {cfg['action']!r}")
    _write_json(cfg["out"], data)
    # done: the grader waits on this process's end, and tearing down nbgrader's thousand modules
    # (and its exit handlers, for kernels already shut down) took half a second of it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
