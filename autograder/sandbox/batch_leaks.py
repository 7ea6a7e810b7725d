"""The self-check's tripwire for a test that sends an answer in the same batch as the call it
answers.

Why: ``servelab.harness.calls.call_each`` sends a test's calls to the child as one message, and
the student's code can read the whole message while its first call runs (the child's frames
hold it: the hostile ``peeks_at_the_batch``). A test that sends the reference's result for
call ``i`` as an argument of a later call ``j`` of the same batch hands the student the answer.
Which values are answers only the reference knows, so the check runs where the replies are the
reference's: the self-check's "reference: full marks" grading sets :data:`VARIABLE`, and
:meth:`autograder.sandbox.remote.Child.many` then fails a test whose batch carries one of its
own answers further on (never in a student's grading: there a correct answer and a stolen one
look alike).

What counts as an answer that cannot be there by chance: a numeric array of two distinct values
or more, a float that is not a whole number, an int of a million or more (counts of parameters,
bytes, tokens), unless the call or an earlier one of the batch was handed the same value; small
ints, whole floats and constant arrays are ids, sizes, flags and zeros that a later call may
well take.

>>> import numpy as np
>>> from autograder.sandbox import wire
>>> meets = np.array([True, False, True])
>>> batch = [{"op": "call", "args": wire.encode([1.5])}, {"op": "call", "args": wire.encode([meets])}]
>>> leaks(batch, [(True, meets.copy()), (True, 0.5)])
['the answer of call 1 is an argument of call 2 of the same batch']
>>> leaks(batch, [(True, np.array([1.0, 0.0, 1.0])), (True, 1.5)])  # another dtype kind; not later
[]
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from autograder.sandbox import wire

VARIABLE = "SERVELAB_CHECK_BATCHES"  # "1" in the grader's environment: the tripwire is on


def _answers(value, depth: int = 0):
    """The values inside a decoded reply that count as answers (see the module's docstring)."""
    if depth > wire.MAX_DEPTH:
        return
    if isinstance(value, np.ndarray):
        if value.dtype.kind in wire.NUMERIC_KINDS and len(np.unique(value)) >= 2:
            yield value
    elif type(value) is float:
        if math.isfinite(value) and value != round(value):
            yield value
    elif type(value) is int:
        if abs(value) >= 1_000_000:
            yield value
    elif type(value) in (list, tuple):
        for v in value:
            yield from _answers(v, depth + 1)
    elif type(value) is dict:
        for v in value.values():
            yield from _answers(v, depth + 1)
    elif type(value) is SimpleNamespace:
        for v in vars(value).values():
            yield from _answers(v, depth + 1)


def _arguments(encoded, depth: int = 0):
    """The plain values inside a request's encoded arguments (handles left out)."""
    if depth > wire.MAX_DEPTH:
        return
    if type(encoded) is list:
        for v in encoded:
            yield from _arguments(v, depth + 1)
    elif type(encoded) is dict and len(encoded) == 1:
        (tag, body), = encoded.items()
        if tag in ("__ndarray__", "__npscalar__"):
            yield from _answers(wire.decode(encoded))
        elif tag == "__tuple__":
            yield from _arguments(body, depth + 1)
        elif tag == "__dict__":
            for pair in body:
                yield from _arguments(pair, depth + 1)
        elif tag == "__ns__":
            yield from _arguments(list(body.values()), depth + 1)
    else:
        yield from _answers(encoded)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
            return False
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    return type(a) is type(b) and a == b


def leaks(requests: list[dict], outcomes: list[tuple[bool, object]]) -> list[str]:
    """For each call of the batch whose answer (``outcomes``: what :meth:`Child.many` returns)
    appears among the arguments of a later call, a line naming both (calls counted from 1)."""
    found = []
    for i, (ok, value) in enumerate(outcomes):
        known = [arg for r in requests[:i + 1] for arg in _arguments([r.get("args", []), r.get("kwargs", {})])]
        # an answer the student's code was handed already (ttft is first_token_s when every
        # arrival is 0) is no leak
        answers = [a for a in _answers(value) if not any(_same(a, k) for k in known)] if ok else []
        for j in range(i + 1, len(requests)):
            if not answers:
                break
            later = list(_arguments([requests[j].get("args", []), requests[j].get("kwargs", {})]))
            if any(_same(answer, arg) for answer in answers for arg in later):
                found.append(f"the answer of call {i + 1} is an argument of call {j + 1} of the same batch")
                break
    return found
