"""``make build`` in a staff release never leaves a dead end (the Makefile's PYTAG / VENV_TAG /
STALE_VENV and tools/python_for_wheels.py): a named Python that does not run is named as such and
.venv is left alone; a Python with no wheel gets the wheels there are and the Pythons that fit
them, and no .venv is made with it; the next plain ``make build`` then ends with a working .venv;
a .venv made by another Python than the one named, or left half made, is made again.

The release here is the staff release's Makefile and tool with stand-in wheels (a package
``servelab`` of one line, for each Python tag wanted): installing them needs no network and no
compiler, and every step is the Makefile's own. About 20 s (four venvs)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.grading.grade import ROOT
from autograder.release.repository import plan

PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
TAG = "import sys; print('cp%d%d' % sys.version_info[:2])"


def tag_of(python: str) -> str:
    return subprocess.run([python, "-c", TAG], capture_output=True, text=True, check=True).stdout.strip()


def other_python() -> str | None:
    """A Python 3.10+ of another version than this one (make test's second Python, say)."""
    mine = tag_of(sys.executable)
    for v in ("3.10", "3.12", "3.13", "3.11"):
        for path in sorted(glob.glob(str(PYENV_ROOT / "versions" / f"{v}.*" / "bin" / f"python{v}"))) + \
                [shutil.which(f"python{v}") or ""]:
            if path and subprocess.run([path, "-c", ""], capture_output=True).returncode == 0 and tag_of(path) != mine:
                return path
    return None


def stand_in_wheel(folder: Path, tag: str) -> None:
    info = "servelab-0.1.0.dist-info"
    with zipfile.ZipFile(folder / f"servelab-0.1.0-{tag}-{tag}-manylinux_2_17_x86_64.whl", "w") as z:
        z.writestr("servelab/__init__.py", f"BUILT_FOR = {tag!r}\n")
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: servelab\nVersion: 0.1.0\nProvides-Extra: student\n")
        z.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}-{tag}-any\n")
        z.writestr(f"{info}/RECORD", f"servelab/__init__.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")


@pytest.fixture(scope="module")
def staff_files() -> dict[str, str | None]:
    return plan(ROOT)


@pytest.fixture
def release(tmp_path, staff_files) -> Path:
    """A staff release's Makefile and tool, with no wheel yet: each test its own."""
    folder = tmp_path / "release"
    folder.mkdir()
    (folder / "Makefile").write_text(staff_files["Makefile"] or "", encoding="utf-8")
    assert "tools/python_for_wheels.py" in staff_files, "the release must carry the tool its Makefile runs"
    (folder / "tools").mkdir()
    shutil.copyfile(ROOT / "tools" / "python_for_wheels.py", folder / "tools" / "python_for_wheels.py")
    (folder / "wheels").mkdir()
    return folder


def make_build(release: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "MAKEFLAGS", "VIRTUAL_ENV")}
    return subprocess.run(["make", "--no-print-directory", "build", *args], cwd=release, capture_output=True,
                          text=True, timeout=600, env=env)


def built_for(release: Path) -> str:
    return subprocess.run([str(release / ".venv" / "bin" / "python"), "-c", "import servelab; print(servelab.BUILT_FOR)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_python_that_does_not_run_is_named_and_nothing_is_made(release, tmp_path):
    stand_in_wheel(release / "wheels", tag_of(sys.executable))
    shim = tmp_path / "python3.14"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.14: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    run = make_build(release, f"PYTHON={shim}")
    assert run.returncode != 0
    assert f"make build: the Python '{shim}' does not run (pyenv: python3.14: command not found)" in run.stderr
    assert not (release / ".venv").exists()


def test_no_wheel_names_the_wheels_and_the_next_plain_build_works(release):
    default = shutil.which("python3")
    assert default is not None
    stand_in_wheel(release / "wheels", "cp399")  # a Python this machine has not
    run = make_build(release, f"PYTHON={sys.executable}")
    assert run.returncode != 0 and not (release / ".venv").exists(), run.stderr
    assert (f"make build: wheels/ has no servelab wheel for {sys.executable} (Python "
            f"{sys.version_info[0]}.{sys.version_info[1]}); it has wheels for Python 3.99") in run.stderr, run.stderr
    assert "None of those Pythons runs here: install one" in run.stderr
    # the wheel for the default python3 arrives: a plain make build now ends with a working .venv
    stand_in_wheel(release / "wheels", tag_of(default))
    run = make_build(release)
    assert run.returncode == 0, run.stdout + run.stderr
    assert built_for(release) == tag_of(default)


def test_a_venv_of_another_python_or_half_made_is_made_again(release):
    other = other_python()
    if other is None:
        pytest.skip("no second Python 3.10+ here (make test's test-python-other needs one too)")
    for python in (other, sys.executable):
        stand_in_wheel(release / "wheels", tag_of(python))
    assert make_build(release, f"PYTHON={sys.executable}").returncode == 0
    run = make_build(release, f"PYTHON={other}")  # the .venv of this Python is not the one named
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"is made again with {other}" in run.stdout and built_for(release) == tag_of(other)
    (release / ".venv" / ".deps-stamp").unlink()  # a build stopped half way
    run = make_build(release, f"PYTHON={sys.executable}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "left half made" in run.stdout and built_for(release) == tag_of(sys.executable)
