"""The Rust block allocator against the pure-Python reference, step by step.

A Hypothesis ``RuleBasedStateMachine`` drives ``servelab.blocks.BlockAllocator`` (Rust) and
``servelab.reference.blocks.BlockAllocator`` with the same operations, on pools from one block
to a few dozen, and after every step demands that every observable agrees (results, errors and
their messages, block tables, reference counts, the free queue in order, each block's tokens and
cache key, counters) and that the allocator's invariants hold:

* free + referenced = total, and the free queue holds exactly the unreferenced blocks;
* each block's reference count equals the number of tables holding it;
* a table's blocks hold exactly its sequence's tokens (so a cache hit returned blocks whose
  stored tokens equal the request's, and no append wrote into a block someone else reads);
* a cached block in a table carries the key of that table's prefix;
* a key is registered only once its block is computed (``allocate(.., num_computed)``,
  ``mark_computed``, ``append``): a block past what its sequences have computed carries none;
* ``can_allocate(n)`` true means ``allocate`` of ``n`` tokens succeeds;
* ``OutOfBlocks`` changes nothing;
* freeing everything frees every block (checked at the end of every run);
* with a host tier (§8 milestone 4b): the same host keys in the same eviction order and the
  same transfers (offloads, recalls, drops, in order); a key in one tier only.

Under ``make test`` the ``ci`` profile runs a few thousand steps in seconds. For a long soak,
``make fuzz`` runs this file as a script (``python tests/test_blocks_state_machine.py``) with
the ``thorough`` profile and prints how many operations ran.
"""

from __future__ import annotations

import collections
import os
import sys
import time

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from servelab.blocks import BlockAllocator, OutOfBlocks, block_key
from servelab.reference import blocks as ref

# What ran, over the whole process (printed by the fuzz script).
COUNTS: collections.Counter[str] = collections.Counter()

TOKENS = st.integers(0, 2)  # a tiny vocabulary: prompts share prefixes often


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - every error is compared, type and message
        return ("err", type(e), e.args)


def snapshot(a) -> tuple:
    """Every observable of an allocator, as plain data."""
    ids = a.seq_ids()
    return (
        a.stats(),
        ids,
        [(a.block_table(s), a.num_tokens(s), a.num_cached_tokens(s), a.can_append(s)) for s in ids],
        a.ref_counts().tolist(),
        a.free_queue().tolist(),
        [(a.block_tokens(b), a.key_of(b)) for b in range(a.num_blocks)],
        [x.tolist() for x in a.block_tables()],
        (a.host_blocks, a.host_policy, a.host_keys()),
    )


