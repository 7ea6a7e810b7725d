"""The private ``servelab._core`` boundary (rust/src/py/): the hardware crosses as one
``(model, gpu, efficiency)`` tuple; the one-card continuous-batching simulator takes its options as
one ``ContinuousOptions`` record, read by attribute into a typed struct, and the multi-card ones as
one dict. A malformed argument is a Python exception naming what is wrong, never a Rust panic (the
public wrappers check everything first; this is what a direct caller gets)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from servelab import _core
from servelab.continuous_options import ContinuousOptions
from servelab.hw_model import DEFAULT_EFFICIENCY, H100, LLAMA3_8B
from servelab.workload import Requests

HW = (LLAMA3_8B, H100, DEFAULT_EFFICIENCY)
REQS = Requests([0.0, 0.1], [8, 4], [3, 2])
CARD = dict(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, num_blocks=16, chunked_prefill=False)


def _record(**fields):
    """A stand-in for a ContinuousOptions that skipped its constructor's checks: what the core
    reads by attribute, each field replaceable by junk."""
    base = dict(CARD, trace=False, batch_log=False, prefix_caching=False, shared_prefixes=None, host_blocks=0,
                host_policy="lru", speculative=None, step_extra_s=(0.0, 0.0))
    return SimpleNamespace(**{**base, **fields})


@pytest.mark.parametrize("fields, error, named", [
    (dict(num_blocks=None), TypeError, "num_blocks"),  # not resolved by pool_blocks
    (dict(trace="no"), TypeError, "trace"),
    (dict(speculative=SimpleNamespace(k=2, draft=LLAMA3_8B, acceptance=None, seed=0)), TypeError, "speculative"),
    (dict(shared_prefixes=(np.array([-1, 0]), np.array([0, 4]))), TypeError, "shared_prefixes"),
    (dict(step_extra_s=1.0), TypeError, "step_extra_s"),
    (dict(block_size=0), ValueError, "block_size"),  # the core's own check of the card
])
def test_bad_continuous_options_name_the_field(fields, error, named):
    with pytest.raises(error, match=named):
        _core.sim_continuous_batching(HW, REQS, _record(**fields), 0.0)


def test_a_record_crosses_as_its_checked_self():
    # the record the library builds, and a duck-typed one of the same fields, run the same
    record = ContinuousOptions(**CARD)
    plain = _core.sim_continuous_batching(HW, REQS, record, 0.0)
    given = _core.sim_continuous_batching(HW, REQS, _record(), 0.0)
    assert "cached_tokens" not in plain and "spec_steps" not in plain
    assert sorted(plain) == sorted(given)
    assert np.array_equal(plain["finish_s"], given["finish_s"])


def test_bad_hardware_and_pool_options_are_python_errors():
    with pytest.raises(ValueError, match="length 3"):
        _core.sim_batch1((LLAMA3_8B, H100), REQS, False)
    with pytest.raises(TypeError, match="gpu must be a servelab.hw_model.GpuSpec"):
        _core.step_cost_columns((LLAMA3_8B, "H100", DEFAULT_EFFICIENCY), np.array([1]), np.array([0]))
    with pytest.raises(KeyError, match="router"):
        _core.sim_data_parallel(HW, REQS, dict(card=CARD, n_replicas=2))
    with pytest.raises(ValueError, match="shared prefixes need prefix_caching=True"):
        _core.sim_data_parallel(HW, REQS, dict(card=CARD, n_replicas=2, router="round_robin",
                                               shared=(np.array([-1, 0]), np.array([0, 4]))))
    with pytest.raises(TypeError, match="link"):
        _core.sim_disaggregated(HW, REQS, dict(card=CARD, n_prefill=1, n_decode=1, router="round_robin", link=1.0))


@pytest.mark.parametrize("call, named", [
    (lambda a: a.num_tokens("x"), "seq_id"),
    (lambda a: a.fork(0, 2**70), "child_id"),
    (lambda a: a.allocate(1, [1, 2], num_computed=1.5), "num_computed"),
    (lambda a: a.can_allocate(None), "n_tokens"),
])
def test_the_core_allocator_names_a_bad_integer_argument(call, named):
    a = _core.BlockAllocator(4, 2)
    a.allocate(0, [1, 2, 3])
    with pytest.raises((TypeError, OverflowError), match=f"^{named} must be an integer"):
        call(a)
    a.check_invariants()  # and nothing changed
    assert a.seq_ids() == [0] and a.num_free_blocks == 2
