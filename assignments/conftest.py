"""Registers servelab's grading plugins for ``pytest assignments/``: the points table read from
``manifest.toml`` (printed last), and the probe that reports a task not started yet in one line
instead of a Hypothesis report (``servelab.harness.fail_fast``), and the grader's import rule on
the files a student edits (``servelab.harness.submission_guard``: a refused import fails here as
it does in grading). The Hypothesis profile is
``student`` unless ``HYPOTHESIS_PROFILE`` names another. Each example has a time limit
fitted to the reference solution's, each test a longer one (``servelab.harness.time_limit``: a
stuck test fails, naming the input that was running, and the run goes on). (The autograder does not use this file.)"""

import os
import sys
from pathlib import Path

try:
    from servelab.harness import fail_fast, plugin, submission_guard, time_limit
    from servelab.harness.hypothesis_profiles import cap_examples, register_and_load
except ModuleNotFoundError as missing:  # a pytest from outside the project's .venv: one line, no traceback
    sys.stderr.write(f"{missing}: this pytest runs outside the project's .venv; "
                     "run `make check` (or .venv/bin/pytest assignments/) instead\n")
    raise SystemExit(4) from None  # 4: pytest's "usage error"

register_and_load("student")

# a8/a10: a step that differs from the engine's gets a page of both runs, here (local runs only;
# scheduler_harness.TRACE_DIR_VARIABLE)
os.environ.setdefault("SERVELAB_TRACE_DIR", str(Path(__file__).resolve().parent.parent / "out" / "failures"))

# helpers given to several tasks (a5's and a6's event queue and step price) are kept once, in
# given/; the grader copies each into the sandbox of a task that imports it. Last on the path:
# a task's own module of the same name would win.
sys.path.append(str(Path(__file__).with_name("given")))


def pytest_addoption(parser):
    plugin.add_option(parser)
    time_limit.add_option(parser)


def pytest_configure(config):
    grading = plugin.GradingPlugin(Path(__file__).with_name("manifest.toml"))
    config.pluginmanager.register(grading, "servelab-grading")
    # the grader's import rule on the files a student edits (servelab.harness.submission_rules)
    edits = (rel for task in grading.manifest.tasks for rel in task.edit)
    config.pluginmanager.register(submission_guard.SubmissionGuard(submission_guard.finder_for(grading.root, edits)),
                                  "servelab-submission-guard")
    config.pluginmanager.register(fail_fast.FailFast(), "servelab-fail-fast")
    # each example's limit fitted to the reference's (example_times.json); a loop is looked for in
    # the students' files
    files = frozenset(os.path.realpath(grading.root / rel) for task in grading.manifest.tasks for rel in task.edit)
    config.pluginmanager.register(time_limit.from_config(config, grading.root, files), "servelab-time-limit")


def pytest_collection_modifyitems(items):
    cap_examples(items)  # only under HYPOTHESIS_PROFILE=compat (a second Python, a fresh install)
