"""The only process in which student code runs: import the student's modules, then answer calls.

Started by :mod:`autograder.sandbox.remote` as ``python -s child.py CONFIG_JSON``. Standard library only
(numpy only if an argument or a result is an array), so nothing the grader trusts is loaded here.

Order matters: resource limits and the audit hook are installed *before* the first line of
student code runs, and neither can be undone from Python afterwards (raising a hard limit and
adding/removing hooks are themselves refused by the hook). The hook is a closure that nothing
else references, and the ``gc`` introspection that could reach it is refused too.

Protocol: one JSON request per line on stdin (``{"op": "call", "target": {"module", "name"},
{"handle"} or {"handle", "attr"} (a method looked up at the call), "args", "kwargs"}``,
``{"op": "attr", "module", "name"}`` for a module-level value, or
``getattr/len/bool/contains/getitem/list`` on a handle, ``{"op": "many", "requests"}``: several
calls and attribute reads, answered by a list of ``(True, value)`` or ``(False, {"type",
"message"})``); one JSON reply per line on the file
descriptor named in the config: ``{"value": ...}``, ``{"raised": {"type", "message"}}``, or, to a
``getattr`` without ``"plain"`` that found a function of the object's class, ``{"method": true}``.
A value that is not plain data stays here as a handle. Before the first request: ``{"ready": true}`` or
``{"import_error": {...}}``. The parent trusts none of it beyond "plain JSON values".
"""

from __future__ import annotations

import base64
import json
import os
import resource
import sys
import traceback
from types import MethodType, SimpleNamespace

# ---- values on the wire (the parent's autograder.sandbox.wire decodes them strictly) -------------------


HANDLES: dict = {}  # id -> an object that stays here; the grader holds only its id


PLAIN = frozenset({type(None), bool, int, float, str})  # JSON's own values: sent as they are


def encode(x, depth=0):
    if depth > 50:
        raise TypeError("value nested too deeply")
    t = type(x)  # exact types only: a subclass could carry an always-true __eq__
    if t in PLAIN:
        return x
    if t is list:
        if all(type(v) in PLAIN for v in x):  # plain values encode to themselves
            return x
        return [encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"__tuple__": [encode(v, depth + 1) for v in x]}
    if t is dict:
        return {"__dict__": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    if t is SimpleNamespace:
        return {"__ns__": {k: encode(v, depth + 1) for k, v in vars(x).items()}}
    if t.__module__ == "numpy" and t.__name__ == "ndarray":
        if x.dtype.kind in "biuf":  # numbers: their bytes in base64 (the grader's wire.decode checks the size)
            import numpy as np
            raw = base64.b64encode(np.ascontiguousarray(x).tobytes()).decode("ascii")
            return {"__ndarray__": {"dtype": x.dtype.str, "shape": list(x.shape), "b64": raw}}
        return {"__ndarray__": {"dtype": x.dtype.str, "shape": list(x.shape), "data": x.ravel().tolist()}}
    if t.__module__ == "numpy" and hasattr(x, "dtype") and hasattr(x, "item"):  # numpy scalar
        return {"__npscalar__": {"dtype": x.dtype.str, "value": x.item()}}
    # anything else stays here: the grader gets a handle it can call, read attributes of, and
    # compare only by identity
    hid = len(HANDLES) + 1
    HANDLES[hid] = x
    return {"__handle__": {"id": hid, "type": f"{t.__module__}.{t.__qualname__}"}}


def decode(x):
    if isinstance(x, list):
        if all(type(v) in PLAIN for v in x):
            return x
        return [decode(v) for v in x]
    if isinstance(x, dict):
        if "__tuple__" in x:
            return tuple(decode(v) for v in x["__tuple__"])
        if "__dict__" in x:
            return {decode(k): decode(v) for k, v in x["__dict__"]}
        if "__ns__" in x:
            return SimpleNamespace(**{k: decode(v) for k, v in x["__ns__"].items()})
        if "__ndarray__" in x:
            import numpy as np
            a = x["__ndarray__"]
            if "b64" in a:  # writable, its own memory, as an array built from a list is
                return np.frombuffer(base64.b64decode(a["b64"]), dtype=np.dtype(a["dtype"])).reshape(a["shape"]).copy()
            return np.array(a["data"], dtype=np.dtype(a["dtype"])).reshape(a["shape"])
        if "__handle__" in x:
            return HANDLES[x["__handle__"]]
        if "__npscalar__" in x:
            import numpy as np
            return np.dtype(x["__npscalar__"]["dtype"]).type(x["__npscalar__"]["value"])
    return x


# ---- the sandbox -------------------------------------------------------------------------------

DENIED_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "os.startfile",
    "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "resource.setrlimit",
    "resource.prlimit", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "socket.__new__",
    "socket.connect", "socket.bind", "sys.addaudithook", "os.setuid", "os.chroot", "pty.spawn",
    "_posixsubprocess.fork_exec",
})
PATH_MUTATING_EVENTS = frozenset({  # every path argument must lie in the sandbox
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
    "os.utime", "shutil.rmtree", "shutil.move",
})
# (source, destination): the source must be readable (a hard link or copy of a forbidden file
# would otherwise open it under another name), the destination in the sandbox
LINKING_EVENTS = frozenset({"os.link", "os.symlink", "shutil.copyfile", "shutil.copytree"})
LISTING_EVENTS = frozenset({"os.listdir", "os.scandir", "glob.glob", "os.chdir"})
BLOCKED_TOP_MODULES = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend"})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _grader_module(name: str):
    """A standard-library-only file of the grader's beside this one, loaded by path (the
    grader's package is not on this process's path)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_servelab_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a loadable module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _forgetting_new_modules(step):
    """Runs ``step()``; the modules it imported (ctypes) are forgotten, and the hook refuses
    them to the student's code anyway."""
    before = set(sys.modules)
    try:
        return step()
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]


