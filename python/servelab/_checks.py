"""Argument checks shared by the library's public functions, in one place.

Every check names the argument, shows the value and says what was allowed, so a message is
something a person can act on. Wrong types raise ``TypeError``, values out of range
``ValueError``. Integers may be Python or numpy integers, reals may be any real number type;
``bool`` (Python's or numpy's) is never taken for a number.

>>> integer("batch_size", 32, lo=1)
32
>>> integer("batch_size", 2.5, lo=1)
Traceback (most recent call last):
...
TypeError: batch_size must be an integer, got 2.5 (float)
>>> integer("seq_id", 2**70)
Traceback (most recent call last):
...
ValueError: seq_id must be an integer in [-9223372036854775808, 9223372036854775807], got 1180591620717411303424
>>> real("max_wait_s", float("nan"), lo=0.0)
Traceback (most recent call last):
...
ValueError: max_wait_s must be a finite number >= 0.0, got nan
>>> flag("trace", 1)
Traceback (most recent call last):
...
TypeError: trace must be True or False, got 1 (int)
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NoReturn, Sequence, TypeGuard, Union

import numpy as np

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_time(value: Any) -> bool:
    # numpy registers datetime64/timedelta64 as integers, but int() of one is not a count
    return isinstance(value, (np.datetime64, np.timedelta64))


def is_int(value: Any) -> TypeGuard[Union[int, np.integer]]:
    """An integer argument: Python's or numpy's, never a bool, a datetime64 or a timedelta64."""
    return isinstance(value, (numbers.Integral, np.integer)) and not _is_bool(value) and not _is_time(value)


def is_real(value: Any) -> TypeGuard[Union[float, int, np.integer, np.floating]]:
    """A real-number argument: int or float, Python's or numpy's, never a bool or a time."""
    return isinstance(value, (numbers.Real, np.integer, np.floating)) and not _is_bool(value) \
        and not _is_time(value)


def integer(name: str, value: Any, lo: int | None = INT64_MIN, hi: int | None = INT64_MAX) -> int:
    """``value`` as a Python int in ``[lo, hi]`` (``None``: unbounded on that side; the default
    is int64's range, what the Rust core can take)."""
    if _is_bool(value) or _is_time(value) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {_shown(value)} ({type(value).__name__})")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name} must be {int_wording(lo, hi)}, got {v}")
    return v


def int_wording(lo: int | None, hi: int | None, plural: bool = False) -> str:
    """The one wording of an integer range, for every message that states one.

    >>> int_wording(1, None), int_wording(0, None, plural=True), int_wording(0, 64)
    ('a positive integer', 'non-negative integers', 'an integer in [0, 64]')
    """
    if lo is not None and hi is not None:
        bound = f" in [{lo}, {hi}]"
    elif lo == 1 or lo == 0:
        return ("positive integers" if lo else "non-negative integers") if plural else \
            ("a positive integer" if lo else "a non-negative integer")
    else:
        bound = f" >= {lo}" if lo is not None else (f" <= {hi}" if hi is not None else "")
    return ("integers" if plural else "an integer") + bound


def either(allowed: Sequence[Any]) -> str:
    """``'a', 'b' or 'c'``: the allowed values of a choice, as every message words them.

    >>> either(("lru", "hits"))
    "'lru' or 'hits'"
    """
    shown = [repr(a) for a in allowed]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def choice(name: str, value: Any, allowed: Sequence[Any]) -> Any:
    """``value`` itself when it is one of ``allowed``; else ``ValueError`` listing them.

    >>> choice("host_policy", "hits", ("lru", "hits"))
    'hits'
    >>> choice("host_policy", "fifo", ("lru", "hits"))
    Traceback (most recent call last):
    ...
    ValueError: host_policy must be 'lru' or 'hits', got 'fifo'
    """
    try:
        ok = any(value == a and type(value) is type(a) for a in allowed)
    except Exception:  # a value whose == raises (a numpy array) is no choice
        ok = False
    if not ok:
        raise ValueError(f"{name} must be {either(allowed)}, got {_shown(value)}")
    return value


def real(name: str, value: Any, lo: float | None = None, hi: float | None = None, *,
         lo_open: bool = False, finite: bool = True) -> float:
    """``value`` as a float, finite unless ``finite=False``, ``>= lo`` (``> lo`` when
    ``lo_open``) and ``<= hi``. With ``finite=False`` and no bounds it checks the type only
    (NaN passes: the caller's own range check names it)."""
    if _is_bool(value) or _is_time(value) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {_shown(value)} ({type(value).__name__})")
    try:
        v = float(value)
    except OverflowError:  # an int past float's range
        v = math.inf if int(value) > 0 else -math.inf  # type: ignore[arg-type]
    bounds = []
    if lo is not None:
        bounds.append(f"{'>' if lo_open else '>='} {lo!r}")
    if hi is not None:
        bounds.append(f"<= {hi!r}")
    ok = math.isfinite(v) or not finite  # NaN fails here or on a bound, not on a type check
    ok = ok and (lo is None or (v > lo if lo_open else v >= lo)) and (hi is None or v <= hi)
    if not ok:
        what = "a finite number" if finite else "a number"
        raise ValueError(f"{name} must be {what}{' ' + ' and '.join(bounds) if bounds else ''}, "
                         f"got {_shown(value)}")
    return v


