"""Measuring CPU time and asking whether it is predictable (lecture §5.4, demo 04 part 1).

Clockwork's premise is that one inference of a fixed shape takes the same time every time; an
LLM request does not, because its length is unknown until it ends. These helpers time a call,
summarise the spread, and fit ``time = a + b * output_len`` to see how much of a request's time
its output length explains.

>>> x = [10, 20, 40, 80]
>>> y = [0.5 + 0.01 * v for v in x]
>>> a, b = fit_affine(x, y)
>>> round(a, 6), round(b, 6), round(median_relative_error(x, y, a, b), 12)
(0.5, 0.01, 0.0)
>>> round(coefficient_of_variation([1.0, 1.0, 1.0]), 12)
0.0
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

__all__ = ["time_calls", "coefficient_of_variation", "fit_affine", "median_relative_error"]


def _as_samples(name: str, values: Sequence[float] | np.ndarray, min_len: int = 1) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size < min_len:
        raise ValueError(f"{name} must be a 1-D sequence of at least {min_len} numbers, "
                         f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {float(arr[~np.isfinite(arr)][0])!r}")
    return arr


def time_calls(fn: Callable[[], object], repeat: int, warmup: int = 3,
               before: Callable[[], object] | None = None) -> np.ndarray:
    """Seconds taken by each of ``repeat`` calls of ``fn`` (``perf_counter``), after ``warmup``
    untimed calls. ``before``, if given, runs before every call, outside the timed region.

    >>> t = time_calls(lambda: sum(range(100)), repeat=5)
    >>> t.shape, bool((t > 0).all())
    ((5,), True)
    """
    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    out = np.empty(repeat)
    for i in range(warmup + repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if i >= warmup:
            out[i - warmup] = dt
    return out


def coefficient_of_variation(samples: Sequence[float] | np.ndarray) -> float:
    """Standard deviation over mean (sample std, ``ddof=1``; 0 for a single sample).

    >>> round(coefficient_of_variation([1.0, 2.0, 3.0]), 4)
    0.5
    >>> coefficient_of_variation([0.0, 0.0])
    Traceback (most recent call last):
    ...
    ValueError: samples must have a positive mean, got 0.0
    """
    arr = _as_samples("samples", samples)
    mean = float(arr.mean())
    if mean <= 0:
        raise ValueError(f"samples must have a positive mean, got {mean!r}")
    return float(arr.std(ddof=1) / mean) if arr.size > 1 else 0.0


def fit_affine(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``y = a + b * x``.

    >>> fit_affine([1, 1], [2, 3])
    Traceback (most recent call last):
    ...
    ValueError: x must hold at least two distinct values to fit a line, got [1.0, 1.0]
    """
    xs, ys = _as_samples("x", x, 2), _as_samples("y", y, 2)
    if xs.shape != ys.shape:
        raise ValueError(f"x and y must have the same length, got {xs.size} and {ys.size}")
    if np.ptp(xs) == 0:
        raise ValueError(f"x must hold at least two distinct values to fit a line, got {xs.tolist()}")
    design = np.column_stack([np.ones_like(xs), xs])
    (a, b), *_ = np.linalg.lstsq(design, ys, rcond=None)
    return float(a), float(b)


def median_relative_error(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray,
                          a: float, b: float) -> float:
    """Median of ``|a + b * x - y| / y``: how far the fitted line is from a typical sample.

    >>> median_relative_error([1, 2, 3], [2.0, 2.0, 4.0], 0.0, 1.0)
    0.25
    """
    xs, ys = _as_samples("x", x), _as_samples("y", y)
    if xs.shape != ys.shape:
        raise ValueError(f"x and y must have the same length, got {xs.size} and {ys.size}")
    if np.any(ys <= 0):
        raise ValueError(f"y must be positive, got {float(ys[ys <= 0][0])!r}")
    return float(np.median(np.abs(a + b * xs - ys) / ys))
