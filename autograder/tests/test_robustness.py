"""Inputs a student cannot predict (a secret mixed with the submission's
hash), regrades that stay byte-identical (notebooks included), strict answers, and a grader
that never falls over (a failure inside one task costs that task only)."""

from __future__ import annotations

import doctest
import importlib
import json
import re
import sys
import types
from pathlib import Path

import pytest

from autograder.grading import grade as grade_module
from autograder.grading import grading_secret, results, testload
from autograder.notebooks import nbgrader
from autograder.sandbox import wire
from autograder.grading.grade import ROOT, grade
from autograder.grading.judge import Outcome, settings
from autograder.sandbox.remote import Limits
from autograder.selfcheck import HOSTILE, points_by_task, reference_submission

QUICK = Limits(wall_s=30.0, cpu_s=30)
A1_TESTS = ROOT / "assignments" / "a1_ledger" / "test_a1_ledger.py"
# the secret and hash the replay table was recorded with (hostile/replayed_inputs/record_table.py)
LAPTOP = grading_secret.Secret(b"the secret a student would need to know", "replay")


def drawn_inputs(seed_of) -> list:
    """The models a1's test_param_count_matches_core draws (answered right, so that every
    example runs) under ``seed_of`` (None: the derandomized seed a released grader would use)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_robust_ledger", ROOT / "assignments" / "a1_ledger" / "ledger.py")
    assert spec is not None and spec.loader is not None
    ledger = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ledger)
    seen = []

    class Recorder(types.ModuleType):
        def __getattr__(self, name):
            def call(*args):
                seen.append(repr(args))
                return getattr(ledger, name)(*args)
            return call

    settings.load_profile("autograder")
    if seed_of is None:
        testload.import_test_module(A1_TESTS, {"ledger": Recorder("ledger")}, "_robust_plain").test_param_count_matches_core()
    else:
        with testload.seeded(seed_of):
            testload.import_test_module(A1_TESTS, {"ledger": Recorder("ledger")}, "_robust_seeded").test_param_count_matches_core()
    assert len(seen) >= 50
    return seen


def seeds(secret: bytes, identity: str):
    s = grading_secret.Secret(secret, "test")
    return lambda test_id: grading_secret.seed_for(s, identity, test_id)


def test_the_inputs_follow_the_secret_and_the_student():
    a = drawn_inputs(seeds(b"course secret", "submission:alice"))
    assert a == drawn_inputs(seeds(b"course secret", "submission:alice")), "same secret, same student: same inputs"
    assert a != drawn_inputs(seeds(b"another secret", "submission:alice")), "another secret: other inputs"
    assert a != drawn_inputs(seeds(b"course secret", "submission:bob")), "another student: other inputs"
    assert a != drawn_inputs(None), "the released grader's own seed draws other inputs"


def test_a_resubmission_draws_the_same_inputs(tmp_path):
    """Shopping: the same student's two submissions, one with a whitespace change, are graded
    on the very same generated inputs (the seed holds no hash of the files). The failing
    tests' messages name the generated models (``ModelSpec(name='random', ...)``), so the two
    gradings' messages are equal."""
    wrong = (ROOT / "assignments" / "a1_ledger" / "ledger.py").read_text().replace(
        "return model.n_layers * per_layer", "return 1 + model.n_layers * per_layer")
    if wrong == (ROOT / "assignments" / "a1_ledger" / "ledger.py").read_text():  # the reference changed its wording
        pytest.fail("the off-by-one edit no longer applies to the reference a1 ledger")
    outputs = []
    for n, text in enumerate((wrong, wrong + "\n\n# resubmitted\n")):
        sub = tmp_path / str(n) / "alice" / "a1_ledger"
        sub.mkdir(parents=True)
        (sub / "ledger.py").write_text(text)
        data = grade(sub.parent, limits=QUICK, only_tasks=frozenset({"a1_ledger"}), secret=LAPTOP)
        outputs.append([t["output"] for t in data["tests"] if t["extra_data"]["task"] == "a1_ledger"])
    assert outputs[0] == outputs[1] and any("name='random'" in o for o in outputs[0]), outputs[0]


def test_every_hypothesis_test_and_state_machine_is_seeded():
    got = {}
    # the modules import the student's module: give each an empty stand-in
    for path in sorted((ROOT / "assignments").glob("a*/test_*.py")):
        student = {line.split()[1]: types.ModuleType(line.split()[1]) for line in path.read_text().splitlines()
                   if re.match(r"^import \w+( as \w+)?$", line) and line.split()[1] not in sys.stdlib_module_names
                   and line.split()[1] not in ("numpy", "pytest")}
        with testload.seeded(lambda test_id: got.setdefault(test_id, len(got) + 1)):
            testload.import_test_module(path, student, f"_robust_{path.stem}")
    assert "a7_paged_blocks/test_a7_paged_blocks.py::SameAsRust" in got  # the state machine
    assert "a1_ledger/test_a1_ledger.py::test_param_count_matches_core" in got
    manifest = grade_module.manifest_of(ROOT)
    given = [t for task in manifest.tasks for t in task.tests if t in got]
    assert len(given) >= 30, given