# extensions never mapped for the student: refused by the hook, a process or a terminal
# library, a test module of CPython's, subinterpreters, or a library the fallback of a
# pure-Python twin covers (hashlib without OpenSSL, uuid without libuuid) that costs most of
# the mapping time. Subinterpreters: one has no audit hook, and the child's own set-up loaded
# ctypes' extension, which a subinterpreter then imports without a new mapping (and calls:
# System V IPC objects that outlived the grading). With no new executable mapping allowed once
# the walls stand, a task's child cannot make one at all.
NOT_PREMAPPED = ("_ctypes", "_posixsubprocess", "_tkinter", "_curses", "readline", "_test", "xxlimited",
                 "_xxtestfuzz", "ossaudiodev", "nis", "spwd", "_crypt", "_dbm", "_gdbm", "_ssl", "_hashlib",
                 "_uuid", "_sqlite3", "_socket", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters",
                 "_interpchannels", "_interpqueues")


# what a notebook's kernel may import besides the standard library and numpy: the library the
# test cells import, plotting, and the kernel's own machinery (a package and the folder of the
# libraries its wheel bundles, "<distribution>.libs", beside it)
KERNEL_PACKAGES = (("servelab", ""), ("matplotlib", ""), ("PIL", "pillow"), ("kiwisolver", ""),
                   ("contourpy", ""), ("fontTools", ""), ("zmq", "pyzmq"), ("tornado", ""), ("psutil", ""),
                   ("markupsafe", ""), ("yaml", ""))


