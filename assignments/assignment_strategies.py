"""Hypothesis strategies and answer checks, the one module shared by every assignment's tests
and the library's own tests (``tests/`` puts this folder on ``sys.path``), so both draw specs
from one set of ranges.

Specs reach student code as plain namespaces (:func:`plain`): the answer must come from the
fields, not from the properties or methods that servelab's own dataclasses carry.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
from hypothesis import strategies as st

from servelab import hw_model as hw
from servelab.workload import Requests


def plain(spec, **changes) -> SimpleNamespace:
    """A dataclass spec's fields only, as a ``SimpleNamespace``, with ``changes`` applied (a
    field can be made invalid this way: no ``__post_init__`` runs).

    >>> plain(hw.H100, memory_bytes=-1.0).memory_bytes
    -1.0
    """
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    fields.update(changes)
    return SimpleNamespace(**fields)


@st.composite
def models(draw) -> hw.ModelSpec:
    """Valid Llama-style models, from tiny to beyond 70B, tied or untied, 0.5-4 bytes a value
    (int4 to FP32)."""
    n_kv = draw(st.integers(1, 16))
    return hw.ModelSpec("random", n_layers=draw(st.integers(1, 128)), d_model=draw(st.integers(1, 16384)),
                        n_heads=n_kv * draw(st.integers(1, 8)), n_kv_heads=n_kv,
                        d_head=draw(st.integers(1, 256)), d_ff=draw(st.integers(1, 65536)),
                        vocab_size=draw(st.integers(1, 300_000)), tie_embeddings=draw(st.booleans()),
                        bytes_per_param=draw(st.sampled_from([0.5, 1.0, 2.0, 4.0])))


# from a laptop GPU (1 TFLOP/s, 100 GB/s) to past a B200 (10 PFLOP/s, 100 TB/s)
gpus = st.builds(hw.GpuSpec, name=st.just("random"), peak_flops=st.floats(1e12, 1e16),
                 hbm_bandwidth=st.floats(1e11, 1e14), memory_bytes=st.floats(1e9, 1e12))

efficiencies = st.builds(hw.Efficiency, compute=st.floats(0.05, 1.0), bandwidth=st.floats(0.05, 1.0),
                         overhead_s=st.floats(0.0, 0.01))

# one sequence of a step: (new tokens, tokens already cached); a batch holds 1-16 of them
sequences = st.tuples(st.integers(1, 8192), st.integers(0, 131072))
batches = st.lists(sequences, min_size=1, max_size=16)


# ---- request workloads (the simulators' tests, a6_admission) ------------------------------------

# gaps between arrivals: bursts (0), near-collisions, static batching's 0.2 s wait itself, and
# pauses long enough to drain the queue
ARRIVAL_GAPS_S = (0.0, 0.001, 0.05, 0.2, 0.5, 3.0)


@st.composite
def workloads(draw, min_n: int = 0, max_n: int = 24, max_prompt: int = 4096, max_output: int = 200) -> Requests:
    """Small bursty ``servelab.workload.Requests``: ``min_n``..``max_n`` requests from 0, 0.1
    or 3.7 s on, gaps from ``ARRIVAL_GAPS_S`` or any in [0, 5] s (many exact ties), prompts of
    1..``max_prompt`` tokens, 1..``max_output`` output tokens (often 1-3), so that every branch
    of the batching rules (full batch, timeout, ties at the start instant, idle GPU) is reached.
    Past :data:`FEW_REQUESTS` requests, numpy draws the values from a seed that Hypothesis draws."""
    n = draw(st.integers(min_n, max_n))
    if n <= FEW_REQUESTS:
        gaps = draw(st.lists(st.one_of(st.sampled_from(ARRIVAL_GAPS_S), st.floats(0.0, 0.05), st.floats(0.0, 5.0)),
                             min_size=n, max_size=n))
        start = draw(st.sampled_from([0.0, 0.1, 3.7]))
        prompt = draw(st.lists(st.integers(1, max_prompt), min_size=n, max_size=n))
        output = draw(st.lists(st.one_of(st.integers(1, min(3, max_output)), st.integers(1, max_output)),
                               min_size=n, max_size=n))
    else:  # the same kinds of values, made by numpy from a drawn seed and drawn shares
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        start = draw(st.sampled_from([0.0, 0.1, 3.7]))
        kind = rng.choice(3, n, p=draw(st.sampled_from(GAP_MIXES)))  # a listed gap, a short one, any
        gaps = np.where(kind == 0, rng.choice(ARRIVAL_GAPS_S, n), rng.uniform(0.0, np.where(kind == 1, 0.05, 5.0)))
        # prompts: any length, the shortest and the longest among them
        prompt = np.where(rng.random(n) < 0.1, rng.choice([1, max_prompt], n), rng.integers(1, max_prompt + 1, n))
        short = rng.random(n) < draw(st.sampled_from([0.0, 0.5, 1.0]))  # often 1-3 output tokens
        output = np.where(short, rng.integers(1, min(3, max_output) + 1, n), rng.integers(1, max_output + 1, n))
        prompt, output = prompt.tolist(), output.tolist()
    arrival = start + np.cumsum(np.array(gaps, dtype=np.float64)) if n else np.zeros(0)
    return Requests(arrival, prompt, output)


# workloads of up to this many requests: every value drawn (and shrunk) by Hypothesis; larger
# ones: a seed and a few shares drawn, numpy makes the values (a draw per value cost the
# assignments' grading seconds)
FEW_REQUESTS = 6
GAP_MIXES = ((1 / 3, 1 / 3, 1 / 3), (0.9, 0.05, 0.05), (0.1, 0.8, 0.1), (0.1, 0.1, 0.8))


# static batching's parameters, around demo 03's (B = 8/32/128, 0.2 s)
static_params = st.fixed_dictionaries({
    "batch_size": st.integers(1, 9),
    "max_wait_s": st.one_of(st.just(0.0), st.just(0.2), st.floats(0.0, 3.0)),
    "ride_along": st.booleans(),
})


# ---- tiny_llm token ids (a11, a12 and the tiny_llm tests) ----------------------------------------

token_ids = st.integers(min_value=0, max_value=255)  # tiny_llm's byte vocabulary


def prompts(min_size: int = 1, max_size: int = 64) -> st.SearchStrategy[list[int]]:
    """Random byte-token prompts (the acceptance range is 1..64 tokens)."""
    return st.lists(token_ids, min_size=min_size, max_size=max_size)


# one sequence of a ragged batch: (tokens already cached, new tokens, has a cache at all)
batch_entries = st.tuples(prompts(0, 40), prompts(1, 24), st.booleans())


# ---- strict answers: shape, dtype and finiteness (every comparison goes through these) ---------
#
# ``np.allclose(actual, expected)`` broadcasts: an answer of shape (0, n) "equals" anything of
# shape (n,), and ``True == 1``. So a test states what it expects of each answer, and these
# refuse anything else with a message, before any value is compared.

def answer_array(what, value, shape, kinds="iuf", finite=True):
    """``value`` as a numpy array of exactly ``shape`` (no empty or extra axis), of a dtype kind
    in ``kinds`` ("b" bool, "i"/"u" integers, "f" floats: bool is never an integer here), and
    finite unless ``finite`` is False (NaN then allowed, infinities still refused unless
    ``finite is None``).

    >>> answer_array("x", [1.0, 2.0], (2,)).tolist()
    [1.0, 2.0]
    >>> answer_array("x", np.zeros((0, 2)), (2,))
    Traceback (most recent call last):
    AssertionError: x: expected an array of shape (2,), got shape (0, 2)
    >>> answer_array("x", [True, False], (2,))
    Traceback (most recent call last):
    AssertionError: x: expected numbers (dtype kind in 'iuf'), got dtype bool
    >>> answer_array("x", [1.0, float("nan")], (2,))
    Traceback (most recent call last):
    AssertionError: x: expected finite values, got [1.0, nan]
    """
    import numpy as np

    if isinstance(value, (str, bytes, dict)) or value is None:
        raise AssertionError(f"{what}: expected an array of shape {tuple(shape)}, got {type(value).__name__} {value!r:.200}")
    try:
        got = np.asarray(value)
    except Exception as exc:  # ragged lists
        raise AssertionError(f"{what}: expected an array of shape {tuple(shape)}, got {value!r:.200} ({exc})") from None
    assert got.shape == tuple(shape), f"{what}: expected an array of shape {tuple(shape)}, got shape {got.shape}"
    assert got.dtype.kind in kinds, f"{what}: expected {_kinds(kinds)}, got dtype {got.dtype}"
    if got.dtype.kind == "f" and finite is not None:
        bad = ~np.isfinite(got) if finite else np.isinf(got)
        assert not bad.any(), f"{what}: expected {'finite values' if finite else 'no infinity'}, got {got.tolist()[:8]}"
    return got


def _kinds(kinds: str) -> str:
    return {"b": "booleans", "iu": "integers", "iuf": f"numbers (dtype kind in {kinds!r})",
            "f": "floats"}.get(kinds, f"dtype kind in {kinds!r}")


def assert_close(what, expected, actual, rtol, atol=0.0, equal_nan=False, kinds="iuf"):
    """``actual`` has ``expected``'s shape, a numeric dtype, NaN only where ``equal_nan`` allows
    it (and then only where ``expected`` has NaN), no infinity that ``expected`` lacks, and is
    close to it: an ``allclose`` that cannot be passed by broadcasting.

    >>> assert_close("t", [1.0, 2.0], [1.0, 2.0 + 1e-13], rtol=1e-12)
    >>> assert_close("t", [1.0, 2.0], [[1.0, 2.0]], rtol=1e-12)
    Traceback (most recent call last):
    AssertionError: t: expected an array of shape (2,), got shape (1, 2)
    """
    import numpy as np

    want = np.asarray(expected, dtype=float)  # float64
    finite = None if (np.isinf(want).any()) else (not equal_nan)
    got = answer_array(what, actual, want.shape, kinds, finite=finite)
    ok = np.allclose(got.astype(np.float64), want, rtol=rtol, atol=atol, equal_nan=equal_nan)
    assert ok, f"{what}: expected {want.tolist()[:8]}, got {got.tolist()[:8]}"


def answer_int(what, value):
    """``value`` as a Python int: an int or a numpy integer, never a bool or a float.

    >>> answer_int("n", np.int64(3))
    3
    >>> answer_int("n", True)
    Traceback (most recent call last):
    AssertionError: n: expected an integer, got bool True
    """
    import numpy as np

    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    assert ok, f"{what}: expected an integer, got {type(value).__name__} {value!r:.200}"
    return int(value)


def answer_bool(what, value):
    """``value`` as a Python bool: a bool or a numpy bool, never 0 or 1."""
    import numpy as np

    assert isinstance(value, (bool, np.bool_)), f"{what}: expected True or False, got {type(value).__name__} {value!r:.200}"
    return bool(value)


def answer_float(what, value, finite=True):
    """``value`` as a Python float: a float, an int or a numpy number, never a bool; finite
    unless ``finite`` is False.

    >>> answer_float("t", 2)
    2.0
    >>> answer_float("t", float("inf"))
    Traceback (most recent call last):
    AssertionError: t: expected a finite number, got inf
    """
    import math

    import numpy as np

    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    assert ok, f"{what}: expected a number, got {type(value).__name__} {value!r:.200}"
    value = float(value)
    assert not finite or math.isfinite(value), f"{what}: expected a finite number, got {value!r}"
    return value


def assert_close_float(what, expected, actual, rel_tol, abs_tol=0.0):
    """``math.isclose`` on a strictly checked number (:func:`answer_float`)."""
    import math

    got = answer_float(what, actual)
    assert math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol), f"{what}: expected {expected!r}, got {got!r}"
    return got
