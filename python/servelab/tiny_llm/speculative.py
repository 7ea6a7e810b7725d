"""Speculative decoding on the real model (§8, course project milestone 4a).

A decode step of a large model is memory-bound: it streams every weight to produce one token
(§3.3). A small *draft* model guesses ``k`` tokens cheaply, one at a time; the *target* then
checks all ``k`` guesses in one forward of ``k + 1`` tokens, which costs about as much as a
one-token step while it stays memory-bound. Every guess up to the first wrong one is kept, and
the target's own token at that position comes for free, so a step emits 1 to ``k + 1`` tokens.

Verification is greedy (:func:`accept_greedy`: the tokens are exactly the target's own, §6.5,
whatever the draft) or rejection sampling (:func:`accept_sampled`: each token follows the
target's distribution exactly; Leviathan et al. 2023, Chen et al. 2023). The closed form of the
tokens per step is :func:`expected_tokens_per_step`; :func:`speculative_step_cost` prices a step
on the paper GPU; ``servelab demo speculative`` puts measured and predicted side by side.

>>> from servelab.tiny_llm import TINY, TinyLLM, generate
>>> target = TinyLLM(TINY)
>>> run = speculate(list(b"hello world"), 12, k=4, target=target, draft=target)
>>> run.tokens == generate(list(b"hello world"), 12, model=target).tokens
True
>>> run.acceptance_rate, len(run.steps)    # a perfect draft: 4 kept per step, +1 free token
(1.0, 3)
>>> round(expected_tokens_per_step(0.8, 4), 3)
3.362
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from servelab import _checks, hw_model
from servelab.tiny_llm.model import TinyLLM, Weights, as_token_ids, model_for
from servelab.tiny_llm.config import TINY
from servelab.tiny_llm.sampling import softmax

__all__ = ["SpecStep", "SpecGeneration", "speculate", "accept_greedy", "accept_sampled",
           "draw_token", "expected_tokens_per_step", "perturbed_draft", "speculative_step_cost"]

# verify(guesses, target rows, draft probabilities, u_accept, u_draw) -> (kept, next token)
Verify = Callable[..., tuple[int, int]]


@dataclass(frozen=True)
class SpecStep:
    """One target step: ``proposed`` draft guesses, ``accepted`` of them kept, ``emitted``
    tokens added (``accepted + 1``, the last being the target's), at target context
    ``context`` (tokens in its cache before the verify forward)."""

    proposed: int
    accepted: int
    emitted: int
    context: int


@dataclass(frozen=True)
class SpecGeneration:
    """The tokens of a speculative run and what each target step did (the prefill, which
    emits the first token, is not a step)."""

    prompt: tuple[int, ...]
    tokens: list[int]
    steps: tuple[SpecStep, ...]
    draft_forwards: int

    @property
    def acceptance_rate(self) -> float:
        """Kept guesses over judged guesses: the guesses after a step's first rejection are
        thrown away unjudged, so they do not count (nan when nothing was judged). This is the
        ``a`` of :func:`expected_tokens_per_step`."""
        kept = sum(s.accepted for s in self.steps)
        judged = kept + sum(s.accepted < s.proposed for s in self.steps)
        return kept / judged if judged else float("nan")

    @property
    def tokens_per_step(self) -> float:
        """Tokens emitted per target step, after the prefill's first token."""
        return sum(s.emitted for s in self.steps) / len(self.steps) if self.steps else float("nan")


def expected_tokens_per_step(a: float, k: int) -> float:
    """``(1 - a^(k+1)) / (1 - a)``: the mean of ``1 + (number of leading kept guesses)`` when
    each of ``k`` guesses is kept with probability ``a``; ``k + 1`` at ``a = 1``.

    >>> expected_tokens_per_step(0.0, 5), expected_tokens_per_step(1.0, 5)
    (1.0, 6.0)
    """
    if not _checks.is_real(a) or not 0.0 <= a <= 1.0:
        raise ValueError(f"a (the acceptance rate) must be a number in [0, 1], got {a!r}")
    _checks.count("k (draft tokens per step)", k)
    return float(k + 1) if a == 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def perturbed_draft(model: TinyLLM, noise: float, seed: int = 0) -> TinyLLM:
    """A draft of tunable quality: ``model`` with Gaussian noise added to every weight (standard
    deviation ``noise`` times each array's own). ``noise = 0`` is a perfect draft; the larger
    ``noise``, the fewer guesses the target keeps.

    >>> perturbed_draft(TinyLLM(TINY), -1.0)
    Traceback (most recent call last):
    ...
    ValueError: noise must be a non-negative finite number, got -1.0
    """
    if not _checks.is_real(noise) or not 0 <= noise < np.inf:
        raise ValueError(f"noise must be a non-negative finite number, got {noise!r}")
    rng = np.random.default_rng(seed)

    def jitter(a: np.ndarray) -> np.ndarray:
        out = (a + rng.standard_normal(a.shape, dtype=np.float32) * np.float32(noise * a.std())
               ).astype(np.float32)
        out.flags.writeable = False
        return out

    w = model.weights
    layers = tuple(dataclasses.replace(layer, **{f.name: jitter(getattr(layer, f.name))
                                                 for f in dataclasses.fields(layer)})
                   for layer in w.layers)
    draft = TinyLLM(model.config)
    draft.weights = Weights(jitter(w.embed), layers, jitter(w.final_norm), jitter(w.lm_head))
    return draft


def speculate(prompt: Sequence[int] | np.ndarray, max_new_tokens: int, k: int, *,
              draft: TinyLLM, target: TinyLLM | None = None, temperature: float | None = None,
              seed: int = 0, verify: Verify | None = None) -> SpecGeneration:
    """Generate ``max_new_tokens`` tokens with ``target`` (default: the ``TINY`` model), ``k``
    guesses of ``draft`` per step. ``temperature=None`` is greedy; otherwise both models sample
    at that temperature and the random draws come from generators seeded with ``(seed,
    position, purpose)``, so a run is reproducible bit for bit. ``verify`` replaces the
    verification rule (default :func:`accept_greedy` or :func:`accept_sampled`, called with the
    same arguments; assignment a11 plugs a student's in here).
    """
    target = model_for(TINY) if target is None else target
    cfg = target.config
    if verify is None:  # through a Verify: both rules take the same five arguments
        default: Verify = accept_greedy if temperature is None else accept_sampled
        verify = default
    if draft.config.vocab_size != cfg.vocab_size:
        raise ValueError(f"draft has vocab_size {draft.config.vocab_size}, the target "
                         f"{cfg.vocab_size}: they must share one vocabulary")
    tokens = as_token_ids(prompt, cfg.vocab_size, "prompt").tolist()
    _checks.positive_int("max_new_tokens", max_new_tokens)
    _checks.count("k (draft tokens per step)", k)
    if temperature is not None and not (_checks.is_real(temperature) and 0 < temperature < np.inf):
        raise ValueError(f"temperature must be None (greedy) or a positive finite number, "
                         f"got {temperature!r}")
    need = len(tokens) + max_new_tokens - 1
    for name, m in (("target", target), ("draft", draft)):
        if need > m.config.max_len:
            raise ValueError(f"a prompt of {len(tokens)} tokens and {max_new_tokens} new tokens "
                             f"need {need} positions, more than the {name}'s max_len "
                             f"{m.config.max_len}")

    def pick(logits: np.ndarray, position: int, purpose: int) -> tuple[int, np.ndarray | None]:
        # greedy: the argmax; sampling: a draw, and the probabilities it came from
        if temperature is None:
            return int(np.argmax(logits)), None
        probs = softmax(logits, temperature)
        return _draw(probs, seed, position, purpose), probs

    t_cache, d_cache = target.new_cache(), draft.new_cache()
    seq = list(tokens)
    first, _ = pick(target.forward(seq, t_cache), len(seq), 0)
    seq.append(first)
    steps: list[SpecStep] = []
    draft_forwards = 0
    while len(seq) - len(tokens) < max_new_tokens:
        room = max_new_tokens - (len(seq) - len(tokens))
        k_now = min(k, room - 1)  # never guess past the end
        guesses: list[int] = []
        draft_probs: list[np.ndarray] = []  # sampling only (greedy picks carry no probabilities)
        for _ in range(k_now):
            known = seq + guesses  # the draft's cache may lag a token or two behind
            logits = draft.forward(known[len(d_cache):], d_cache)
            draft_forwards += 1
            guess, q = pick(logits, len(seq) + len(guesses), 1)
            guesses.append(guess)
            if q is not None:
                draft_probs.append(q)
        context = len(t_cache)
        rows = target.forward(seq[context:] + guesses, t_cache, all_logits=True)
        if temperature is None:
            kept, nxt = verify(guesses, rows, None, None, None)
        else:
            at = range(len(seq), len(seq) + len(guesses))  # the positions the guesses fill
            u_accept = np.array([_uniform(seed, i, 2) for i in at])
            u_draw = np.array([_uniform(seed, i, 3) for i in at] + [_uniform(seed, at.stop, 0)])
            p = np.stack([softmax(r, temperature) for r in rows])
            q = np.stack(draft_probs) if guesses else np.zeros((0, cfg.vocab_size))
            kept, nxt = verify(guesses, p, q, u_accept, u_draw)
        if not (_checks.is_int(kept) and _checks.is_int(nxt)
                and 0 <= kept <= len(guesses) and 0 <= nxt < cfg.vocab_size):
            raise ValueError(f"verify must return (kept in [0, {len(guesses)}], a token id in "
                             f"[0, {cfg.vocab_size})), got ({kept!r}, {nxt!r})")
        kept, nxt = int(kept), int(nxt)
        seq += guesses[:kept] + [nxt]
        t_cache.truncate(len(seq) - 1)  # forget the KV of rejected guesses
        if len(d_cache) > len(seq) - 1:
            d_cache.truncate(len(seq) - 1)
        steps.append(SpecStep(k_now, kept, kept + 1, context))
    return SpecGeneration(tuple(tokens), seq[len(tokens):], tuple(steps), draft_forwards)


def _uniform(seed: int, position: int, purpose: int) -> float:
    """The uniform of one draw: ``purpose`` 0 samples the target, 1 the draft, 2 accepts or
    rejects a guess, 3 draws from the residual (so a run is reproducible from its seed)."""
    return float(np.random.default_rng((seed, position, purpose)).random())


def _draw(probs: np.ndarray, seed: int, position: int, purpose: int) -> int:
    return draw_token(probs, _uniform(seed, position, purpose))


def draw_token(probs: np.ndarray, u: float) -> int:
    """Inverse-CDF draw: the first token whose cumulative probability exceeds ``u`` (in
    ``[0, 1)``) times the total.

    >>> draw_token(np.array([0.25, 0.5, 0.25]), 0.3), draw_token(np.array([0.25, 0.5, 0.25]), 0.8)
    (1, 2)
    """
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(probs) - 1))


