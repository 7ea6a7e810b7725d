"""What leaves the instructors' copy as a package: the sdist and the abi3 wheel (``make sdist``,
``make wheel``) hold no answer key, mutant, hostile submission, reference or solution region; the
wheel is manylinux2014 and carries its licence and metadata; and a student's Python (3.10 and
3.12, each in a fresh venv outside the repository) installs it and runs a demo and a release's
``pytest assignments/``: 0 points on the stubs without a collection error, and full
marks with the reference solutions pasted back (on 3.12; on 3.10 ``make test-python-other`` runs
the course's assignments)."""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from autograder.notebooks import nbgrader
from autograder import selfcheck
from autograder.ci import workflow
from autograder.grading.grade import ROOT, manifest_of
from servelab.harness.manifest import Manifest
from autograder.markers import HIDDEN, SOLUTION

# path fragments that must never be in an archive: the answer key, mutants, hostile submissions,
# the exercise scripts, and the whole assignments, autograder and tests folders (a package needs
# none of them). The readable twins (servelab/reference/) do ship: they are no solution
# (autograder/tests/test_reference_is_no_solution.py).
SECRET_PATHS = ("autograder/", "answers/", "answer_key", "mutants/", "hostile/", "exercises/",
                "assignments/", "tests/")
SOLUTION_BEGIN = SOLUTION.begin
REGION_MARKERS = (SOLUTION.begin, HIDDEN.begin)
STUDENT_PYTHONS = ("3.10", "3.12")
# the reference solutions, pasted back into the release, earn full marks with the wheel on the
# newest (on 3.10, `make test-python-other` runs the course's assignments, hidden tests included,
# with the same abi3 extension: full marks there too, without a third copy of that run here)
FULL_MARKS_PYTHONS = ("3.12",)
# a bound against a hang only: on a shared, loaded machine a release's pytest run can take many
# minutes of wall time for one of CPU (CI's own time limit bounds the whole run)
LONG = 3600


def secrets_in(members: dict[str, bytes]) -> list[str]:
    """Archive members (name -> bytes) that are secret by path, or hold a solution or hidden-tests
    region (a line that is exactly the marker, as the release's own leak check reads them: the
    grading library's docstrings may quote a marker inside a longer line)."""
    found = [name for name in members if any(part in name for part in SECRET_PATHS)]
    for name, data in members.items():
        try:
            lines = data.decode("utf-8").splitlines()
        except UnicodeDecodeError:
            continue  # the compiled extension
        found += [f"{name}: {line.strip()}" for line in lines if line.strip() in REGION_MARKERS]
    return found


def wheel_members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}


def sdist_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as t:
        out = {}
        for m in t.getmembers():
            if m.isfile():
                f = t.extractfile(m)
                assert f is not None
                out[m.name.split("/", 1)[1]] = f.read()  # drop the servelab-0.1.0/ prefix
        return out


def find_python(version: str) -> str:
    """A CPython ``version`` interpreter: pyenv's (as on this project's machines), else PATH's."""
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(f"{pyenv}/versions/{version}.*/bin/python{version}")) or \
        [p for p in [shutil.which(f"python{version}")] if p]
    if not found:
        pytest.fail(f"no Python {version} here (pyenv install {version}): the wheel must be tried on it")
    return found[-1]


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory) -> Path:
    return selfcheck.make_release(tmp_path_factory.mktemp("release"))


def test_secrets_in_finds_each_kind_of_leak():
    members = {"servelab/reference/step_cost.py": b"", "autograder/answers/answer_key.json": b"{}",
               "mutants/a1_ledger.toml": b"", "a.py": f"def f():\n    {SOLUTION_BEGIN}\n    return 1\n".encode(),
               "servelab/harness/doc.py": f'""">>> strip("{SOLUTION_BEGIN}")"""\n'.encode(),
               "servelab/_core.abi3.so": b"\x7fELF\xff\xfe"}
    assert secrets_in(members) == ["autograder/answers/answer_key.json", "mutants/a1_ledger.toml",
                                   f"a.py: {SOLUTION_BEGIN}"]


@pytest.mark.parametrize("kind", ["sdist", "wheel"])
def test_archive_holds_no_answer_key_mutant_hostile_or_solution_but_the_references(dist, kind):
    members = sdist_members(dist[kind]) if kind == "sdist" else wheel_members(dist[kind])
    assert secrets_in(members) == []
    # and it is a package all the same: the library, and what builds it (sdist) or the extension
    # (the readable twins included: students read them)
    must = (["pyproject.toml", "Cargo.toml", "Cargo.lock", "LICENSE", "rust/src/lib.rs", "python/servelab/hw_model.py",
             "python/servelab/reference/step_cost.py"]
            if kind == "sdist" else ["servelab/_core.abi3.so", "servelab/hw_model.py", "servelab/_core.pyi",
                                     "servelab/py.typed", "servelab/reference/step_cost.py"])
    assert [m for m in must if m not in members] == []


