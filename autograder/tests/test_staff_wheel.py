"""The staff binary (``autograder/release/staff_wheel.py``) works like the readable library and
gives nothing away: built for the running Python from maturin's abi3 wheel, installed into a
fresh venv outside the repository, it

* holds no ``.py`` of the library but ``__main__.py`` and the students' pytest harness
  (``servelab.harness``), no ``servelab.reference`` and no
  ``servelab.lecture_key``, and a ``.pyi`` stub beside every compiled module;
* embeds no source: no run of 12 source tokens (docstrings aside) is among a compiled module's
  printable strings;
* keeps what compiling could break: signatures, docstrings, dataclasses, pickling, package data,
  ``python -m servelab``;
* passes :data:`SUBSET` of the library's tests, and the reference solutions score full marks in
  the course's ``assignments/`` (hidden tests included) on it;
* and a staff release carrying it passes the plagiarism-style check
  (``test_release_similarity.py`` runs it on the release; here on the installed package).

Cost (2 cores): the C compiler at -O0 (the instructors' ``make staff-wheels`` builds -O2; the
flag changes speed, not behaviour) about 1.5 min of CPU, the venv about 30 s, the subset and the
assignments about 2-3 min; the four-Python build is ``make staff-wheels``, outside ``make test``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from autograder.grading.grade import ROOT, manifest_of
from autograder.release import similarity, staff_wheel

LONG = 3600  # a bound against a hang only (CI's own limit bounds the run)
# The library's tests that run on the staff wheel. Left out: the tests that import
# servelab.reference or servelab.lecture_key (the wheel has neither, by design: they are the
# answers), the benchmarks' tests (benchmarks/ is not in a release), and
# test_assignments_grading.py (it grades the assignments with the course's own tooling; the
# reference solutions' full marks are checked here directly). What is kept covers what compiling
# changes: every docstring example of every compiled module (test_doctests), the argument checks
# and their messages (Cython's own type checks would preempt them), the given helpers against
# the library, pickling through the sweep's process pool, the engine's tokens and the command line.
SUBSET = (
    "tests/test_doctests.py",
    "tests/test_hw_model_errors.py",
    "tests/test_engine_errors.py",
    "tests/test_assignment_helpers.py",
    "tests/test_events.py",
    "tests/test_metrics.py",
    "tests/test_workload.py",
    "tests/test_spec_files.py",
    "tests/test_sweep.py",
    "tests/test_engine_tokens.py",
    "tests/test_cli.py",
)


@pytest.fixture(scope="module")
def staff(tmp_path_factory, dist) -> dict[str, Path]:
    """The session's abi3 wheel (``make wheel``, as ``make staff-wheels`` uses: conftest's
    ``dist``), its staff wheel for this Python, and a fresh venv with the staff wheel and the
    `student` extra."""
    tmp = tmp_path_factory.mktemp("staff")
    base = dist["wheel"]
    wheel = staff_wheel.build(base, tmp / "staff", jobs=os.cpu_count() or 1, opt="-O0")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # the `student` extra, as a release's make build installs it; no .pyc compiled at install
    # (a throwaway venv: its first imports write what they use)
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", f"{wheel}[student]"],
                             capture_output=True, text=True, timeout=LONG)
    assert install.returncode == 0, install.stderr[-3000:]
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    return {"wheel": wheel, "venv": venv, "python": python, "site": site, "tmp": tmp}


def in_venv(staff, code: str) -> str:
    run = subprocess.run([str(staff["python"]), "-c", code], cwd=staff["tmp"], capture_output=True, text=True,
                         timeout=LONG, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_the_wheel_holds_compiled_modules_and_stubs_and_no_answer(staff):
    names = zipfile.ZipFile(staff["wheel"]).namelist()
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert staff["wheel"].name.startswith(f"servelab-0.1.0-{staff_wheel.python_tag()}-{staff_wheel.python_tag()}-")
    # source: python -m servelab's __main__ and the students' pytest harness (pluggy takes Python
    # functions only), nothing else
    assert [n for n in names if n.endswith(".py") and not n.startswith("servelab/harness/")] == ["servelab/__main__.py"]
    assert sorted(n for n in names if n.startswith("servelab/harness/")) == sorted(
        p.relative_to(ROOT / "python").as_posix() for p in (ROOT / "python/servelab/harness").glob("*.py"))
    assert not [n for n in names if n.startswith(("servelab/reference", "servelab/lecture_key"))]
    compiled = [n for n in names if n.endswith(suffix)]
    sources = [p.relative_to(ROOT / "python").as_posix() for p in (ROOT / "python/servelab").rglob("*.py")
               if not p.relative_to(ROOT / "python").as_posix().startswith(staff_wheel.LEFT_OUT)
               and not p.relative_to(ROOT / "python").as_posix().startswith(staff_wheel.KEPT_AS_SOURCE)]
    assert sorted(n.removesuffix(suffix) for n in compiled) == sorted(s.removesuffix(".py") for s in sources)
    assert not [n for n in compiled if n.removesuffix(suffix) + ".pyi" not in names], "a module without its stub"
    assert {"servelab/_core.abi3.so", "servelab/_core.pyi", "servelab/py.typed",
            "servelab/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"} <= set(names)


def test_no_compiled_module_embeds_its_source(staff):
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    found, checked = {}, 0
    with zipfile.ZipFile(staff["wheel"]) as z:
        for name in z.namelist():
            if not name.endswith(suffix):
                continue
            source = (ROOT / "python" / (name.removesuffix(suffix) + ".py")).read_text(encoding="utf-8")
            stub = z.read(name.removesuffix(suffix) + ".pyi").decode("utf-8")
            runs = similarity.source_runs_in_binary(source, z.read(name), shown=stub)
            checked += len(similarity._raw_tokens(source)) > similarity.RUN
            if runs:
                found[name] = runs[:3]
    assert checked > 40 and found == {}, found
    # the control: the same comparison finds the source in a "binary" that carries it
    source = (ROOT / "python/servelab/hw_model.py").read_text(encoding="utf-8")
    assert len(similarity.source_runs_in_binary(source, b"\x7fELF\0" + source.encode())) > 1000


def test_introspection_pickling_dataclasses_and_data_work_compiled(staff):
    out = in_venv(staff, """
