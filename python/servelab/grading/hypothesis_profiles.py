"""Hypothesis profiles shared by the library's tests, the assignments and the grader.

* ``ci``: modest example counts, derandomized, sized for a 2-core CI machine (``make test``);
* ``grading``: derandomized with a fixed seed and no deadline, so a grade is reproducible;
* ``dev``: Hypothesis' defaults without a deadline, for students' local runs;
* ``thorough``: many examples, for a long soak.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = {
    "ci": dict(max_examples=60, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow]),
    "grading": dict(max_examples=100, deadline=None, derandomize=True, print_blob=False,
                    suppress_health_check=list(HealthCheck)),
    "dev": dict(deadline=None),
    "thorough": dict(max_examples=2000, deadline=None),
}


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
    ValueError: HYPOTHESIS_PROFILE must be one of ['ci', 'dev', 'grading', 'thorough'], got 'fast'
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
