"""Reference values of assignment a9_batch_invariance (exercise 10 of lecture 1, §6.5),
computed by the reference solution: what the answer key and its table show.

The demonstration of the tests: 16 rows of K = 256 and 4 columns, standard normal, seed 0,
cast to float32. Every reduction is elementwise float32 arithmetic (IEEE, correctly rounded),
so these counts are the same on every machine.
"""

from __future__ import annotations

import math

import numpy as np

SEEDS = {"demonstration x, w (numpy default_rng)": 0}
ROWS, K, N = 16, 256, 4


def answers(solution):
    bi = solution["batch_invariance"]
    rng = np.random.default_rng(SEEDS["demonstration x, w (numpy default_rng)"])
    x = rng.standard_normal((ROWS, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    # the exact product, correctly rounded (fsum): no BLAS, whose last bits vary by machine
    exact = np.array([[math.fsum(float(a) * float(b) for a, b in zip(x[r], w[:, c])) for c in range(N)]
                      for r in range(ROWS)])
    for name, kernel in (("split-K", bi.matmul_split_k), ("batch-invariant", bi.matmul_batch_invariant)):
        batch = kernel(x, w)
        alone = np.concatenate([kernel(x[r:r + 1], w) for r in range(ROWS)])
        changed = batch != alone
        label = f"ex. 10: {name}, batch 16 vs each row alone"
        yield label, "rows with a changed value", int(changed.any(axis=1).sum())
        yield label, "values changed (of 64)", int(changed.sum())
        yield label, "largest change", float(np.abs(batch.astype(np.float64) - alone).max())
        yield label, "largest error vs exact (batch 16)", float(np.abs(batch.astype(np.float64) - exact).max())
