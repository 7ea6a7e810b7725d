"""Registers servelab's grading plugin, so that ``pytest assignments/`` ends with a points table
read from ``manifest.toml``. (The autograder does not use this file: it runs pytest with
``--noconftest`` and loads the plugin itself.)"""

from pathlib import Path

from servelab.grading import plugin
from servelab.grading.hypothesis_profiles import register_and_load

register_and_load()


def pytest_addoption(parser):
    plugin.add_option(parser)


def pytest_configure(config):
    config.pluginmanager.register(plugin.GradingPlugin(Path(__file__).with_name("manifest.toml")),
                                  "servelab-grading")