def chain_keys(tokens: list[int], bs: int) -> list[int]:
    keys, parent = [], ref.ROOT_KEY
    for i in range(len(tokens) // bs):
        parent = ref.block_key(parent, tokens[i * bs:(i + 1) * bs])
        keys.append(parent)
    return keys


class BlocksMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rust: BlockAllocator | None = None
        self.ref: ref.BlockAllocator | None = None
        self.model: dict[int, list[int]] = {}  # live sequence -> its tokens
        # per block: its current content was declared computed (allocate's num_computed, a
        # hit, mark_computed, an append that filled it); a block given new content is not
        self.computed: list[bool] = []
        self.prompts: list[list[int]] = []  # every prompt and sequence seen, for shared prefixes
        self.freed: list[int] = []
        self.next_id = 0

    # ---- helpers -----------------------------------------------------------------------------

    def both(self, name: str, *args):
        """Calls `name` on both allocators; they must return the same or raise the same."""
        COUNTS["ops"] += 1
        r = outcome(getattr(self.rust, name), *args)
        p = outcome(getattr(self.ref, name), *args)
        assert r == p, f"{name}{args}: rust {r} != reference {p}"
        if r[0] == "err" and r[1] is OutOfBlocks:
            COUNTS["out_of_blocks"] += 1
        return r

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def draw_prompt(self, data) -> list[int]:
        """A fresh prompt, or (mostly) a cut of an earlier prompt or sequence plus a tail, cut
        at a block boundary more often than not, so that prefix hits are common."""
        bs = self.rust.block_size
        base: list[int] = []
        pool = self.prompts[-8:] + list(self.model.values())
        if pool and data.draw(st.integers(0, 3)):
            base = data.draw(st.sampled_from(pool))
            n_full = len(base) // bs
            cut = data.draw(st.one_of(st.integers(0, n_full).map(lambda k: k * bs),
                                      st.integers(0, len(base))))
            base = base[:cut]
        ext = data.draw(st.lists(TOKENS, min_size=0 if base else 1, max_size=2 * bs + 1))
        return base + ext

    # ---- rules -------------------------------------------------------------------------------

    @initialize(num_blocks=st.integers(1, 24), block_size=st.integers(1, 4),
                prefix_caching=st.booleans(), host_blocks=st.sampled_from([0, 0, 1, 2, 5]),
                host_policy=st.sampled_from(["lru", "hits"]))
    def setup(self, num_blocks: int, block_size: int, prefix_caching: bool, host_blocks: int,
              host_policy: str) -> None:
        COUNTS["examples"] += 1
        host_blocks *= prefix_caching  # a host tier holds cached prefixes only
        self.rust = BlockAllocator(num_blocks, block_size, prefix_caching, host_blocks, host_policy)
        self.ref = ref.BlockAllocator(num_blocks, block_size, prefix_caching, host_blocks, host_policy)
        self.computed = [False] * num_blocks

    @rule(data=st.data())
    def allocate(self, data) -> None:
        prompt = self.draw_prompt(data)
        seq_id = self.new_id()
        surely = self.rust.can_allocate(len(prompt))
        before = snapshot(self.rust)
        # None: standalone (all computed); 0: an engine's admission; else a part
        computed = data.draw(st.one_of(st.none(), st.just(0), st.integers(0, len(prompt))))
        r = self.both("allocate", seq_id, prompt, computed)
        self.prompts.append(prompt)
        if r[0] == "ok":
            self.model[seq_id] = list(prompt)
            bs, hits = self.rust.block_size, self.rust.num_cached_tokens(seq_id)
            upto = len(prompt) if computed is None else computed
            for i, b in enumerate(self.rust.block_table(seq_id)):
                self.computed[b] = i < max(hits, upto) // bs  # fresh blocks: only what is declared
            COUNTS["cached_tokens"] += self.rust.num_cached_tokens(seq_id)
        else:
            assert r[1] is OutOfBlocks and not surely, r
            assert snapshot(self.rust) == before, "OutOfBlocks changed the allocator"

    @precondition(lambda self: self.model)
    @rule(data=st.data(), token=TOKENS)
    def append(self, data, token: int) -> None:
        self.append_to(data.draw(st.sampled_from(sorted(self.model))), token)

    def append_to(self, seq_id: int, token: int) -> None:
        can = self.rust.can_append(seq_id)
        before = snapshot(self.rust)
        table = self.rust.block_table(seq_id)
        r = self.both("append", seq_id, token)
        if r[0] == "ok":
            assert can
            self.model[seq_id].append(token)
            after = self.rust.block_table(seq_id)
            if len(after) > len(table) or after[-1] != table[-1]:
                self.computed[after[-1]] = False  # a new block, or a copy: new content
            if len(self.model[seq_id]) % self.rust.block_size == 0:  # filled: all before it computed
                for b in after:
                    self.computed[b] = True
            if r[1] is not None:
                COUNTS["copies"] += 1
                src, dst = r[1]
                assert src == table[-1] and self.rust.block_table(seq_id)[-1] == dst
        else:
            assert r[1] is OutOfBlocks and not can, r
            assert snapshot(self.rust) == before, "OutOfBlocks changed the allocator"

    @precondition(lambda self: self.model)
    @rule(data=st.data(), diverge=st.booleans(), token=TOKENS)
    def fork(self, data, diverge: bool, token: int) -> None:
        parent = data.draw(st.sampled_from(sorted(self.model)))
        child = self.new_id()
        assert self.both("fork", parent, child)[0] == "ok"
        self.model[child] = list(self.model[parent])
        if diverge:  # parallel sampling: the child draws its own next token at once
            self.append_to(child, token)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def free(self, data) -> None:
        seq_id = data.draw(st.sampled_from(sorted(self.model)))
        assert self.both("free", seq_id)[0] == "ok"
        self.prompts.append(self.model.pop(seq_id))
        self.freed.append(seq_id)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def mark_computed(self, data) -> None:
        seq_id = data.draw(st.sampled_from(sorted(self.model)))
        n = data.draw(st.integers(0, len(self.model[seq_id])))
        assert self.both("mark_computed", seq_id, n)[0] == "ok"
        for b in self.rust.block_table(seq_id)[:n // self.rust.block_size]:
            self.computed[b] = True

    @rule()
    def take_transfers(self) -> None:
        """The same offloads, recalls and drops, in the same order; each recall lands in a
        block now holding that key, each offload names a key now on the host or dropped later."""
        r = self.both("take_transfers")[1]
        COUNTS["host_hits"] += sum(kind == "recall" for kind, *_ in r)
        gone = {k for kind, _, k, _ in r if kind != "offload"}
        host = set(self.rust.host_keys())
        for kind, b, k, _ in r:
            if kind == "offload":
                assert k in host or k in gone, (kind, b, k)

    @rule(n=st.integers(0, 100))
    def can_allocate(self, n: int) -> None:
        self.both("can_allocate", n)

    @rule(data=st.data())
    def bad_call(self, data) -> None:
        """Misuse: both must raise the same error with the same message, and change nothing."""
        live = sorted(self.model)
        unknown = data.draw(st.sampled_from(self.freed + [self.next_id + 1000, -5]))
        calls = [
            ("allocate", unknown, []),
            ("allocate", unknown, [0, -1]),
            ("allocate", unknown, [1, ref.TOKEN_LIMIT]),
            ("allocate", unknown, [0, 1.5]),
            ("allocate", unknown, "01"),
            ("allocate", unknown, [0, 1], 3),
            ("allocate", unknown, [0], -1),
            ("mark_computed", unknown, 0),
            ("append", unknown, 0),
            ("fork", unknown, self.next_id + 2000),
            ("free", unknown),
            ("block_table", unknown),
            ("num_cached_tokens", unknown),
            ("can_append", unknown),
            ("can_allocate", -1),
            ("block_tokens", self.rust.num_blocks),
            ("key_of", -1),
        ]
        if live:
            s = data.draw(st.sampled_from(live))
            calls += [("allocate", s, [0]), ("append", s, -1), ("append", s, 1 << 40),
                      ("append", s, None), ("fork", s, s),
                      ("mark_computed", s, -1), ("mark_computed", s, len(self.model[s]) + 1)]
        call = data.draw(st.sampled_from(calls))
        before = snapshot(self.rust)
        r = self.both(*call)
        assert r[0] == "err", call
        assert snapshot(self.rust) == before

    # ---- invariants --------------------------------------------------------------------------

    @invariant()
    def agree(self) -> None:
        if self.rust is None:
            return
        COUNTS["checks"] += 1
        snap = snapshot(self.rust)
        assert snap == snapshot(self.ref)
        self.rust.check_invariants()
        self.ref.check_invariants()
        stats, ids, seqs, refs, queue, blocks, _, (_, _, host_keys) = snap
        n, bs = stats["num_blocks"], stats["block_size"]
        assert ids == sorted(self.model)
        # free + referenced = total; the queue is exactly the unreferenced blocks.
        assert stats["num_free_blocks"] + sum(r > 0 for r in refs) == n
        assert sorted(queue) == [b for b in range(n) if refs[b] == 0]
        # reference count = number of tables holding the block.
        held = collections.Counter(b for table, *_ in seqs for b in table)
        assert refs == [held[b] for b in range(n)]
        for s, (table, n_tokens, n_cached, _) in zip(ids, seqs):
            tokens = self.model[s]
            assert n_tokens == len(tokens) and len(table) == -(-n_tokens // bs)
            # the blocks hold the sequence's tokens (hits, forks and copy-on-write included)
            assert [t for b in table for t in blocks[b][0]] == tokens, (s, table)
            assert n_cached % bs == 0 and n_cached < max(len(tokens), 1)
            if self.rust.prefix_caching:
                keys = chain_keys(tokens, bs)
                for i, b in enumerate(table):
                    key = blocks[b][1]
                    assert key is None or key == keys[i], (s, i, b)
            else:
                assert n_cached == 0 and all(k is None for _, k in blocks)
        # a key lives in one tier; the host holds at most its capacity
        assert not set(host_keys) & {k for _, k in blocks if k is not None}
        assert len(host_keys) == stats["num_host_cached_blocks"] <= stats["host_blocks"]
        if self.rust.prefix_caching:
            # registered when computed: a keyed block (in use or free) holds declared-computed KV
            for b in range(n):
                assert blocks[b][1] is None or self.computed[b], (b, self.computed)

    def teardown(self) -> None:
        if self.rust is None:
            return
        COUNTS["evictions"] += self.rust.num_evictions
        for s in sorted(self.model):
            self.both("free", s)
        snap = snapshot(self.rust)
        assert snap == snapshot(self.ref)
        assert self.rust.num_free_blocks == self.rust.num_blocks
        assert not self.rust.ref_counts().any()
        assert sorted(self.rust.free_queue().tolist()) == list(range(self.rust.num_blocks))


# A few thousand steps at least (about 5 s on CI's 2 cores), but under the second Python's
# compat profile, whose point is that a difference between Pythons fails on any input (the ci
# run on the first Python explores; its 150 machines were 10% of the second Python's lane).
BlocksMachine.TestCase.settings = settings(
    max_examples=settings.default.max_examples if os.environ.get("HYPOTHESIS_PROFILE") == "compat"
    else max(settings.default.max_examples, 150), stateful_step_count=80)
TestBlocksMachine = BlocksMachine.TestCase


def test_hash_is_identical_in_rust_and_python() -> None:
    rng = np.random.default_rng(0)
    parent = ref.ROOT_KEY
    for _ in range(50):
        tokens = rng.integers(0, ref.TOKEN_LIMIT, size=int(rng.integers(0, 20))).tolist()
        assert block_key(parent, tokens) == ref.block_key(parent, tokens)
        parent = ref.block_key(parent, tokens)
    assert block_key(parent, [ref.TOKEN_LIMIT - 1]) == ref.block_key(parent, [ref.TOKEN_LIMIT - 1])


def main() -> int:
    """The soak: ``python tests/test_blocks_state_machine.py [EXAMPLES]``."""
    sys.path.insert(0, os.path.dirname(__file__))
    import conftest  # noqa: F401 - registers the profiles

    profile = os.environ.get("HYPOTHESIS_PROFILE", "thorough")
    settings.load_profile(profile)
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else settings.default.max_examples
    steps = int(os.environ.get("FUZZ_STEPS", "200"))
    print(f"fuzzing the block allocator: profile {profile}, {examples} examples of up to "
          f"{steps} steps, Rust vs the Python reference", flush=True)
    t0 = time.perf_counter()
    test = BlocksMachine.TestCase("runTest")
    test.settings = settings(max_examples=examples, stateful_step_count=steps, deadline=None)
    test.runTest()
    dt = time.perf_counter() - t0
    print(f"ok: {COUNTS['ops']:,} operations in {COUNTS['examples']:,} runs "
          f"({COUNTS['checks']:,} full comparisons) in {dt:.1f} s, no invariant broken; "
          f"{COUNTS['out_of_blocks']:,} OutOfBlocks, {COUNTS['copies']:,} copy-on-writes, "
          f"{COUNTS['cached_tokens']:,} prefix-cached tokens, {COUNTS['evictions']:,} evictions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
