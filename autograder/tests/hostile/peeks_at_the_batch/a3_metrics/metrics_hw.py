"""Hostile: meets_slo, span_s and throughput_tok_s are not solved. Each walks up the child's
frames to the batch it is part of (servelab.harness.calls.call_each sends a test's calls in one
message) and answers with what a later call of that batch carries as an argument: the test's
reference values (``attainment(meets)``, ``goodput(meets, span)``,
``cost_per_million_tokens(throughput, usd)``). Without a later call to read, each answer is
wrong. The other functions are honest: 6 points (latencies, percentiles, sustained rate)."""

import base64
import sys

import numpy as np


def _later_args(function: str):
    """The decoded arguments of the first later request of the running batch that calls
    ``function``, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        req, one = frame.f_locals.get("req"), frame.f_locals.get("one")
        if isinstance(req, dict) and req.get("op") == "many" and one is not None:
            requests = req["requests"]
            for later in requests[requests.index(one) + 1:]:
                if later.get("target", {}).get("name") == function:
                    return [_decoded(a) for a in later["args"]]
            return None
        frame = frame.f_back
    return None


def _decoded(x):
    if isinstance(x, dict) and "__ndarray__" in x:
        a = x["__ndarray__"]
        return np.frombuffer(base64.b64decode(a["b64"]), dtype=np.dtype(a["dtype"])).reshape(a["shape"]).copy()
    return x


def ttft(arrival_s, first_token_s):
    return first_token_s - arrival_s


def tpot(first_token_s, finish_s, output_len):
    gaps = (output_len - 1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(output_len > 1, (finish_s - first_token_s) / gaps, np.nan)


def e2e(arrival_s, finish_s):
    return finish_s - arrival_s


def p50_p90_p99(x):
    kept = [v for v in np.asarray(x, dtype=np.float64).tolist() if v == v]  # NaN is not itself
    return tuple(float(np.percentile(kept, q)) for q in (50, 90, 99)) if kept else (float("nan"),) * 3


def span_s(arrival_s, finish_s):
    seen = _later_args("goodput")
    return float(seen[1]) if seen else -1.0


def meets_slo(arrival_s, first_token_s, finish_s, output_len, rejected, slo_ttft_s, slo_tpot_s):
    seen = _later_args("attainment")
    return seen[0] if seen else np.zeros(len(arrival_s), dtype=bool)


def attainment(good):
    return float(np.mean(good)) if len(good) else float("nan")


def goodput(good, span):
    return float(np.sum(good)) / span if span > 0 else 0.0


def throughput_tok_s(output_len, rejected, span):
    seen = _later_args("cost_per_million_tokens")
    return float(seen[0]) if seen else -1.0


def cost_per_million_tokens(tokens_per_s, usd_per_gpu_hour):
    return usd_per_gpu_hour / 3600.0 / tokens_per_s * 1e6 if tokens_per_s > 0 else float("inf")


def sustained_rate(rates, attainments, target):
    sustained = 0.0
    for rate, att in zip(rates, attainments):
        if not att >= target:
            break
        sustained = float(rate)
    return sustained
