"""The kernel in which a student's notebook runs: ipykernel behind the same sandbox as
:mod:`autograder.sandbox.child` (resource limits, then the audit hook), installed before the first cell.

nbgrader starts it through a kernel spec that :mod:`autograder.notebooks.nbgrader` writes into the
temporary course folder (``python -s kernel.py -f CONNECTION_FILE``, the sandbox settings
in the environment variable ``SERVELAB_SANDBOX``). The kernel's own machinery (ipykernel, zmq,
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
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _become_the_sandbox_user(cfg: dict) -> None:
    """Started as root (behind bubblewrap, or not): Jupyter wrote the connection file mode 0600
    as root, so copy it into the kernel's own folder, then drop to the grading's uid for good
    (autograder/sandbox/os_boundary.py) before anything of the notebook's runs."""
    uid, gid = cfg.get("uid"), cfg.get("gid")
    if uid is None:
        return
    at = sys.argv.index("-f") + 1
    own = os.path.join(cfg["own"], "connection.json")
    with open(sys.argv[at], "rb") as src, open(own, "wb") as dst:
        dst.write(src.read())
    os.chown(own, uid, gid)
    os.chmod(own, 0o600)
    sys.argv[at] = own
    _load("os_boundary").drop_privileges(uid, gid)


def main() -> None:
    cfg = json.loads(os.environ.pop("SERVELAB_SANDBOX"))
    _become_the_sandbox_user(cfg)
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
        child.install_syscall_filter()
    child.install_limits(cfg)
    child.install_audit_hook(cfg)
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
