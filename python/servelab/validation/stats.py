"""The statistics inference-perf reports, by its own definitions (lecture §4's TTFT, ITL, TPOT
and E2E, as one load generator measures them on a streamed answer).

The client reads the server's event stream *line by line* and stamps the clock at every line,
blank ones included. vLLM sends one event per output token, ``data: {...}`` followed by a blank
line, and ends with ``data: [DONE]`` and a blank line; so an answer of ``N`` tokens leaves
``2N + 2`` stamps, two per token a few microseconds apart, the last two when the stream ends.
From the stamps ``t[0..n-1]`` of a successful request that started at ``start`` and ended at
``end``:

* ``time_to_first_token = t[0] - start``;
* ``time_per_output_token = (t[-1] - t[0]) / (n - 1)``: about *half* the decode step here,
  since every token has two stamps;
* ``inter_token_latency``: every gap ``t[j+1] - t[j]`` of every request, pooled (half of them
  near zero);
* ``request_latency = end - start``.

A request fails when the client gives up (its timeout, 300 s by default) or the server errs;
failures count apart and are in none of the distributions. A summary is the mean and numpy's
(linear) percentiles over the successes.

:func:`lifecycle_summary` applies these definitions to stamps as a client records them;
:func:`simulated_summary` gives the same numbers for a simulated run, which knows each
request's first-token and finish times but keeps no stamp per token (the means and the
percentiles of TTFT, TPOT and E2E need no more; ITL's mean is total decode time over total
gaps).

>>> import numpy as np
>>> s = simulated_summary(start_s=np.array([0.0, 1.0]), first_s=np.array([0.1, 1.3]),
...                       finish_s=np.array([2.1, 3.3]), output_len=np.array([101, 101]))
>>> s.successes, s.failures, round(s.metric("ttft_mean"), 3), round(s.metric("tpot_mean") * 1e3, 3)
(2, 0, 0.2, 9.852)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from servelab import _checks

__all__ = ["METRICS", "METRIC_SOURCE", "StageSummary", "summarize", "lifecycle_summary", "simulated_summary",
           "stream_stamps", "STAMPS_PER_TOKEN", "TRAILING_STAMPS"]

# the six compared metrics: (inference-perf distribution, statistic)
METRIC_SOURCE = {
    "ttft_mean": ("time_to_first_token", "mean"),
    "ttft_p90": ("time_to_first_token", "p90"),
    "itl_mean": ("inter_token_latency", "mean"),
    "tpot_mean": ("time_per_output_token", "mean"),
    "e2e_mean": ("request_latency", "mean"),
    "e2e_p90": ("request_latency", "p90"),
}
METRICS = tuple(METRIC_SOURCE)
STAMPS_PER_TOKEN = 2  # the event's data line and its blank line
TRAILING_STAMPS = 2  # data: [DONE] and its blank line
_PERCENTILES = (("p0.1", 0.1), ("p1", 1), ("p5", 5), ("p10", 10), ("p25", 25), ("median", 50), ("p75", 75),
                ("p90", 90), ("p95", 95), ("p99", 99), ("p99.9", 99.9))


def summarize(values: Sequence[float] | np.ndarray) -> dict[str, float] | None:
    """inference-perf's summary of a distribution: mean, min, percentiles (numpy's linear
    interpolation), max; ``None`` for no value.

    >>> summarize([1.0, 2.0, 3.0, 4.0])["p90"]
    3.7
    >>> summarize([]) is None
    True
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return None
    out = {"mean": float(v.mean()), "min": float(v.min())}
    for name, q in _PERCENTILES:
        out[name] = float(np.percentile(v, q))
    out["max"] = float(v.max())
    return out


@dataclass(frozen=True)
class StageSummary:
    """One stage's counts and distributions (inference-perf's names, seconds)."""

    successes: int
    failures: int
    latency: dict[str, dict[str, float] | None]

    def metric(self, name: str) -> float:
        """One of :data:`METRICS` (``nan`` when nothing succeeded)."""
        dist, stat = METRIC_SOURCE[_checks.choice("name", name, METRICS)]
        d = self.latency.get(dist)
        return float("nan") if d is None or stat not in d else float(d[stat])


