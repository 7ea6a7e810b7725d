"""``make staff-wheels``'s builds (autograder/release/staff_wheels.py): one staff wheel per Python,
each built in a venv of its own Python, side by side; built again only when what it is made from
changed (the abi3 wheel's files, staff_wheel.py, the extra, the Python, the flag), else reused as
it is; a Python no longer asked for loses its wheel. The compilation itself (staff_wheel.py) is
test_staff_wheel.py's: here a stand-in command writes a wheel named for the venv's Python and
counts its calls. About 10 s (two venvs)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.release.staff_wheels import build_all

STAND_IN = """
import sys
from pathlib import Path
out, calls = Path(sys.argv[1]), Path(sys.argv[2])
tag = "cp%d%d" % sys.version_info[:2]
(out / f"servelab-0.1.0-{tag}-{tag}-linux_x86_64.whl").write_bytes(b"built by " + sys.executable.encode())
with calls.open("a") as f:
    f.write(tag + "\\n")
"""


def second_python() -> str | None:
    mine = "%d.%d" % sys.version_info[:2]
    for v in ("3.10", "3.12", "3.13", "3.11"):
        if v == mine:
            continue
        root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
        for path in sorted(glob.glob(str(root / "versions" / f"{v}.*" / "bin" / f"python{v}"))):
            if subprocess.run([path, "-c", ""], capture_output=True).returncode == 0:
                return path
    return None


def base_wheel(path: Path, body: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("servelab/__init__.py", body)
    return path


def test_built_side_by_side_then_reused_until_the_library_changes(tmp_path):
    other = second_python()
    if other is None:
        pytest.skip("no second Python 3.10+ here (make test's test-python-other needs one too)")
    pythons = [sys.executable, other]
    script, calls = tmp_path / "stand_in.py", tmp_path / "calls.txt"
    script.write_text(STAND_IN)

    def command(python: Path, base: Path, out: Path, jobs: int, opt: str) -> list[str]:
        return [str(python), str(script), str(out), str(calls)]

    base = base_wheel(tmp_path / "servelab-0.1.0-cp310-abi3-linux_x86_64.whl", "VERSION = 1\n")
    out, venvs = tmp_path / "staff", tmp_path / "venvs"
    said: list[str] = []
    kwargs = dict(base=base, out=out, venvs=venvs, requirements="", command=command, report=said.append)
    first = build_all(pythons, **kwargs)
    assert [o.reused for o in first] == [False, False]
    tags = sorted(o.tag for o in first)
    assert sorted(calls.read_text().split()) == tags  # each built by its own Python's venv
    assert sorted(p.name.split("-")[2] for p in out.glob("*.whl")) == tags
    # nothing changed: both reused, no build
    again = build_all(pythons, **kwargs)
    assert [o.reused for o in again] == [True, True] and len(calls.read_text().split()) == 2
    assert any("reused, the library has not changed" in line for line in said)
    # the same files in a zip written again (other times): still the same library
    shutil.copyfile(base, tmp_path / "copy.whl")
    base_wheel(base, "VERSION = 1\n")
    assert [o.reused for o in build_all(pythons, **kwargs)] == [True, True]
    # the library changed: both built again
    base_wheel(base, "VERSION = 2\n")
    assert [o.reused for o in build_all(pythons, **kwargs)] == [False, False]
    assert len(calls.read_text().split()) == 4
    # a Python no longer asked for: its wheel is not shipped
    only = build_all([sys.executable], **kwargs)
    assert [o.reused for o in only] == [True]
    assert [p.name for p in out.glob("*.whl")] == [only[0].wheel.name]


def test_from_a_fresh_clone_staff_wheels_and_release_build_what_they_need_first(tmp_path):
    """``make -n`` in a folder with the course's Makefile and nothing built: the venv with
    servelab and the abi3 wheel come before the staff wheels, and a release's one command holds
    them all (no "ModuleNotFoundError: servelab" half way)."""
    root = Path(__file__).resolve().parents[2]
    shutil.copyfile(root / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text("")
    for goal in ("staff-wheels", "release"):
        run = subprocess.run(["make", "-n", goal, f"STAFF_PYTHONS={sys.executable}"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120,
                             env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "PYTHON")})
        assert run.returncode == 0, run.stderr
        steps = run.stdout
        order = [steps.find(s) for s in ("-m venv .venv", "maturin develop", "maturin build --release",
                                         "-m autograder.release.staff_wheels")]
        assert -1 not in order and order == sorted(order), (goal, order, steps[-3000:])
        if goal == "release":
            assert steps.find("-m autograder release") > order[-1]


def test_the_real_command_reaches_staff_wheel(tmp_path):
    """The command each venv runs is one staff_wheel.py's parser takes (``--opt -O2`` was read as
    a flag of its own); a base that is no abi3 wheel is then refused by the build itself."""
    from autograder.release.staff_wheels import REPO, default_command
    cmd = default_command(Path(sys.executable), tmp_path / "not-a-wheel.whl", tmp_path, 1, "-O2")
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode != 0 and "usage:" not in run.stderr, run.stderr
    assert "base_wheel must be maturin's abi3 wheel" in run.stderr, run.stderr
