"""Hypothesis strategies and helpers shared by every assignment's tests.

Specs reach student code as plain namespaces (:func:`plain`): the answer must come from the
fields, not from the properties or methods that servelab's own dataclasses carry.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from hypothesis import strategies as st

from servelab import hw_model as hw


def plain(spec) -> SimpleNamespace:
    """A dataclass spec's fields only, as a ``SimpleNamespace``."""
    return SimpleNamespace(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)})


@st.composite
def models(draw) -> hw.ModelSpec:
    """Valid Llama-style models, from tiny to beyond 70B, tied or untied, 1-4 bytes a value."""
    n_kv = draw(st.integers(1, 16))
    return hw.ModelSpec("random", n_layers=draw(st.integers(1, 128)), d_model=draw(st.integers(1, 16384)),
                        n_heads=n_kv * draw(st.integers(1, 8)), n_kv_heads=n_kv,
                        d_head=draw(st.integers(1, 256)), d_ff=draw(st.integers(1, 65536)),
                        vocab_size=draw(st.integers(1, 300_000)), tie_embeddings=draw(st.booleans()),
                        bytes_per_param=draw(st.sampled_from([1.0, 2.0, 4.0])))


gpus = st.builds(hw.GpuSpec, name=st.just("random"), peak_flops=st.floats(1e13, 5e15),
                 hbm_bandwidth=st.floats(5e11, 2e13), memory_bytes=st.floats(1e9, 1e12))

efficiencies = st.builds(hw.Efficiency, compute=st.floats(0.1, 1.0), bandwidth=st.floats(0.1, 1.0),
                         overhead_s=st.floats(0.0, 0.005))

batches = st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 65536)), min_size=1, max_size=12)


# ---- request workloads (a6_admission) -----------------------------------------------------------

# gaps between arrivals: bursts (0), near-collisions, and pauses long enough to drain the queue
ARRIVAL_GAPS_S = (0.0, 0.001, 0.05, 0.2, 0.5, 3.0)


@st.composite
def request_workloads(draw, max_requests: int = 20, max_output: int = 60):
    """Small bursty ``servelab.workload.Requests``: 1..``max_requests`` requests, prompts of
    1-1024 tokens, 1..``max_output`` output tokens."""
    import numpy as np
    from servelab.workload import Requests
    n = draw(st.integers(1, max_requests))
    gaps = draw(st.lists(st.sampled_from(ARRIVAL_GAPS_S), min_size=n, max_size=n))
    return Requests(arrival_s=np.cumsum(gaps),
                    prompt_len=draw(st.lists(st.integers(1, 1024), min_size=n, max_size=n)),
                    output_len=draw(st.lists(st.integers(1, max_output), min_size=n, max_size=n)))
