//! Bindings of the multi-card simulators (`sim/data_parallel.rs`, `sim/disaggregated.rs`): a
//! `Requests` in, a dict of numpy columns out (the keys of `sim_continuous_batching`'s dict,
//! without trace or batch log, plus the per-card ones). Self-contained on purpose: it shares
//! only `simulate`/`Requests` and the `ToPy` conversions with the other binding files.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::sim::{simulate, Requests};
use super::{add_functions, dict_of};
use crate::cost::{Efficiency, GpuSpec, ModelSpec};
use crate::sim::continuous::ContinuousParams;
use crate::sim::data_parallel::{self, PoolOutput};
use crate::sim::disaggregated::{self, DisaggOutput, Link};
use crate::sim::router::Router;

dict_of!(PoolOutput { ..sim, reject_code, n_preemptions, card, card_busy_s, card_steps, card_peak_kv_blocks });
dict_of!(DisaggOutput {
    ..pool, ready_s, decode_start_s, decode_card, decode_busy_s, decode_steps, decode_peak_kv_blocks,
});

/// Continuous batching on `n_replicas` cards behind `router` (`"round_robin"` or
/// `"least_tokens"`); `card` is one card's parameters, a dict keyed by `ContinuousParams`' fields.
#[pyfunction]
fn sim_data_parallel<'py>(
    py: Python<'py>,
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    requests: Requests<'py>,
    card: ContinuousParams,
    n_replicas: i64,
    router: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let router = Router::parse(router)?;
    simulate(py, (model, gpu, efficiency), requests, |pr, w| data_parallel::run(pr, w, &card, n_replicas, router))
}

/// Disaggregated serving: `n_prefill` prefill cards, `n_decode` decode cards (each of `card`, as
/// above), the KV over a link of `link_bandwidth` B/s (`inf` allowed) plus `link_latency_s`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_disaggregated<'py>(
    py: Python<'py>,
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    requests: Requests<'py>,
    card: ContinuousParams,
    n_prefill: i64,
    n_decode: i64,
    router: &str,
    link_bandwidth: f64,
    link_latency_s: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let router = Router::parse(router)?;
    let link = Link { bandwidth: link_bandwidth, latency_s: link_latency_s };
    let kv = model.kv_bytes_per_token();
    simulate(py, (model, gpu, efficiency), requests, |pr, w| {
        disaggregated::run(pr, w, &card, n_prefill, n_decode, router, link, kv)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_CARDS", crate::sim::router::MAX_CARDS)?;
    add_functions!(m, sim_data_parallel, sim_disaggregated);
    Ok(())
}