def test_without_a_secret_grade_says_so_once_and_records_it_only_beside_the_results(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(grading_secret.ENV_SECRET, raising=False)
    monkeypatch.delenv(grading_secret.ENV_SECRET_FILE, raising=False)
    monkeypatch.setattr(grading_secret, "_EPHEMERAL", None)
    sub = reference_submission(tmp_path / "ref")
    only = frozenset({"a1_ledger"})
    a = grade(sub, out=tmp_path / "a" / "results.json", limits=QUICK, only_tasks=only)
    b = grade(sub, out=tmp_path / "b" / "results.json", limits=QUICK, only_tasks=only)
    err = capsys.readouterr().err
    assert err.count("no grading secret configured") == 1, err
    recorded = (tmp_path / "a" / f"results.json{grading_secret.SIDECAR_SUFFIX}").read_bytes().strip()
    assert len(recorded) >= 32 and recorded == (tmp_path / "b" / f"results.json{grading_secret.SIDECAR_SUFFIX}").read_bytes().strip()
    assert (tmp_path / "a" / f"results.json{grading_secret.SIDECAR_SUFFIX}").stat().st_mode & 0o077 == 0
    for data in (a, b):
        assert recorded.decode() not in json.dumps(data)
    assert points_by_task(a)["a1_ledger"] == 15
    # a regrade with the recorded secret: the same results
    monkeypatch.setenv(grading_secret.ENV_SECRET_FILE, str(tmp_path / "a" / f"results.json{grading_secret.SIDECAR_SUFFIX}"))
    assert grading_secret.resolve().value == recorded


def test_a_configured_secret_is_never_written_and_a_bad_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(grading_secret.ENV_SECRET, "configured by the instructors")
    s = grading_secret.resolve()
    assert s.value == b"configured by the instructors" and "configured" not in repr(s)
    grading_secret.record(s, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        grading_secret.configured(tmp_path / "empty")
    with pytest.raises(ValueError, match="cannot be read"):
        grading_secret.configured(tmp_path / "missing")
    monkeypatch.setenv(grading_secret.ENV_SECRET, "")
    with pytest.raises(ValueError, match="empty"):
        grading_secret.configured()


def test_the_release_reveals_nothing_of_the_secret(tmp_path, monkeypatch):
    """Not from the environment, not from a secret file an instructor left in the course copy,
    not from a random secret recorded there beside a results.json."""
    from autograder.release.repository import release

    token = "s3cr3t-" + "9f2c" * 8
    careless = [ROOT / "instructors-secret.txt", ROOT / f"results.json{grading_secret.SIDECAR_SUFFIX}"]
    monkeypatch.setenv(grading_secret.ENV_SECRET, token)
    monkeypatch.setenv(grading_secret.ENV_SECRET_FILE, str(careless[0]))
    try:
        for path in careless:
            path.write_text(token)
        files = release(ROOT, tmp_path / "release", readable=True)  # the one that ships the grader
    finally:
        for path in careless:
            path.unlink(missing_ok=True)
    assert files
    for path in (tmp_path / "release").rglob("*"):
        assert grading_secret.SIDECAR_SUFFIX not in path.name and path.name != careless[0].name, path
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    # the released grader seeds from a secret it must be given: it holds no default one
    shipped = (tmp_path / "release" / "autograder" / "grading" / "grading_secret.py").read_text()
    assert "secrets.token_hex" in shipped and not re.search(r"ENV_SECRET\s*,\s*\"", shipped)


def test_the_replay_table_works_only_with_the_inputs_it_was_recorded_for(monkeypatch):
    """Control for hostile/replayed_inputs: with the secret and identity it was recorded under,
    the table earns full marks; graded for real (the secret, under its own name) it earns nothing."""
    only = frozenset({"a1_ledger"})
    real = grade(HOSTILE / "replayed_inputs", limits=QUICK, only_tasks=only, secret=LAPTOP)
    assert points_by_task(real)["a1_ledger"] == 0
    known = grade(HOSTILE / "replayed_inputs", limits=QUICK, only_tasks=only, secret=LAPTOP, identity="replay")
    assert points_by_task(known)["a1_ledger"] == 15


ABSOLUTE = re.compile(r"(?<![\w.<>~/-])/(?:tmp|work|home|root|var|autograder)/")


def test_regrading_is_byte_identical_notebooks_included(tmp_path):
    """A submission whose messages name files (the released notebooks fail with tracebacks, a
    task raises with a path and a surrogate in its message), graded twice into two folders: the
    the same bytes, no absolute path, no surrogate."""
    sub = tmp_path / "sub"
    for rel, text in nbgrader.student_versions(ROOT).items():
        (sub / rel).parent.mkdir(parents=True, exist_ok=True)
        (sub / rel).write_text(text, encoding="utf-8")
    (sub / "assignments" / "a1_ledger").mkdir(parents=True)
    (sub / "assignments" / "a1_ledger" / "ledger.py").write_bytes(
        (HOSTILE / "surrogate_message" / "a1_ledger" / "ledger.py").read_bytes())
    only = frozenset({"a1_ledger", *(nb.id for nb in nbgrader.notebooks_of(ROOT))})
    texts = []
    for run in ("first", "second"):
        out = tmp_path / run / "results.json"
        grade(sub, out=out, limits=QUICK, only_tasks=only)
        texts.append(out.read_bytes())
    assert texts[0] == texts[1]
    data = json.loads(texts[0])
    outputs = [t["output"] for t in data["tests"]]
    assert any("Error" in o for t, o in zip(data["tests"], outputs) if "notebook" in t["extra_data"]), outputs
    for o in outputs:
        assert not ABSOLUTE.search(o), o
        o.encode("utf-8")  # no lone surrogate
        assert len(o) <= results.MAX_TEXT + 30


OTHER_TASK = "a11_speculative"  # graded beside the failing one: its grading takes about a second


@pytest.mark.parametrize("failure", [RecursionError("maximum recursion depth exceeded"), OSError(28, "No space left"),
                                     UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
                                     ValueError("not enough values to unpack (expected 2, got 1)"),
                                     SystemExit(3)])
def test_a_task_that_fails_the_grader_scores_zero_and_the_others_are_graded(tmp_path, monkeypatch, failure):
    real = grade_module.run_task

    def run_task(root, task, *args, **kwargs):
        if task.id == "a1_ledger":
            raise failure
        return real(root, task, *args, **kwargs)

    monkeypatch.setattr(grade_module, "run_task", run_task)
    out = tmp_path / "results.json"
    data = grade(reference_submission(tmp_path / "ref"), out=out, limits=QUICK,
                 only_tasks=frozenset({"a1_ledger", OTHER_TASK}))
    assert json.loads(out.read_text(encoding="utf-8")) == data
    got = points_by_task(data)
    assert got["a1_ledger"] == 0 and got[OTHER_TASK] == {t.id: t.points for t in grade_module.manifest_of(ROOT).tasks}[OTHER_TASK]
    message = next(t["output"] for t in data["tests"] if t["extra_data"]["task"] == "a1_ledger")
    assert message.startswith(f"the grader could not grade this task: {type(failure).__name__}"), message


def test_a_surrogate_anywhere_in_an_outcome_still_writes_results(tmp_path, monkeypatch):
    def run_task(root, task, *args, **kwargs):
        return {test: Outcome(False, "bad \ud800\udfff " + "x" * 20_000) for test in task.tests}

    monkeypatch.setattr(grade_module, "run_task", run_task)
    out = tmp_path / "results.json"
    data = grade(reference_submission(tmp_path / "ref"), out=out, limits=QUICK, only_tasks=frozenset({"a1_ledger"}))
    text = out.read_text(encoding="utf-8")
    assert json.loads(text) == data and "\\ud800" not in text
    assert all(len(t["output"]) <= results.MAX_TEXT + 30 for t in data["tests"])


def test_deep_replies_are_refused_by_the_wire():
    deep = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deeply"):
        wire.decode(deep)
    with pytest.raises(ValueError):
        wire.encode(deep)


def test_messages_are_made_safe():
    paths = {Path("/tmp/servelab-grade-abc"): "<work>"}
    text = results.safe_text("at /tmp/servelab-grade-abc/nb/course/x.ipynb and /tmp/ipykernel_99/3.py: "
                             "<object at 0x7f00deadbeef> \udcff tok/s", paths)
    assert text == "at <work>/nb/course/x.ipynb and <path>/3.py: <object at 0x...> ? tok/s"
    assert results.describe(type("E", (Exception,), {"__str__": lambda self: 1 / 0})()) == "<E that cannot be printed>"


def test_the_shared_answer_checks_refuse_degenerate_answers():
    sys.path.insert(0, str(ROOT / "assignments"))
    try:
        # by name: a module of the assignments' folder, outside the packages mypy reads
        assignment_strategies = importlib.import_module("assignment_strategies")
    finally:
        sys.path.remove(str(ROOT / "assignments"))
    result = doctest.testmod(assignment_strategies)
    assert result.attempted >= 8 and result.failed == 0
    import numpy as np

    checks = assignment_strategies
    # the hole these close: allclose broadcasts an empty axis, and True == 1
    assert np.allclose(np.zeros((0, 3)), [1.0, 2.0, 3.0]) and np.allclose([True], [1])
    for bad in (np.zeros((0, 3)), np.zeros((1, 3)), np.zeros((3, 1)), [1.0, 2.0], "abc", None):
        with pytest.raises(AssertionError, match="shape|array"):
            checks.assert_close("x", [1.0, 2.0, 3.0], bad, rtol=1e-9)
    with pytest.raises(AssertionError, match="finite|infinity"):
        checks.assert_close("x", [1.0], [float("inf")], rtol=1e-9, equal_nan=True)
    with pytest.raises(AssertionError, match="integer"):
        checks.answer_int("n", np.bool_(True))
    with pytest.raises(AssertionError, match="True or False"):
        checks.answer_bool("b", 1)
    checks.assert_close("x", [1.0, float("nan")], [1.0, float("nan")], rtol=1e-9, equal_nan=True)