def premap_libraries(packages: tuple[tuple[str, str], ...] = ()) -> list:
    """Maps (``dlopen``, without importing) the compiled extensions the student may import: the
    standard library's, numpy's and those of ``packages`` ((import name, distribution name
    when its bundled libraries' folder is named after that), as :data:`KERNEL_PACKAGES`).
    Once the filter refuses every new executable mapping, an ``import numpy`` or ``import
    _heapq`` then finds its library mapped already (the loader matches it by file) and needs no
    new code. Returns the handles (kept: never unmapped)."""
    import glob
    import importlib.util
    import sysconfig

    import ctypes

    folders = [sysconfig.get_config_var("DESTSHARED") or os.path.join(sysconfig.get_paths()["stdlib"], "lib-dynload")]
    for name, distribution in (("numpy", ""), *packages):
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            folders.append(folder)
            bundled = os.path.join(os.path.dirname(folder), f"{distribution or name}.libs")
            if os.path.isdir(bundled):
                folders.append(bundled)
    handles = []
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "**", "*.so"), recursive=True)):
            if os.path.basename(path).startswith(NOT_PREMAPPED):
                continue
            try:
                handles.append(ctypes.CDLL(path, mode=sys.getdlopenflags()))
            except OSError:  # a missing dependency: the student's import of it fails as it would
                pass
    for name in ("libgcc_s.so.1",):  # glibc loads it to unwind a thread that calls pthread_exit
        try:
            handles.append(ctypes.CDLL(name))
        except OSError:
            pass
    return handles