def accept_greedy(guesses: Sequence[int], logits: np.ndarray, *_: object) -> tuple[int, int]:
    """Greedy verification: ``logits[i]`` are the target's logits after the first ``i``
    guesses (``len(guesses) + 1`` rows). Keep guesses while each is the target's argmax;
    return ``(kept, next token)``: the target's argmax at the first mismatch, or after the
    last guess when all are kept.

    >>> accept_greedy([3, 1], np.eye(4)[[3, 2, 0]])   # guess 1 is not the argmax (2) of row 1
    (1, 2)
    """
    for i, guess in enumerate(guesses):
        best = int(np.argmax(logits[i]))
        if best != guess:
            return i, best
    return len(guesses), int(np.argmax(logits[len(guesses)]))


def accept_sampled(guesses: Sequence[int], p: np.ndarray, q: np.ndarray, u_accept: np.ndarray,
                   u_draw: np.ndarray) -> tuple[int, int]:
    """Rejection sampling: guess ``i`` (drawn from the draft's ``q[i]``) is kept when
    ``u_accept[i] < p[i][g] / q[i][g]``; at the first rejection the next token is drawn with
    ``u_draw[i]`` from ``max(0, p[i] - q[i])`` renormalised (from ``p[i]`` if that is all
    zero); when all are kept, from ``p[k]`` with ``u_draw[k]``. Returns ``(kept, next token)``.

    >>> p, q = np.array([[0.5, 0.5], [1.0, 0.0]]), np.array([[0.0, 1.0]])
    >>> accept_sampled([1], p, q, np.array([0.9]), np.array([0.3, 0.0]))  # 0.9 >= 0.5: rejected
    (0, 0)
    """
    for i, guess in enumerate(guesses):
        if u_accept[i] * q[i][guess] >= p[i][guess]:  # u >= p/q, without dividing by q
            residual = np.maximum(p[i] - q[i], 0.0)
            return i, draw_token(residual if residual.sum() > 0 else p[i], float(u_draw[i]))
    return len(guesses), draw_token(p[len(guesses)], float(u_draw[len(guesses)]))


def speculative_step_cost(target: hw_model.ModelSpec, draft: hw_model.ModelSpec,
                          gpu: hw_model.GpuSpec, k: int, context_len: int) -> float:
    """Paper-GPU seconds of one speculative step at ``context_len``: ``k`` draft decode steps
    (contexts ``context_len .. context_len + k - 1``) and one target forward of ``k + 1``
    tokens on top of ``context_len`` (§3: while memory-bound it costs about one decode step).

    >>> from servelab.hw_model import H100, LLAMA3_8B
    >>> round(speculative_step_cost(LLAMA3_8B, LLAMA3_8B, H100, 0, 512) * 1e3, 2)  # = decode
    6.13
    """
    _checks.count("k (draft tokens per step)", k)
    verify = hw_model.step_cost(target, gpu, [(k + 1, context_len)]).time_s
    return verify + sum(hw_model.step_cost(draft, gpu, [(1, context_len + i)]).time_s
                        for i in range(k))
