"""Hypothesis profiles shared by the library's tests, the assignments and the grader.

* ``ci``: modest example counts, derandomized, sized for a 2-core CI machine (``make test``);
* ``compat``: the library's tests once more on a second Python (``make test-python-other``): every
  test runs, with a few examples each, derandomized. What differs between Python versions (syntax,
  the standard library, the extension's stable ABI) fails on any input; exploring the inputs is
  the ``ci`` run's job, on the first Python;
* ``grading``: derandomized with a fixed seed and no deadline, so a grade is reproducible;
* ``student``: the default of ``pytest assignments/`` (``assignments/conftest.py``): Hypothesis'
  100 examples, full shrinking so that a failure ends at the smallest counterexample, and the
  example database, so that the next run tries the last failure first. Before each test a probe
  (:data:`PROBE`: the ``@example`` cases and one generated example, no shrinking) finds a task
  not started yet (:mod:`servelab.harness.fail_fast`), so an empty stub costs one example;
* ``dev``: Hypothesis' defaults without a deadline;
* ``thorough``: many examples, for a long soak.

Tests that set ``max_examples`` themselves (those that run the tiny model: 25 to 60) keep their
count under every profile but ``compat``, which caps every test at :data:`COMPAT_EXAMPLES`
(:func:`cap_examples`, called by the conftests once the tests are collected).
"""

from __future__ import annotations

import os
from typing import Any, Iterable, TypedDict

from hypothesis import HealthCheck, Phase, Verbosity, settings


class SettingsKwargs(TypedDict, total=False):
    """The keyword arguments of ``hypothesis.settings`` that the profiles set."""

    max_examples: int
    deadline: None
    derandomize: bool
    print_blob: bool
    suppress_health_check: list[HealthCheck]
    phases: list[Phase]
    database: None
    report_multiple_bugs: bool
    verbosity: Verbosity


PROFILES: dict[str, SettingsKwargs] = {
    "ci": dict(max_examples=60, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow]),
    "compat": dict(max_examples=10, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow]),
    "grading": dict(max_examples=100, deadline=None, derandomize=True, print_blob=False,
                    suppress_health_check=list(HealthCheck)),
    "student": dict(max_examples=100, deadline=None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow]),
    "dev": dict(deadline=None),
    "thorough": dict(max_examples=2000, deadline=None),
}

# what differs between Pythons or installs fails on any input: under compat no test runs more
COMPAT_EXAMPLES = 10


def cap_examples(items: Iterable[Any]) -> int:
    """Under the ``compat`` profile, caps at :data:`COMPAT_EXAMPLES` the examples of each
    collected test (pytest items) that sets a larger count itself, a state machine's included;
    returns how many were capped (0 under any other profile)."""
    if os.environ.get("HYPOTHESIS_PROFILE") != "compat":
        return 0
    capped = 0
    for item in items:
        obj = getattr(item, "obj", None)
        func: Any = getattr(obj, "__func__", obj)
        own = getattr(func, "_hypothesis_internal_use_settings", None)
        if isinstance(own, settings) and own.max_examples > COMPAT_EXAMPLES:
            func._hypothesis_internal_use_settings = settings(own, max_examples=COMPAT_EXAMPLES)
            capped += 1
        case: Any = getattr(item, "cls", None)  # a state machine's TestCase carries its settings
        machine = getattr(case, "settings", None)
        if isinstance(machine, settings) and machine.max_examples > COMPAT_EXAMPLES:
            case.settings = settings(machine, max_examples=COMPAT_EXAMPLES)
            capped += 1
    return capped


# the student profile's probe: is the task started at all? (a stub raises on the first example)
PROBE: SettingsKwargs = dict(max_examples=1, phases=[Phase.explicit, Phase.generate], database=None,
             report_multiple_bugs=False)


def register_and_load(default: str = "dev") -> str:
    """Registers every profile and loads ``$HYPOTHESIS_PROFILE`` (or ``default``).

    >>> import os
    >>> saved = os.environ.pop("HYPOTHESIS_PROFILE", None)
    >>> register_and_load("ci"), settings().max_examples, settings().derandomize
    ('ci', 60, True)
    >>> os.environ["HYPOTHESIS_PROFILE"] = "fast"
    >>> register_and_load()
    Traceback (most recent call last):
    ...
    ValueError: HYPOTHESIS_PROFILE must be one of ['ci', 'compat', 'dev', 'grading', 'student', 'thorough'], got 'fast'
    >>> _ = os.environ.pop("HYPOTHESIS_PROFILE")
    >>> if saved is not None: os.environ["HYPOTHESIS_PROFILE"] = saved
    >>> _ = register_and_load(saved or "ci")
    """
    for name, kwargs in PROFILES.items():
        settings.register_profile(name, **kwargs)
    name = os.environ.get("HYPOTHESIS_PROFILE", default)
    if name not in PROFILES:
        raise ValueError(f"HYPOTHESIS_PROFILE must be one of {sorted(PROFILES)}, got {name!r}")
    settings.load_profile(name)
    return name
