//! Bindings of the serving simulator (`sim/`): numpy columns in, a dict of numpy columns out.

use super::slice;
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::cost::{PyEfficiency, PyGpuSpec, PyModelSpec};
use crate::cost::Pricer;
use crate::error::CoreResult;
use crate::sim::admission::EarlyReject;
use crate::sim::batch1::{self, AcceptAll};
use crate::sim::continuous::{self, ContinuousParams};
use crate::sim::continuous_per_step;
use crate::sim::continuous_prefix::{self, Prefixes};
use crate::sim::fixed_service;
use crate::sim::static_batching::{self, StaticParams};
use crate::sim::{SimOutput, Workload};


fn to_dict<'py>(py: Python<'py>, o: SimOutput) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("start_s", o.start_s.into_pyarray(py))?;
    d.set_item("first_token_s", o.first_token_s.into_pyarray(py))?;
    d.set_item("finish_s", o.finish_s.into_pyarray(py))?;
    d.set_item("rejected", o.rejected.into_pyarray(py))?;
    d.set_item("batch_id", o.batch_id.into_pyarray(py))?;
    d.set_item("busy_s", o.busy_s)?;
    d.set_item("flops", o.flops)?;
    d.set_item("n_steps", o.n_steps)?;
    d.set_item("peak_kv_tokens", o.peak_kv_tokens)?;
    match o.trace {
        Some(t) => {
            let tr = PyDict::new(py);
            tr.set_item("start_s", t.start_s.into_pyarray(py))?;
            tr.set_item("step_s", t.step_s.into_pyarray(py))?;
            tr.set_item("batch_size", t.batch_size.into_pyarray(py))?;
            tr.set_item("tokens", t.tokens.into_pyarray(py))?;
            tr.set_item("n_prefill", t.n_prefill.into_pyarray(py))?;
            tr.set_item("n_decode", t.n_decode.into_pyarray(py))?;
            tr.set_item("kv_tokens", t.kv_tokens.into_pyarray(py))?;
            d.set_item("trace", tr)?;
        }
        None => d.set_item("trace", py.None())?,
    }
    Ok(d)
}

/// Validates everything, then runs `f` without the GIL.
#[allow(clippy::too_many_arguments)]
fn simulate<'py, F>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    arrival_s: PyReadonlyArray1<'py, f64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    output_len: PyReadonlyArray1<'py, i64>,
    f: F,
) -> PyResult<Bound<'py, PyDict>>
where
    F: FnOnce(&Pricer, &Workload<'_>) -> CoreResult<SimOutput> + Send,
{
    let pricer = Pricer::new(&model.into(), &gpu.into(), &efficiency.into())?;
    let (a, p, l) = (slice("arrival_s", &arrival_s)?, slice("prompt_len", &prompt_len)?, slice("output_len", &output_len)?);
    let w = Workload::new(a, p, l)?;
    // A million-step run takes tens of milliseconds: let other Python threads run meanwhile.
    let out = py.detach(|| f(&pricer, &w))?;
    to_dict(py, out)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_batch1<'py>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    arrival_s: PyReadonlyArray1<'py, f64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    output_len: PyReadonlyArray1<'py, i64>,
    trace: bool,
) -> PyResult<Bound<'py, PyDict>> {
    simulate(py, model, gpu, efficiency, arrival_s, prompt_len, output_len, |pr, w| {
        Ok(batch1::run(pr, w, &mut AcceptAll, trace))
    })
}

/// Batch 1 with early rejection (§5.3): `predicted_len` is the controller's guess of each
/// output length. The dict has one more column, `would_first_token_s` (see `sim/admission.rs`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_batch1_early_reject<'py>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    arrival_s: PyReadonlyArray1<'py, f64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    output_len: PyReadonlyArray1<'py, i64>,
    slo_ttft_s: f64,
    predicted_len: PyReadonlyArray1<'py, i64>,
    trace: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let pred = slice("predicted_len", &predicted_len)?;
    let mut would: Vec<f64> = Vec::new();
    let d = simulate(py, model, gpu, efficiency, arrival_s, prompt_len, output_len, |pr, w| {
        let mut adm = EarlyReject::new(pr, w, slo_ttft_s, pred)?;
        let out = batch1::run(pr, w, &mut adm, trace);
        would = adm.would_first_token_s;
        Ok(out)
    })?;
    d.set_item("would_first_token_s", would.into_pyarray(py))?;
    Ok(d)
}

/// The CNN-era server of demo 04 (`sim/fixed_service.rs`): `slo_s` None accepts everything.
#[pyfunction]
fn sim_fixed_service<'py>(
    py: Python<'py>,
    arrival_s: PyReadonlyArray1<'py, f64>,
    service_s: f64,
    slo_s: Option<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    let a = slice("arrival_s", &arrival_s)?;
    let o = py.detach(|| fixed_service::run(a, service_s, slo_s))?;
    let d = PyDict::new(py);
    d.set_item("start_s", o.start_s.into_pyarray(py))?;
    d.set_item("finish_s", o.finish_s.into_pyarray(py))?;
    d.set_item("rejected", o.rejected.into_pyarray(py))?;
    d.set_item("busy_s", o.busy_s)?;
    Ok(d)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_static_batching<'py>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    arrival_s: PyReadonlyArray1<'py, f64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    output_len: PyReadonlyArray1<'py, i64>,
    batch_size: i64,
    max_wait_s: f64,
    ride_along: bool,
    trace: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let params = StaticParams { batch_size, max_wait_s, ride_along };
    params.validate()?;
    simulate(py, model, gpu, efficiency, arrival_s, prompt_len, output_len, move |pr, w| {
        static_batching::run(pr, w, &params, trace)
    })
}

