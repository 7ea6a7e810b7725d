"""Assignment 3: how to judge a serving system (lecture §4.1-§4.4).

Every function takes numpy arrays, one entry per request in arrival order: ``arrival_s``,
``first_token_s``, ``finish_s`` on the simulated clock (NaN for a request admission control
rejected, ``rejected[i] = True``) and ``output_len`` (``L_o``; the first token comes out of the
prefill). Check yourself with ``make check TASK=a3_metrics``.
"""

from __future__ import annotations

import numpy as np


def ttft(arrival_s: np.ndarray, first_token_s: np.ndarray) -> np.ndarray:
    """Time to first token per request: queueing + prefill."""
    ### BEGIN SOLUTION
    return first_token_s - arrival_s
    ### END SOLUTION


def tpot(first_token_s: np.ndarray, finish_s: np.ndarray, output_len: np.ndarray) -> np.ndarray:
    """Time per output token: the mean gap between a request's output tokens. A one-token
    answer has no gap: return NaN for it (and for rejected requests, whose times are NaN)."""
    ### BEGIN SOLUTION
    gaps = (output_len - 1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(output_len > 1, (finish_s - first_token_s) / gaps, np.nan)
    ### END SOLUTION


def e2e(arrival_s: np.ndarray, finish_s: np.ndarray) -> np.ndarray:
    """End-to-end latency per request."""
    ### BEGIN SOLUTION
    return finish_s - arrival_s
    ### END SOLUTION


def p50_p90_p99(x: np.ndarray) -> tuple[float, float, float]:
    """P50, P90 and P99 of the non-NaN values (linear interpolation between order statistics,
    numpy's default); three NaNs when nothing is left."""
    ### BEGIN SOLUTION
    x = np.asarray(x, dtype=np.float64)
    x = x[~np.isnan(x)]
    if not len(x):
        return (float("nan"),) * 3
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return float(p50), float(p90), float(p99)
    ### END SOLUTION


def span_s(arrival_s: np.ndarray, finish_s: np.ndarray) -> float:
    """The run's length: from the first arrival to the last event (the last finish, or the last
    arrival if that is later, e.g. when it was rejected). 0 for no requests."""
    ### BEGIN SOLUTION
    if not len(arrival_s):
        return 0.0
    end = max(float(np.nanmax(finish_s, initial=0.0)), float(arrival_s[-1]))
    return end - float(arrival_s[0])
    ### END SOLUTION


def meets_slo(arrival_s, first_token_s, finish_s, output_len, rejected, slo_ttft_s: float,
              slo_tpot_s: float) -> np.ndarray:
    """Per request: served, TTFT within ``slo_ttft_s`` and TPOT within ``slo_tpot_s`` (a
    one-token answer meets any TPOT objective)."""
    ### BEGIN SOLUTION
    t = tpot(first_token_s, finish_s, output_len)
    with np.errstate(invalid="ignore"):
        return (~rejected) & (ttft(arrival_s, first_token_s) <= slo_ttft_s) & (np.isnan(t) | (t <= slo_tpot_s))
    ### END SOLUTION


def attainment(good: np.ndarray) -> float:
    """SLO attainment: the share of all requests (rejected ones included) that met the SLO."""
    ### BEGIN SOLUTION
    return float(np.mean(good)) if len(good) else float("nan")
    ### END SOLUTION


def goodput(good: np.ndarray, span: float) -> float:
    """Goodput, definition 1: requests that met the SLO per second of span (0 if the span is 0)."""
    ### BEGIN SOLUTION
    return float(np.sum(good)) / span if span > 0 else 0.0
    ### END SOLUTION


def throughput_tok_s(output_len: np.ndarray, rejected: np.ndarray, span: float) -> float:
    """Output tokens of served requests per second of span (0 if the span is 0)."""
    ### BEGIN SOLUTION
    return float(output_len[~rejected].sum()) / span if span > 0 else 0.0
    ### END SOLUTION


def cost_per_million_tokens(tokens_per_s: float, usd_per_gpu_hour: float) -> float:
    """Dollars per million output tokens for a GPU billed by the hour that produces
    ``tokens_per_s`` (infinite when it produces nothing)."""
    ### BEGIN SOLUTION
    return usd_per_gpu_hour / 3600.0 / tokens_per_s * 1e6 if tokens_per_s > 0 else float("inf")
    ### END SOLUTION


def sustained_rate(rates: np.ndarray, attainments: np.ndarray, target: float) -> float:
    """Goodput, definition 2 (§4.4, exercise 4), on a grid: ``rates`` increase; scan them
    upwards and return the last rate before the first whose attainment is below ``target``
    (0.0 if the lowest rate already fails)."""
    ### BEGIN SOLUTION
    sustained = 0.0
    for rate, att in zip(rates, attainments):
        if not att >= target:  # a NaN attainment fails too
            break
        sustained = float(rate)
    return sustained
    ### END SOLUTION