def lifecycle_summary(start_s: Sequence[float], end_s: Sequence[float], stamps: Sequence[Sequence[float]],
                      failed: Sequence[bool]) -> StageSummary:
    """The definitions above applied to what a client recorded: per request its start, end,
    the stream's stamps and whether it failed. A success with fewer than two stamps has no
    TTFT, TPOT or ITL (as in inference-perf) but counts in the request latency."""
    n = len(start_s)
    if not len(end_s) == len(stamps) == len(failed) == n:
        raise ValueError(f"start_s, end_s, stamps and failed must have one entry per request, got {n}, {len(end_s)}, "
                         f"{len(stamps)} and {len(failed)}")
    ok = [i for i in range(n) if not failed[i]]
    streamed = [i for i in ok if len(stamps[i]) > 1]
    ttft = [stamps[i][0] - start_s[i] for i in streamed]
    tpot = [(stamps[i][-1] - stamps[i][0]) / (len(stamps[i]) - 1) for i in streamed]
    itl = [b - a for i in streamed for a, b in zip(stamps[i][:-1], stamps[i][1:])]
    latency = {"time_to_first_token": summarize(ttft), "inter_token_latency": summarize(itl),
               "time_per_output_token": summarize(tpot),
               "request_latency": summarize([end_s[i] - start_s[i] for i in ok])}
    return StageSummary(len(ok), n - len(ok), latency)


def stream_stamps(first_s: float, finish_s: float, output_len: int) -> np.ndarray:
    """The stamps a client records for an answer of ``output_len`` tokens whose first token
    arrives at ``first_s`` and last at ``finish_s``, the tokens evenly spaced between (a
    simulated run keeps no time per token): two stamps per token, two at the end.

    >>> stream_stamps(1.0, 3.0, 3).tolist()
    [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    """
    n = _checks.positive_int("output_len", output_len)
    tokens = np.linspace(first_s, finish_s, n) if n > 1 else np.array([first_s])
    return np.concatenate([np.repeat(tokens, STAMPS_PER_TOKEN), np.full(TRAILING_STAMPS, finish_s)])


def simulated_summary(start_s: np.ndarray, first_s: np.ndarray, finish_s: np.ndarray, output_len: np.ndarray,
                      timeout_s: float = float("inf")) -> StageSummary:
    """The stage's statistics for simulated requests (arrays, one entry per request): a
    request whose latency passes ``timeout_s`` (or that never finished, NaN) failed. The same
    numbers as :func:`lifecycle_summary` on :func:`stream_stamps` (``tests/test_validation_stats.py``),
    without building the stamps; ITL gets its mean only (its percentiles need the spacing of
    the tokens, which the simulator does not keep)."""
    start, first, finish = (np.asarray(a, dtype=np.float64) for a in (start_s, first_s, finish_s))
    n_out = np.asarray(output_len, dtype=np.int64)
    if not len(start) == len(first) == len(finish) == len(n_out):
        raise ValueError("start_s, first_s, finish_s and output_len must have one entry per request")
    timeout = _checks.positive("timeout_s", timeout_s) if np.isfinite(timeout_s) else float("inf")
    latency = finish - start
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(latency) & (latency <= timeout)
    gaps = STAMPS_PER_TOKEN * n_out[ok] + TRAILING_STAMPS - 1  # n stamps, n - 1 gaps
    decode = finish[ok] - first[ok]
    itl = {"mean": float(decode.sum() / gaps.sum())} if ok.any() else None
    return StageSummary(int(ok.sum()), int(len(ok) - ok.sum()),
                        {"time_to_first_token": summarize(first[ok] - start[ok]), "inter_token_latency": itl,
                         "time_per_output_token": summarize(decode / gaps), "request_latency": summarize(latency[ok])})