def confine_files(rules: dict) -> None:
    """Landlock (landlock.py, beside this file): from here on this process reads only
    ``rules["read"]`` and writes only ``rules["write"]``. ``rules["required"]`` (no mount
    namespace holds the files back): a kernel without Landlock, or a second thread, which
    Landlock would leave unconfined, stops the child before any student code."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: inside bubblewrap's sealed namespace
        threads = 1
    try:
        if threads != 1:
            raise OSError(f"{threads} threads run before the confinement; it would hold only this one")
        _grader_module("landlock").restrict(rules["read"], rules["write"], rules.get("list", []))
    except OSError:
        if rules.get("required"):
            raise


def install_syscall_filter(exec_mappings: bool = True) -> None:
    """The kernel's refusals (syscall_filter.py, beside this file: no programs, processes,
    namespaces, memory-only code or network for whatever runs here, a subinterpreter or a
    carried binary included; ``exec_mappings=False``: no new executable mapping of any file).
    The ctypes it used is forgotten; the hook refuses it anyway."""
    _forgetting_new_modules(lambda: _grader_module("syscall_filter").install(exec_mappings))


def install_limits(cfg: dict) -> None:
    def cap(which, value):
        resource.setrlimit(which, (value, value))  # soft = hard: cannot be raised again

    cap(resource.RLIMIT_CPU, int(cfg["cpu_s"]))
    cap(resource.RLIMIT_AS, int(cfg["memory_bytes"]))
    cap(resource.RLIMIT_FSIZE, int(cfg["output_bytes"]))
    cap(resource.RLIMIT_CORE, 0)
    if os.geteuid() != 0 and cfg.get("nproc"):  # root ignores RLIMIT_NPROC; the hook covers it
        cap(resource.RLIMIT_NPROC, int(cfg["nproc"]))


def _refuse_processes(*args, **kwargs):
    raise PermissionError("the autograder does not let submissions start processes")


def disarm_process_spawning() -> None:
    """Python 3.11 raises no audit event for ``_posixsubprocess.fork_exec``, which starts a
    program with no audit hook at all. Importing the module is refused, but a process whose
    machinery already imported ``subprocess`` (a Jupyter kernel) holds it: its entry points are
    replaced before the hook goes in. Nothing can restore them: the original is reachable only
    through ``gc`` (refused) or a fresh import (refused)."""
    # setattr: the names are private to those modules (no stub declares them; this file imports
    # nothing beyond what the child needs, not even typing)
    posix = sys.modules.get("_posixsubprocess")
    if posix is not None:
        setattr(posix, "fork_exec", _refuse_processes)
    subprocess_module = sys.modules.get("subprocess")
    if subprocess_module is not None and hasattr(subprocess_module, "_fork_exec"):
        setattr(subprocess_module, "_fork_exec", _refuse_processes)


def install_audit_hook(cfg: dict) -> None:
    disarm_process_spawning()
    forbidden = tuple(os.path.realpath(p) for p in cfg["forbidden"])
    writable = tuple(os.path.realpath(p) for p in cfg["writable"]) + ("/dev/null",)
    blocked_modules = frozenset(cfg["blocked_modules"]) | BLOCKED_TOP_MODULES
    own_proc = (f"/proc/{os.getpid()}", "/proc/self", "/proc/thread-self")
    realpath, fspath, sep = os.path.realpath, os.fspath, os.sep

    def under(path, roots):
        return any(path == r or path.startswith(r + sep) for r in roots)

    def resolve(p):
        if isinstance(p, int) or p is None:
            return None
        p = fspath(p)
        if isinstance(p, bytes):
            p = p.decode("utf-8", "surrogateescape")
        return realpath(p)

    def check_read(path, event):
        if path is None:
            return
        if under(path, forbidden) or (path.startswith("/proc/") and not under(path, own_proc)):
            raise PermissionError(f"the autograder does not let submissions reach {path} ({event})")

    def hook(event, args):
        if event in DENIED_EVENTS or event.startswith("ctypes."):
            raise PermissionError(f"the autograder does not allow {event} in submissions")
        if event == "import":
            name = args[0] or ""
            parts = name.split(".")
            # any part: an extension's file loaded under a dotted name ("x._posixsubprocess")
            # still initialises the blocked module
            if name in blocked_modules or parts[0] in blocked_modules or not BLOCKED_TOP_MODULES.isdisjoint(parts):
                raise ImportError(f"the autograder does not let submissions import {name}")
            check_read(resolve(args[1]), event)
        elif event == "open":
            path = resolve(args[0])
            check_read(path, event)
            mode, flags = args[1] or "r", args[2] or 0
            writing = any(c in str(mode) for c in "wax+") or (flags & WRITE_FLAGS)
            if path is not None and writing and not under(path, writable):
                raise PermissionError(f"the autograder lets submissions write only in their own folder, not {path}")
        elif event == "sqlite3.connect":  # sqlite opens (and may create) its file without an "open" event
            db = args[0] if args else None
            if isinstance(db, (str, bytes, os.PathLike)) and fspath(db) not in (":memory:", b":memory:", "", b""):
                path = resolve(db)
                check_read(path, event)
                if not under(path, writable):
                    raise PermissionError(f"the autograder lets submissions write only in their own folder, not {path}")
        elif event in LISTING_EVENTS:
            if args:
                check_read(resolve(args[0]), event)
        elif event in LINKING_EVENTS:
            src, dst = resolve(args[0]), resolve(args[1])
            check_read(src, event)
            if dst is not None and not under(dst, writable):
                raise PermissionError(f"the autograder lets submissions change files only in their own folder, not {dst}")
        elif event in PATH_MUTATING_EVENTS:
            for a in args[:2]:
                if isinstance(a, (str, bytes, os.PathLike)):
                    p = resolve(a)
                    if not under(p, writable):
                        raise PermissionError(f"the autograder lets submissions change files only in their own folder, not {p}")

    sys.addaudithook(hook)


# ---- main loop ---------------------------------------------------------------------------------


def describe(exc: BaseException) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {"type": type(exc).__name__, "message": str(exc)[:4000], "traceback": "".join(tb[-6:])[-4000:]}


METHOD = object()  # the reply to a getattr that found a function of the object's class (main)


def is_method_of_class(obj, name, value) -> bool:
    """Whether ``value``, read as ``obj.name``, is ``obj`` bound to its class's function ``name``:
    then the grader may call ``name`` on any object of that class without a handle (the call
    looks it up again, as ``obj.name(...)`` does)."""
    return (type(value) is MethodType and value.__self__ is obj
            and getattr(type(obj), name, None) is value.__func__)


def serve(req: dict, modules: dict):
    """What one request asks of the student's code."""
    op = req["op"]
    if op == "many":  # several calls and attribute reads, in order; each one's value or exception
        done: list = []  # (ok, the value or the exception itself)
        results = []
        for one in req["requests"]:
            if one.get("op") not in ("call", "getattr"):
                raise ValueError(f"unknown request {one.get('op')!r} in a batch")
            try:
                if "of" in one:  # an attribute of what an earlier request of this batch returned
                    ok, got = done[one["of"]]
                    if not ok:
                        raise got
                    value = getattr(got, one["name"])
                else:
                    value = serve({**one, "plain": True}, modules)
                done.append((True, value))
                results.append((True, value))
            except BaseException as exc:
                done.append((False, exc))
                results.append((False, {"type": type(exc).__name__, "message": str(exc)[:4000]}))
        return results
    if op == "attr":  # a module-level name (a notebook's answer); a function stays a handle
        return getattr(modules[req["module"]], req["name"])
    if op == "call":
        target = req["target"]
        if "module" in target:
            fn = getattr(modules[target["module"]], target["name"])
        elif "attr" in target:  # a method of a handle, looked up now (the grader kept no handle of it)
            fn = getattr(HANDLES[target["handle"]], target["attr"])
        else:
            fn = HANDLES[target["handle"]]
        return fn(*decode(req["args"]), **decode(req["kwargs"]))
    obj = HANDLES[req["handle"]]
    if op == "getattr":
        value = getattr(obj, req["name"])
        if not req.get("plain") and is_method_of_class(obj, req["name"], value):
            return METHOD
        return value
    if op == "len":
        return len(obj)
    if op == "bool":
        return bool(obj)
    if op == "contains":
        return decode(req["arg"]) in obj
    if op == "getitem":
        return obj[decode(req["arg"])]
    if op == "list":
        return list(obj)
    raise ValueError(f"unknown request {op!r}")


