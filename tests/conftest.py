"""Hypothesis profiles for the library's tests.

* ``ci`` (the default under ``make test``): sized so that the whole suite stays well inside the
  CI budget on a 2-core machine.
* ``dev``: Hypothesis' defaults, for local runs.
* ``thorough``: many more examples, for a soak before a release.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