def is_bool(value: Any) -> bool:
    """A flag argument: Python's or numpy's bool (never 0 or 1)."""
    return _is_bool(value)


def positive_int(name: str, value: Any, hi: int | None = INT64_MAX) -> int:
    """``value`` as a Python int in ``[1, hi]``: a count or a size. Every refusal is a
    ``ValueError`` (2.5 or ``True`` is a bad count, as the Rust core, which checks the same
    arguments, says too), worded "a positive integer".

    >>> positive_int("block_size", np.int64(16))
    16
    >>> positive_int("num_blocks", True)
    Traceback (most recent call last):
    ...
    ValueError: num_blocks must be a positive integer, got True
    >>> positive_int("prompt_len", 10**6, hi=2**17)
    Traceback (most recent call last):
    ...
    ValueError: prompt_len must be an integer in [1, 131072], got 1000000
    """
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be {int_wording(1, None)}, got {_shown(int(value) if is_int(value) else value)}")
    v = int(value)
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be {int_wording(1, hi)}, got {v}")
    return v


def count(name: str, value: Any, hi: int | None = None) -> int:
    """``value`` as a Python int in ``[0, hi]`` (a number of things, which may be none);
    ``TypeError`` if it is no integer.

    >>> count("n", -1)
    Traceback (most recent call last):
    ...
    ValueError: n must be a non-negative integer, got -1
    """
    v = integer(name, value, lo=None, hi=None)
    if v < 0:
        raise ValueError(f"{name} must be {int_wording(0, None)}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be {int_wording(0, hi)}, got {v}")
    return v


def positive(name: str, value: Any) -> float:
    """``value`` as a float, finite and > 0 (a rate, a duration, a mean); ``TypeError`` if it is
    no real number.

    >>> positive("rate", 0)
    Traceback (most recent call last):
    ...
    ValueError: rate must be a positive finite number, got 0
    """
    v = real(name, value, finite=False)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number, got {_shown(value)}")
    return v


def non_negative(name: str, value: Any) -> float:
    """``value`` as a float, finite and >= 0 (a spread, a wait); ``TypeError`` if it is no real
    number.

    >>> non_negative("sigma", -1.0)
    Traceback (most recent call last):
    ...
    ValueError: sigma must be a finite number >= 0, got -1.0
    """
    v = real(name, value, finite=False)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {_shown(value)}")
    return v


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool: only ``True`` or ``False`` (numpy's too)."""
    if not _is_bool(value):
        raise TypeError(f"{name} must be True or False, got {_shown(value)} ({type(value).__name__})")
    return bool(value)


def instance(name: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` itself when it is a ``kind``; else ``TypeError`` saying ``what`` was expected."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {what}, got {_shown(value)} ({type(value).__name__})")
    return value


def int64_array(name: str, values: Any) -> np.ndarray:
    """``values`` as a contiguous 1-D int64 array (what the Rust core's array arguments take):
    any integer dtype whose values fit; floats, bools, objects and other shapes are refused.

    >>> int64_array("offsets", np.array([0, 2], dtype=np.int32)).dtype
    dtype('int64')
    >>> int64_array("offsets", [0.0, 2.0])
    Traceback (most recent call last):
    ...
    ValueError: offsets must hold integers, got dtype float64
    """
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{name} must be a 1-D array of integers, got {_shown(values)} ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.size and arr.dtype.kind == "u" and int(arr.max()) > INT64_MAX:  # would wrap to negative
        i = int(np.argmax(arr > INT64_MAX))
        raise ValueError(f"{name}[{i}] must fit in a signed 64-bit integer, got {int(arr[i])}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def seed(name: str, value: Any) -> int | np.random.SeedSequence:
    """A seed for ``numpy.random.default_rng``: a non-negative integer or a ``SeedSequence``.

    >>> seed("seed", -1)
    Traceback (most recent call last):
    ...
    ValueError: seed must be a non-negative integer, got -1
    """
    if isinstance(value, np.random.SeedSequence):
        return value
    if _is_bool(value) or _is_time(value) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be a non-negative integer or a numpy SeedSequence, got {_shown(value)} "
                        f"({type(value).__name__})")
    return integer(name, value, 0, None)


def reraise_named(exc: BaseException, ints: dict[str, Any] | None = None,
                  flags: dict[str, Any] | None = None) -> NoReturn:
    """The Rust core refused an argument with a message that names nothing ("'NoneType' object
    cannot be interpreted as an integer", "Python int too large to convert to C long"): check
    the arguments here, so the error names the first bad one; re-raise ``exc`` if none is."""
    try:
        for name, value in (ints or {}).items():
            integer(name, value)
        for name, value in (flags or {}).items():
            flag(name, value)
    except (TypeError, ValueError) as named:
        if isinstance(exc, OverflowError) and isinstance(named, ValueError):
            raise OverflowError(str(named)) from None  # the same type as before, now named
        raise named from None
    raise exc
