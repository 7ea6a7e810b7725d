"""Workloads: who arrives when, with how long a prompt, wanting how many tokens (lecture §4.5).

* :class:`Requests` holds a workload as three numpy columns (``arrival_s``, ``prompt_len``,
  ``output_len``), validated on construction: bad input raises ``ValueError`` naming the value.
* :func:`poisson_arrivals` and :func:`piecewise_poisson_arrivals` (bursts) make arrival times;
  :func:`lognormal_lengths` makes long-tailed lengths; :func:`chat_requests` puts them together
  into the lecture's chat workload.
* :class:`SharedPrefixes` says which earlier request each prompt starts with, and for how many
  tokens (prefix caching, §3.5); :func:`chat_sessions` draws a chat service's workload with
  system prompts shared across conversations and multi-turn conversations.
* :func:`load_trace_csv` reads a CSV trace (the Azure LLM inference trace's columns accepted),
  and :func:`azure_trace` replays the two Azure traces (November 2023) shipped in
  ``servelab/data/azure_llm_2023/`` (CC BY 4.0, see the README there).

Randomness is seeded and split into independent streams (arrivals, prompts, outputs), so the
same seed gives the same lengths at every arrival rate: a sweep over rates compares the same
requests, only closer together ("common random numbers"). Arrivals at rate ``r`` are unit-rate
arrivals divided by ``r``.

>>> reqs = chat_requests(n=4, rate=2.0, seed=1)
>>> len(reqs), reqs.arrival_s.dtype, reqs.prompt_len.dtype
(4, dtype('float64'), dtype('int64'))
>>> slower = chat_requests(n=4, rate=1.0, seed=1)
>>> bool((slower.output_len == reqs.output_len).all()), bool((slower.arrival_s == 2 * reqs.arrival_s).all())
(True, True)
>>> Requests([0.0, 1.0], [5, 0], [3, 3])
Traceback (most recent call last):
...
ValueError: prompt_len[1] must be an integer in [1, 16777216], got 0
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from servelab import _checks, _core

__all__ = [
    "Requests",
    "check_shared_prefixes",
    "MAX_REQUEST_TOKENS",
    "MAX_REQUESTS",
    "CHAT_PROMPT_MEAN",
    "CHAT_PROMPT_SIGMA",
    "CHAT_OUTPUT_MEAN",
    "CHAT_OUTPUT_SIGMA",
    "CHAT_MAX_LEN",
    "poisson_arrivals",
    "piecewise_poisson_arrivals",
    "lognormal_lengths",
    "chat_requests",
    "SharedPrefixes",
    "chat_sessions",
    "load_trace_csv",
    "azure_trace",
    "AZURE_TRACES",
]

MAX_REQUEST_TOKENS: int = _core.MAX_REQUEST_TOKENS  # 2**24, the simulator's bound
# Most requests a generator draws at once (2**27: a gigabyte per column). A count past it is a
# ValueError naming the argument, not a MemoryError halfway through.
MAX_REQUESTS = 2**27

# The lecture's chat workload (§4.5): "prompt mean 512, output mean 256, both long-tailed
# lognormal". The lecture does not print the sigmas. The output sigma sets everything demo 03
# measures (how long a batch-1 request holds the GPU, how far the longest of a static batch
# is from the mean); 0.8 was chosen by scanning 0.8-1.4 (with caps 1536-8192) over six seeds:
# it puts static batching at 3/6/8.5x batch 1 with 60/74/82% seat waste and exercise 5's
# throughputs within 10%, while batch 1 stays at 0.62-0.68 req/s and 162 tok/s. Sigma 1.0
# gives 2.5/4.6/5.4x and 67/80/87% waste, far from the lecture. The prompt sigma changes
# little (prefill is a small share of the time); it is 0.8 too. Lengths are capped at
# CHAT_MAX_LEN (Llama-3-8B's 8K context window), which sigma 0.8 almost never reaches.
CHAT_PROMPT_MEAN = 512
CHAT_PROMPT_SIGMA = 0.8
CHAT_OUTPUT_MEAN = 256
CHAT_OUTPUT_SIGMA = 0.8
CHAT_MAX_LEN = 8192


# ---- the container -----------------------------------------------------------------------------

def _asarray(name: str, values: object) -> np.ndarray:
    try:
        return np.asarray(values)
    except (TypeError, ValueError, OverflowError) as exc:  # ragged nesting, odd objects
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got {values!r:.80} ({exc})") from None


def _float_column(name: str, values: object) -> np.ndarray:
    arr = _asarray(name, values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
                                 or arr.size == 0):
        raise ValueError(f"{name} must hold numbers, got dtype {arr.dtype}")
    return np.array(arr, dtype=np.float64)


def _int_column(name: str, values: object) -> np.ndarray:
    arr = _asarray(name, values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if np.issubdtype(arr.dtype, np.integer) and arr.dtype != bool:
        if arr.dtype == np.uint64 and int(arr.max()) > MAX_REQUEST_TOKENS:
            i = int(np.argmax(arr > MAX_REQUEST_TOKENS))
            raise ValueError(f"{name}[{i}] must be an integer in [1, {MAX_REQUEST_TOKENS}], got {arr[i]}")
        return np.array(arr, dtype=np.int64)
    if np.issubdtype(arr.dtype, np.floating):  # whole numbers in a float array are fine
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{name}[{i}] must be an integer in [1, {MAX_REQUEST_TOKENS}], got {float(arr[i])!r}")
        big = np.abs(arr) > MAX_REQUEST_TOKENS
        if big.any():
            i = int(np.argmax(big))
            raise ValueError(f"{name}[{i}] must be an integer in [1, {MAX_REQUEST_TOKENS}], got {float(arr[i])!r}")
        return arr.astype(np.int64)
    if arr.dtype == object:  # a list of Python ints too big for int64 lands here
        try:
            return _int_column(name, np.array([_whole(name, i, v) for i, v in enumerate(arr)], dtype=np.int64))
        except OverflowError:
            pass
    raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")


def _whole(name: str, i: int, v: object) -> int:
    if not _checks.is_int(v):
        raise ValueError(f"{name}[{i}] must be an integer in [1, {MAX_REQUEST_TOKENS}], got {v!r}")
    if not 1 <= int(v) <= MAX_REQUEST_TOKENS:
        raise ValueError(f"{name}[{i}] must be an integer in [1, {MAX_REQUEST_TOKENS}], got {v}")
    return int(v)


@dataclass(frozen=True, eq=False)
class Requests:
    """A workload: request ``i`` arrives at ``arrival_s[i]`` seconds with a prompt of
    ``prompt_len[i]`` tokens and wants ``output_len[i]`` output tokens.

    Validated on construction (the same rules as the Rust simulator, with the same messages):
    equal lengths; arrival times finite, ``>= 0`` and sorted; lengths whole numbers in
    ``[1, MAX_REQUEST_TOKENS]``. The columns are stored as read-only copies (float64, int64).

    >>> r = Requests(arrival_s=[0.0, 0.5, 0.5], prompt_len=[512, 64, 2048], output_len=[256, 1, 20])
    >>> len(r), r.total_output_tokens
    (3, 277)
    >>> r[1:].prompt_len.tolist()
    [64, 2048]
    >>> Requests([1.0, 0.5], [1, 1], [1, 1])
    Traceback (most recent call last):
    ...
    ValueError: arrival_s must be sorted, got arrival_s[1]=0.5 after arrival_s[0]=1.0
    >>> Requests([float("nan")], [1], [1])
    Traceback (most recent call last):
    ...
    ValueError: arrival_s[0] must be a finite number >= 0, got nan
    """

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    if TYPE_CHECKING:  # what the constructor takes (the fields hold the validated arrays)
        def __init__(self, arrival_s: Sequence[float] | np.ndarray, prompt_len: Sequence[int] | np.ndarray,
                     output_len: Sequence[int] | np.ndarray) -> None: ...

    def __post_init__(self) -> None:
        a = _float_column("arrival_s", self.arrival_s)
        p = _int_column("prompt_len", self.prompt_len)
        o = _int_column("output_len", self.output_len)
        if not len(a) == len(p) == len(o):
            raise ValueError("arrival_s, prompt_len and output_len must have the same length, "
                             f"got {len(a)}, {len(p)} and {len(o)}")
        bad = ~np.isfinite(a) | (a < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"arrival_s[{i}] must be a finite number >= 0, got {float(a[i])!r}")
        if len(a) > 1:
            down = a[1:] < a[:-1]
            if down.any():
                i = int(np.argmax(down)) + 1
                raise ValueError(f"arrival_s must be sorted, got arrival_s[{i}]={float(a[i])!r} "
                                 f"after arrival_s[{i - 1}]={float(a[i - 1])!r}")
        for name, col in (("prompt_len", p), ("output_len", o)):
            out = (col < 1) | (col > MAX_REQUEST_TOKENS)
            if out.any():
                i = int(np.argmax(out))
                raise ValueError(f"{name}[{i}] must be an integer in [1, {MAX_REQUEST_TOKENS}], got {int(col[i])}")
        for name, col in (("arrival_s", a), ("prompt_len", p), ("output_len", o)):
            col.flags.writeable = False
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def __getitem__(self, index: slice) -> Requests:
        """A contiguous slice (still sorted): ``reqs[:100]``."""
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise ValueError(f"Requests can only be sliced with a contiguous slice, got {index!r}")
        return Requests(self.arrival_s[index], self.prompt_len[index], self.output_len[index])

    def __repr__(self) -> str:
        if not len(self):
            return "Requests(n=0)"
        span = float(self.arrival_s[-1] - self.arrival_s[0])
        return (f"Requests(n={len(self)}, span_s={span:.4g}, mean_prompt={self.prompt_len.mean():.1f}, "
                f"mean_output={self.output_len.mean():.1f})")

    @property
    def total_output_tokens(self) -> int:
        return int(self.output_len.sum())

    def with_arrivals(self, arrival_s: Sequence[float] | np.ndarray) -> Requests:
        """The same requests arriving at other times."""
        return Requests(arrival_s, self.prompt_len, self.output_len)

    def speed_up(self, factor: float) -> Requests:
        """The same requests arriving ``factor`` times as fast (arrival times divided by it),
        e.g. to replay a trace at another load.

        >>> Requests([0.0, 2.0], [1, 1], [1, 1]).speed_up(4).arrival_s.tolist()
        [0.0, 0.5]
        """
        f = _checks.positive("factor", factor)
        with np.errstate(over="ignore"):
            arrival_s = self.arrival_s / f
        if not np.isfinite(arrival_s).all():
            raise ValueError(f"factor={factor!r} is too small: arrival times would overflow to infinity")
        return self.with_arrivals(arrival_s)


# ---- arrivals ----------------------------------------------------------------------------------

def poisson_arrivals(n: int, rate: float, seed: int | np.random.SeedSequence = 0) -> np.ndarray:
    """``n`` arrival times of a Poisson process of ``rate`` requests per second, from time 0.

    Exponential gaps of mean ``1 / rate``, summed. The gaps are drawn at unit rate and divided
    by ``rate``, so the same seed at twice the rate gives the same arrivals at half the times.

    >>> poisson_arrivals(3, rate=1.0, seed=0).round(3).tolist()
    [0.68, 1.7, 1.719]
    """
    n = _checks.count("n", n, MAX_REQUESTS)
    rate = _checks.positive("rate", rate)
    gaps = np.random.default_rng(_checks.seed("seed", seed)).standard_exponential(n)
    t = np.cumsum(gaps) / rate
    if n and not math.isfinite(t[-1]):
        raise ValueError(f"rate={rate!r} is too small: {n} arrivals would come after the largest "
                         "float, at infinity")
    return t


def piecewise_poisson_arrivals(breaks_s: Sequence[float], rates: Sequence[float],
                               seed: int | np.random.SeedSequence = 0) -> np.ndarray:
    """Arrival times of a Poisson process whose rate is piecewise constant: ``rates[i]``
    requests per second on ``[breaks_s[i], breaks_s[i+1])``. Bursts, e.g. demo 04's 60 req/s
    with 200 req/s during seconds 10-12::

        piecewise_poisson_arrivals([0, 10, 12, 30], [60, 200, 60])

    Drawn by time rescaling: unit-rate Poisson points on the cumulative rate, mapped back to
    time. A rate of 0 makes a quiet interval.

    >>> t = piecewise_poisson_arrivals([0, 1, 2], [0.0, 1000.0], seed=0)
    >>> bool(t.min() >= 1.0 and t.max() < 2.0), 900 < len(t) < 1100
    (True, True)
    """
    b, r = _float_column("breaks_s", breaks_s), _float_column("rates", rates)
    seed = _checks.seed("seed", seed)
    if b.ndim != 1 or r.ndim != 1 or len(b) != len(r) + 1 or len(r) == 0:
        raise ValueError(f"breaks_s must have one more entry than rates, got {len(b)} and {len(r)}")
    if not np.isfinite(b).all() or b[0] < 0 or (np.diff(b) <= 0).any():
        raise ValueError(f"breaks_s must be finite, >= 0 and strictly increasing, got {b.tolist()}")
    if not np.isfinite(r).all() or (r < 0).any():
        raise ValueError(f"rates must be finite and >= 0, got {r.tolist()}")
    cum = np.concatenate([[0.0], np.cumsum(r * np.diff(b))])  # cumulative rate at each break
    rng = np.random.default_rng(seed)
    expected = cum[-1]
    if not expected <= MAX_REQUESTS / 2:  # also catches an overflow to inf
        raise ValueError(f"rates x (breaks_s intervals) expect {expected:.4g} arrivals, more than "
                         f"MAX_REQUESTS / 2 = {MAX_REQUESTS // 2}; rates={r.tolist()[:8]}, "
                         f"breaks_s={b.tolist()[:8]}")
    points = np.cumsum(rng.standard_exponential(int(expected + 10 * math.sqrt(expected) + 10)))
    while len(points) and points[-1] < cum[-1]:  # rarely: draw more
        more = np.cumsum(rng.standard_exponential(len(points) + 10)) + points[-1]
        points = np.concatenate([points, more])
    points = points[points < cum[-1]]
    seg = np.searchsorted(cum, points, side="right") - 1
    seg = np.minimum(seg, len(r) - 1)
    # points never fall in a zero-rate segment (its cumulative width is 0)
    return b[seg] + (points - cum[seg]) / r[seg]


# ---- lengths -----------------------------------------------------------------------------------

def lognormal_lengths(n: int, mean: float, sigma: float, seed: int | np.random.SeedSequence = 0,
                      max_len: int | None = None) -> np.ndarray:
    """``n`` token counts from a lognormal of the given ``mean`` and log-space ``sigma``.

    ``mu = ln(mean) - sigma**2 / 2`` makes ``mean`` the mean of the continuous distribution;
    values are then rounded to whole tokens and clipped to ``[1, max_len]``, which moves the
    sample mean a little (clipping the tail lowers it). ``sigma = 0`` gives ``mean`` every time.

    >>> lognormal_lengths(5, mean=100, sigma=0.0).tolist()
    [100, 100, 100, 100, 100]
    >>> x = lognormal_lengths(100_000, mean=256, sigma=1.0, seed=3)
    >>> bool(245 < x.mean() < 267), int(x.min()) >= 1
    (True, True)
    """
    n = _checks.count("n", n, MAX_REQUESTS)
    mean = _checks.positive("mean", mean)
    seed = _checks.seed("seed", seed)
    _checks.non_negative("sigma", sigma)
    hi = MAX_REQUEST_TOKENS if max_len is None else _checks.count("max_len", max_len)
    if not 1 <= hi <= MAX_REQUEST_TOKENS:
        raise ValueError(f"max_len must be an integer in [1, {MAX_REQUEST_TOKENS}], got {max_len!r}")
    sigma = float(sigma) + 0.0  # -0.0 -> 0.0 (numpy refuses a negative zero)
    try:
        mu = math.log(mean) - sigma ** 2 / 2
    except OverflowError:
        raise ValueError(f"sigma={sigma!r} is too large: sigma**2 overflows a float") from None
    x = np.random.default_rng(seed).lognormal(mu, sigma, n)
    return np.clip(np.rint(x), 1, hi).astype(np.int64)


def chat_requests(n: int = 600, rate: float = 0.5, seed: int = 0, *,
                  prompt_mean: float = CHAT_PROMPT_MEAN, prompt_sigma: float = CHAT_PROMPT_SIGMA,
                  output_mean: float = CHAT_OUTPUT_MEAN, output_sigma: float = CHAT_OUTPUT_SIGMA,
                  max_len: int = CHAT_MAX_LEN) -> Requests:
    """The lecture's chat workload (§4.5): Poisson arrivals at ``rate`` req/s, lognormal prompts
    (mean 512) and outputs (mean 256). Arrivals, prompts and outputs draw from three independent
    streams of ``seed``: changing ``rate`` moves the arrivals and nothing else.

    >>> r = chat_requests(n=2000, rate=1.0, seed=0)
    >>> bool(450 < r.prompt_len.mean() < 570), bool(225 < r.output_len.mean() < 285)
    (True, True)
    """
    arrivals, prompts, outputs = np.random.SeedSequence(_checks.count("seed", seed)).spawn(3)
    n = _checks.count("n", n, MAX_REQUESTS)
    # checked here too, so that a bad prompt_mean is named as such (not as lognormal's "mean")
    for name, value in (("prompt_mean", prompt_mean), ("output_mean", output_mean)):
        _checks.positive(name, value)
    for name, value in (("prompt_sigma", prompt_sigma), ("output_sigma", output_sigma)):
        _checks.non_negative(name, value)
        if not math.isfinite(float(value) ** 2 if float(value) < 1e150 else math.inf):
            raise ValueError(f"{name}={value!r} is too large: its square overflows a float")
    return Requests(poisson_arrivals(n, rate, arrivals),
                    lognormal_lengths(n, prompt_mean, prompt_sigma, prompts, max_len),
                    lognormal_lengths(n, output_mean, output_sigma, outputs, max_len))


# ---- shared prefixes (prefix caching, §3.5) -------------------------------------------------------

@dataclass(frozen=True, eq=False)
class SharedPrefixes:
    """Which tokens the prompts of a workload share, for prefix caching (lecture §3.5).

    Request ``i``'s first ``length[i]`` tokens are those of request ``parent[i]``, an earlier
    one (``-1``: none, and then ``length[i] == 0``); the rest are its own. A chat request names
    the first request that used its system prompt, with ``length`` the system prompt's; turn
    ``k`` of a conversation names turn ``k - 1``, with ``length`` that turn's whole prompt and
    output. Parents form trees: a system prompt's group is the requests below its first user.
    The simulator turns this into token ids (``rust/src/sim/continuous/prefix.rs``) and checks
    it against the workload: ``parent[i] < i``; ``length[i]`` at most ``prompt_len[i]`` and the
    parent's ``prompt_len + output_len``.

    >>> sp = SharedPrefixes(parent=[-1, 0, 1], length=[0, 512, 900])
    >>> sp.shared_tokens, len(sp)
    (1412, 3)
    >>> SharedPrefixes([-1, 0], [0])
    Traceback (most recent call last):
    ...
    ValueError: parent and length must have the same length, got 2 and 1
    """

    parent: np.ndarray
    length: np.ndarray

    def __post_init__(self) -> None:
        p = _checks.int64_array("parent", self.parent)
        k = _checks.int64_array("length", self.length)
        if len(p) != len(k):
            raise ValueError(f"parent and length must have the same length, got {len(p)} and {len(k)}")
        for name, col in (("parent", p), ("length", k)):
            col = col.copy()
            col.flags.writeable = False
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.parent)

    @property
    def shared_tokens(self) -> int:
        """Prompt tokens that repeat an earlier request's (an upper bound on cache hits)."""
        return int(self.length.sum())

    @staticmethod
    def none(n: int) -> SharedPrefixes:
        """``n`` requests sharing nothing."""
        n = _checks.count("n", n, MAX_REQUESTS)
        return SharedPrefixes(np.full(n, -1, np.int64), np.zeros(n, np.int64))


