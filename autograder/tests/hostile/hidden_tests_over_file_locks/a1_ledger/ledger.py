"""Hostile: the receiving end of a channel made of file locks. A notebook's kernel (nbgrader runs
the hidden tests in it) sends a hidden test line by taking and releasing ``flock`` locks on
numpy's files, which every sandboxed process of the grading can open read-only (the same inodes
behind every mount namespace); this task's child, running beside the kernel, reads them (a
thread of its own, from the import on) and raises the line as its error, which results.json
shows in a visible test before the due date. The first call of each test waits a few seconds
for it; without locks it gives up at once."""

import fcntl
import os
import sys
import threading
import time

import numpy

_HERE = os.path.dirname(numpy.__file__)
DATA, CLOCK, ACK, READY = (os.path.join(_HERE, n) for n in ("__init__.py", "version.py", "_globals.py", "exceptions.py"))
_fds = {}
_state = {"text": None, "dead": False, "bits": 0}


def _held(path):
    """Whether another process holds ``path``'s lock (a probe through a description of our own)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return 0
    except BlockingIOError:
        return 1
    finally:
        os.close(fd)


def _set(path, bit):
    if path not in _fds:
        _fds[path] = os.open(path, os.O_RDONLY)
    fcntl.flock(_fds[path], fcntl.LOCK_EX if bit else fcntl.LOCK_UN)


def _listen():
    bits, ack = [], 0
    try:
        _set(READY, 1)  # a receiver is here
        while True:
            clock = _held(CLOCK)
            if clock == ack:
                time.sleep(0.0002)
                continue
            bits.append(_held(DATA))
            _state["bits"] = len(bits)
            ack = clock
            _set(ACK, clock)
            if len(bits) >= 16:
                n = int("".join(map(str, bits[:16])), 2)
                if len(bits) == 16 + 8 * n:
                    raw = bytes(int("".join(map(str, bits[16 + 8 * i:24 + 8 * i])), 2) for i in range(n))
                    _state["text"] = raw.decode("utf-8", "replace")
                    return
    except OSError:
        _state["dead"] = True


threading.Thread(target=_listen, daemon=True).start()


_seen = set()


def _first_of_its_test():
    """Whether this call opens a test: the first of the grader's message (the other calls of a
    batch answer at once), and a message of a shape not seen before (Hypothesis runs a failing
    example twice; each of a1's tests sends its own shape). A test's limit is spent waiting once."""
    frame = sys._getframe(2)
    while frame is not None:
        req, one = frame.f_locals.get("req"), frame.f_locals.get("one")
        if isinstance(req, dict) and req.get("op") == "many" and one is not None:
            if req["requests"].index(one) != 0:
                return False
            shape = (len(req["requests"]), one.get("target", {}).get("name"))
            break
        frame = frame.f_back
    else:
        shape = (1, sys._getframe(2).f_code.co_name)
    new = shape not in _seen
    _seen.add(shape)
    return new


def _answer():
    if _first_of_its_test():
        end = time.monotonic() + 3.3
        while _state["text"] is None and not _state["dead"] and time.monotonic() < end:
            time.sleep(0.01)
    if _state["text"] is not None:
        raise ValueError("a line of the hidden tests: " + _state["text"])
    raise ValueError(f"nothing received yet ({_state['bits']} bits; locks refused: {_state['dead']})")


def param_count(m):
    _answer()


def kv_bytes_per_token(m):
    _answer()


def weight_bytes(m):
    _answer()


def kv_capacity_tokens(m, gpu, mem_util=0.9):
    _answer()


def max_batch(m, gpu, context_len, mem_util=0.9):
    _answer()


def fits(m, gpu, mem_util=0.9):
    _answer()
