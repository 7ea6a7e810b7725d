"""The grader's side of the child process: start it under limits, call student functions in it,
and stand in for the student's modules inside the (pristine, trusted) tests.

A test does ``import ledger`` and then ``ledger.param_count(x)``: the grader puts a
:class:`RemoteModule` named ``ledger`` in ``sys.modules`` while it imports the test, so the call
goes over a pipe to the child, and what comes back is plain data (:mod:`autograder.sandbox.wire`).
Everything the test does with that value (comparisons, the oracle, Hypothesis) happens here.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import select
import selectors
import signal
import subprocess
import sys
import time
import types
from typing import IO, cast
from dataclasses import dataclass, field
from pathlib import Path

from autograder.sandbox import batch_leaks, folder_budget, os_boundary, wire

CHILD = os_boundary.CHILD
# servelab's folder: a notebook's kernel imports it, so the uid drop alone cannot close it (README)
SERVELAB = Path(__file__).resolve().parents[2] / "python" / "servelab"
MAX_REPLY = 16 << 20  # bytes; a longer line is a protocol error, not a reason to run out of memory
# values in one reply (its commas and brackets, counted before it is parsed): 16 MiB of "[]," is
# 5.6 million lists, 830 MB of the grader's memory and 4 s of its CPU once parsed and decoded; an
# honest reply holds a few hundred (an array travels as one base64 string)
MAX_REPLY_VALUES = 1 << 20
CHUNK = 1 << 16  # bytes per read or write on the pipes
TRICKLE, TRICKLE_WAIT_S = 1 << 12, 0.002  # a read of fewer bytes and no end of line waits this long before the next
POLL_MAX_S = 3600.0  # the longest one wait in poll (its milliseconds are a C int); a longer deadline waits again


@dataclass(frozen=True)
class Limits:
    """Per test: wall-clock seconds (from the child's start, the import included, for the
    first test a child serves; from the test's start for the next ones), CPU seconds (a child
    serving n tests gets n times this), address space, bytes of output, and processes or
    threads beyond those the user already runs."""

    wall_s: float = 60.0
    cpu_s: int = 60
    memory_bytes: int = 2 << 30
    output_bytes: int = 1 << 20
    nproc: int = 64
    # the limits as the manifest gives them, before calibrate.scaled() fitted them to this
    # machine (None: not scaled): messages name these, so that a regrade on a slower or busier
    # machine writes the same results.json
    given_wall_s: float | None = field(default=None, compare=False)
    given_cpu_s: int | None = field(default=None, compare=False)

    def wall_words(self) -> str:
        """The wall-clock limit as a message names it."""
        if self.given_wall_s is None:
            return f"{self.wall_s:g} s (wall clock)"
        return f"{self.given_wall_s:g} s (wall clock, fitted to this machine's speed and load)"

    def cpu_words(self) -> str:
        """The CPU limit as a message names it."""
        if self.given_cpu_s is None:
            return f"{self.cpu_s} s"
        return f"{self.given_cpu_s} s a test, fitted to this machine's speed"

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_bytes", "output_bytes", "nproc"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {v!r}")


class SubmissionFailed(BaseException):
    """The child died, hung, or broke the protocol. A BaseException on purpose: Hypothesis must
    not treat it as a falsifying example and shrink (which would call the dead child again)."""


class StudentError(Exception):
    """An exception of a type that is not a builtin, raised by student code."""


def _exception_from(raised: dict) -> Exception:
    name, message = str(raised.get("type", "Exception")), str(raised.get("message", ""))
    cls = getattr(builtins, name, None)
    text = f"{message}  [raised by your code]"
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, (StopIteration, StopAsyncIteration)):
        try:
            return cls(text)
        except Exception:
            pass
    return StudentError(f"{name}: {text}")


def _nameless_log(path: Path) -> int:
    """A descriptor open for writing only on a new file that no longer has a name (so
    ``RLIMIT_FSIZE`` still bounds what the child prints, and nothing can open it again)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.unlink(path)
    return fd


def _describe_exit(code: int | None, limits: Limits) -> str:
    if code is None:
        return "was still running"
    if code >= 0:
        return f"ended with exit code {code}"
    sig = -code
    reasons: dict[int, str] = {signal.SIGXCPU: f" (CPU time limit of {limits.cpu_words()})",
                               signal.SIGXFSZ: f" (output over the limit of {limits.output_bytes} bytes)",
                               signal.SIGKILL: " (killed)", signal.SIGSEGV: " (crashed; possibly out of memory)"}
    why = reasons.get(sig, "")
    return f"was killed by {signal.Signals(sig).name}{why}"