def check_shared_prefixes(shared_prefixes: object, n_requests: int) -> SharedPrefixes | None:
    """``shared_prefixes`` (None or a :class:`SharedPrefixes` of one entry per request), checked
    for a simulator's argument of that name.

    >>> check_shared_prefixes(SharedPrefixes.none(2), 3)
    Traceback (most recent call last):
    ...
    ValueError: shared_prefixes must have one entry per request (n_requests=3), got 2
    """
    n_requests = _checks.count("n_requests", n_requests)
    if shared_prefixes is None:
        return None
    if not isinstance(shared_prefixes, SharedPrefixes):
        raise TypeError("shared_prefixes must be None or a servelab.workload.SharedPrefixes, "
                        f"got {type(shared_prefixes).__name__}")
    if len(shared_prefixes) != n_requests:
        raise ValueError(f"shared_prefixes must have one entry per request (n_requests={n_requests}), "
                         f"got {len(shared_prefixes)}")
    return shared_prefixes


def chat_sessions(n: int = 200, rate: float = 0.5, seed: int = 0, *, system_len: int = 1024,
                  n_system_prompts: int = 4, shared_fraction: float = 1.0, turns_mean: float = 1.0,
                  think_s: float = 30.0, user_mean: float = 128, output_mean: float = CHAT_OUTPUT_MEAN,
                  sigma: float = CHAT_OUTPUT_SIGMA, max_len: int = CHAT_MAX_LEN
                  ) -> tuple[Requests, SharedPrefixes]:
    """A chat service's workload with shared prefixes: ``n`` conversations starting as a
    Poisson process of ``rate`` per second, each a series of turns (requests).

    * **System prompts.** Each conversation opens with a system prompt of ``system_len`` tokens:
      with probability ``shared_fraction`` one of ``n_system_prompts`` shared ones (uniformly),
      else its own. A first turn shares its system prompt with the earliest request that used
      it (vLLM's automatic prefix caching sees the same).
    * **Turns.** A conversation has a geometric number of turns of mean ``turns_mean`` (1: single
      turn). Turn ``k`` arrives an exponential ``think_s`` (mean) after turn ``k - 1`` *arrived*
      (an open loop: a slow server can see a turn before the previous answer is done; it then
      reuses only what is computed). Its prompt is the previous turn's prompt and output plus a
      new user message, so its shared prefix is the whole previous turn.
    * **Lengths.** User messages are lognormal of mean ``user_mean``, outputs of mean
      ``output_mean`` (both log-space ``sigma``); a conversation ends before a prompt would
      pass ``max_len``.

    Returns the requests (sorted by arrival; the number of requests is the number of turns) and
    their :class:`SharedPrefixes`. Seeded streams as in :func:`chat_requests`: changing ``rate``
    moves the conversation starts and nothing else.

    >>> reqs, sp = chat_sessions(n=3, rate=1.0, seed=1, system_len=64, turns_mean=2.0)
    >>> len(reqs) >= 3, bool((sp.length <= reqs.prompt_len).all())
    (True, True)
    >>> reqs2, sp2 = chat_sessions(n=3, rate=2.0, seed=1, system_len=64, turns_mean=2.0)
    >>> bool((reqs2.prompt_len == reqs.prompt_len).all()), bool((sp2.parent == sp.parent).all())
    (True, True)
    """
    n = _checks.count("n", n, MAX_REQUESTS)
    rate = _checks.positive("rate", rate)
    streams = np.random.SeedSequence(_checks.count("seed", seed)).spawn(6)
    system_len = _checks.integer("system_len", system_len, 0, MAX_REQUEST_TOKENS - 1)
    # never more prompts than a workload may have requests (numpy's draw below needs an int64)
    n_system_prompts = _checks.integer("n_system_prompts", n_system_prompts, 1, MAX_REQUESTS)
    shared_fraction = _checks.real("shared_fraction", shared_fraction, 0.0, 1.0)
    turns_mean = _checks.real("turns_mean", turns_mean, 1.0, 1e6)
    think_s = _checks.real("think_s", think_s, 0.0)
    for name, value in (("user_mean", user_mean), ("output_mean", output_mean)):
        _checks.positive(name, value)
    sigma = _checks.real("sigma", sigma, 0.0, 100.0)
    max_len = _checks.integer("max_len", max_len, system_len + 1, MAX_REQUEST_TOKENS)
    starts = poisson_arrivals(n, rate, streams[0])
    choose = np.random.default_rng(streams[1])
    shared = choose.random(n) < shared_fraction
    system_id = np.where(shared, choose.integers(0, n_system_prompts, n), -1 - np.arange(n))
    turns = np.random.default_rng(streams[2]).geometric(1.0 / turns_mean, n)
    total = int(turns.sum())
    if total > MAX_REQUESTS:
        raise ValueError(f"n={n} conversations of turns_mean={turns_mean!r} draw {total} turns, more "
                         f"than MAX_REQUESTS = {MAX_REQUESTS}")
    # one draw per turn, conversation after conversation (the same at every rate)
    users = lognormal_lengths(total, user_mean, sigma, streams[3], max_len)
    outs = lognormal_lengths(total, output_mean, sigma, streams[4], max_len)
    gaps = np.random.default_rng(streams[5]).exponential(think_s, total) if think_s > 0 else np.zeros(total)
    # (arrival, conversation, turn, prompt, output, system id) per request
    rows: list[tuple[float, int, int, int, int, int]] = []
    first = 0
    for c in range(n):
        t, prompt = float(starts[c]), system_len
        for k in range(int(turns[c])):
            prompt += int(users[first + k])
            if prompt > max_len:
                break
            rows.append((t, c, k, prompt, int(outs[first + k]), int(system_id[c])))
            prompt += int(outs[first + k])
            t += float(gaps[first + k])
        first += int(turns[c])
    rows.sort(key=lambda r: (r[0], r[1], r[2]))  # by arrival; a conversation's turns in order
    parent = np.full(len(rows), -1, np.int64)
    length = np.zeros(len(rows), np.int64)
    last_turn: dict[int, int] = {}  # conversation -> index of its latest turn so far
    first_user: dict[int, int] = {}  # shared system prompt -> index of its first request
    for i, (_, c, k, _, _, sys_id) in enumerate(rows):
        if k > 0:
            j = last_turn[c]
            parent[i], length[i] = j, rows[j][3] + rows[j][4]
        elif sys_id >= 0 and sys_id in first_user and system_len > 0:
            parent[i], length[i] = first_user[sys_id], system_len
        else:
            first_user.setdefault(sys_id, i)
        last_turn[c] = i
    reqs = Requests(np.array([r[0] for r in rows], np.float64), np.array([r[3] for r in rows], np.int64),
                    np.array([r[4] for r in rows], np.int64))
    return reqs, SharedPrefixes(parent, length)