def main() -> None:
    cfg = json.loads(sys.argv[1])
    out = os.fdopen(int(cfg["reply_fd"]), "w", encoding="utf-8")
    del sys.path[0]  # the folder of this script: the grader's own package stays out of reach
    hidden = tuple(os.path.realpath(p) for p in cfg["forbidden"])
    sys.path[:] = [p for p in sys.path if not any(os.path.realpath(p or ".").startswith(h) for h in hidden)]

    def reply(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    sys.dont_write_bytecode = True
    import importlib
    import importlib.util

    # standard modules a notebook's kernel has loaded anyway (subprocess: its spawning entry
    # points are disarmed by the hook's installation), imported before the hook refuses them
    for name in cfg.get("preload", []):
        importlib.import_module(name)
    if cfg.get("syscall_filter"):
        # the child's own code first, then the walls: its libraries mapped, its files confined
        # (Landlock), and no new executable mapping from here on, wherever a carried one lands
        rules = cfg.get("landlock") or {}

        def walls():
            libraries = premap_libraries()  # kept: ctypes never unmaps a library anyway
            syscall_filter = _grader_module("syscall_filter")  # read before the files are confined
            if rules.get("files", True) and "read" in rules:
                confine_files(rules)
            # "new_code": only the controls of the tests switch this wall off
            # a task's child reads no free space or memory: a kernel beside it could signal that way
            syscall_filter.install(exec_mappings=bool(rules.get("new_code", False)), machine_state=False)
            return len(libraries)

        _forgetting_new_modules(walls)
    install_limits(cfg)
    install_audit_hook(cfg)

    modules = {}
    for name, path in cfg["modules"]:
        try:
            sys.path.insert(0, os.path.dirname(path))
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"{path} is not a loadable module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            modules[name] = module
        except BaseException as exc:  # SystemExit and KeyboardInterrupt at import included
            reply({"import_error": {"module": name, **describe(exc)}})
            return
    reply({"ready": True})
    for line in sys.stdin:
        try:
            req = json.loads(line)
            value = serve(req, modules)
            answer = {"method": True} if value is METHOD else {"value": encode(value)}
        except BaseException as exc:
            answer = {"raised": describe(exc)}
        reply(answer)


if __name__ == "__main__":
    main()
