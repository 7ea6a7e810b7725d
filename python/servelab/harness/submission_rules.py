"""What a submission's own files may import: the one statement of the rule, read by the grader
(``autograder/grading/judge.py`` hands :data:`REFUSED_MODULES` to the sandboxed child, whose
audit hook refuses them) and by the students' ``pytest assignments/`` (:mod:`.submission_guard`
applies it to their files, so that a refusal shows in ``make check`` and not first in the grade).

The grader runs a student's module in a child process that sees the standard library, numpy,
the modules of its task's folder and the helpers of ``assignments/given/`` it imports, nothing
else; and its audit hook refuses servelab outright, whatever the module's path: the Rust core
and the pure-Python references would answer the task for the student (lecture §8.3: tokens and
times are computed by the library, and the assignment is to compute them yourself). Helpers a
task's README offers (``given/event_queue.py``, a task folder's ``errors.py``) are in that set.

The local check is a mirror, not the boundary: the grader keeps its own copy of the process
modules (``autograder/sandbox/child.py``) and its OS boundary.
"""

from __future__ import annotations

import sys

# servelab as a whole (its first part refuses every submodule); the submodules are named too so
# that the grader's list reads as the rule does
REFUSED_MODULES = ("servelab", "servelab._core", "servelab.hw_model", "servelab.reference")
# modules that would reach past the audit hook (foreign calls, starting a process): refused as
# any part of a dotted name, as the grader's child does
PROCESS_MODULES = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend"})
# the third-party packages the grader's child can import besides the standard library
LIBRARIES = frozenset({"numpy"})


def refused_message(name: str) -> str:
    """The grader's own words for a refused import.

    >>> refused_message("servelab.hw_model")
    'the autograder does not let submissions import servelab.hw_model'
    """
    return f"the autograder does not let submissions import {name}"


def absent_message(name: str) -> str:
    """What a submission's import of a module the grader's child cannot see says: the grader's
    own ``No module named`` first, then why.

    >>> absent_message("assignment_strategies")  # doctest: +ELLIPSIS
    "No module named 'assignment_strategies' where the autograder runs a submission: it sees the standard library, numpy, ..."
    """
    return (f"No module named {name!r} where the autograder runs a submission: it sees the "
            "standard library, numpy, the modules of the task's own folder and those of "
            "assignments/given/, nothing else")


def is_refused(name: str) -> bool:
    """The grader's audit hook refuses ``name``.

    >>> [is_refused(n) for n in ("servelab.blocks", "servelab", "numpy.linalg", "x._ctypes", "servelabx")]
    [True, True, False, True, False]
    """
    parts = name.split(".")
    return name in REFUSED_MODULES or parts[0] in REFUSED_MODULES or not PROCESS_MODULES.isdisjoint(parts)


def is_visible(name: str, task_modules: frozenset[str]) -> bool:
    """The grader's child can find ``name`` (a module it does not refuse): the standard
    library, numpy, or one of ``task_modules`` (the task folder's and ``given/``'s modules).

    >>> mods = frozenset({"event_queue", "batching"})
    >>> [is_visible(n, mods) for n in ("heapq", "numpy.random", "event_queue", "ledger", "hypothesis")]
    [True, True, True, False, False]
    """
    top = name.split(".")[0]
    return top in sys.stdlib_module_names or top in LIBRARIES or top in task_modules
