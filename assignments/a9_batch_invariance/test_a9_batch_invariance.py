"""Tests of assignment 9 (batch invariance, exercise 10): the summation order bit for bit
against a slow scalar reference (``servelab.tiny_llm.ordered_sum``), the batch-invariant
kernel's rows identical in any batch, the split-K kernel's rows really changing with the batch
size, and both equal to an exact product up to float32 rounding."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import batch_invariance as mine
from assignment_strategies import answer_array, answer_int
from servelab.harness.calls import call_each, value
from servelab.tiny_llm.ordered_sum import ordered_matmul as scalar_reference  # the slow, plain order

EPS32 = float(np.finfo(np.float32).eps) / 2  # unit roundoff of float32


def bits(a):
    return np.asarray(a).view(np.uint32)


def check_float32(what, got, shape):
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == shape, \
        f"{what}: expected a float32 array of shape {shape}, got {got.dtype} {got.shape}"
    return got


def same_bits(what, want, got):
    got = check_float32(what, got, want.shape)
    diff = np.flatnonzero(bits(got) != bits(want))
    assert diff.size == 0, (f"{what}: {diff.size} of {want.size} values differ in their bits, first at flat index "
                            f"{diff[0]}: expected {want.flat[diff[0]]!r}, got {got.flat[diff[0]]!r}")


def close_to_exact(what, x, w, got):
    """Within the rounding a float32 sum of K terms may make, of the exact (float64) product."""
    exact = x.astype(np.float64) @ w.astype(np.float64)
    got = check_float32(what, got, exact.shape)
    k = x.shape[1]
    bound = 2 * (k + 1) * EPS32 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64)) + k * 1e-37
    bad = np.flatnonzero(~(np.abs(got.astype(np.float64) - exact) <= bound))
    assert bad.size == 0, (f"{what}: {bad.size} values too far from x @ w, first at flat index {bad[0]}: "
                           f"expected {exact.flat[bad[0]]!r} (+- {bound.flat[bad[0]]:.3g}), got {got.flat[bad[0]]!r}")


values = st.floats(-8.0, 8.0, width=32, allow_subnormal=False)
FEW = 8  # arrays up to this size: every value drawn (and shrunk) by Hypothesis


@st.composite
def float32s(draw, count):
    """``count`` float32 values in [-8, 8]. A few are drawn one by one; more are made by numpy
    from a drawn seed, in a drawn spread of magnitudes (the same signs and sizes a sum's
    rounding depends on), with a few drawn values (0, -0, 8, ...) scattered among them: a
    thousand values cost Hypothesis a dozen choices, not a thousand."""
    if count <= FEW:
        return np.array(draw(st.lists(values, min_size=count, max_size=count)), dtype=np.float32)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    low = draw(st.sampled_from([-20, -3, 0, 2]))  # magnitudes 2**low .. 8
    got = rng.choice([-1.0, 1.0], count) * np.exp2(rng.uniform(low, 3, count))
    if draw(st.booleans()):  # a few chosen values scattered among the random ones
        special = draw(st.lists(values, min_size=1, max_size=4))
        spots = rng.random(count) < draw(st.sampled_from([0.05, 0.5]))
        got[spots] = rng.choice(special, int(spots.sum()))
    return got.astype(np.float32)


@st.composite
def problems(draw, max_rows=6, max_k=40):
    """A batch ``x`` (B, K) and weights ``w`` (K, N), float32."""
    b, k, n = draw(st.integers(1, max_rows)), draw(st.integers(1, max_k)), draw(st.integers(1, 3))
    return draw(float32s(b * k)).reshape(b, k), draw(float32s(k * n)).reshape(k, n)


def random_problem(rows, k, n, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32))


@given(problems(), st.data())
def test_reduce_in_pieces_bit_for_bit(p, data):
    x, w = p
    k = x.shape[1]
    starts = [0] + sorted(data.draw(st.sets(st.integers(1, k - 1), max_size=6))) if k > 1 else [0]
    same_bits(f"reduce_in_pieces(x={x.tolist()}, w={w.tolist()}, starts={starts})",
              scalar_reference(x, w, starts), mine.reduce_in_pieces(x, w, starts))


@given(st.integers(1, 300), st.data())
def test_piece_starts(k, data):
    pieces = data.draw(st.integers(1, k))
    want = [int(part[0]) for part in np.array_split(np.arange(k), pieces)]
    got = mine.piece_starts(k, pieces)
    got = answer_array(f"piece_starts(k={k}, pieces={pieces})", got, (len(want),), kinds="iu").tolist()
    assert got == want, f"piece_starts(k={k}, pieces={pieces}): expected {want}, got {got}"


@given(problems(max_rows=20, max_k=48))
def test_split_k_follows_its_split_rule(p):
    x, w = p
    b, k = x.shape
    s = answer_int(f"split_count({b}, {k})", mine.split_count(b, k))
    # bounded before the grader splits by it (1..K pieces: np.array_split into 6 million pieces
    # would take 1.7 GB here); more pieces than K would leave empty ones, which no rule makes
    assert 1 <= s <= k, f"split_count({b}, {k}) must cut K={k} into 1 to {k} pieces, got {s}"
    starts = [int(part[0]) for part in np.array_split(np.arange(k), s)]
    same_bits(f"matmul_split_k(x={x.tolist()}, w={w.tolist()}) (B={b}, K={k}: {s} pieces at {starts})",
              scalar_reference(x, w, starts), mine.matmul_split_k(x, w))


@given(problems(), st.sampled_from([1, 4, 8, 32]), st.data())
def test_batch_invariant_rows_are_identical_in_any_batch(p, block_k, data):
    """Every row, computed alone, in the whole batch, and in a shuffled batch with other rows,
    has the same bits (and those are the order of the module docstring)."""
    x, w = p
    b, k = x.shape
    others = data.draw(float32s(k * data.draw(st.integers(1, 5)))).reshape(-1, k)
    mixed = np.concatenate([x, others])
    order = data.draw(st.permutations(range(len(mixed))))
    # the whole batch, the shuffled one and each row alone, in one message to your code's
    # process under the autograder (servelab.harness.calls), then checked in that order
    whole, shuffled, *alones = call_each([(mine.matmul_batch_invariant, (x, w, block_k)),
                                          (mine.matmul_batch_invariant, (mixed[order], w, block_k))]
                                         + [(mine.matmul_batch_invariant, (x[r:r + 1], w, block_k)) for r in range(b)])
    whole = value(whole)
    same_bits(f"matmul_batch_invariant(x={x.tolist()}, w={w.tolist()}, block_k={block_k})",
              scalar_reference(x, w, np.arange(0, k, block_k).tolist()), whole)  # a piece every block_k
    shuffled = value(shuffled)
    for r in range(b):
        alone = value(alones[r])
        same_bits(f"row {r} of x={x.tolist()} alone vs in the batch of {b} (w={w.tolist()}, block_k={block_k})",
                  check_float32("matmul_batch_invariant", whole, (b, w.shape[1]))[r:r + 1], alone)
        at = list(order).index(r)
        same_bits(f"row {r} of x={x.tolist()} alone vs at position {at} of a batch of {len(mixed)} "
                  f"(w={w.tolist()}, block_k={block_k})", np.asarray(alone),
                  check_float32("matmul_batch_invariant", shuffled, (len(mixed), w.shape[1]))[at:at + 1])


@given(problems(max_rows=20, max_k=64))
def test_both_kernels_agree_with_the_exact_product(p):
    x, w = p
    close_to_exact(f"matmul_split_k(x={x.tolist()}, w={w.tolist()})", x, w, mine.matmul_split_k(x, w))
    close_to_exact(f"matmul_batch_invariant(x={x.tolist()}, w={w.tolist()})", x, w, mine.matmul_batch_invariant(x, w))


def test_split_k_changes_with_the_batch_size():
    """The demonstration: 16 random rows of K = 256 (seed 0). In a batch of 16 the split-K
    kernel sums each row in one piece; alone, in 16 pieces. Some rows come out different, by a
    few float32 roundings; the batch-invariant kernel gives every row the same bits both ways."""
    x, w = random_problem(16, 256, 4, seed=0)
    batch = check_float32("matmul_split_k on 16 rows", mine.matmul_split_k(x, w), (16, 4))
    alone = np.concatenate([check_float32(f"matmul_split_k on row {r} alone", mine.matmul_split_k(x[r:r + 1], w), (1, 4))
                            for r in range(16)])
    changed = int((bits(batch) != bits(alone)).any(axis=1).sum())
    assert changed >= 4, f"split-K: expected several of the 16 rows to change between batch 16 and batch 1, got {changed}"
    close_to_exact("split-K, rows alone", x, w, alone)
    close_to_exact("split-K, batch of 16", x, w, batch)
    inv_batch = mine.matmul_batch_invariant(x, w)
    for r in range(16):
        same_bits(f"batch-invariant row {r} (seed 0, K = 256): alone vs in the batch of 16",
                  check_float32("matmul_batch_invariant", inv_batch, (16, 4))[r:r + 1],
                  mine.matmul_batch_invariant(x[r:r + 1], w))
