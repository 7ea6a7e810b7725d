"""Hypothesis strategies shared by the library's tests: models, GPUs, efficiencies, batches."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import strategies as st

from servelab import hw_model as hw


@st.composite
def models(draw) -> hw.ModelSpec:
    """Valid Llama-style models from tiny to beyond 70B."""
    n_kv = draw(st.integers(1, 16))
    group = draw(st.integers(1, 8))
    return hw.ModelSpec(
        name="random",
        n_layers=draw(st.integers(1, 128)),
        d_model=draw(st.integers(1, 16384)),
        n_heads=n_kv * group,
        n_kv_heads=n_kv,
        d_head=draw(st.integers(1, 256)),
        d_ff=draw(st.integers(1, 65536)),
        vocab_size=draw(st.integers(1, 300_000)),
        tie_embeddings=draw(st.booleans()),
        bytes_per_param=draw(st.sampled_from([0.5, 1.0, 2.0, 4.0])),
    )


@st.composite
def gpus(draw) -> hw.GpuSpec:
    return hw.GpuSpec(
        name="random",
        peak_flops=draw(st.floats(1e12, 1e16)),
        hbm_bandwidth=draw(st.floats(1e11, 1e14)),
        memory_bytes=draw(st.floats(1e9, 1e12)),
    )


efficiencies = st.builds(hw.Efficiency, compute=st.floats(0.05, 1.0), bandwidth=st.floats(0.05, 1.0),
                         overhead_s=st.floats(0.0, 0.01))

sequences = st.tuples(st.integers(1, 8192), st.integers(0, 131072))
batches = st.lists(sequences, min_size=1, max_size=16)


def raw(spec, **changes) -> SimpleNamespace:
    """A spec as a plain namespace, so fields can be made invalid without __post_init__."""
    fields = {k: getattr(spec, k) for k in spec.__dataclass_fields__}
    fields.update(changes)
    return SimpleNamespace(**fields)
