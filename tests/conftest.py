"""Hypothesis profiles for the library's tests (``ci`` under ``make test``; see
:mod:`servelab.grading.hypothesis_profiles`)."""

from servelab.grading.hypothesis_profiles import register_and_load

register_and_load()
