"""The hostile submissions are data, not tests: pytest must never load their conftest.py files.

The grader's tests grade with a fixed, public secret (:mod:`autograder.grading_secret`), so that
a run draws the same inputs as the last (a test that needs no secret removes it itself)."""

import os

from autograder.grading_secret import ENV_SECRET, ENV_SECRET_FILE

collect_ignore = ["hostile"]

if not os.environ.get(ENV_SECRET_FILE):
    os.environ.setdefault(ENV_SECRET, "servelab self-check: a fixed, public secret")
