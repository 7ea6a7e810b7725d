"""Assignment 6: tail fan-out and early rejection (lecture §4.3 and §12 exercise 6; §5.3-§5.5
and exercise 9).

**Part 1, the fan-out of the tail (exercise 6).** A task makes ``n_calls`` independent calls,
each slower than its own percentile with probability ``p_slow`` (1% for P99). How likely is the
task to meet at least one slow call, and which per-call percentile keeps that risk under a
target?

**Part 2, early rejection (exercise 9).** Clockwork turns a request away at its arrival when it
predicts that the request will miss its SLO. For an LLM served at batch 1 the controller knows
every prompt (so every prefill time) but not the output lengths: it works with *predicted*
lengths, one per request. Requests are numpy arrays in arrival order: ``arrival_s``,
``prompt_len``, ``output_len`` (``L_o`` output tokens, the first made by the prefill) and
``predicted_len`` (the controller's guess of ``output_len``). ``step_time(batch, price)``
(given in ``assignments/given/pricing.py``) gives the seconds of one forward over ``batch = [(new_tokens,
context_len), ...]``; the event queue in ``given/event_queue.py`` has the API of
``servelab.events.EventQueue``.

The serving rules (batch 1, first come first served, as ``servelab.serving_core.run_batch1``):

* an admitted request starts when it has arrived and the admitted request before it has
  finished; its prefill is one step ``(prompt_len, 0)`` and makes the first token; decode step
  ``s = 1 .. L_o - 1`` is ``(1, prompt_len + s - 1)``; times add up step by step,
  ``t = t + step_time(...)``; it finishes at the end of its last step;
* a rejected request is never served: its first-token and finish times are NaN;
* requests are decided one at a time, in arrival order; an admitted request whose finish time
  is ``<= now`` is no longer in the system at ``now``.

The admission rule (§5.3), at the arrival ``now`` of request ``i``:

1. ``t = now``. If an admitted request is in service (it started at ``since``), lay out its
   run with its *predicted* length from ``since``: ``t_end = since + prefill``, then one decode
   step at a time; if ``t_end > now``, set ``t = t_end`` (otherwise it has outlived its
   prediction and the GPU is taken to be free now);
2. lay out each admitted request that waits, in order, from ``t``: prefill then
   ``predicted_len - 1`` decode steps, adding each step's time to ``t``;
3. admit ``i`` when ``(t + prefill of i) - arrival_i <= slo_ttft_s``.

With the true lengths (the oracle) this estimate is exactly the simulated first-token time, so
every admitted request is on time.

**How to judge it (§5.5).** A request is *on time* when admitted and ``first_token - arrival
<= slo_ttft_s``. *Accepted but late*: admitted and not on time. A *false rejection*: rejected,
but it would have met the SLO had it been admitted; its would-be first token is
``max(arrival, end of the work admitted before it) + its prefill`` (at batch 1, admitting it
changes nothing for the requests ahead of it). For an admitted request the would-be first
token is its actual first token.

Check yourself with ``make check TASK=a6_admission``.
"""

from __future__ import annotations

import math

import numpy as np

from event_queue import EventQueue  # the API of servelab.events.EventQueue, in pure Python
from pricing import step_time

MAX_PREDICTED_LEN = 2**24  # predicted lengths are whole tokens in [1, MAX_PREDICTED_LEN]


# ---- part 1: the fan-out of the tail (exercise 6) ----------------------------------------------

def p_any_slow(n_calls: int, p_slow: float) -> float:
    """Probability that at least one of ``n_calls`` independent calls is slow, each being slow
    with probability ``p_slow``. (Lecture: 20 calls at 1% give about 18%.)"""
    ### BEGIN SOLUTION
    # 1 - (1 - p)^n, written with log1p/expm1 so that a tiny p keeps its digits
    return -math.expm1(n_calls * math.log1p(-p_slow))
    ### END SOLUTION


def per_call_budget(n_calls: int, target: float) -> float:
    """The largest per-call probability of being slow for which the chance that at least one
    of ``n_calls`` calls is slow stays ``<= target``."""
    ### BEGIN SOLUTION
    # (1 - q)^n >= 1 - target  <=>  q <= 1 - (1 - target)^(1/n)
    return -math.expm1(math.log1p(-target) / n_calls)
    ### END SOLUTION


def per_call_percentile(n_calls: int, target: float) -> float:
    """The percentile (0-100) each call must be designed for so that the chance that at least
    one of ``n_calls`` calls exceeds it stays ``<= target``. (Lecture: about P99.5 for 20 calls
    and 10%.)"""
    ### BEGIN SOLUTION
    return 100.0 * (1.0 - per_call_budget(n_calls, target))
    ### END SOLUTION


# ---- part 2: length predictors (§5.5, exercise 9) ----------------------------------------------
# Each returns one predicted length per request: an int64 array of whole tokens, rounded with
# numpy's rint (halves to even), then clipped to [1, MAX_PREDICTED_LEN].

def mean_lengths(output_len) -> np.ndarray:
    """Every request gets the workload's mean output length (the controller knows the
    distribution, not the request)."""
    ### BEGIN SOLUTION
    n = len(output_len)
    mean = float(np.mean(output_len)) if n else 1.0
    return np.clip(np.rint(np.full(n, mean)), 1, MAX_PREDICTED_LEN).astype(np.int64)
    ### END SOLUTION


def oracle_lengths(output_len) -> np.ndarray:
    """The true output lengths (a perfect predictor)."""
    ### BEGIN SOLUTION
    return np.asarray(output_len, dtype=np.int64).copy()
    ### END SOLUTION


