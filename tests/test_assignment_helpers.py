"""The given helpers in assignments/ behave like the servelab pieces they stand in for (the
grader's sandbox lets student code import nothing of servelab)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.events import EventQueue as ServelabQueue
from assignment_strategies import batches, efficiencies, gpus, models

ROOT = Path(__file__).resolve().parents[1]


def load(rel: str):
    spec = importlib.util.spec_from_file_location(Path(rel).stem + "_under_test", ROOT / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module



TIMES = [0.0, -0.0, 0.5, 1.0, 2.5, -1.0, float("nan"), float("inf"), True, "1.0", 3]
ops = st.lists(st.one_of(st.tuples(st.just("push"), st.sampled_from(TIMES)),
                         st.sampled_from([("pop", None), ("peek", None), ("len", None), ("bool", None)])),
               max_size=40)


def run(queue, script):
    """What each operation returned or raised (with the message), as text: repr tells -0.0 from
    0.0 and 3 from 3.0, which == would not."""
    out = []
    for i, (op, t) in enumerate(script):
        try:
            got = queue.push(t, i) if op == "push" else bool(queue) if op == "bool" else getattr(queue, op)()
            out.append(repr(("ok", got, len(queue))))
        except (ValueError, IndexError) as exc:
            out.append(repr(("error", type(exc).__name__, str(exc), len(queue))))
    return out


GivenQueue = load("assignments/given/event_queue.py").EventQueue


@given(ops)
def test_the_given_event_queue_behaves_like_servelabs(script):
    # a5's and a6's given `event_queue` (standard library only: the sandbox refuses servelab)
    # may not drift from servelab.events (len(), bool, -0.0, the messages)
    assert run(GivenQueue(), script) == run(ServelabQueue(), script)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "1.0"])
def test_the_given_event_queue_refuses_bad_times(bad):
    with pytest.raises(ValueError, match="time_s"):
        GivenQueue().push(bad, None)


pricing = load("assignments/given/pricing.py")


@given(models(), gpus, efficiencies, batches)
def test_the_given_pricing_from_constants_equals_step_cost(model, gpu, eff, batch):
    from servelab import hw_model as hw
    want = hw.step_cost(model, gpu, batch, eff).time_s
    got = pricing.step_time(batch, hw.price_constants(model, gpu, eff))
    assert abs(got - want) <= 1e-9 * want


def test_each_given_helper_has_one_copy_and_its_users_import_it():
    # one source each, in assignments/given/ (the grader copies it into the sandbox of each task
    # that imports it): no task folder carries a copy that could drift
    given_names = {p.name for p in (ROOT / "assignments" / "given").glob("*.py")}
    assert {"event_queue.py", "pricing.py"} <= given_names
    copies = [p.relative_to(ROOT).as_posix() for p in (ROOT / "assignments").glob("**/*.py")
              if p.name in given_names and p.parent.name != "given"]
    assert copies == []
    for rel in ("a5_batching/batching.py", "a6_admission/admission.py"):
        text = (ROOT / "assignments" / rel).read_text()
        assert "from event_queue import EventQueue" in text and "from pricing import step_time" in text, rel
    for rel in ("a8_continuous_batching/scheduler.py", "a10_prefix_caching/prefix_scheduler.py"):
        assert "from scheduler_plan import Plan" in (ROOT / "assignments" / rel).read_text(), rel


def test_a9_split_count_examples():
    # split_count is given to students, not graded: its docstring's examples must hold
    import doctest
    fn = load("assignments/a9_batch_invariance/batch_invariance.py").split_count
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(fn, "split_count", globs={"split_count": fn}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 2 and result.failed == 0, f"split_count's examples: {result}"


@pytest.mark.parametrize("helper", sorted(p.name for p in (ROOT / "assignments" / "given").glob("*.py")))
def test_the_given_helpers_need_only_the_standard_library(helper):
    # the sandbox copies them beside student code, where nothing of servelab can be imported
    tree = ast.parse((ROOT / "assignments" / "given" / helper).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names), sorted(names - set(sys.stdlib_module_names))
