"""Tests of assignment 7 (paged blocks): a Hypothesis state machine drives your allocator and
servelab's Rust allocator with the same operations and demands the same block tables, copies,
free counts and errors after every step; plus hand-checked cases."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

import paged_blocks as mine
from servelab.blocks import BlockAllocator
from servelab.harness.calls import call_each, value

SEQ_IDS = st.integers(0, 11)


def kind(exc: Exception) -> str:
    """An exception's class name. Under the autograder a student's own exception class comes
    back as ``StudentError("OutOfBlocks: ...")``; its name is the message's first word."""
    name = type(exc).__name__
    return str(exc).split(":", 1)[0] if name == "StudentError" else name


def typed(value):
    """``value`` with every bool tagged, so that ``True`` never equals the block number 1 (nor
    ``False`` 0); lists and tuples keep their type (``[0, 1] != (0, 1)`` already)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (list, tuple)):
        return type(value)(typed(v) for v in value)
    return value


def outcome(fn, *args):
    """What a call did: ("ok", result) or ("error", exception class name)."""
    try:
        return ("ok", typed(fn(*args)))
    except Exception as exc:
        return ("error", kind(exc))


def read(got):
    """One of ``call_each``'s outcomes as :func:`outcome` says it."""
    ok, result = got
    return ("ok", typed(result)) if ok else ("error", kind(result))


def raises(name, fn, *args):
    got = outcome(fn, *args)
    assert got[0] == "error" and got[1] == name, f"expected {name}, got {got}"


class SameAsRust(RuleBasedStateMachine):
    """After every operation, your allocator's free count and every block table (and one of an
    absent id) must be servelab's. Under the autograder, each operation and the reads of the
    state after it go to your code's process in one message (servelab.harness.calls)."""

    @initialize(num_blocks=st.integers(1, 12), block_size=st.integers(1, 4))
    def start(self, num_blocks, block_size):
        self.mine = mine.PagedAllocator(num_blocks, block_size)
        self.rust = BlockAllocator(num_blocks, block_size)
        self.log = [f"PagedAllocator({num_blocks}, {block_size})"]
        self.same_state(call_each(self.state_reads(self.state_ids())))

    def state_ids(self):
        live = [s for s in range(12) if s in self.rust]
        return live + [next(i for i in range(13) if i not in live)]  # every table, one absent id

    def state_reads(self, ids):
        return [(getattr, (self.mine, "num_free_blocks"))] + [(self.mine.block_table, (s,)) for s in ids]

    def same_state(self, reads):
        free, *tables = reads
        assert typed(value(free)) == self.rust.num_free_blocks, f"num_free_blocks after {' ; '.join(self.log)}"
        for s, got in zip(self.state_ids(), tables):
            assert read(got) == outcome(self.rust.block_table, s), f"block_table({s}) after {' ; '.join(self.log)}"

    def both(self, name, mine_call, rust_call, *args):
        self.log.append(f"{name}{args}")
        want = outcome(rust_call, *args)
        got, *reads = call_each([(mine_call, args)] + self.state_reads(self.state_ids()))
        assert read(got) == want, f"after {' ; '.join(self.log)}: expected {want}, got {read(got)}"
        self.same_state(reads)

    @rule(seq_id=SEQ_IDS, n_tokens=st.integers(1, 12))
    def allocate(self, seq_id, n_tokens):
        self.both("allocate", self.mine.allocate, lambda s, n: self.rust.allocate(s, [0] * n), seq_id, n_tokens)

    @rule(seq_id=SEQ_IDS)
    def append(self, seq_id):
        self.both("append", self.mine.append, lambda s: self.rust.append(s, 0), seq_id)

    @rule(parent=SEQ_IDS, child=SEQ_IDS)
    def fork(self, parent, child):
        self.both("fork", self.mine.fork, self.rust.fork, parent, child)

    @rule(seq_id=SEQ_IDS)
    def free(self, seq_id):
        self.both("free", self.mine.free, self.rust.free, seq_id)


TestSameAsRust = SameAsRust.TestCase
# each step is one operation and the reads of the state after it (one round trip under the
# autograder): 60 runs of up to 30 steps keep grading quick and still reach full pools, forks
# and copies
TestSameAsRust.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_copy_on_write():
    a = mine.PagedAllocator(4, 4)
    assert a.allocate(1, 6) == [0, 1]
    a.fork(1, 2)
    assert a.num_free_blocks == 2
    assert a.append(2) == (1, 2), "appending into a shared, partly filled block copies it"
    assert a.block_table(2) == [0, 2] and a.block_table(1) == [0, 1]
    assert a.append(1) is None, "block 1 is no longer shared: write in place"


def test_tail_blocks_are_reused_first():
    a = mine.PagedAllocator(6, 2)
    a.allocate(1, 6)  # blocks 0, 1, 2
    a.allocate(2, 2)  # block 3
    a.free(1)  # free queue: 4, 5, 2, 1, 0
    assert a.allocate(3, 8) == [4, 5, 2, 1]
    assert a.num_free_blocks == 1


def test_out_of_blocks_changes_nothing():
    a = mine.PagedAllocator(2, 2)
    a.allocate(1, 4)
    raises("OutOfBlocks", a.append, 1)
    raises("OutOfBlocks", a.allocate, 2, 1)
    assert a.block_table(1) == [0, 1] and a.num_free_blocks == 0
    raises("KeyError", a.free, 2)
    a.free(1)
    raises("KeyError", a.free, 1)
    assert a.num_free_blocks == 2
