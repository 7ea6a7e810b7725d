"""One comparison for every simulator parity test: a Rust ``SimResult`` against the pure-Python
reference's dict, column by column (dtype and bits), totals exactly, and the trace if kept."""

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
