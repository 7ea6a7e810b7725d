"""The kernel in which a student's notebook runs: ipykernel behind the same sandbox as
:mod:`autograder.sandbox.child` (resource limits, then the audit hook), installed before the first cell.

nbgrader starts it through a kernel spec that :mod:`autograder.notebooks.nbgrader` writes into the
temporary course folder (``python -s kernel.py -f CONNECTION_FILE``, the sandbox settings
in the environment variable ``SERVELAB_SANDBOX``), already as the sandbox's uid. Each notebook's
kernel has fresh folders of its own (HOME, working folder, TMPDIR, sockets), so no kernel finds
what an earlier one planted. The kernel's own machinery (ipykernel, zmq,
asyncio) is imported first, so that the hook only ever judges what the notebook does.

One difference from the child: the kernel talks to nbgrader over ZeroMQ, whose sockets live in
C and raise no audit events, and asyncio needs a local socket pair for its event loop. So
``socket.__new__`` is allowed for ``AF_UNIX`` only; every other socket is refused, as are
``bind`` and ``connect``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name: str):
    """autograder/<name>.py by path (the package itself stays off the kernel's sys.path)."""
    spec = importlib.util.spec_from_file_location(f"_servelab_{name}", os.path.join(HERE, f"{name}.py"))
    if spec is None or spec.loader is None:
        raise ImportError(f"{name}.py is not a loadable module in {HERE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _check_identity(cfg: dict) -> None:
    """The kernel starts as the sandbox's uid (the boundary's ``setpriv`` drops root before
    Python starts): it has no root phase, so nothing runs as root in a folder the submission
    can write. Its connection file, in a folder of the grader's, is readable to the sandbox's
    group (autograder/notebooks/runner.py). Refuse to run a notebook as anyone else."""
    uid = cfg.get("uid")
    if uid is not None and (os.getuid() != uid or os.geteuid() != uid):
        raise SystemExit(f"the notebook kernel must run as uid {uid}, not {os.geteuid()}")


def _enter_own_folder(cfg: dict) -> None:
    """The working folder: the notebook's own, fresh one (never the grader's, never another
    notebook's), entered as the sandbox's uid."""
    if cfg.get("cwd"):
        os.chdir(cfg["cwd"])


def main() -> None:
    cfg = json.loads(os.environ.pop("SERVELAB_SANDBOX"))
    _check_identity(cfg)
    _enter_own_folder(cfg)
    if sys.path and os.path.realpath(sys.path[0] or ".") == HERE:
        del sys.path[0]
    hidden = tuple(os.path.realpath(p) for p in cfg["forbidden"])
    sys.path[:] = [p for p in sys.path if not any(os.path.realpath(p or ".").startswith(h) for h in hidden)]
    child = _load("child")
    import asyncio  # noqa: F401  (the kernel's machinery, loaded before the hook)

    # in bubblewrap's PID namespace the parent's pid means nothing (ipykernel would see it gone
    # and exit); the kernel ends with its namespace when nbgrader's process ends
    if cfg.get("bwrap"):
        os.environ.pop("JPY_PARENT_PID", None)

    from ipykernel import kernelapp

    unix = socket.AF_UNIX

    def local_sockets_only(event, args):
        if event == "socket.__new__" and len(args) > 1 and args[1] not in (unix, -1):
            raise PermissionError("the autograder does not allow network sockets in notebooks")

    sys.dont_write_bytecode = True
    child.DENIED_EVENTS = child.DENIED_EVENTS - {"socket.__new__"}
    sys.addaudithook(local_sockets_only)  # before the child's hook, which then refuses new hooks
    # nothing the notebook writes to the kernel's own stdout or stderr reaches nbgrader's log,
    # whose tail a failed run shows in results.json (ipykernel sends cell output to the notebook)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    if cfg.get("syscall_filter"):  # every thread: no network (it ran the hidden tests), no processes
        rules = cfg.get("landlock")

        def walls() -> None:
            syscall_filter = child._grader_module("syscall_filter")  # read before the files are confined
            # the compiled libraries a notebook may import mapped first (libgcc_s among them:
            # glibc loads it when a thread ends), then no new executable mapping, as in a task's
            # child: a library the notebook carries into its writable folders cannot run
            child.premap_libraries(child.KERNEL_PACKAGES)
            if rules:  # without a mount namespace: the files it may read and write (os_boundary)
                child.confine_files(rules)
            syscall_filter.install(bool(cfg.get("new_code", False)))

        child._forgetting_new_modules(walls)
    child.install_limits(cfg)
    child.install_audit_hook(cfg)
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