def noisy_lengths(output_len, sigma: float, seed: int = 42) -> np.ndarray:
    """Exercise 9's predictor: ``output_len * exp(eps)`` with ``eps ~ N(0, sigma^2)``, drawn as
    ``numpy.random.default_rng(seed).normal(0.0, sigma, n)`` (one draw per request, in order),
    then rounded and clipped as above."""
    ### BEGIN SOLUTION
    out = np.asarray(output_len, dtype=np.float64)
    eps = np.random.default_rng(int(seed)).normal(0.0, float(sigma), len(out))
    return np.clip(np.rint(out * np.exp(eps)), 1, MAX_PREDICTED_LEN).astype(np.int64)
    ### END SOLUTION


# ---- part 2: the simulator and the report -------------------------------------------------------

def simulate_early_reject(arrival_s, prompt_len, output_len, predicted_len, slo_ttft_s: float,
                          price: dict) -> dict:
    """Batch 1 with early rejection (see the module docstring).

    Returns a dict of four arrays in request order: ``first_token_s`` and ``finish_s`` (floats,
    NaN for a rejected request), ``rejected`` (bools) and ``would_first_token_s`` (floats, for
    every request).
    """
    ### BEGIN SOLUTION
    n = len(arrival_s)
    arrival = [float(a) for a in arrival_s]
    prompt = [int(p) for p in prompt_len]
    true_len = [int(x) for x in output_len]
    guess = [int(x) for x in predicted_len]
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    start = np.full(n, np.nan)
    rejected = np.zeros(n, dtype=bool)
    would = np.full(n, np.nan)

    def prefill(j: int) -> float:
        return step_time([(prompt[j], 0)], price)

    decode_s: dict[int, float] = {}  # a decode step's price by context length: each layout asks again

    def lay_out(j: int, t: float, length: int, arrived: float | None = None) -> float:
        """Request ``j`` run from ``t`` for ``length`` tokens. With ``arrived``, it stops as
        soon as the clock is past ``arrived + slo_ttft_s``: the verdict is then already "late"."""
        t = t + prefill(j)
        for s in range(1, length):
            if arrived is not None and t - arrived > slo_ttft_s:
                break
            context = prompt[j] + s - 1
            step = decode_s.get(context)
            if step is None:
                step = decode_s[context] = step_time([(1, context)], price)
            t = t + step
        return t

    events = EventQueue()
    for i in range(n):
        events.push(arrival[i], ("arrival", i))
    in_system: list[int] = []  # admitted, not finished: the first is in service
    free_at = 0.0  # when the GPU finishes everything admitted so far
    while len(events):
        now = events.peek()[0]
        arrivals = []
        while len(events) and events.peek()[0] == now:  # take in the whole instant first
            _, (kind, i) = events.pop()
            if kind == "finish":
                in_system.remove(i)
            else:
                arrivals.append(i)
        for i in arrivals:  # then decide, one arrival at a time
            a = arrival[i]
            t = now
            waiting = in_system
            if in_system and start[in_system[0]] <= now:
                end = lay_out(in_system[0], float(start[in_system[0]]), guess[in_system[0]])
                if end > t:
                    t = end
                waiting = in_system[1:]
            for j in waiting:
                if t - a > slo_ttft_s:
                    break  # already late: the layout only grows
                t = lay_out(j, t, guess[j], a)
            p = prefill(i)
            would[i] = (free_at if free_at > now else now) + p
            if (t + p) - a > slo_ttft_s:
                rejected[i] = True
                continue
            # admitted: it runs with its true length once the work before it is done
            start[i] = free_at if free_at > now else now
            first[i] = start[i] + p
            finish[i] = lay_out(i, float(start[i]), true_len[i])
            free_at = float(finish[i])
            in_system.append(i)
            events.push(free_at, ("finish", i))
    return {"first_token_s": first, "finish_s": finish, "rejected": rejected,
            "would_first_token_s": would}
    ### END SOLUTION


def admission_report(arrival_s, first_token_s, rejected, would_first_token_s,
                     slo_ttft_s: float) -> dict:
    """§5.5's table for one run: a dict with the counts ``n``, ``accepted``, ``on_time``,
    ``accepted_late``, ``rejected``, ``false_rejections``, and the shares ``attainment``
    (on time / all requests: a rejected request missed its SLO), ``late_share_of_accepted``
    (accepted late / accepted, 0 when none was accepted) and ``false_rejection_share`` (false
    rejections / rejected, 0 when none was rejected)."""
    ### BEGIN SOLUTION
    a = np.asarray(arrival_s, dtype=np.float64)
    rej = np.asarray(rejected, dtype=bool)
    first = np.asarray(first_token_s, dtype=np.float64)
    would = np.asarray(would_first_token_s, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        on_time = int((~rej & (first - a <= slo_ttft_s)).sum())
        false_rej = int((rej & (would - a <= slo_ttft_s)).sum())
    n, n_rej = len(a), int(rej.sum())
    accepted = n - n_rej
    return {"n": n, "accepted": accepted, "on_time": on_time, "accepted_late": accepted - on_time,
            "rejected": n_rej, "false_rejections": false_rej,
            "attainment": on_time / n if n else math.nan,
            "late_share_of_accepted": (accepted - on_time) / accepted if accepted else 0.0,
            "false_rejection_share": false_rej / n_rej if n_rej else 0.0}
    ### END SOLUTION