/// Continuous batching (`sim/continuous.rs`). Beside the usual columns: `reject_code` (int8,
/// see `continuous::REJECT_*`), `n_preemptions`, the totals `preemptions` and
/// `peak_kv_blocks`, with the trace its columns `kv_blocks`, `n_preempted`, `n_admitted`, and
/// with `batch_log` a dict of CSR columns `offsets`, `request_id`, `new_tokens`, `context_len`.
/// `per_step` (tests and benchmarks only) runs the per-sequence-step loop the event-driven
/// engine replaced (`sim/continuous_per_step.rs`): the same output, bit for bit, slower.
/// `prefix_caching` runs `sim/continuous_prefix.rs` over the shared prefixes `prefix_parent` /
/// `prefix_len` (None: nothing shared) and adds `cached_tokens`, `computed_tokens` and the
/// totals `prefix_hits`, `prefix_lookups`, `prefix_evictions`.
#[pyfunction]
#[pyo3(signature = (model, gpu, efficiency, arrival_s, prompt_len, output_len, max_num_seqs,
    max_num_batched_tokens, block_size, num_blocks, chunked_prefill, trace, batch_log, per_step=false,
    prefix_caching=false, prefix_parent=None, prefix_len=None))]
#[allow(clippy::too_many_arguments)]
fn sim_continuous_batching<'py>(
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
    trace: bool,
    batch_log: bool,
    per_step: bool,
    prefix_caching: bool,
    prefix_parent: Option<PyReadonlyArray1<'py, i64>>,
    prefix_len: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<Bound<'py, PyDict>> {
    let params = ContinuousParams { max_num_seqs, max_num_batched_tokens, block_size, num_blocks, chunked_prefill };
    params.validate()?;
    if per_step && prefix_caching {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "per_step=True has no prefix caching (the prefix-caching loop is per-step already)",
        ));
    }
    let n = arrival_s.len()?;
    let (none_parent, no_len) = (vec![-1i64; if prefix_parent.is_none() { n } else { 0 }], vec![0i64; if prefix_len.is_none() { n } else { 0 }]);
    let parent = match &prefix_parent { Some(x) => slice("prefix_parent", x)?, None => &none_parent[..] };
    let plen = match &prefix_len { Some(x) => slice("prefix_len", x)?, None => &no_len[..] };
    let mut rest = None;
    let mut prefix_out = None;
    let d = simulate(py, model, gpu, efficiency, arrival_s, prompt_len, output_len, |pr, w| {
        let o = if prefix_caching {
            let (o, p) = continuous_prefix::run(pr, w, &params, &Prefixes { parent, len: plen }, true, trace, batch_log)?;
            prefix_out = Some(p);
            o
        } else if per_step {
            continuous_per_step::run_per_step(pr, w, &params, trace, batch_log)?
        } else {
            continuous::run(pr, w, &params, trace, batch_log)?
        };
        rest = Some((o.reject_code, o.n_preemptions, o.preemptions, o.peak_kv_blocks, o.trace_extra, o.batch_log));
        Ok(o.sim)
    })?;
    let (codes, n_pre, pre, peak, extra, log) = rest.expect("set by a successful run");
    d.set_item("reject_code", codes.into_pyarray(py))?;
    d.set_item("n_preemptions", n_pre.into_pyarray(py))?;
    d.set_item("preemptions", pre)?;
    d.set_item("peak_kv_blocks", peak)?;
    if let Some(p) = prefix_out {
        d.set_item("cached_tokens", p.cached_tokens.into_pyarray(py))?;
        d.set_item("computed_tokens", p.computed_tokens.into_pyarray(py))?;
        d.set_item("prefix_hits", p.num_hits)?;
        d.set_item("prefix_lookups", p.num_lookups)?;
        d.set_item("prefix_evictions", p.num_evictions)?;
    }
    if let Some(x) = extra {
        let tr = d.get_item("trace")?.expect("set by to_dict");
        tr.set_item("kv_blocks", x.kv_blocks.into_pyarray(py))?;
        tr.set_item("n_preempted", x.n_preempted.into_pyarray(py))?;
        tr.set_item("n_admitted", x.n_admitted.into_pyarray(py))?;
    }
    match log {
        Some(l) => {
            let ld = PyDict::new(py);
            ld.set_item("offsets", l.offsets.into_pyarray(py))?;
            ld.set_item("request_id", l.request_id.into_pyarray(py))?;
            ld.set_item("new_tokens", l.new_tokens.into_pyarray(py))?;
            ld.set_item("context_len", l.context_len.into_pyarray(py))?;
            d.set_item("batch_log", ld)?;
        }
        None => d.set_item("batch_log", py.None())?,
    }
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_REQUEST_TOKENS", crate::sim::MAX_REQUEST_TOKENS)?;
    m.add_function(wrap_pyfunction!(sim_batch1, m)?)?;
    m.add_function(wrap_pyfunction!(sim_static_batching, m)?)?;
    m.add_function(wrap_pyfunction!(sim_batch1_early_reject, m)?)?;
    m.add_function(wrap_pyfunction!(sim_fixed_service, m)?)?;
    m.add_function(wrap_pyfunction!(sim_continuous_batching, m)?)?;
    Ok(())
}
