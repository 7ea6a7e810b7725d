"""Trick: plant a hard link to the solution in the scratch folder. The hook checks a link's
source, but resolves it against the working folder, not against src_dir_fd; once linked, the
file opens under its new, harmless name."""
import os
import sys


def _steal():
    root = os.open("/", os.O_RDONLY)
    rel = os.path.join(_course(), "assignments", "a1_ledger", "ledger.py").lstrip("/")
    os.link(rel, "planted.py", src_dir_fd=root)
    with open("planted.py") as f:
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
