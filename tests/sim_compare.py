"""One comparison for every simulator parity test: a Rust ``SimResult`` against the pure-Python
reference's dict, column by column (dtype and bits), totals exactly, and the trace if kept
(``assert_same``); or two Rust runs of one workload, by their bits (``assert_same_runs``: the
event-driven loops against the per-step loops they replace)."""

from __future__ import annotations

import numpy as np


def assert_same(rust, py: dict, columns: tuple[str, ...], totals: tuple[str, ...], trace: tuple[str, ...]) -> None:
    for k in columns:
        got, want = getattr(rust, k), py[k]
        assert got.dtype == want.dtype, k
        assert np.array_equal(got, want, equal_nan=True), (k, got, want)
    for k in totals:
        assert getattr(rust, k) == py[k], (k, getattr(rust, k), py[k])
    if py["trace"] is None:
        assert rust.trace is None
    else:
        for k in trace:
            assert np.array_equal(getattr(rust.trace, k), py["trace"][k]), k


def bits(x: np.ndarray) -> np.ndarray:
    """Floats as their bit patterns (so -0.0 != 0.0 and NaN == NaN); other dtypes as they are."""
    return x.view(np.int64) if x.dtype == np.float64 else x


def assert_same_runs(got, want, columns: tuple[str, ...], totals: tuple[str, ...], trace: tuple[str, ...],
                     context: object = None) -> None:
    """Two ``SimResult``s of one workload are one run: every column by dtype and bits, every
    total by type and repr, and, where `want` kept them, the trace by bits and the batch log entry
    by entry (where it did not, neither did `got`). `context` goes into each failure's message."""
    for k in columns:
        a, b = getattr(got, k), getattr(want, k)
        assert a.dtype == b.dtype and np.array_equal(bits(a), bits(b)), (k, context)
    for k in totals:
        a, b = getattr(got, k), getattr(want, k)
        assert type(a) is type(b) and repr(a) == repr(b), (k, a, b)
    if want.trace is None:
        assert got.trace is None and got.batch_log is None
        return
    for k in trace:
        assert np.array_equal(bits(getattr(got.trace, k)), bits(getattr(want.trace, k))), k
    assert got.batch_log.to_list() == want.batch_log.to_list()
