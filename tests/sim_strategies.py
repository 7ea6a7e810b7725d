"""Hypothesis strategies for simulator tests: small random workloads with many ties."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from servelab.workload import Requests


@st.composite
def workloads(draw, max_n: int = 24, max_prompt: int = 4096, max_output: int = 200) -> Requests:
    """Arrival gaps from a mix of exact ties, tiny gaps, the 0.2 s wait itself and long pauses,
    so that every branch of the batching rules (full batch, timeout, ties at the start instant,
    idle GPU) is reached."""
    n = draw(st.integers(0, max_n))
    gaps = draw(st.lists(st.one_of(st.just(0.0), st.just(0.2), st.floats(0.0, 0.05),
                                   st.floats(0.0, 5.0)), min_size=n, max_size=n))
    start = draw(st.sampled_from([0.0, 0.1, 3.7]))
    arrival = start + np.cumsum(np.array(gaps, dtype=np.float64)) if n else np.zeros(0)
    prompt = draw(st.lists(st.integers(1, max_prompt), min_size=n, max_size=n))
    output = draw(st.lists(st.one_of(st.integers(1, 3), st.integers(1, max_output)), min_size=n, max_size=n))
    return Requests(arrival, prompt, output)


static_params = st.fixed_dictionaries({
    "batch_size": st.integers(1, 9),
    "max_wait_s": st.one_of(st.just(0.0), st.just(0.2), st.floats(0.0, 3.0)),
    "ride_along": st.booleans(),
})
