"""What a test stopped by the time limit was doing: the input that was running (Hypothesis's
current example) and the student's call that spun, with its arguments (a test written by hand
shows its case there), so that the message names the input that makes the loop endless.

>>> def simulate(arrival_s, batch_size):
...     return describe_call(sys._getframe())
>>> simulate([0.0, 0.3], 2)
'simulate(arrival_s=[0.0, 0.3], batch_size=2)'
>>> describe_example({"r": "workload", "b": 3})
"r='workload', b=3"
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from types import CodeType, FrameType

VALUE_CHARS = 120  # each value's repr at most (a workload's arrays are long)


def short_repr(value: object, limit: int = VALUE_CHARS) -> str:
    """``repr(value)`` in one line, cut in its middle past ``limit`` characters.

    >>> short_repr(list(range(100)), 30)
    '[0, 1, 2, 3, 4,…6, 97, 98, 99]'
    """
    try:
        text = " ".join(repr(value).split())
    except Exception as exc:  # noqa: BLE001 - a student's __repr__ may raise anything
        text = f"<{type(value).__name__}: repr raised {type(exc).__name__}>"
    if len(text) <= limit:
        return text
    tail = (limit - 1) // 2
    return text[: limit - 1 - tail] + "…" + text[len(text) - tail:]


def describe_example(kwargs: dict[str, object]) -> str:
    return ", ".join(f"{name}={short_repr(value)}" for name, value in kwargs.items())


def describe_call(frame: FrameType) -> str:
    """``function(arg=value, ...)``: a frame's function and its arguments as they are now."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    if code.co_flags & 0x04:  # *args
        names.append(code.co_varnames[count])
    local = frame.f_locals
    args = ", ".join(f"{n}={short_repr(local[n])}" for n in names if n in local and n != "self")
    return f"{code.co_name}({args})"


@functools.lru_cache(maxsize=4096)
def _real(path: str) -> str:
    return os.path.realpath(path)


def student_frames(frame: FrameType | None, files: frozenset[str]) -> tuple[FrameType | None, FrameType | None]:
    """The outermost and the innermost frame of ``frame``'s stack whose file is one of
    ``files`` (the real paths of the files students edit): the test's call into their code, and
    where it spins."""
    outer = inner = None
    while frame is not None:
        if _real(frame.f_code.co_filename) in files:
            outer = frame
            if inner is None:
                inner = frame
        frame = frame.f_back
    return outer, inner


def student_codes(frame: FrameType | None, files: frozenset[str]) -> list[CodeType]:
    """The functions of the student's files on ``frame``'s stack (where a loop may be spinning)."""
    codes = []
    while frame is not None:
        if _real(frame.f_code.co_filename) in files:
            codes.append(frame.f_code)
        frame = frame.f_back
    return codes


def where(frame: FrameType) -> str:
    """``simulate_static() at batching.py line 71``."""
    return f"{frame.f_code.co_name}() at {Path(frame.f_code.co_filename).name} line {frame.f_lineno}"
