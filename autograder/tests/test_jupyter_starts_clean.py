"""A student's Jupyter starts without nbgrader's "[E ...] nbgrader will not work correctly":
``make notebooks`` switches off nbgrader's instructors' server extensions in .venv (the Makefile
says why), and a Jupyter server started as the README says (in assignments/notebooks) logs no
error. Real: the server starts, loads its extensions and is stopped (about 10 s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.grading.grade import ROOT

JUPYTER = Path(sys.executable).with_name("jupyter")


@pytest.mark.skipif(not JUPYTER.exists(), reason="the notebooks extra (Jupyter) is not installed in this venv")
def test_jupyter_in_the_notebooks_folder_logs_no_error(tmp_path):
    subprocess.run(["make", "-s", "--no-print-directory", "notebooks"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, timeout=600)
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_PLATFORM_DIRS": "1"}
    cmd = [str(JUPYTER), "server", "assignments/notebooks", "--no-browser", "--port=0",
           "--IdentityProvider.token=test", *(["--allow-root"] if os.geteuid() == 0 else [])]
    log = tmp_path / "jupyter.log"
    with log.open("w") as out:
        server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + 300  # a bound against a hang, not a speed test
            while "is running at" not in log.read_text() and server.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
    text = log.read_text()
    assert "is running at" in text, text
    assert "validate_assignment | extension was successfully loaded" in text, text  # the students' one
    errors = [line for line in text.splitlines() if line.startswith(("[E ", "[C ")) and "received signal 15" not in line]
    assert errors == [] and "nbgrader will not work" not in text, errors
    # and JupyterLab offers no instructors' menu (formgrader, course and assignment lists, the
    # Create Assignment toolbar), which would open an error page with their server side off
    lab = json.loads((Path(sys.prefix) / "etc" / "jupyter" / "labconfig" / "page_config.json").read_text())
    off = {name for name, disabled in lab.get("disabledExtensions", {}).items() if disabled}
    assert {f"@jupyter/nbgrader:{p}" for p in ("formgrader", "assignment-list", "course-list", "create-assignment")} <= off
    assert "@jupyter/nbgrader:validate-assignment" not in off
