"""The Rust step cost and the pure-Python reference agree (DESIGN.md: every fast path has a
reference). Same inputs -> equal results to 1e-9 relative; same bad input -> same error."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import _core
from servelab import hw_model as hw
from servelab.reference import step_cost as ref
from assignment_strategies import batches, efficiencies, gpus, models, plain

FIELDS = ("time_s", "flops", "bytes_moved", "weight_bytes", "kv_bytes", "compute_s", "memory_s",
          "mfu", "intensity")


def assert_close(a: float, b: float, what: str) -> None:
    assert math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0), f"{what}: rust={a!r} python={b!r}"


@given(models(), gpus, efficiencies, batches)
def test_step_cost_rust_equals_python(model, gpu, eff, batch):
    rust = hw.step_cost(model, gpu, batch, eff)
    py = ref.step_cost(model, gpu, eff, batch)
    for f in FIELDS:
        assert_close(getattr(rust, f), getattr(py, f), f)
    assert (rust.bound, rust.n_tokens, rust.n_seqs) == (py.bound, py.n_tokens, py.n_seqs)


@given(models(), gpus, st.floats(0.01, 1.0))
def test_ledger_rust_equals_python(model, gpu, mem_util):
    assert model.param_count == ref.param_count(model)
    assert model.kv_bytes_per_token == ref.kv_bytes_per_token(model)
    assert_close(model.weight_bytes, ref.weight_bytes(model), "weight_bytes")
    assert hw.kv_capacity_tokens(model, gpu, mem_util) == ref.kv_capacity_tokens(model, gpu, mem_util)


@given(models(), gpus, efficiencies, st.lists(batches, min_size=1, max_size=8))
def test_vectorised_equals_one_at_a_time(model, gpu, eff, steps):
    flat = [s for b in steps for s in b]
    offsets = np.cumsum([0] + [len(b) for b in steps])
    many = hw.step_cost_many(model, gpu, [n for n, _ in flat], [c for _, c in flat], offsets, eff)
    for i, batch in enumerate(steps):
        py = ref.step_cost(model, gpu, eff, batch)
        for f in FIELDS:
            assert_close(float(getattr(many, f)[i]), getattr(py, f), f)
        assert bool(many.compute_bound[i]) == (py.bound == "compute")


@given(models(), gpus, efficiencies, st.integers(1, 512), st.integers(1, 64), st.integers(0, 65536))
def test_uniform_steps_equal_explicit_batches(model, gpu, eff, b, n, c):
    uni = hw.decode_step_costs(model, gpu, [b], [c], [n], efficiency=eff)
    py = ref.step_cost(model, gpu, eff, [(n, c)] * b)
    for f in FIELDS:
        assert_close(float(getattr(uni, f)[0]), getattr(py, f), f)


# ---- the same errors ----------------------------------------------------------------------------

BAD_MODELS = [
    dict(n_layers=0), dict(d_model=-4096), dict(n_heads=0), dict(n_kv_heads=0), dict(d_head=-1),
    dict(d_ff=0), dict(vocab_size=0), dict(n_layers=_core.MAX_DIM + 1), dict(n_kv_heads=7),
    dict(n_heads=30), dict(bytes_per_param=0.0), dict(bytes_per_param=-2.0),
    dict(bytes_per_param=float("nan")), dict(bytes_per_param=float("inf")),
]
BAD_GPUS = [dict(peak_flops=0.0), dict(hbm_bandwidth=-1.0), dict(memory_bytes=float("nan")),
            dict(peak_flops=float("inf"))]
BAD_EFFS = [dict(compute=0.0), dict(compute=1.5), dict(bandwidth=-0.1), dict(overhead_s=-1e-3),
            dict(overhead_s=float("nan"))]
BAD_BATCHES = [[], [(0, 10)], [(1, 0), (-3, 5)], [(4, -1)], [(1, _core.MAX_TOKENS + 1)]]


def core_step_cost(model, gpu, efficiency, batch):
    """The Rust core's step cost of a list of pairs (it takes the batch as two columns)."""
    new, ctx = np.array(batch, dtype=np.int64).reshape(-1, 2).T
    return _core.step_cost_columns((model, gpu, efficiency), np.ascontiguousarray(new), np.ascontiguousarray(ctx))


def errors_of(fn, *args):
    with pytest.raises(ValueError) as info:
        fn(*args)
    return str(info.value)


@pytest.mark.parametrize("change", BAD_MODELS, ids=str)
def test_bad_model_same_error(change):
    m = plain(hw.LLAMA3_8B, **change)
    eff = hw.DEFAULT_EFFICIENCY
    rust = errors_of(core_step_cost, m, hw.H100, eff, [(1, 0)])
    assert rust == errors_of(ref.step_cost, m, hw.H100, eff, [(1, 0)])
    field = next(iter(change))
    assert field in rust and "got" in rust
    # the dataclass refuses it at construction, with the same message
    with pytest.raises(ValueError, match="^" + re.escape(rust) + "$"):
        hw.ModelSpec(**vars(m))


@pytest.mark.parametrize("change", BAD_GPUS, ids=str)
def test_bad_gpu_same_error(change):
    g = plain(hw.H100, **change)
    rust = errors_of(core_step_cost, hw.LLAMA3_8B, g, hw.DEFAULT_EFFICIENCY, [(1, 0)])
    assert rust == errors_of(ref.step_cost, hw.LLAMA3_8B, g, hw.DEFAULT_EFFICIENCY, [(1, 0)])
    assert next(iter(change)) in rust


@pytest.mark.parametrize("change", BAD_EFFS, ids=str)
def test_bad_efficiency_same_error(change):
    e = plain(hw.DEFAULT_EFFICIENCY, **change)
    rust = errors_of(core_step_cost, hw.LLAMA3_8B, hw.H100, e, [(1, 0)])
    assert rust == errors_of(ref.step_cost, hw.LLAMA3_8B, hw.H100, e, [(1, 0)])
    assert next(iter(change)) in rust


@pytest.mark.parametrize("batch", BAD_BATCHES, ids=str)
def test_bad_batch_same_error(batch):
    args = (hw.LLAMA3_8B, hw.H100, hw.DEFAULT_EFFICIENCY, batch)
    rust = errors_of(core_step_cost, *args)
    assert rust == errors_of(ref.step_cost, *args)
    assert errors_of(hw.step_cost, hw.LLAMA3_8B, hw.H100, batch) == rust


@pytest.mark.parametrize("mem_util", [0.0, -0.5, 1.01, float("nan")])
def test_bad_mem_util_same_error(mem_util):
    args = (hw.LLAMA3_8B, hw.H100, mem_util)
    rust = errors_of(hw.kv_capacity_tokens, *args)
    assert rust == errors_of(ref.kv_capacity_tokens, *args)
    assert rust.startswith("mem_util must be in (0, 1], got ")


@pytest.mark.parametrize("ctx", [0, -1])
def test_bad_context_len_same_error(ctx):
    rust = errors_of(hw.max_batch, hw.LLAMA3_8B, hw.H100, ctx)
    assert rust == errors_of(ref.max_batch, hw.LLAMA3_8B, hw.H100, ctx)
    assert f"context_len must be an integer in [1, {_core.MAX_TOKENS}], got {ctx}" == rust
