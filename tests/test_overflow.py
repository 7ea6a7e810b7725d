"""Large inputs give a named error or the right number, never a wrapped one; every message that
used to be unhelpful now names its argument."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab import _core, blocks, engine, hw_model as hw, serving_core, tiny_llm
from servelab.events import EventQueue
from servelab.reference import step_cost as ref
from servelab.workload import Requests

M, G = hw.LLAMA3_8B, hw.H100
LIMIT = _core.MAX_STEP_TOKENS
# wording of the Rust/PyO3 internals that must never reach a user
INTERNALS = ("Some(", "None..", "PyModelSpec", "PyGpuSpec", "C long", "type mismatch", "has no attribute")


def message_of(call, kinds=(TypeError, ValueError, OverflowError)) -> str:
    with pytest.raises(kinds) as info:
        call()
    msg = str(info.value)
    assert not any(word in msg for word in INTERNALS), msg
    return msg


# ---- totals that used to wrap ------------------------------------------------------------------

def test_a_sweep_whose_totals_wrap_is_an_error_naming_the_values():
    # 2**32 sequences x 2**31 new tokens wrapped to weight_bytes = -7.6e22
    msg = message_of(lambda: hw.decode_step_costs(M, G, [2**32], [0], new_tokens=[2**31]))
    assert "batch_size x new_tokens" in msg and "4294967296 x 2147483648" in msg and str(LIMIT) in msg


def test_a_step_at_the_limit_is_exact_and_one_past_it_is_refused():
    n = LIMIT // _core.MAX_TOKENS  # 2**13 sequences of 2**40 tokens: exactly 2**53
    batch = np.full((n, 2), [_core.MAX_TOKENS, 0])
    at = hw.step_cost(M, G, batch)
    assert at.n_tokens == LIMIT and at.n_seqs == n
    assert at.weight_bytes > 0 and at.flops > 0 and math.isfinite(at.time_s)
    past = np.vstack([batch, [[1, 0]]])
    msg = message_of(lambda: hw.step_cost(M, G, past))
    assert msg == (f"batch[{n}].new_tokens must keep the step's total at most {LIMIT} new tokens, "
                   f"got 1 on top of {LIMIT}")
    # the pure-Python reference refuses it with the same words
    assert message_of(lambda: ref.step_cost(M, G, hw.DEFAULT_EFFICIENCY, past.tolist())) == msg


def test_8_million_sequences_of_2_40_tokens_are_refused():
    # numpy path: no Python loop over the 2**23 pairs (a Python loop took 100 s, then gave a negative n_tokens)
    batch = np.empty((2**23, 2), dtype=np.int64)
    batch[:, 0], batch[:, 1] = 2**40, 0
    msg = message_of(lambda: hw.step_cost(M, G, batch))
    assert msg.startswith("batch[8192].new_tokens must keep the step's total at most")


pairs = st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 1 << 20)), min_size=1, max_size=40)


@given(pairs)
def test_list_and_array_batches_price_alike(batch):
    """The numpy path (an (n, 2) array) and a list of pairs give the same step, and both equal
    the pure-Python reference; n_tokens is the exact sum."""
    as_list = hw.step_cost(M, G, batch)
    as_array = hw.step_cost(M, G, np.array(batch, dtype=np.int32))
    want = ref.step_cost(M, G, hw.DEFAULT_EFFICIENCY, batch)
    assert as_list == as_array
    assert as_list.n_tokens == sum(n for n, _ in batch) == want.n_tokens
    assert math.isclose(as_list.time_s, want.time_s, rel_tol=1e-9)


def test_largest_dimensions_do_not_wrap_kv_bytes():
    big = _core.MAX_DIM
    m = dataclasses.replace(M, n_layers=big, n_heads=big, n_kv_heads=big, d_head=big)
    assert m.kv_bytes_per_token == 2.0 * big**3 * 2.0  # was 0.0 (i64 wrapped)
    assert m.kv_bytes_per_token == ref.kv_bytes_per_token(m)


def test_a_kv_capacity_past_64_bits_is_an_error():
    gpu = dataclasses.replace(G, memory_bytes=1e300)
    msg = message_of(lambda: hw.kv_capacity_tokens(M, gpu))
    assert msg.startswith("memory_bytes=1e+300 gives a KV capacity of")
    assert message_of(lambda: ref.kv_capacity_tokens(M, gpu)) == msg


def test_decode_step_cost_of_a_huge_batch_builds_no_list():
    # one group of 2**30 sequences: priced as a group, not as a list of 2**30 pairs
    c = hw.decode_step_cost(M, G, 2**30, 10)
    assert c.n_seqs == c.n_tokens == 2**30 and c.bound == "compute"
    small = hw.decode_step_cost(M, G, 64, 1024)
    assert math.isclose(small.time_s, hw.step_cost(M, G, [(1, 1024)] * 64).time_s, rel_tol=1e-12)


# ---- messages that used to say too little ------------------------------------------------------

def test_offsets_message_shows_offsets():
    msg = message_of(lambda: hw.step_cost_many(M, G, [1], [0], [0, 5]))
    assert msg == "offsets must start at 0 and end at len(new_tokens)=1, got offsets[0]=0 and offsets[-1]=5"


@pytest.mark.parametrize("field,value,kind", [("d_model", 4096.0, TypeError), ("n_layers", "32", TypeError),
                                              ("n_layers", 2**70, ValueError), ("tie_embeddings", 1, TypeError)])
def test_a_bad_model_field_is_named(field, value, kind):
    msg = message_of(lambda: dataclasses.replace(M, **{field: value}), kind)
    assert msg.startswith(field) and (str(value) in msg or repr(value) in msg)


def test_a_bad_gpu_field_is_named():
    assert message_of(lambda: dataclasses.replace(G, peak_flops="x")) == "peak_flops must be a real number, got 'x'"


def test_a_string_for_a_model_names_model():
    for call in (lambda: hw.step_cost("llama", G, [(1, 1)]), lambda: hw.price_constants("llama", G)):
        assert message_of(call, TypeError).startswith("model must be a servelab.hw_model.ModelSpec")


@pytest.mark.parametrize("call,name", [
    (lambda: blocks.BlockAllocator(4, 4).allocate(2**70, [1]), "seq_id"),
    (lambda: blocks.BlockAllocator(2**70, 4), "num_blocks"),
    (lambda: blocks.BlockAllocator(4, 4).free(None), "seq_id"),
    (lambda: blocks.block_key(-1, [1]), "parent_key"),
])
def test_allocator_arguments_are_named(call, name):
    assert name in message_of(call)


def test_allocator_replay_takes_any_integer_dtype():
    args = [np.array(x, dtype=np.int32) for x in ([0, 1], [0, 0], [0, 7], [1, 2, 3], [0, 3])]
    got = blocks.BlockAllocator(8, 4).replay(*args)
    want = blocks.BlockAllocator(8, 4).replay(*(a.astype(np.int64) for a in args))
    assert got.tolist() == want.tolist()
    assert "offsets must hold integers" in message_of(
        lambda: blocks.BlockAllocator(8, 4).replay(*args[:4], np.array([0.0, 3.0])))


def test_too_big_a_pool_is_a_named_error_not_a_memory_error():
    msg = message_of(lambda: engine.Engine(num_blocks=10**7))
    assert "num_blocks=10000000" in msg and "MAX_VALUES" in msg
    msg = message_of(lambda: tiny_llm.ModelConfig(d_model=2**20))
    assert "d_model=1048576" in msg and "parameters" in msg


def test_the_default_num_blocks_is_not_blamed_on_the_caller():
    reqs = Requests([0.0], [1], [1])
    msg = message_of(lambda: serving_core.run_continuous_batching(reqs, tiny_llm.TINY.spec, G, block_size=1))
    assert msg.startswith("the default num_blocks") and "block_size=1" in msg


def test_the_clock_never_runs_backwards():
    q: EventQueue[str] = EventQueue()
    q.push(5.0, "a")
    q.push(9.0, "b")
    assert q.pop() == (5.0, "a")
    msg = message_of(lambda: q.push(1.0, "late"), ValueError)
    assert msg == "time_s must not be earlier than the last popped event's time 5.0, got 1.0"
    q.push(5.0, "now")  # the current time itself is fine
    assert [q.pop(), q.pop()] == [(5.0, "now"), (9.0, "b")]
