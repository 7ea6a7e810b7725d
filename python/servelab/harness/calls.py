"""Several calls into a student's code at once, for the tests of the assignments: what each call
returned or raised, in order, an exception stopping none of the calls after it.

Run locally (``pytest assignments/``) it is a plain loop. Under the autograder, the student's
code runs in another process and each call is a message there and back; where every call goes
to that process, :func:`call_each` sends them in one message (a state machine's check of a
dozen block tables after each step was a dozen round trips). The autograder's stand-ins for the
student's functions, methods and objects say how, by two class attributes
(``_remote_call_request`` and ``_remote_getattr_request``, in ``autograder/sandbox/remote.py``);
anything else is called here, one call at a time, with the same result.

A batch carries inputs only: the student's code can read the whole message while its first
call runs, so a value that answers one of the calls (the reference's result for it) goes in a
later batch, once that answer came back (autograder/README.md: the threat model).

>>> call_each([(int, ("3",)), (int, ("x",)), (getattr, ("ab", "upper"))])[:2]
[(True, 3), (False, ValueError("invalid literal for int() with base 10: 'x'"))]

An attribute of what an earlier call of the same batch returned is read with :class:`Earlier`
(the plan a scheduler returns, and its fields, in one message):

>>> from types import SimpleNamespace as NS
>>> call_each([(NS, ()), (getattr, (Earlier(0), "batch"))])[1][0]
False
>>> call_each([(lambda: NS(batch=[1]), ()), (getattr, (Earlier(0), "batch"))])[1]
(True, [1])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Call = tuple[Callable[..., Any], tuple[Any, ...]]


@dataclass(frozen=True)
class Earlier:
    """In ``(getattr, (Earlier(i), name))``: the value that call ``i`` of the same batch
    returned (when it raised, this read raises the same exception)."""

    index: int


def call_each(calls: Sequence[Call]) -> list[tuple[bool, Any]]:
    """``fn(*args)`` for each ``(fn, args)`` of ``calls``, in order: ``(True, value)``, or
    ``(False, exception)`` when it raised an ``Exception`` (the calls after it still run). An
    attribute read is the call ``(getattr, (obj, name))``; ``obj`` may be :class:`Earlier`."""
    prepared = [_prepared(fn, args) for fn, args in calls]
    if prepared and all(p is not None for p in prepared):
        runners = {id(p[0]): p[0] for p in prepared if p is not None and p[0] is not None}
        if len(runners) == 1:
            (runner,) = runners.values()
            return runner.many([p[1] for p in prepared if p is not None])
    done: list[tuple[bool, Any]] = []
    for fn, args in calls:
        if fn is getattr and len(args) == 2 and isinstance(args[0], Earlier):
            ok, got = done[args[0].index]
            done.append(_one(getattr, (got, args[1])) if ok else (False, got))
        else:
            done.append(_one(fn, args))
    return done


def value(outcome: tuple[bool, Any]) -> Any:
    """The value of one of :func:`call_each`'s outcomes, or its exception raised again.

    >>> value((True, 2)), value((False, KeyError(3)))
    Traceback (most recent call last):
    KeyError: 3
    """
    ok, got = outcome
    if not ok:
        raise got
    return got


def _one(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as exc:
        return False, exc


def _prepared(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, dict] | None:
    """(the process that runs it, or None for any, the request) for a call that the
    autograder's stand-ins can send with others; None for any other call."""
    if fn is getattr and len(args) == 2 and isinstance(args[0], Earlier) and isinstance(args[1], str):
        return None, {"op": "getattr", "of": args[0].index, "name": args[1]}  # whichever process ran it
    if fn is getattr and len(args) == 2 and isinstance(args[1], str):
        request = getattr(type(args[0]), "_remote_getattr_request", None)
        return None if request is None else request(args[0], args[1])
    request = getattr(type(fn), "_remote_call_request", None)
    return None if request is None else request(fn, args)
