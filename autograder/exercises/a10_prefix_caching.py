"""Reference values of assignment a10_prefix_caching (§3.5, §8 milestone 3), computed by the
reference solution driving servelab's engine (``scheduler_harness.run_prefix``): what the answer
key and its table show.

The stated load: a burst of 8 single-turn chats arriving together, their lengths and system
prompts from ``workload.chat_sessions`` (one system prompt of 128 tokens, user messages of mean
6 tokens, answers of mean 4, log-space sigma 0.5), blocks of 16 tokens, room for every request.
Counts and times depend on lengths only (the paper clock prices lengths), so they are the same
on every machine.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from servelab.engine import Request, serve
from servelab.tiny_llm import TINY, TinyLLM
from servelab.workload import chat_sessions

SEEDS = {"chat_sessions and the token ids (numpy default_rng)": 0}
N, SYSTEM_LEN, BLOCK = 8, 128, 16
FOLDER = Path(__file__).resolve().parents[2] / "assignments" / "a10_prefix_caching"


def _harness():
    """The tests' ``assignments/scheduler_harness.py`` (it imports nothing of the student's)."""
    spec = importlib.util.spec_from_file_location("_a10_scheduler_harness",
                                                  FOLDER.parent / "scheduler_harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stated_load() -> list[Request]:
    seed = SEEDS["chat_sessions and the token ids (numpy default_rng)"]
    loads, sp = chat_sessions(N, rate=1.0, seed=seed, system_len=SYSTEM_LEN, n_system_prompts=1,
                              user_mean=6, output_mean=4, sigma=0.5, max_len=240)
    rng = np.random.default_rng(seed)
    system = rng.integers(0, 128, SYSTEM_LEN).tolist()
    return [Request(system + [128 + i] + rng.integers(0, 128, int(p) - SYSTEM_LEN - 1).tolist(), int(m))
            for i, (p, m) in enumerate(zip(loads.prompt_len, loads.output_len))]


def answers(solution):
    requests = stated_load()
    blocks = sum(-(-(len(r.prompt) + r.max_new_tokens - 1) // BLOCK) for r in requests)
    eng = dict(num_blocks=blocks, block_size=BLOCK, max_num_seqs=16, max_num_batched_tokens=4096,
               model=TinyLLM(TINY))
    off = serve(requests, **eng)
    on, _ = _harness().run_prefix(solution["prefix_scheduler"].schedule,
                                  solution["prefix_blocks"].PrefixBlocks, requests, **eng)
    label = f"{N} chats sharing a {SYSTEM_LEN}-token system prompt, blocks of {BLOCK} (§3.5, §8.3)"
    yield label, "prompt tokens", sum(len(r.prompt) for r in requests)
    yield label, "tokens served from cache", sum(r.num_cached_tokens for r in on.requests)
    yield label, "tokens computed, prefix caching off", sum(r.num_computed_tokens for r in off.requests)
    yield label, "tokens computed, prefix caching on", sum(r.num_computed_tokens for r in on.requests)
    for name, res in (("off", off), ("on", on)):
        yield label, f"mean TTFT (ms), prefix caching {name}", \
            round(float(np.mean([r.ttft_s for r in res.requests])) * 1e3, 4)