# ---- traces ------------------------------------------------------------------------------------

# Accepted header names (case-insensitive) for each column.
_ARRIVAL_COLUMNS = ("arrival_s", "arrival_time", "arrival", "timestamp", "time_s", "time")
_PROMPT_COLUMNS = ("prompt_len", "prompt_tokens", "input_tokens", "contexttokens", "context_tokens")
_OUTPUT_COLUMNS = ("output_len", "output_tokens", "generatedtokens", "generated_tokens")


def _pick(header: list[str], names: Sequence[str], what: str, path: Path) -> int:
    lowered = [h.strip().lower() for h in header]
    for name in names:
        if name in lowered:
            return lowered.index(name)
    raise ValueError(f"{path} has no {what} column (one of {', '.join(names)}), got header {header}")


def _timestamp_ticks(text: str) -> int:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` (any number of fraction digits; the Azure traces have
    seven) as an integer count of 100-ns ticks since 0001-01-01, exactly."""
    from datetime import datetime

    head, _, frac = text.strip().partition(".")
    whole = datetime.fromisoformat(head)
    if frac and not frac.isdigit():
        raise ValueError(frac)
    frac7 = int((frac + "0000000")[:7]) if frac else 0
    days = whole.toordinal()
    return ((days * 86400 + whole.hour * 3600 + whole.minute * 60 + whole.second) * 10_000_000) + frac7


def load_trace_csv(path: str | Path, *, limit: int | None = None, start_at_zero: bool = True) -> Requests:
    """Reads a request trace: one request per row, with an arrival time, a prompt length and an
    output length. Header names are matched case-insensitively; the Azure LLM inference trace's
    ``TIMESTAMP,ContextTokens,GeneratedTokens`` are accepted, as are ``arrival_s``,
    ``prompt_len``, ``output_len`` (and a few synonyms).

    Arrival times are seconds, or timestamps ``YYYY-MM-DD HH:MM:SS.fffffff``. With
    ``start_at_zero`` (the default) they are shifted so that the first request arrives at 0.
    ``limit`` keeps the first rows only. A bad row raises ``ValueError`` naming the file, line
    and value; rows must be in arrival order.
    """
    _checks.instance("path", path, (str, Path), "a file path (str or pathlib.Path)")
    path = Path(path)
    if limit is not None:
        limit = _checks.count("limit", limit)
    start_at_zero = _checks.flag("start_at_zero", start_at_zero)
    with open(path, newline="", encoding="utf-8") as f:  # newline="": the csv module eats CRLF
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise ValueError(f"{path} is empty: expected a header row") from None
        ia = _pick(header, _ARRIVAL_COLUMNS, "arrival time", path)
        ip = _pick(header, _PROMPT_COLUMNS, "prompt length", path)
        io = _pick(header, _OUTPUT_COLUMNS, "output length", path)
        times: list[float] = []
        ticks: list[int] = []
        lines: list[int] = []
        prompts: list[int] = []
        outputs: list[int] = []
        for row in reader:
            if limit is not None and len(prompts) >= limit:
                break
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            lines.append(line)
            try:
                raw_t, raw_p, raw_o = row[ia], row[ip], row[io]
            except IndexError:
                raise ValueError(f"{path}, line {line}: expected {len(header)} columns, got {row}") from None
            for name, cell, sink in (("prompt length", raw_p, prompts), ("output length", raw_o, outputs)):
                try:
                    sink.append(int(cell.strip()))
                except ValueError:
                    raise ValueError(f"{path}, line {line}: {name} must be an integer, got {cell!r}") from None
            try:
                times.append(float(raw_t))
            except ValueError:
                try:
                    ticks.append(_timestamp_ticks(raw_t))
                except ValueError:
                    raise ValueError(f"{path}, line {line}: arrival time must be seconds or a timestamp "
                                     f"YYYY-MM-DD HH:MM:SS.fffffff, got {raw_t!r}") from None
    if times and ticks:
        raise ValueError(f"{path}: arrival times mix seconds and timestamps")
    raw: list[float] | list[int] = ticks or times
    for k in range(1, len(raw)):  # checked before any shift, so the message names the file's values
        if raw[k] < raw[k - 1]:
            raise ValueError(f"{path}, line {lines[k]}: rows must be sorted by arrival time, got "
                             f"{raw[k]!r} after {raw[k - 1]!r}")
    if ticks:
        t0 = ticks[0] if start_at_zero else 0
        arrival = np.array([(t - t0) / 1e7 for t in ticks], dtype=np.float64)
    else:
        arrival = np.array(times, dtype=np.float64)
        if start_at_zero and len(arrival):
            arrival = arrival - arrival[0]
    try:
        return Requests(arrival, prompts, outputs)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


AZURE_TRACES = {
    "conv": "AzureLLMInferenceTrace_conv.csv",  # a chat service: 19,366 requests, ~58 min
    "code": "AzureLLMInferenceTrace_code.csv",  # a code-completion service: 8,819 requests, ~57 min
}


def azure_trace(kind: str = "conv", *, limit: int | None = None) -> Requests:
    """One of the Azure LLM inference traces of November 2023 shipped with servelab
    (``kind`` = ``"conv"`` or ``"code"``; CC BY 4.0, from Azure/AzurePublicDataset, the data of
    the Splitwise paper, ISCA 2024: see ``servelab/data/azure_llm_2023/README.md``).
    Arrival times start at 0.

    >>> conv = azure_trace("conv")
    >>> len(conv), int(conv.prompt_len.max()), round(float(conv.arrival_s[-1]) / 60, 1)
    (19366, 14050, 58.4)
    """
    _checks.choice("kind", kind, tuple(sorted(AZURE_TRACES)))
    ref = resources.files("servelab") / "data" / "azure_llm_2023" / AZURE_TRACES[kind]
    with resources.as_file(ref) as path:
        return load_trace_csv(path, limit=limit)
