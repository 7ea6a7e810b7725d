"""Pure-Python references of every Rust fast path: small, readable, checked against the core.

They ship with the library for students to read (none is a task's solution: calling them
passes no graded task), and they are the oracle's oracle: property tests feed the same inputs
to a reference and to ``servelab._core`` and demand the same answers and the same errors.
For instance, the reference ledger and the Rust core count Llama-3-8B alike:

>>> from servelab import hw_model
>>> from servelab.reference import step_cost
>>> step_cost.param_count(hw_model.LLAMA3_8B) == hw_model.LLAMA3_8B.param_count == 8_030_261_248
True
"""

# readable twins that a task's own code imports under a plain name (a5's and a6's simulators do
# ``from event_queue import EventQueue``). Standard library only: the grader copies the file
# into the sandbox of such a task, where nothing of servelab can be imported, and
# ``assignments/conftest.py`` makes the name import this module under pytest.
GIVEN = {"event_queue": "events"}


def given_twins() -> None:
    """Makes each name of :data:`GIVEN` import its twin outside the sandbox (under pytest, or
    wherever a task's module is imported directly); a module of that name already imported is
    left alone."""
    import importlib
    import sys

    for name, module in GIVEN.items():
        sys.modules.setdefault(name, importlib.import_module(f"{__name__}.{module}"))