A_METHOD = object()  # what Child.request returns for a getattr that found a method (Child.attribute)


class Child:
    """One child process with the student's modules imported; call :meth:`call` on it."""

    def __init__(self, modules: list[tuple[str, Path]], scratch: Path, forbidden: list[Path],
                 blocked_modules: list[str], limits: Limits, deadline: float, preload: tuple[str, ...] = (),
                 budget_end: float | None = None, serves: int = 1) -> None:
        """``scratch``: a new folder, the child's cwd, HOME and TMPDIR, the only place it may write
        without namespaces (behind bubblewrap it may write nowhere: ``sealed`` in os_boundary).
        ``preload``: standard modules imported before the sandbox is installed. ``deadline``
        (``time.monotonic()``) bounds every exchange with the child, reads and writes alike;
        ``budget_end``, when earlier, bounds them instead (the task's budget: a message then says
        that it ran out). ``serves``: how many tests this child may answer one after another
        (:meth:`renew` gives each its own wall-clock limit); its CPU limit is ``serves`` times
        the per-test one, since a process's CPU time only adds up."""
        self.limits, self.deadline = limits, deadline
        self._budget_given = budget_end
        self.budget_end = budget_end if budget_end is not None and budget_end < deadline else None
        if self.budget_end is not None:
            self.deadline = self.budget_end
        # what the child wrote and the grader has not taken yet; ``_scanned`` bytes of it hold no
        # newline (each byte is looked at once: a child writing one byte at a time costs the grader
        # one read per byte, never a rescan of everything before it)
        self._buffer = bytearray()
        self._scanned = 0
        self._reply: int | None = None
        self._request: int | None = None
        self._poll: select.poll | None = None  # waits for the reply pipe (_read)
        # (kind, name): the child said that name is a function of that kind's class (attribute)
        self._methods: set[tuple[str, str]] = set()
        self._watch: folder_budget.Watch | None = None  # the scratch folder's budget, where it is on disk
        self.boundary = os_boundary.boundary()  # the OS boundary (autograder/sandbox/os_boundary.py)
        nproc = self.boundary.nproc_limit(limits.nproc)
        home, tmp = scratch / "home", scratch / "tmp"
        home.mkdir(parents=True)
        tmp.mkdir()
        read_fd, write_fd = os.pipe()
        cfg = {"reply_fd": write_fd, "modules": [[n, str(p)] for n, p in modules],
               "forbidden": [str(p) for p in forbidden], "writable": [str(scratch)],
               "blocked_modules": list(blocked_modules), "cpu_s": max(1, int(limits.cpu_s)) * max(1, int(serves)),
               "memory_bytes": int(limits.memory_bytes), "output_bytes": int(limits.output_bytes),
               "nproc": nproc, "preload": list(preload),
               # the kernel's refusals go with the OS boundary (SERVELAB_SANDBOX=none: the hook only)
               "syscall_filter": self.boundary.mode != "none"}
        env = {"HOME": str(home), "TMPDIR": str(tmp), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
               "PYTHONIOENCODING": "utf-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        # the child sees its modules' folders (read-only), its scratch folder (its own) and the
        # interpreter; the course copy, servelab and every other folder are not there at all
        folders = sorted({Path(p).parent for _, p in modules})
        # Landlock: what it may read and write, in every mode that has a boundary (os_boundary)
        cfg["landlock"] = self.boundary.confinement(readable=folders, writable=[scratch])
        # sealed: no writable or executable place for a carried binary, no /proc (os_boundary)
        argv = self.boundary.command([sys.executable, "-s", str(CHILD), json.dumps(cfg)],
                                     # numpy's folder too: a venv may reach it through a .pth file, outside
                                     # the interpreter's folders that the boundary shows anyway
                                     readable=[*folders, CHILD, os_boundary.SYSCALL_FILTER, os_boundary.LANDLOCK,
                                               *os_boundary.beyond_interpreter(os_boundary.library_paths())],
                                     writable=[scratch],
                                     hidden=forbidden, cwd=scratch, sealed=True, noexec_tmp=tmp)
        for folder in (*folders, scratch):
            self.boundary.reach(folder)
        self.boundary.lock(forbidden, keep=[SERVELAB])  # only without namespaces: 0700 instead
        if not self.boundary.bwrap:  # what an earlier child or kernel of this uid left running
            self.boundary.reap()
        # the student's prints go to a file that is never read back, write-only and unlinked
        # before the child starts: under a name (it was scratch/output.log) the child could
        # write a compiled extension into it through its stdout and import it from there
        log = _nameless_log(scratch.parent / f"{scratch.name}.log")
        try:
            self.boundary.give(scratch)
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=scratch, env=env, pass_fds=(write_fd,), start_new_session=True)
        finally:
            os.close(log)
        os.close(write_fd)
        self._reply = read_fd
        # without a mount namespace the scratch folder lies on the grading machine's disk: bounded
        # by the grader's watch, as a sealed child's tmpfs is by its size (folder_budget)
        if not self.boundary.bwrap and self.boundary.mode != "none":
            self._watch = folder_budget.Watch([scratch], self._over_budget).start()
        # both pipes non-blocking: every exchange waits in poll, up to the deadline, never in a
        # read or a write (a child that stops reading a large request cannot hang the grader)
        os.set_blocking(read_fd, False)
        self._request = cast(IO[bytes], self.proc.stdin).fileno()  # stdin=PIPE
        os.set_blocking(self._request, False)
        first = self._read("importing your code")
        if "import_error" in first:
            err = first["import_error"]
            if not isinstance(err, dict):
                raise SubmissionFailed("importing your code failed")
            self.close()
            raise SubmissionFailed(f"importing {err.get('module')} raised {err.get('type')}: "
                                   f"{str(err.get('message'))[:1500]}\n{str(err.get('traceback'))[-1500:]}")
        if first != {"ready": True}:
            self.close()
            raise SubmissionFailed("the child process sent something unexpected while importing your code")

    def alive(self) -> bool:
        """Whether the child still answers: running, its pipes open (a death, a timeout or a
        broken reply closes it)."""
        return self._reply is not None and self.proc.poll() is None

    def renew(self, deadline: float) -> None:
        """A new wall-clock ``deadline`` for the next test this child serves (still capped by the
        task's budget): a child kept from one test to the next gives each test its own limit."""
        given = self._budget_given
        self.budget_end = given if given is not None and given < deadline else None
        self.deadline = deadline if self.budget_end is None else self.budget_end

    def call(self, module: str, name: str, args: tuple, kwargs: dict):
        """``module.name(*args, **kwargs)`` in the child; its value, decoded."""
        return self.request({"op": "call", "target": {"module": module, "name": name},
                             "args": self._encode(list(args)), "kwargs": self._encode(kwargs)},
                            f"{module}.{name}(...)")

    def attr(self, module: str, name: str):
        """The value of ``module.name`` in the child (plain data, or a handle); AttributeError
        when the module has no such name."""
        return self.request({"op": "attr", "module": module, "name": name}, f"{module}.{name}")

    def attribute(self, owner: RemoteObject, name: str):
        """``owner.name``. When the child once said that ``name`` is a function of the class of
        an object of ``owner``'s kind, a :class:`RemoteMethod` at once, with no request: a
        state-machine test reads ``blocks.allocate`` before each of thousands of calls, and
        each read was a round trip to the child."""
        kind = object.__getattribute__(owner, "_kind")
        if (kind, name) in self._methods:
            return RemoteMethod(owner, name)
        value = self.request({"op": "getattr", "handle": object.__getattribute__(owner, "_id"), "name": name},
                             f"{kind}.{name}")
        if value is A_METHOD:
            self._methods.add((kind, name))
            return RemoteMethod(owner, name)
        return value

    def many(self, requests: list[dict]) -> list[tuple[bool, object]]:
        """Several ``call`` and ``getattr`` requests in one message, run one after another by
        the child: for each, ``(True, value)`` or ``(False, the exception it raised)`` (the
        requests after an exception still run). ``servelab.harness.calls.call_each`` sends them
        (a state machine's check after each step: a dozen round trips became one)."""
        names = sorted({str(r.get("name") or r.get("target", {}).get("name") or r.get("target", {}).get("attr")
                            or "...") for r in requests})
        what = f"{len(requests)} calls sent together ({', '.join(names)[:200]})"
        items = self.request({"op": "many", "requests": requests}, what)
        if type(items) is not list or len(items) != len(requests):
            raise SubmissionFailed(f"the child process sent something unexpected for {what}")
        out: list[tuple[bool, object]] = []
        for item in items:
            if type(item) is tuple and len(item) == 2 and item[0] is True:
                out.append((True, item[1]))
            elif type(item) is tuple and len(item) == 2 and item[0] is False and type(item[1]) is dict:
                out.append((False, _exception_from(item[1])))
            else:
                raise SubmissionFailed(f"the child process sent something unexpected for {what}")
        if os.environ.get(batch_leaks.VARIABLE) == "1":  # the self-check's reference grading only
            found = batch_leaks.leaks(requests, out)
            if found:
                raise SubmissionFailed(f"the test sends an answer with the call it answers ({what}): "
                                       f"{'; '.join(found)}; send it in a later batch (autograder/README.md)")
        return out

    def request(self, req: dict, what: str):
        """Sends one request, returns the decoded value or raises what the student code raised
        (:data:`A_METHOD` when a ``getattr`` found a function of the object's class). Every
        value the child sends comes through here (the self-check's bounds check inflates them
        here: autograder/selfcheck/bounds.py)."""
        reply = self._exchange(req, what)
        if reply == {"method": True} and req.get("op") == "getattr" and not req.get("plain"):
            return A_METHOD
        return self._value_of(reply, what)

    def _exchange(self, req: dict, what: str) -> dict:
        if self._reply is None:
            raise SubmissionFailed(f"{what}: the child process of this test has already ended")
        self._send((json.dumps(req) + "\n").encode(), what)
        return self._read(what)

    def _value_of(self, reply: dict, what: str):
        if "value" in reply and len(reply) == 1:
            try:
                return wire.decode(reply["value"], handle=lambda hid, kind: RemoteObject(self, hid, kind))
            except (ValueError, TypeError) as exc:
                raise SubmissionFailed(f"{what} returned something that is not a plain value ({exc})") from None
        if "raised" in reply and isinstance(reply["raised"], dict):
            raise _exception_from(reply["raised"])
        raise SubmissionFailed(f"the child process sent something unexpected for {what}")

    def _encode(self, value):
        def handle_id(obj: RemoteObject | RemoteMethod) -> int:
            if isinstance(obj, RemoteMethod):  # a method passed on: the child's own bound method
                obj = obj._fetched()
                if not isinstance(obj, RemoteObject):
                    raise SubmissionFailed(f"an attribute of your object was a method and is now a "
                                           f"{type(obj).__name__}")
            if obj._child is not self:
                raise SubmissionFailed(f"{obj!r} belongs to another test's process")
            return obj._id
        return wire.encode(value, handle=handle_id)

    def _timed_out(self, what: str, doing: str) -> SubmissionFailed:
        self.close()
        limit = (f"time limit: {self.limits.wall_words()} ran out" if self.budget_end is None else
                 "time budget: the time this task may take in all ran out")
        return SubmissionFailed(f"{limit} while {doing}{what}; your code's process was stopped")

    def _send(self, data: bytes, what: str) -> None:
        """Writes one request, waiting in poll up to the deadline. While the child does not read,
        what it writes is still taken (bounded by :data:`MAX_REPLY`), so that neither side waits
        on the other for ever."""
        if self.deadline <= time.monotonic():  # spent by the test's own work since the last reply
            raise self._timed_out(what, "the test was about to call ")
        view = memoryview(data)
        try:  # a request that fits in the pipe is written at once (most are: no poll set up for it)
            view = view[os.write(cast(int, self._request), view[:CHUNK]):]
        except BlockingIOError:
            pass
        except OSError:  # BrokenPipeError: it ended
            raise SubmissionFailed(self._death(what)) from None
        if not view:
            return
        sel = selectors.DefaultSelector()
        try:
            sel.register(cast(int, self._request), selectors.EVENT_WRITE)
            sel.register(cast(int, self._reply), selectors.EVENT_READ)
            while view:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise self._timed_out(what, "your code did not read the request for ")
                for key, _ in sel.select(left):
                    if key.fd == self._reply:
                        if not self._take(what):
                            sel.unregister(self._reply)  # it closed its end: its stdin tells the rest
                        continue
                    try:
                        view = view[os.write(cast(int, self._request), view[:CHUNK]):]
                    except BlockingIOError:
                        continue
                    except OSError:  # BrokenPipeError: it ended
                        raise SubmissionFailed(self._death(what)) from None
        finally:
            sel.close()

    def _take(self, what: str) -> bool:
        """One read of what the child wrote into the buffer; False at its end of file."""
        try:
            chunk = os.read(cast(int, self._reply), CHUNK)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        self._buffer += chunk
        if len(self._buffer) > MAX_REPLY:
            self.close()
            raise SubmissionFailed(f"the reply to {what} was longer than {MAX_REPLY} bytes")
        return True

    def _read(self, what: str) -> dict:
        # one poll object for the reply pipe, kept between requests (a selector made and closed
        # for each would cost three more system calls a request, and a grading makes ten thousands)
        if self._poll is None:
            self._poll = select.poll()
            self._poll.register(cast(int, self._reply), select.POLLIN)
        while (end := self._buffer.find(b"\n", self._scanned)) < 0:
            if 0 < len(self._buffer) - self._scanned < TRICKLE:
                # a reply in small pieces: let them pile up in the pipe for a moment (a
                # child writing one byte at a time would otherwise keep a core of the
                # grader reading as fast as it writes, until the deadline)
                time.sleep(max(0.0, min(TRICKLE_WAIT_S, self.deadline - time.monotonic())))
            self._scanned = len(self._buffer)
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self._timed_out(what, "")
            if self._poll.poll(math.ceil(min(left, POLL_MAX_S) * 1000)) and not self._take(what):
                raise SubmissionFailed(self._death(what))
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 1]
        self._scanned = 0
        if line.count(b",") + line.count(b"[") + line.count(b"{") > MAX_REPLY_VALUES:
            self.close()
            raise SubmissionFailed(f"the reply to {what} held more than {MAX_REPLY_VALUES} values")
        try:
            reply = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deeply
            self.close()
            raise SubmissionFailed(f"the child process wrote something that is not a reply while {what}") from None
        if not isinstance(reply, dict):
            self.close()
            raise SubmissionFailed(f"the child process wrote something that is not a reply while {what}")
        if self._watch is not None and self._watch.check() is not None:
            raise SubmissionFailed(self._death(what))
        return reply

    def _over_budget(self, words: str) -> None:
        """The watch's verdict (its thread): the child and its group end now."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _death(self, what: str) -> str:
        try:
            code = self.proc.wait(timeout=max(0.1, min(2.0, self.deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            code = None
        self.close()
        tripped = self._watch.tripped if self._watch is not None else None
        if tripped is not None:
            return f"your code's process was killed: it {tripped}, while {what}"
        return f"your code's process {_describe_exit(code, self.limits)} while {what}"

    def close(self) -> None:
        """Kills the child and anything it started (its own process group), then reaps it."""
        if self._watch is not None:
            self._watch.stop()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers that outlived the leader
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if not self.boundary.bwrap:  # a process that left the group (a PID namespace ends with its first)
            self.boundary.reap()
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self._reply is not None:
            os.close(self._reply)
            self._reply = None
            self._poll = None


class RemoteObject:
    """An object that lives in the child (an instance of a student's class, a bound method...).
    Attribute reads, calls, ``len``, ``in``, ``[]``, iteration and truth go to the child and come
    back as plain values or further handles. Equality is identity: a student's ``__eq__`` never
    runs in the grader."""

    __slots__ = ("_child", "_id", "_kind")
    _remote_handle = True  # how autograder.sandbox.wire recognises it

    def __init__(self, child: Child, hid: int, kind: str) -> None:
        object.__setattr__(self, "_child", child)
        object.__setattr__(self, "_id", hid)
        object.__setattr__(self, "_kind", kind)

    def _ask(self, op: str, what: str, **fields):
        return self._child.request({"op": op, "handle": self._id, **fields}, what)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._child.attribute(self, name)

    def __call__(self, *args, **kwargs):
        return self._child.request({"op": "call", "target": {"handle": self._id},
                                    "args": self._child._encode(list(args)),
                                    "kwargs": self._child._encode(kwargs)}, f"{self._kind}(...)")

    def __len__(self) -> int:
        return _checked(self._ask("len", f"len({self._kind})"), int)

    def __bool__(self) -> bool:
        return _checked(self._ask("bool", f"bool({self._kind})"), bool)

    def __contains__(self, item) -> bool:
        return _checked(self._ask("contains", f"... in {self._kind}", arg=self._child._encode(item)), bool)

    def __getitem__(self, key):
        return self._ask("getitem", f"{self._kind}[...]", arg=self._child._encode(key))

    def __iter__(self):
        return iter(_checked(self._ask("list", f"list({self._kind})"), list))

    def __repr__(self) -> str:
        return f"<{self._kind} object from your code>"

    # servelab.harness.calls.call_each: a call of this object, or an attribute read, sent with others
    def _remote_call_request(self, args: tuple) -> tuple[Child, dict]:
        return self._child, {"op": "call", "target": {"handle": self._id}, "args": self._child._encode(list(args)),
                             "kwargs": {}}

    def _remote_getattr_request(self, name: str) -> tuple[Child, dict]:
        return self._child, {"op": "getattr", "handle": self._id, "name": name, "plain": True}


class RemoteMethod:
    """``owner.name`` where ``name`` is a function of the class of ``owner`` (the child said so
    for an object of that kind). A call is one request, and the child looks the method up at
    that moment, as ``owner.name(...)`` would. Anything else (truth, equality, an attribute, a
    method passed to student code) first fetches what ``owner.name`` is now, so that an
    instance whose attribute stopped being a method reads as what it is."""

    __slots__ = ("_owner", "_name", "_value")
    _remote_handle = True  # goes to the child as its bound method (Child._encode)

    def __init__(self, owner: RemoteObject, name: str) -> None:
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_value", None)

    def __call__(self, *args, **kwargs):
        owner = self._owner
        child, kind = object.__getattribute__(owner, "_child"), object.__getattribute__(owner, "_kind")
        return child.request({"op": "call", "target": {"handle": object.__getattribute__(owner, "_id"),
                                                       "attr": self._name},
                              "args": child._encode(list(args)), "kwargs": child._encode(kwargs)},
                             f"{kind}.{self._name}(...)")

    def _remote_call_request(self, args: tuple) -> tuple[Child, dict]:
        """This call as a request that ``servelab.harness.calls.call_each`` sends with others."""
        owner = self._owner
        child = object.__getattribute__(owner, "_child")
        return child, {"op": "call", "target": {"handle": object.__getattribute__(owner, "_id"), "attr": self._name},
                       "args": child._encode(list(args)), "kwargs": {}}

    def _fetched(self):
        """What ``owner.name`` is in the child: a handle of its bound method, as a rule."""
        if self._value is None:
            owner = self._owner
            what = f"{object.__getattribute__(owner, '_kind')}.{self._name}"
            value = owner._ask("getattr", what, name=self._name, plain=True)
            object.__setattr__(self, "_value", (value,))
        return self._value[0]

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._fetched(), name)

    def __eq__(self, other) -> bool:
        return bool(self._fetched() == (other._fetched() if isinstance(other, RemoteMethod) else other))

    def __hash__(self) -> int:
        return hash(self._fetched())

    def __len__(self) -> int:
        return len(self._fetched())

    def __bool__(self) -> bool:
        return bool(self._fetched())

    def __contains__(self, item) -> bool:
        return item in self._fetched()

    def __getitem__(self, key):
        return self._fetched()[key]

    def __iter__(self):
        return iter(self._fetched())

    def __repr__(self) -> str:
        return "<builtins.method object from your code>"


def kind_of(obj: RemoteObject) -> str:
    """The qualified type name of the object a handle stands for (``"builtins.function"``),
    read without asking the child (the name came with the handle)."""
    return object.__getattribute__(obj, "_kind")


def _checked(value, kind: type):
    if type(value) is not kind:
        raise SubmissionFailed(f"the child process answered a {type(value).__name__} where a {kind.__name__} was due")
    return value


class RemoteModule(types.ModuleType):
    """Stands in for a student module inside a test: every attribute is a function in the child."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_child"] = None

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return RemoteFunction(self, attr)

    def bind(self, child: Child | None) -> None:
        self.__dict__["_child"] = child

    def child(self) -> Child:
        """The child process of the test that runs now."""
        child = self.__dict__["_child"]
        if child is None:
            raise SubmissionFailed("no child process is running for this test")
        return child


class RemoteFunction:
    """``module.name`` of a student's module: each call goes to the child of the test that runs
    at the time of the call."""

    __slots__ = ("_module", "__name__", "__qualname__")

    def __init__(self, module: RemoteModule, name: str) -> None:
        self._module = module
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        return self._module.child().call(self._module.__name__, self.__name__, args, kwargs)

    def _remote_call_request(self, args: tuple) -> tuple[Child, dict]:
        """This call as a request that ``servelab.harness.calls.call_each`` sends with others."""
        child = self._module.child()
        return child, {"op": "call", "target": {"module": self._module.__name__, "name": self.__name__},
                       "args": child._encode(list(args)), "kwargs": {}}

    def __repr__(self) -> str:
        return f"<function {self.__name__} from your code>"
