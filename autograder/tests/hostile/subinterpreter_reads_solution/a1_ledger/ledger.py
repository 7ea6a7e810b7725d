"""Trick: audit hooks belong to one interpreter (PEP 578), so a subinterpreter has none. Inside
one, read the instructors' solution from the course copy (its path is in sys.argv), hand it
back through a file in the scratch folder, and answer with it."""
import os
import sys


def _steal():
    import _xxsubinterpreters as interpreters

    path = os.path.join(_course(), "assignments", "a1_ledger", "ledger.py")
    interp = interpreters.create()
    interpreters.run_string(interp, f"data = open({path!r}).read()\nopen('stolen.txt', 'w').write(data)\n")
    with open("stolen.txt") as f:
        return f.read()


def _course():
    """The course copy: the grader starts .../autograder/sandbox/child.py, so it is three folders up."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[0] or "."))))


_NS = {}


def __getattr__(name):
    """Every function the tests call comes from the stolen reference solution."""
    if not _NS:
        exec(compile(_steal(), "<stolen>", "exec"), _NS)
    return _NS[name]