def test_wheel_is_abi3_for_glibc_2_17_with_licence_and_metadata(dist, tmp_path):
    wheel = dist["wheel"]
    arch = platform.machine()
    assert re.fullmatch(rf"servelab-[\d.]+-cp310-abi3-manylinux2014_{arch}\.manylinux_2_17_{arch}\.whl|"
                        rf"servelab-[\d.]+-cp310-abi3-manylinux_2_17_{arch}\.manylinux2014_{arch}\.whl", wheel.name), wheel.name
    members = wheel_members(wheel)
    # the linker's view: no symbol needs a glibc newer than 2.17 (what manylinux2014 promises)
    so = tmp_path / "_core.abi3.so"
    so.write_bytes(members["servelab/_core.abi3.so"])
    symbols = subprocess.run(["objdump", "-T", str(so)], capture_output=True, text=True, check=True).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", symbols)}
    assert versions and max(versions) <= (2, 17), sorted(versions)
    meta = next(data.decode() for name, data in members.items() if name.endswith(".dist-info/METADATA"))
    assert "License-Expression: MIT" in meta and "License-File: LICENSE" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") and b"MIT License" in d for n, d in members.items())
    assert [v for v in ("3.10", "3.11", "3.12", "3.13")
            if f"Classifier: Programming Language :: Python :: {v}\n" not in meta] == []
    assert "Requires-Python: >=3.10" in meta and "Requires-Dist: tomli" in meta and "Author: " in meta


def pytest_points(python: Path, release: Path) -> tuple[dict, subprocess.CompletedProcess]:
    """``pytest assignments/`` in ``release`` with ``python`` (its servelab: the installed wheel)."""
    points = release / "points.json"
    points.unlink(missing_ok=True)
    # the compat profile (10 examples a property): what is tried here is the installed wheel,
    # not the inputs, which make test's own `pytest assignments/` explores under ci
    env = {**os.environ, "HYPOTHESIS_PROFILE": "compat", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTHONPATH", None)
    run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "assignments",
                          "--points-json", str(points)], cwd=release, capture_output=True, text=True,
                         timeout=LONG, env=env)
    return (json.loads(points.read_text()) if points.exists() else {}), run


@pytest.mark.parametrize("version", STUDENT_PYTHONS)
def test_a_fresh_venv_installs_the_wheel_and_runs_a_demo_and_the_release(dist, release_dir, version, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([find_python(version), "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # what a student's release installs with it: the `student` extra (pytest, Hypothesis)
    # (no .pyc compiled at install: a throwaway venv, whose first imports write what they use)
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile",
                              f"{dist['wheel']}[student]"],
                             capture_output=True, text=True, timeout=LONG)
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run([str(python), "-c", "import servelab._core, sys; print(servelab._core.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)) and where.endswith("_core.abi3.so"), where

    demo = subprocess.run([str(venv / "bin" / "servelab"), "demo", "01", "--out", str(tmp_path / "demo")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=LONG)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert list((tmp_path / "demo").glob("*.png")), "demo 01 wrote no plot"

    release = tmp_path / "release"
    shutil.copytree(release_dir, release, symlinks=True)
    summary, run = pytest_points(python, release)
    assert summary, f"no points table:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    assert run.returncode == 1 and "ERROR collecting" not in run.stdout and "INTERNALERROR" not in run.stdout
    assert summary["points"] == 0, summary

    if version not in FULL_MARKS_PYTHONS:
        return
    for task in manifest_of(ROOT).tasks:  # the reference solutions, pasted back
        for rel in task.edit:
            shutil.copyfile(ROOT / "assignments" / rel, release / "assignments" / rel)
    summary, run = pytest_points(python, release)
    assert run.returncode == 0, run.stdout[-3000:]
    released = Manifest.load(release / "assignments" / "manifest.toml")  # hidden tests left out
    assert {t["id"]: t["points"] for t in summary["tasks"]} == {t.id: t.points for t in released.tasks}
    assert summary["points"] == released.total_points > 0


def test_the_release_workflow_has_one_classroom_step_per_released_task_with_its_points(tmp_path):
    from autograder.release.repository import release
    release_dir = tmp_path / "release"
    release(ROOT, release_dir, readable=True)  # the release that carries the grader the workflow runs
    text = (release_dir / ".github" / "workflows" / "classroom.yml").read_text()
    steps = [chunk for chunk in text.split("\n      - ")[1:] if f"uses: {workflow.COMMAND_GRADER}" in chunk]
    got = {re.search(r"\bid: (\S+)", s).group(1): int(re.search(r"max-score: (\d+)", s).group(1))  # type: ignore[union-attr]
           for s in steps}
    released = Manifest.load(release_dir / "assignments" / "manifest.toml")
    notebook_auto = {nb.id: sum(c.points for c in nbgrader.cell_points(release_dir / "assignments" / nb.file)
                                if c.kind == "auto") for nb in nbgrader.notebooks_of(release_dir)}
    assert got == {t.id: t.points for t in released.tasks} | {k: v for k, v in notebook_auto.items() if v}
    assert f"runners: {','.join(got)}" in text
