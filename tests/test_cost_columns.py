"""``step_cost_many(columns=...)``: the columns asked for, bit for bit those of the
full call, and no other; bad names are errors naming the argument."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import hw_model as hw
from servelab.hw_model import H100, LLAMA3_8B, StepCosts

NAMES = [f.name for f in dataclasses.fields(StepCosts)]


@given(seed=st.integers(0, 2**32 - 1), pick=st.lists(st.sampled_from(NAMES), min_size=1, max_size=4))
def test_selected_columns_equal_the_full_ones(seed, pick):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 6, int(rng.integers(0, 30)))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    new = np.where(rng.random(n) < 0.3, rng.integers(1, 4096, n), 1)
    ctx = rng.integers(0, 9000, n)
    full = hw.step_cost_many(LLAMA3_8B, H100, new, ctx, offsets)
    some = hw.step_cost_many(LLAMA3_8B, H100, new, ctx, offsets, columns=pick)
    assert sorted(some) == sorted(set(pick))
    for k, v in some.items():
        want = getattr(full, k)
        assert v.dtype == want.dtype and np.array_equal(v.view(np.uint8), want.view(np.uint8)), k
    # and the full call is step_cost one step at a time (an independent path to the columns)
    for s in range(len(sizes)):
        lo, hi = int(offsets[s]), int(offsets[s + 1])
        one = hw.step_cost(LLAMA3_8B, H100, list(zip(new[lo:hi].tolist(), ctx[lo:hi].tolist())))
        want = [one.bound == "compute" if k == "compute_bound" else getattr(one, k) for k in NAMES]
        assert [getattr(full, k)[s] for k in NAMES] == want, s


def test_bad_columns_are_errors():
    args = (LLAMA3_8B, H100, [1], [0], [0, 1])
    with pytest.raises(ValueError, match=r"columns\[1\] must be one of time_s, flops, .*got 'speed'"):
        hw.step_cost_many(*args, columns=["time_s", "speed"])
    with pytest.raises(ValueError, match="columns must name at least one column"):
        hw.step_cost_many(*args, columns=[])
    with pytest.raises(ValueError, match="columns must be a list of column names, got 'time_s'"):
        hw.step_cost_many(*args, columns="time_s")
    with pytest.raises(ValueError, match="columns must be a list of column names"):
        hw.step_cost_many(*args, columns=[1])


@given(seed=st.integers(0, 2**32 - 1), pick=st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
def test_out_arrays_are_filled_in_place(seed, pick):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 6, int(rng.integers(0, 30)))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    new, ctx = rng.integers(1, 3000, n), rng.integers(0, 9000, n)
    full = hw.step_cost_many(LLAMA3_8B, H100, new, ctx, offsets)
    out = {k: np.full(len(sizes), 7, dtype=bool if k == "compute_bound" else np.float64) for k in pick}
    keep = dict(out)
    assert hw.step_cost_many(LLAMA3_8B, H100, new, ctx, offsets, out=out) is out
    for k in pick:
        assert out[k] is keep[k] and np.array_equal(out[k], getattr(full, k)), k


def test_bad_out_arrays_are_errors():
    args = (LLAMA3_8B, H100, [1, 1], [0, 5], [0, 1, 2])
    for bad, why in [({"time_s": np.empty(3)}, "of 2 elements"), ({"time_s": np.empty(2, np.float32)}, "float64"),
                     ({"compute_bound": np.empty(2)}, "bool"), ({"time_s": np.empty(4)[::2]}, "writable 1-D"),
                     ({"speed": np.empty(2)}, "the key must be one of"), ({}, "at least one column")]:
        with pytest.raises(ValueError, match=why):
            hw.step_cost_many(*args, out=bad)
    frozen = np.empty(2)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        hw.step_cost_many(*args, out={"time_s": frozen})
    with pytest.raises(ValueError, match="columns or out, not both"):
        hw.step_cost_many(*args, columns=["time_s"], out={"time_s": np.empty(2)})
