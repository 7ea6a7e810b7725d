"""inference-perf's ``shared_prefix`` workload and constant-rate stages, rebuilt with
servelab's workload tools (:class:`servelab.workload.Requests`, :class:`~servelab.workload.SharedPrefixes`).

What the generator does, and what is made here the same way:

* **Prompts.** ``num_groups`` system prompts of ``system_prompt_len`` random token ids; under
  each, ``num_prompts_per_group`` questions of ``question_len`` random ids. Each is decoded to
  text, and a prompt is ``system text + " " + question text``. The prompts are made once and
  shuffled once; request ``n`` of a stage (counting from 0 in every stage) sends prompt
  ``n % (num_groups x num_prompts_per_group)``. So a prompt comes back every 100 requests
  (prefix caching serves all of it but its last partial block), and the prompts of a group
  share their system prompt.
* **Token counts.** The server tokenises the *text*: random ids decoded and encoded again come
  out a few percent longer, one BOS token is added. Each segment of ``L`` ids is modelled as
  ``L + Binomial(L, expansion)`` tokens (``L - Binomial(L, -expansion)`` for a tokenizer whose
  round trip merges ids, a negative expansion); ``expansion`` is read from the experiment's measured
  prompt lengths (what its tokenizer did to these prompts, a fact of the workload, not of the
  server), :data:`DEFAULT_EXPANSION` (Llama-2's tokenizer on the shipped runs) without them.
  Every answer is exactly ``output_len`` tokens (``ignore_eos``, ``max_tokens``).
* **Arrivals.** A constant-rate stage sends ``int(rate x duration)`` requests; the gaps are
  exponential of mean ``1 / rate``, then scaled so that they sum to the duration exactly. A
  stage begins once every request of the one before has finished (then 1 s of the generator's
  ``interval`` and 1 s of its own lead): ``stage_starts`` says when each begins.
* **Multi-turn chat** (a later generator's ``enable_multi_turn_chat``): a user's turn waits for
  its previous answer, a closed loop that servelab's open-loop simulators do not have. It is
  refused with that reason; the shipped runs are single-turn (see :mod:`.experiment`).

>>> from servelab.validation.experiment import SharedPrefixConfig, Stage
>>> data = SharedPrefixConfig(2, 2, system_prompt_len=10, question_len=20, output_len=5)
>>> w = shared_prefix_workload(data, [Stage(rate=2.0, duration_s=3.0)], [0.0], seed=1, expansion=0.0)
>>> w.requests.prompt_len.tolist(), w.requests.output_len.tolist()
([31, 31, 31, 31, 31, 31], [5, 5, 5, 5, 5, 5])
>>> w.prompt_id.tolist(), w.shared.parent.tolist(), w.shared.length.tolist()
([0, 1, 2, 3, 0, 1], [-1, -1, 1, 0, 0, 1], [0, 0, 10, 10, 31, 31])
>>> round(float(w.requests.arrival_s[-1]), 9)
3.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from servelab import _checks
from servelab.validation.experiment import Experiment, SharedPrefixConfig, Stage
from servelab.workload import Requests, SharedPrefixes

__all__ = ["StagedWorkload", "shared_prefix_workload", "expansion_from_measured", "DEFAULT_EXPANSION",
           "STAGE_LEAD_S"]

# extra tokens per random token id after decode + encode, Llama-2's SentencePiece tokenizer
# (32,000 ids): the shipped Llama-2 runs' measured prompt lengths give 4.4-5.0% in every
# profile, 4.75% on average (Mixtral's tokenizer: 3.9-4.2%)
DEFAULT_EXPANSION = 0.0475
# between a stage's last answer and the next stage's clock: the generator's `interval` (1 s)
# and the 1 s it gives its workers to fill their queues
STAGE_LEAD_S = 2.0


@dataclass(frozen=True)
class StagedWorkload:
    """The requests of every stage on one clock (sorted by arrival), which prompt each sends,
    which stage it belongs to, and what its prompt shares with earlier ones."""

    requests: Requests
    shared: SharedPrefixes
    stage: np.ndarray
    prompt_id: np.ndarray


def expansion_from_measured(experiment: Experiment) -> float:
    """Extra tokens per generated token id, from the measured prompt lengths (mean over the
    stages' successes): ``(mean - 1 BOS) / (system + question) - 1``; :data:`DEFAULT_EXPANSION`
    when nothing was measured."""
    total, weight = 0.0, 0
    for m in experiment.measured:
        if m.prompt_len and m.successes:
            total += float(m.prompt_len["mean"]) * m.successes
            weight += m.successes
    if not weight:
        return DEFAULT_EXPANSION
    ids = experiment.data.system_prompt_len + experiment.data.question_len
    return float(min(max((total / weight - 1.0) / ids - 1.0, -0.9), 1.0))


def shared_prefix_workload(data: SharedPrefixConfig, stages: Sequence[Stage], stage_starts: Sequence[float], *,
                           seed: int = 0, expansion: float = DEFAULT_EXPANSION) -> StagedWorkload:
    """The requests of ``stages`` (stage ``k``'s clock starts at ``stage_starts[k]`` s; each
    must start after the one before ends), built as the ``shared_prefix`` generator builds them.
    Seeded: the same arguments give the same workload."""
    _checks.instance("data", data, SharedPrefixConfig, "a SharedPrefixConfig")
    if data.multi_turn:
        raise ValueError("data.multi_turn=True: multi-turn chat makes each user's turn wait for the previous answer "
                         "(a closed loop), which the open-loop simulator cannot reproduce")
    if not data.ignore_eos:
        raise ValueError("data.ignore_eos=False: answers would end at the model's end-of-sequence token, whose "
                         "lengths a simulator that computes no tokens cannot know")
    stages = list(stages)
    starts = [_checks.non_negative(f"stage_starts[{k}]", s) for k, s in enumerate(stage_starts)]
    if len(starts) != len(stages) or not stages:
        raise ValueError(f"stage_starts must have one start per stage ({len(stages)}), got {len(starts)}")
    for k, s in enumerate(stages):
        _checks.instance(f"stages[{k}]", s, Stage, "a Stage")
    for k in range(1, len(starts)):
        end = starts[k - 1] + stages[k - 1].duration_s
        if starts[k] < end:
            raise ValueError(f"stage_starts[{k}]={starts[k]!r} is before stage {k - 1} ends ({end!r})")
    expansion = _checks.real("expansion", expansion, -0.9, 1.0)
    seed = _checks.count("seed", seed)
    prompts_rng, order_rng, *gap_rngs = (np.random.default_rng(s) for s in
                                         np.random.SeedSequence(seed).spawn(2 + len(stages)))
    n_prompts = data.num_groups * data.num_prompts_per_group
    # tokens after the round trip through text (one draw per segment, as each is decoded once)
    sign = 1 if expansion >= 0 else -1
    sys_len = data.system_prompt_len + sign * prompts_rng.binomial(data.system_prompt_len, abs(expansion),
                                                                   data.num_groups)
    q_len = data.question_len + sign * prompts_rng.binomial(data.question_len, abs(expansion), n_prompts)
    group = np.repeat(np.arange(data.num_groups), data.num_prompts_per_group)
    # prompt k of the shuffled list (the generator shuffles once, before any request)
    shuffled = order_rng.permutation(n_prompts)
    prompt_len = 1 + sys_len[group[shuffled]] + q_len[shuffled]  # BOS + system + question
    # the system prompt's tokens are shared within the group; its last token may merge with
    # the separator when the whole text is encoded, so it is not counted as shared
    shared_sys = np.maximum(sys_len[group[shuffled]], 0)

    arrivals, ids, stage_of = [], [], []
    for k, (stage, start) in enumerate(zip(stages, starts)):
        n = stage.n_requests
        if n == 0:
            continue
        gaps = gap_rngs[k].exponential(1.0 / stage.rate, n)
        gaps *= stage.duration_s / gaps.sum()
        arrivals.append(start + np.cumsum(gaps))
        ids.append(np.arange(n) % n_prompts)
        stage_of.append(np.full(n, k))
    if not arrivals:
        raise ValueError("stages hold no request (int(rate * duration) is 0 in every stage)")
    arrival = np.concatenate(arrivals)
    pid = np.concatenate(ids)
    st = np.concatenate(stage_of)
    order = np.argsort(arrival, kind="stable")
    arrival, pid, st = arrival[order], pid[order], st[order]

    parent = np.full(len(pid), -1, np.int64)
    length = np.zeros(len(pid), np.int64)
    last_of_prompt: dict[int, int] = {}
    first_of_group: dict[int, int] = {}
    for i, p in enumerate(pid.tolist()):
        g = int(group[shuffled[p]])
        if p in last_of_prompt:  # the same text again: the whole prompt is shared
            parent[i], length[i] = last_of_prompt[p], prompt_len[p]
        elif g in first_of_group and shared_sys[p] > 0:
            parent[i], length[i] = first_of_group[g], shared_sys[p]
        first_of_group.setdefault(g, i)
        last_of_prompt[p] = i
    reqs = Requests(arrival, prompt_len[pid], np.full(len(pid), data.output_len, np.int64))
    return StagedWorkload(reqs, SharedPrefixes(parent, length), st, pid)
