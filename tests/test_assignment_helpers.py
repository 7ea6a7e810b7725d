"""The given helpers in assignments/ behave like the servelab pieces they stand in for (the
grader's sandbox lets student code import nothing of servelab)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.events import EventQueue as RustQueue
from assignment_strategies import batches, efficiencies, gpus, models

ROOT = Path(__file__).resolve().parents[1]


def load(rel: str):
    spec = importlib.util.spec_from_file_location(Path(rel).stem + "_under_test", ROOT / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PyQueue = load("assignments/a5_batching/event_queue.py").EventQueue

ops = st.lists(st.one_of(st.tuples(st.just("push"), st.sampled_from([0.0, 0.5, 1.0, 2.5, -1.0, float("nan")])),
                         st.just(("pop", None)), st.just(("peek", None))), max_size=40)


def run(queue, script):
    out = []
    for i, (op, t) in enumerate(script):
        try:
            out.append(("ok", queue.push(t, i) if op == "push" else getattr(queue, op)(), len(queue)))
        except (ValueError, IndexError) as exc:
            out.append(("error", type(exc).__name__, len(queue)))
    return out


@given(ops)
def test_a5_event_queue_behaves_like_servelab(script):
    assert run(PyQueue(), script) == run(RustQueue(), script)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a5_event_queue_refuses_bad_times(bad):
    with pytest.raises(ValueError, match="time_s"):
        PyQueue().push(bad, None)


pricing = load("assignments/a5_batching/pricing.py")


@given(models(), gpus, efficiencies, batches)
def test_a5_pricing_from_constants_equals_step_cost(model, gpu, eff, batch):
    from servelab import hw_model as hw
    want = hw.step_cost(model, gpu, batch, eff).time_s
    got = pricing.step_time(batch, hw.price_constants(model, gpu, eff))
    assert abs(got - want) <= 1e-9 * want


@pytest.mark.parametrize("helper", ["event_queue.py", "pricing.py"])
def test_a6_helpers_are_a5s(helper):
    # the grader's sandbox holds one task's folder only, so a6 carries its own copies; they must
    # stay the a5 files checked above
    a5, a6 = (ROOT / "assignments" / task / helper for task in ("a5_batching", "a6_admission"))
    assert a6.read_bytes() == a5.read_bytes(), f"assignments/a6_admission/{helper} differs from a5_batching's"


def test_a9_split_count_examples():
    # split_count is given to students, not graded: its docstring's examples must hold
    import doctest
    fn = load("assignments/a9_batch_invariance/batch_invariance.py").split_count
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(fn, "split_count", globs={"split_count": fn}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 2 and result.failed == 0, f"split_count's examples: {result}"
