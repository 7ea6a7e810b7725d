"""Block allocator throughput: Rust vs the pure-Python reference on one recorded trace.

The trace is recorded (seeded) from a small continuous-batching workload run on the reference:
requests arrive with prompts that mostly start with one of a few shared system prompts, are
admitted while blocks allow (a refused ``allocate`` stays in the trace as an ``OutOfBlocks``),
some fork for a second sample, every running sequence appends one token per step, a sequence
that cannot append is preempted (freed and re-queued), and finished ones are freed.

The same trace is then replayed on fresh allocators:

* the Python reference, one Python call per op;
* the Rust allocator through ``servelab.blocks.BlockAllocator``, one Python call per op (what an
  engine written in Python pays: here PyO3's per-call overhead dominates);
* the same through ``servelab._core`` directly (without the wrapper's extra call);
* ``BlockAllocator.replay``: the whole trace as numpy arrays in one call (the allocator's own
  speed).

Every replay must give the same status for every op and the same final observables.

A second table replays the trace's first ops with a host tier (``host_blocks``, §8 milestone 4b)
of twice the pool, ``"lru"`` and ``"hits"``, against no tier: the tier's cost per op in the Python
reference, through ``servelab.blocks`` and in ``replay``. A tier leaves every status as it was (a
recall takes a fresh block as a recomputation would): checked, and the Rust and reference tiers
end in the same state.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
from benchmarks.timing import best_of
from rich.console import Console
from rich.table import Table

from servelab import _core
from servelab.blocks import OP_ALLOCATE, OP_APPEND, OP_FORK, OP_FREE, BlockAllocator, OutOfBlocks
from servelab.reference import blocks as ref

SEED = 0


def record_trace(seed: int, n_ops: int, num_blocks: int, block_size: int):
    """Runs the workload on the reference and records every op, with its status."""
    rng = np.random.default_rng(seed)
    a = ref.BlockAllocator(num_blocks, block_size, prefix_caching=True)
    systems = [rng.integers(0, 32000, size=int(rng.integers(32, 256))).tolist() for _ in range(6)]
    op: list[int] = []
    seq: list[int] = []
    arg: list[int] = []
    prompts: list[list[int]] = []
    status: list[int] = []

    def do(code: int, s: int, x: int, fn, *args) -> bool:
        op.append(code), seq.append(s), arg.append(x)
        try:
            r = fn(*args)
        except OutOfBlocks:
            status.append(2)
            return False
        status.append(1 if code == OP_APPEND and r is not None else 0)
        return True

    waiting: deque[tuple[int, int, int, bool]] = deque()  # id, prompt index, max_new, fork
    running: dict[int, int] = {}  # seq id -> tokens still to generate
    prompt_of: dict[int, int] = {}
    next_id = 0
    while len(op) < n_ops:
        for _ in range(int(rng.poisson(1.5))):
            user = rng.integers(0, 32000, size=int(rng.integers(4, 160))).tolist()
            system = systems[int(rng.integers(len(systems)))] if rng.random() < 0.8 else []
            prompts.append(system + user)
            waiting.append((next_id, len(prompts) - 1, int(rng.integers(4, 64)), rng.random() < 0.1))
            next_id += 2  # odd ids are forked children
        while waiting:
            sid, p, max_new, fork = waiting[0]
            if not do(OP_ALLOCATE, sid, p, a.allocate, sid, prompts[p]):
                break
            waiting.popleft()
            running[sid], prompt_of[sid] = max_new, p
            if fork:
                do(OP_FORK, sid, sid + 1, a.fork, sid, sid + 1)
                running[sid + 1] = max_new
        for sid in list(running):
            token = int(rng.integers(0, 32000))
            if not do(OP_APPEND, sid, token, a.append, sid, token):
                do(OP_FREE, sid, 0, a.free, sid)  # preempted: the prompt is recomputed later
                if sid % 2 == 0:
                    waiting.appendleft((sid, prompt_of[sid], running[sid], False))
                del running[sid]
                continue
            running[sid] -= 1
            if running[sid] == 0:
                do(OP_FREE, sid, 0, a.free, sid)
                del running[sid]
    offsets = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
    tokens = np.array([t for p in prompts for t in p], dtype=np.int64)
    arrays = tuple(np.array(v, dtype=np.int64) for v in (op, seq, arg)) + (tokens, offsets)
    return arrays, prompts, np.array(status, dtype=np.int64), observables(a)


def observables(a) -> tuple:
    ids, offsets, blocks = a.block_tables()
    return (a.stats(), ids.tolist(), offsets.tolist(), blocks.tolist(),
            a.ref_counts().tolist(), a.free_queue().tolist(),
            [a.num_cached_tokens(s) for s in ids.tolist()])


def op_by_op(a, ops) -> np.ndarray:
    """One Python call per op, the way an engine in Python drives the allocator."""
    status = []
    for code, s, x in ops:
        try:
            if code == OP_ALLOCATE:
                a.allocate(s, x)
                st = 0
            elif code == OP_APPEND:
                st = 0 if a.append(s, x) is None else 1
            elif code == OP_FORK:
                a.fork(s, x)
                st = 0
            else:
                a.free(s)
                st = 0
        except OutOfBlocks:
            st = 2
        status.append(st)
    return np.array(status, dtype=np.int64)




def run(console: Console, quick: bool = False) -> None:
    n_ops, num_blocks, block_size = (20_000, 256, 16) if quick else (200_000, 512, 16)
    arrays, prompts, recorded, final = record_trace(SEED, n_ops, num_blocks, block_size)
    op, seq, arg, _, _ = arrays
    ops = [(c, s, prompts[x] if c == OP_ALLOCATE else x)
           for c, s, x in zip(op.tolist(), seq.tolist(), arg.tolist())]
    counts = np.bincount(op, minlength=4)
    console.print(f"trace: {len(op):,} ops (seed {SEED}; {counts[0]:,} allocate, {counts[1]:,} append, "
                  f"{counts[2]:,} fork, {counts[3]:,} free; {int((recorded == 2).sum()):,} OutOfBlocks, "
                  f"{int((recorded == 1).sum()):,} copy-on-writes), pool {num_blocks} blocks of "
                  f"{block_size}, prefix caching on: {final[0]['num_hits']:,} of "
                  f"{final[0]['num_lookups']:,} looked-up blocks hit")

    def new(kind):
        return {"ref": ref.BlockAllocator, "rust": BlockAllocator,
                "core": _core.BlockAllocator}[kind](num_blocks, block_size, True)

    rows = []
    for label, kind, fn, repeat in [
        ("Python reference, op by op", "ref", lambda a: op_by_op(a, ops), 1),
        ("Rust via servelab.blocks, op by op", "rust", lambda a: op_by_op(a, ops), 3),
        ("Rust via servelab._core, op by op", "core", lambda a: op_by_op(a, ops), 3),
        ("Rust replay(numpy trace), one call", "rust", lambda a: a.replay(*arrays), 5),
    ]:
        allocs = []

        def once(kind=kind, fn=fn, allocs=allocs):
            allocs.append(new(kind))
            return fn(allocs[-1])

        seconds, status = best_of(once, repeat)
        assert np.array_equal(status, recorded), f"{label}: statuses differ from the recording"
        assert observables(allocs[-1]) == final, f"{label}: final state differs from the recording"
        rows.append((label, seconds))

    base = rows[0][1]
    table = Table(title="block allocator: same trace, same final state")
    table.add_column("implementation")
    table.add_column("time", justify="right")
    table.add_column("ops/s", justify="right")
    table.add_column("vs reference", justify="right")
    for label, seconds in rows:
        table.add_row(label, f"{seconds * 1e3:,.1f} ms", f"{len(op) / seconds:,.0f}", f"{base / seconds:,.1f}x")
    console.print(table)
    console.print("Op by op, each call crosses PyO3 (argument conversion, a Python list back): "
                  "that is what an engine in Python pays. replay() is the allocator alone.")
    _host_tier(console, arrays, prompts, recorded, num_blocks, block_size, 5_000 if quick else 20_000)
    _decode_steps(console, 64 if quick else 256, 200 if quick else 1000)


def _host_tier(console: Console, arrays, prompts, recorded, num_blocks: int, block_size: int,
               n_ops: int) -> None:
    """The first ``n_ops`` of the trace with a host tier of twice the pool and without: ns per
    op, and what the tier costs (the reference's victim scan is linear in the tier's size, so
    its ops are only timed on this prefix)."""
    arrays = tuple(a[:n_ops] for a in arrays[:3]) + tuple(arrays[3:])
    recorded = recorded[:n_ops]
    op, seq, arg = (a.tolist() for a in arrays[:3])
    ops = [(c, s, prompts[x] if c == OP_ALLOCATE else x) for c, s, x in zip(op, seq, arg)]
    host = 2 * num_blocks
    tiers = {"no tier": (0, "lru"), "lru": (host, "lru"), "hits": (host, "hits")}
    impls = {"Python ref.": (ref.BlockAllocator, lambda a: op_by_op(a, ops), 1),
             "Rust per op": (BlockAllocator, lambda a: op_by_op(a, ops), 3),
             "Rust replay": (BlockAllocator, lambda a: a.replay(*arrays), 5)}
    ns: dict[tuple[str, str], float] = {}
    ends: dict[tuple[str, str], tuple] = {}
    for label, (cls, fn, repeat) in impls.items():
        for tier, (h, policy) in tiers.items():
            allocs = []

            def once(cls=cls, fn=fn, h=h, policy=policy, allocs=allocs):
                allocs.append(cls(num_blocks, block_size, True, host_blocks=h, host_policy=policy))
                return fn(allocs[-1])

            seconds, status = best_of(once, repeat, time.thread_time)
            assert np.array_equal(status, recorded), f"{label}, {tier}: statuses differ from the recording"
            a = allocs[-1]
            ends[label, tier] = observables(a) + (a.host_keys(), a.take_transfers())
            ns[label, tier] = seconds / n_ops * 1e9
    for (label, tier), end in ends.items():  # one state per tier, whoever computed it
        assert end == ends["Python ref.", tier], f"{label}, {tier}: final state differs"
    stats = ends["Python ref.", "lru"][0]
    kinds = [t[0] for t in ends["Python ref.", "lru"][-1]]
    table = Table(title=f"host tier of {host:,} blocks (twice the pool) vs none: the trace's first "
                        f"{n_ops:,} ops", title_justify="left")
    for c in ("ns per op", "no tier", "lru", "hits", "lru/none", "hits/none", "lru vs ref"):
        table.add_column(c, justify="left" if c == "ns per op" else "right")
    for label in impls:
        none, lru, hits = (ns[label, tier] for tier in tiers)
        table.add_row(label, f"{none:,.0f}", f"{lru:,.0f}", f"{hits:,.0f}", f"{lru / none:,.2f}x",
                      f"{hits / none:,.2f}x", f"{ns['Python ref.', 'lru'] / lru:,.0f}x")
    console.print(table)
    console.print("   Python ref. and Rust per op (through servelab.blocks): one Python call per op; Rust "
                  f"replay: the numpy trace in one call. lru: {kinds.count('offload'):,} offloads, "
                  f"{kinds.count('recall'):,} recalls "
                  f"({stats['num_host_hits']:,} host hits against {stats['num_hits']:,} GPU hits), "
                  f"{kinds.count('drop'):,} drops; the transfer log is read once, at the end. Same statuses "
                  "with and without the tier, the same final state in Rust and the reference (checked). "
                  "CPU time of this thread (best of 3, replay of 5; the reference once). The reference finds "
                  "its victim by a scan of the whole tier (readable, linear in host_blocks); Rust keeps the "
                  "tier ordered (a BTreeSet).")


def _decode_steps(console: Console, n_seqs: int, n_steps: int) -> None:
    """An engine's decode step through Python: one append per running sequence, or one
    append_many call for the whole step (the same state after, checked)."""
    rng = np.random.default_rng(SEED)
    prompts = [rng.integers(0, 32000, int(rng.integers(16, 200))).tolist() for _ in range(n_seqs)]
    tokens = rng.integers(0, 32000, (n_steps, n_seqs))
    ids = np.arange(n_seqs, dtype=np.int64)
    need = sum(-(-(len(p) + n_steps) // 16) for p in prompts)

    def setup() -> BlockAllocator:
        a = BlockAllocator(need, 16, True)
        for s, p in enumerate(prompts):
            a.allocate(s, p)
        return a

    def per_op(a: BlockAllocator) -> None:
        for row in tokens.tolist():
            for s, t in enumerate(row):
                a.append(s, t)

    def batched(a: BlockAllocator) -> None:
        for row in tokens:
            done, _, _ = a.append_many(ids, row)
            assert done == n_seqs

    def steps_only(fn) -> tuple[float, BlockAllocator]:
        """Best of 3 of the steps alone (the prompts are allocated before the clock starts)."""
        best, a = float("inf"), None
        for _ in range(3):
            a = setup()
            t0 = time.perf_counter()
            fn(a)
            best = min(best, time.perf_counter() - t0)
        return best, a

    t_op, a_op = steps_only(per_op)
    t_many, a_many = steps_only(batched)
    assert observables(a_op) == observables(a_many), "append_many differs from appends one by one"
    appends = n_seqs * n_steps
    table = Table(title=f"decode steps through Python: {n_steps:,} steps of {n_seqs} sequences")
    for c in ("calls", "time", "ns/append", "speed-up"):
        table.add_column(c, justify="right")
    table.add_row("append, one per sequence", f"{t_op * 1e3:,.1f} ms", f"{t_op / appends * 1e9:,.0f}", "1.0x")
    table.add_row("append_many, one per step", f"{t_many * 1e3:,.1f} ms", f"{t_many / appends * 1e9:,.0f}",
                  f"{t_op / t_many:,.1f}x")
    console.print(table)
    console.print("   The steps alone, best of 3 (prefix caching on; the prompts allocated before the clock "
                  "starts).")
