"""Registers servelab's grading plugins for ``pytest assignments/``: the points table read from
``manifest.toml`` (printed last), and the probe that reports a task not started yet in one line
instead of a Hypothesis report (``servelab.grading.fail_fast``). The Hypothesis profile is
``student`` unless ``HYPOTHESIS_PROFILE`` names another. (The autograder does not use this file.)"""

from pathlib import Path

from servelab.grading import fail_fast, plugin
from servelab.grading.hypothesis_profiles import register_and_load

register_and_load("student")


def pytest_addoption(parser):
    plugin.add_option(parser)


def pytest_configure(config):
    config.pluginmanager.register(plugin.GradingPlugin(Path(__file__).with_name("manifest.toml")),
                                  "servelab-grading")
    config.pluginmanager.register(fail_fast.FailFast(), "servelab-fail-fast")
