"""The dev container a staff release ships (autograder/release/devcontainer/) is one a student can
use: a user of their own, not root (Jupyter refuses root), Jupyter's port forwarded and the port
Jupyter is told to listen on, a Python the release has a wheel for (the staff-wheels default),
and a set-up command made of targets the release's Makefile defines.

What this machine cannot try (no Docker daemon here) is the container itself; the instructors'
guide (autograder/README.md, "The dev container") gives the two commands that do."""

from __future__ import annotations

import json
import re

from autograder.grading.grade import ROOT
from autograder.release.names import makefile_targets
from autograder.release.repository import DEVCONTAINER, plan

DOCKERFILE = (DEVCONTAINER / "Dockerfile").read_text(encoding="utf-8")


def config() -> dict:
    text = (DEVCONTAINER / "devcontainer.json").read_text(encoding="utf-8")
    return json.loads("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//")))


def test_the_student_is_not_root():
    user = config()["remoteUser"]
    assert user not in ("root", "") and config()["containerUser"] == user
    assert re.search(rf"^ARG USERNAME={user}$", DOCKERFILE, re.M)
    assert re.search(r'^RUN useradd [^\n]*"\$USERNAME"', DOCKERFILE, re.M)
    assert re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)[-1] == "$USERNAME"  # the last USER: the student


def test_jupyter_listens_on_the_forwarded_port():
    port = int(re.search(r"c\.ServerApp\.port = (\d+)", DOCKERFILE).group(1))
    assert 'c.ServerApp.ip = "0.0.0.0"' in DOCKERFILE  # the container's every address: forwardable
    assert port in config()["forwardPorts"] and str(port) in config()["portsAttributes"]


def test_its_python_has_a_staff_wheel_by_default():
    version = re.search(r"^FROM [^\n]*python:(\d+\.\d+)", DOCKERFILE, re.M).group(1)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    defaults = re.search(r"^STAFF_PYTHONS \?= \$\(foreach v,([\d. ]+),", makefile, re.M).group(1).split()
    assert version in defaults, (version, defaults)


def test_its_set_up_runs_targets_the_release_defines():
    command = config()["postCreateCommand"]
    assert command.startswith("make ")
    targets = makefile_targets(plan(ROOT)["Makefile"] or "")
    assert set(command.split()[1:]) <= targets and {"build", "notebooks"} <= set(command.split()[1:])
