//! Bindings of the multi-card simulators (`sim/data_parallel.rs`, `sim/disaggregated.rs`): a
//! `Requests` in, a dict of numpy columns out (the keys of `sim_continuous_batching`'s dict,
//! without trace or batch log, plus the per-card ones). Self-contained on purpose: it shares
//! only `simulate`/`Requests` and the `ToPy` conversions with the other binding files.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::sim::{simulate, Requests};
use super::{add_functions, to_dict, ToPy};
use crate::cost::{Efficiency, GpuSpec, ModelSpec};
use crate::sim::continuous::ContinuousParams;
use crate::sim::data_parallel::{self, PoolOutput};
use crate::sim::disaggregated::{self, DisaggOutput, Link};
use crate::sim::router::Router;

impl ToPy for PoolOutput {
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = to_dict(py, self.sim)?;
        d.set_item("reject_code", self.reject_code.to_py(py)?)?;
        d.set_item("n_preemptions", self.n_preemptions.to_py(py)?)?;
        d.set_item("card", self.card.to_py(py)?)?;
        d.set_item("card_busy_s", self.card_busy_s.to_py(py)?)?;
        d.set_item("card_steps", self.card_steps.to_py(py)?)?;
        d.set_item("card_peak_kv_blocks", self.card_peak_kv_blocks.to_py(py)?)?;
        Ok(d.into_any())
    }
}

impl ToPy for DisaggOutput {
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = to_dict(py, self.pool)?;
        d.set_item("ready_s", self.ready_s.to_py(py)?)?;
        d.set_item("decode_start_s", self.decode_start_s.to_py(py)?)?;
        d.set_item("decode_card", self.decode_card.to_py(py)?)?;
        d.set_item("decode_busy_s", self.decode_busy_s.to_py(py)?)?;
        d.set_item("decode_steps", self.decode_steps.to_py(py)?)?;
        d.set_item("decode_peak_kv_blocks", self.decode_peak_kv_blocks.to_py(py)?)?;
        Ok(d.into_any())
    }
}

/// Continuous batching on `n_replicas` cards behind `router` (`"round_robin"` or
/// `"least_tokens"`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_data_parallel<'py>(
    py: Python<'py>,
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    requests: Requests<'py>,
    max_num_seqs: i64,
    max_num_batched_tokens: i64,
    block_size: i64,
    num_blocks: i64,
    chunked_prefill: bool,
    n_replicas: i64,
    router: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let params = ContinuousParams { max_num_seqs, max_num_batched_tokens, block_size, num_blocks, chunked_prefill };
    let router = Router::parse(router)?;
    simulate(py, (model, gpu, efficiency), requests, |pr, w| data_parallel::run(pr, w, &params, n_replicas, router))
}

/// Disaggregated serving: `n_prefill` prefill cards, `n_decode` decode cards, the KV over a
/// link of `link_bandwidth` B/s (`inf` allowed) plus `link_latency_s`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_disaggregated<'py>(
    py: Python<'py>,
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    requests: Requests<'py>,
    max_num_seqs: i64,
    max_num_batched_tokens: i64,
    block_size: i64,
    num_blocks: i64,
    chunked_prefill: bool,
    n_prefill: i64,
    n_decode: i64,
    router: &str,
    link_bandwidth: f64,
    link_latency_s: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let params = ContinuousParams { max_num_seqs, max_num_batched_tokens, block_size, num_blocks, chunked_prefill };
    let router = Router::parse(router)?;
    let link = Link { bandwidth: link_bandwidth, latency_s: link_latency_s };
    let kv = model.kv_bytes_per_token();
    simulate(py, (model, gpu, efficiency), requests, |pr, w| {
        disaggregated::run(pr, w, &params, n_prefill, n_decode, router, link, kv)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_CARDS", crate::sim::router::MAX_CARDS)?;
    add_functions!(m, sim_data_parallel, sim_disaggregated);
    Ok(())
}
