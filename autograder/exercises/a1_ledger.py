"""Reference values of assignment a1_ledger (exercises 1 and 3 of lecture 1, §2.4 and §3.5),
computed by the reference solution: what the answer key and its table show.

``answers(solution)`` receives the task's reference modules by name and yields
``(exercise, quantity, value)``; values are plain numbers or booleans.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from servelab.hw_model import H100, LLAMA3_70B, LLAMA3_8B

SEEDS: dict[str, int] = {}  # nothing random here


def _plain(spec):
    return SimpleNamespace(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)})


def answers(solution):
    ledger = solution["ledger"]
    no_gqa = dataclasses.replace(LLAMA3_8B, n_kv_heads=32)
    for exercise, spec in (("Llama-3-8B (§2.4)", LLAMA3_8B), ("ex. 1: Llama-3-70B", LLAMA3_70B),
                           ("ex. 3: Llama-3-8B without GQA", no_gqa)):
        m = _plain(spec)
        yield exercise, "parameters", ledger.param_count(m)
        yield exercise, "weight bytes (BF16)", ledger.weight_bytes(m)
        yield exercise, "KV bytes per token", ledger.kv_bytes_per_token(m)
        yield exercise, "fits on one H100 (90% of 80 GB)", ledger.fits(m, H100)
        yield exercise, "KV capacity on H100 (tokens)", ledger.kv_capacity_tokens(m, H100)
        yield exercise, "max batch at context 1024 on H100", ledger.max_batch(m, H100, 1024)
