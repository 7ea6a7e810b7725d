"""Samplers: how the next token is chosen from the logits (greedy, temperature, top-p).

A sampler is called as ``sampler(logits, step)`` where ``step`` is the index of the token being
generated (0 for the first output token). Seeded samplers draw from a generator seeded with
``(seed, step)``, so a token depends only on the logits, the seed and its position in the
output: the same request gives the same tokens whether it runs alone, in a batch, or is
preempted and recomputed (lecture 2, §6.5). Probabilities are computed in float64.

>>> import numpy as np
>>> logits = np.array([0.0, 2.0, 1.0], dtype=np.float32)
>>> GREEDY(logits, 0)
1
>>> s = TopP(p=0.5, seed=7)
>>> [s(logits, step) for step in range(5)]     # only token 1 lies in the top 50% of mass
[1, 1, 1, 1, 1]
>>> t = Temperature(1.0, seed=3)
>>> [t(logits, step) for step in range(8)] == [t(logits, step) for step in range(8)]
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from servelab import _checks

__all__ = ["Sampler", "Greedy", "Temperature", "TopP", "GREEDY", "softmax"]


class Sampler(Protocol):
    """Anything called as ``sampler(logits, step) -> token id``."""

    def __call__(self, logits: np.ndarray, step: int) -> int: ...


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Probabilities of ``logits / temperature`` in float64.

    >>> softmax(np.array([0.0, 0.0])).tolist()
    [0.5, 0.5]
    """
    z = _check_logits(logits).astype(np.float64) / _checks.positive("temperature", temperature)
    z = np.exp(z - z.max())
    return z / z.sum()


def _check_logits(logits: np.ndarray) -> np.ndarray:
    try:
        arr = np.asarray(logits)
    except (TypeError, ValueError, OverflowError):
        arr = np.asarray(None)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"logits must be a non-empty 1-D array, got shape {arr.shape}")
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"logits must hold real numbers, got dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("logits must be finite, got a NaN or an infinity")
    return arr


def _draw(probs: np.ndarray, seed: int, step: int) -> int:
    """Inverse-CDF draw of one token from ``probs`` with the generator of ``(seed, step)``."""
    u = np.random.default_rng((seed, step)).random()
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(probs) - 1))


def _check_step(step: int) -> int:
    if not _checks.is_int(step) or step < 0:
        raise ValueError(f"step must be a non-negative integer (the output index), got {step!r}")
    return int(step)


def sampled_token(sampler: Sampler, logits: np.ndarray, step: int) -> int:
    """``sampler(logits, step)`` checked: a token id in the vocabulary (``len(logits)``), so a
    sampler that returns something else is named instead of failing later in ``int()``."""
    token = sampler(logits, step)
    if not _checks.is_int(token) \
            or not 0 <= token < len(logits):
        raise TypeError(f"sampler must return a token id in [0, {len(logits)}), got {token!r:.80} "
                        f"from {sampler!r:.80}")
    return int(token)


@dataclass(frozen=True)
class Greedy:
    """The most likely token (the lowest id among exact ties)."""

    def __call__(self, logits: np.ndarray, step: int) -> int:
        _check_step(step)
        return int(np.argmax(_check_logits(logits)))


@dataclass(frozen=True)
class Temperature:
    """Sample from ``softmax(logits / temperature)``.

    >>> Temperature(0.0)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be a positive finite number, got 0.0
    """

    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        _checks.positive("temperature", self.temperature)
        _checks.count("seed", self.seed)

    def __call__(self, logits: np.ndarray, step: int) -> int:
        return _draw(softmax(_check_logits(logits), self.temperature), self.seed, _check_step(step))


@dataclass(frozen=True)
class TopP:
    """Nucleus sampling: keep the most likely tokens whose probabilities first add up to at
    least ``p`` (after ``temperature``), renormalise, sample.

    >>> TopP(p=1.5)
    Traceback (most recent call last):
    ...
    ValueError: p must be in (0, 1], got 1.5
    """

    p: float = 0.9
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (_checks.is_real(self.p) and 0 < self.p <= 1):
            raise ValueError(f"p must be in (0, 1], got {self.p!r}")
        Temperature(self.temperature, self.seed)  # same checks

    def nucleus(self, logits: np.ndarray) -> np.ndarray:
        """Token ids kept, most likely first (ties: lower id first, deterministic).

        >>> TopP(p=0.8).nucleus(np.log(np.array([0.1, 0.6, 0.3]))).tolist()
        [1, 2]
        """
        probs = softmax(_check_logits(logits), self.temperature)
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        keep = int(np.searchsorted(cumulative, self.p * cumulative[-1], side="left")) + 1
        return order[:min(keep, len(order))]

    def __call__(self, logits: np.ndarray, step: int) -> int:
        kept = self.nucleus(logits)
        probs = softmax(np.asarray(logits)[kept], self.temperature)
        return int(kept[_draw(probs, self.seed, _check_step(step))])


GREEDY = Greedy()
