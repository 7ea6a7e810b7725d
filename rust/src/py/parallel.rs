//! Bindings of the multi-card simulators (`sim/data_parallel.rs`, `sim/disaggregated.rs`):
//! numpy columns in, a dict of numpy columns out (the keys of `sim_continuous_batching`'s
//! dict, plus the per-card ones). Self-contained on purpose: it shares only the spec
//! conversions and `slice` with the other binding files.

use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::cost::{PyEfficiency, PyGpuSpec, PyModelSpec};
use super::slice;
use crate::cost::{ModelSpec, Pricer};
use crate::sim::continuous::ContinuousParams;
use crate::sim::data_parallel::{self, PoolOutput};
use crate::sim::disaggregated::{self, Link};
use crate::sim::router::Router;
use crate::sim::Workload;

fn pool_dict<'py>(py: Python<'py>, o: PoolOutput) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let s = o.sim;
    d.set_item("start_s", s.start_s.into_pyarray(py))?;
    d.set_item("first_token_s", s.first_token_s.into_pyarray(py))?;
    d.set_item("finish_s", s.finish_s.into_pyarray(py))?;
    d.set_item("rejected", s.rejected.into_pyarray(py))?;
    d.set_item("batch_id", s.batch_id.into_pyarray(py))?;
    d.set_item("busy_s", s.busy_s)?;
    d.set_item("flops", s.flops)?;
    d.set_item("n_steps", s.n_steps)?;
    d.set_item("peak_kv_tokens", s.peak_kv_tokens)?;
    d.set_item("trace", py.None())?;
    d.set_item("reject_code", o.reject_code.into_pyarray(py))?;
    d.set_item("n_preemptions", o.n_preemptions.into_pyarray(py))?;
    d.set_item("card", o.card.into_pyarray(py))?;
    d.set_item("card_busy_s", o.card_busy_s.into_pyarray(py))?;
    d.set_item("card_steps", o.card_steps.into_pyarray(py))?;
    d.set_item("card_peak_kv_blocks", o.card_peak_kv_blocks.into_pyarray(py))?;
    Ok(d)
}

/// Continuous batching on `n_replicas` cards behind `router` (`"round_robin"` or
/// `"least_tokens"`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_data_parallel<'py>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    arrival_s: PyReadonlyArray1<'py, f64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    output_len: PyReadonlyArray1<'py, i64>,
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
    let pricer = Pricer::new(&model.into(), &gpu.into(), &efficiency.into())?;
    let (a, p, l) = (slice("arrival_s", &arrival_s)?, slice("prompt_len", &prompt_len)?, slice("output_len", &output_len)?);
    let w = Workload::new(a, p, l)?;
    let out = py.detach(|| data_parallel::run(&pricer, &w, &params, n_replicas, router))?;
    pool_dict(py, out)
}

/// Disaggregated serving: `n_prefill` prefill cards, `n_decode` decode cards, the KV over a
/// link of `link_bandwidth` B/s (`inf` allowed) plus `link_latency_s`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_disaggregated<'py>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    arrival_s: PyReadonlyArray1<'py, f64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    output_len: PyReadonlyArray1<'py, i64>,
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
    let model: ModelSpec = model.into();
    let pricer = Pricer::new(&model, &gpu.into(), &efficiency.into())?;
    let kv = model.kv_bytes_per_token();
    let (a, p, l) = (slice("arrival_s", &arrival_s)?, slice("prompt_len", &prompt_len)?, slice("output_len", &output_len)?);
    let w = Workload::new(a, p, l)?;
    let o = py.detach(|| disaggregated::run(&pricer, &w, &params, n_prefill, n_decode, router, link, kv))?;
    let d = pool_dict(py, o.pool)?;
    d.set_item("ready_s", o.ready_s.into_pyarray(py))?;
    d.set_item("decode_start_s", o.decode_start_s.into_pyarray(py))?;
    d.set_item("decode_card", o.decode_card.into_pyarray(py))?;
    d.set_item("decode_busy_s", o.decode_busy_s.into_pyarray(py))?;
    d.set_item("decode_steps", o.decode_steps.into_pyarray(py))?;
    d.set_item("decode_peak_kv_blocks", o.decode_peak_kv_blocks.into_pyarray(py))?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_CARDS", crate::sim::router::MAX_CARDS)?;
    m.add_function(wrap_pyfunction!(sim_data_parallel, m)?)?;
    m.add_function(wrap_pyfunction!(sim_disaggregated, m)?)?;
    Ok(())
}