import dataclasses, inspect, json, pickle, pydoc
import servelab.hw_model as hw, servelab.workload as wl, servelab.metrics as mx
from servelab.engine import serve, Request
assert hw.__file__.endswith(".so"), hw.__file__
print(json.dumps({
    "signature": str(inspect.signature(hw.step_cost)),
    "doc": hw.step_cost.__doc__.splitlines()[0],
    "help": "step_cost(model" in pydoc.render_doc(hw.step_cost, renderer=pydoc.plaintext),
    "fields": [f.name for f in dataclasses.fields(hw.ModelSpec)][:3],
    "replace": dataclasses.replace(hw.LLAMA3_8B, n_kv_heads=32).kv_bytes_per_token,
    "pickle": pickle.loads(pickle.dumps(hw.LLAMA3_8B)) == hw.LLAMA3_8B,
    "pickle_fn": pickle.loads(pickle.dumps(hw.step_cost)) is hw.step_cost,
    "azure": len(wl.azure_trace("conv", limit=5)),
    "serve": serve([Request(list(b"hello"), 2)], num_blocks=8, block_size=4).batch_log(),
}))""")
    got = json.loads(out)
    assert got["signature"].startswith("(model: 'ModelSpec', gpu: 'GpuSpec', batch:") and got["help"]
    assert got["doc"] and got["fields"] == ["name", "n_layers", "d_model"]
    assert got["replace"] == 512 * 1024 and got["pickle"] and got["pickle_fn"]
    assert got["azure"] == 5 and got["serve"] == [[[0, 5, 0]], [[0, 1, 5]]]
    main = subprocess.run([str(staff["python"]), "-m", "servelab", "--help"], cwd=staff["tmp"],
                          capture_output=True, text=True, timeout=LONG)
    assert main.returncode == 0 and "demo" in main.stdout, main.stderr[-2000:]


def _copy_course(staff, *folders: str) -> Path:
    where = staff["tmp"] / "course"
    where.mkdir(exist_ok=True)
    for folder in folders:
        if not (where / folder).exists():
            shutil.copytree(ROOT / folder, where / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "pyproject.toml", where / "pyproject.toml")
    return where


def test_the_subset_of_the_library_tests_passes_on_the_staff_wheel(staff):
    where = _copy_course(staff, "tests", "assignments")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "HYPOTHESIS_PROFILE": "compat"}
    run = subprocess.run([str(staff["python"]), "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUBSET],
                         cwd=where, capture_output=True, text=True, timeout=LONG, env=env)
    assert run.returncode == 0, run.stdout[-5000:]
    assert " passed" in run.stdout.splitlines()[-1], run.stdout[-500:]


def test_the_reference_solutions_score_full_marks_on_the_staff_wheel(staff):
    where = _copy_course(staff, "assignments")
    points = where / "points.json"
    # the compat profile (10 examples a property): what is tried is the compiled build, not the
    # inputs, which make test's `pytest assignments/` explores under ci on the readable library
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "HYPOTHESIS_PROFILE": "compat",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    run = subprocess.run([str(staff["python"]), "-m", "pytest", "-q", "-p", "no:cacheprovider", "assignments",
                          "--points-json", str(points)], cwd=where, capture_output=True, text=True,
                         timeout=LONG, env=env)
    assert run.returncode == 0, run.stdout[-5000:]
    summary = json.loads(points.read_text())
    manifest = manifest_of(ROOT)
    assert {t["id"]: t["points"] for t in summary["tasks"]} == {t.id: t.points for t in manifest.tasks}
    assert summary["points"] == manifest.total_points > 0


def test_what_the_wheel_installs_holds_no_tasks_solution(staff):
    installed = {}
    for path in sorted(staff["site"].glob("servelab*/**/*")):
        if path.is_file():
            tokens = similarity.file_tokens(path.name, path.read_bytes())
            if tokens is not None:
                installed[path.relative_to(staff["site"]).as_posix()] = tokens
    assert any(name.endswith("hw_model.pyi") for name in installed) and len(installed) > 40
    assert similarity.findings(similarity.task_solutions(ROOT), installed) == []


def test_a_staff_release_with_the_wheel_passes_the_similarity_check(staff):
    from autograder.release.repository import release
    out = staff["tmp"] / "release"
    release(ROOT, out, wheels=[staff["wheel"]])
    files = similarity.readable_files(out)
    assert any(name.startswith(f"wheels/{staff['wheel'].name}!servelab/") for name in files)
    found = [str(f) for f in similarity.findings(similarity.task_solutions(ROOT), files)]
    assert found == [], "\n".join(found)
