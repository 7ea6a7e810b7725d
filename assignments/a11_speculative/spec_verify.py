"""Assignment 11: the verify-and-accept step of speculative decoding (lecture §8, milestone 4a).

A draft model guessed ``k`` tokens; the target ran one forward over them and gave, for each
position ``i = 0 .. k``, its logits (or probabilities) after the first ``i`` guesses. Decide
how many guesses to keep and which token comes next. The story is in this folder's README.
Check yourself with ``make check TASK=a11_speculative``.
"""

from __future__ import annotations

import numpy as np


def draw_token(probs: np.ndarray, u: float) -> int:
    """Given: the inverse-CDF draw every sampler here uses, the first token whose cumulative
    probability exceeds ``u * total``. Use it for every draw, so your tokens match."""
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(probs) - 1))


def verify_greedy(guesses: list, logits: np.ndarray) -> tuple:
    """``logits``: ``(k + 1, vocab)``. Keep guesses while each equals the argmax of its row;
    return ``(kept, next_token)``, where ``next_token`` is the argmax of row ``kept``."""
    ### BEGIN SOLUTION
    for i, guess in enumerate(guesses):
        best = int(np.argmax(logits[i]))
        if best != int(guess):
            return i, best
    return len(guesses), int(np.argmax(logits[len(guesses)]))
    ### END SOLUTION


def verify_sampled(guesses: list, p: np.ndarray, q: np.ndarray, u_accept: np.ndarray,
                   u_draw: np.ndarray) -> tuple:
    """Keep guess ``g = guesses[i]`` while ``u_accept[i] < p[i][g] / q[i][g]``. At the first
    rejection draw the next token with ``u_draw[i]`` from ``max(0, p[i] - q[i])`` (from
    ``p[i]`` if that is all zero); if all are kept, from ``p[k]`` with ``u_draw[k]``.
    Return ``(kept, next_token)``."""
    ### BEGIN SOLUTION
    for i, guess in enumerate(guesses):
        g = int(guess)
        if u_accept[i] * q[i][g] >= p[i][g]:  # u >= p/q, written without a division by q
            residual = np.maximum(p[i] - q[i], 0.0)
            return i, draw_token(residual if residual.sum() > 0 else p[i], float(u_draw[i]))
    k = len(guesses)
    return k, draw_token(p[k], float(u_draw[k]))
    ### END SOLUTION


def expected_tokens_per_step(a: float, k: int) -> float:
    """Mean tokens one target step emits when each of ``k`` guesses is kept with probability
    ``a`` independently: ``1 + a + a^2 + ... + a^k``."""
    ### BEGIN SOLUTION
    if a == 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)
    ### END SOLUTION
