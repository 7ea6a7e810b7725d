//! Bindings of the serving simulator (`sim/`): numpy columns in, a dict of numpy columns out.

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::{add_functions, dict_of, merge, slice, to_dict, ToPy};
use crate::cost::{Efficiency, GpuSpec, ModelSpec, Pricer};
use crate::error::CoreResult;
use crate::sim::admission::EarlyReject;
use crate::sim::batch1::{self, AcceptAll};
use crate::sim::continuous::{self, BatchLog, ContinuousOutput, ContinuousParams, StepExtra};
use crate::sim::continuous_per_step::{self, SpecOutput, Speculation};
use crate::sim::continuous_prefix::{self, PrefixOutput, Prefixes};
use crate::sim::fixed_service::{self, FixedOutput};
use crate::sim::static_batching::{self, StaticParams};
use crate::sim::{SimOutput, StepTrace, Workload};

dict_of!(SimOutput { start_s, first_token_s, finish_s, rejected, batch_id, busy_s, flops, n_steps, peak_kv_tokens, trace });
dict_of!(StepTrace { start_s, step_s, batch_size, tokens, n_prefill, n_decode, kv_tokens });
dict_of!(StepExtra { kv_blocks, n_preempted, n_admitted });
dict_of!(BatchLog { offsets, request_id, new_tokens, context_len });
dict_of!(FixedOutput { start_s, finish_s, rejected, busy_s });
dict_of!(PrefixOutput {
    cached_tokens, computed_tokens, prefix_hits, prefix_lookups, prefix_evictions, host_hits, host_transfer_s,
});
dict_of!(SpecOutput { spec_proposed, spec_accepted, spec_steps, draft_busy_s });

/// The request columns of a `servelab.workload.Requests`, read by attribute name (its
/// constructor has checked them; the core checks them again).
#[derive(FromPyObject)]
pub(super) struct Requests<'py> {
    pub(super) arrival_s: PyReadonlyArray1<'py, f64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    output_len: PyReadonlyArray1<'py, i64>,
}

/// Validates everything, then runs `f` without the GIL; the dict of what it returns.
pub(super) fn simulate<'py, O: ToPy + Send>(
    py: Python<'py>,
    (model, gpu, efficiency): (ModelSpec, GpuSpec, Efficiency),
    r: Requests<'py>,
    f: impl FnOnce(&Pricer, &Workload<'_>) -> CoreResult<O> + Send,
) -> PyResult<Bound<'py, PyDict>> {
    let pricer = Pricer::new(&model, &gpu, &efficiency)?;
    let a = slice("arrival_s", &r.arrival_s)?;
    let (p, l) = (slice("prompt_len", &r.prompt_len)?, slice("output_len", &r.output_len)?);
    let w = Workload::new(a, p, l)?;
    // A million-step run takes tens of milliseconds: let other Python threads run meanwhile.
    let out = py.detach(|| f(&pricer, &w))?;
    to_dict(py, out)
}

/// Batch 1 (`sim/batch1.rs`). With `predicted_len`, the controller's guess of each output
/// length, early rejection against `slo_ttft_s` (§5.3): the dict then has one more column,
/// `would_first_token_s` (see `sim/admission.rs`).
#[pyfunction]
#[pyo3(signature = (model, gpu, efficiency, requests, trace, slo_ttft_s=0.0, predicted_len=None))]
#[allow(clippy::too_many_arguments)]
fn sim_batch1<'py>(
    py: Python<'py>,
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    requests: Requests<'py>,
    trace: bool,
    slo_ttft_s: f64,
    predicted_len: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<Bound<'py, PyDict>> {
    let Some(predicted_len) = predicted_len else {
        return simulate(py, (model, gpu, efficiency), requests, |pr, w| Ok(batch1::run(pr, w, &mut AcceptAll, trace)));
    };
    let pred = slice("predicted_len", &predicted_len)?;
    let mut would: Vec<f64> = Vec::new();
    let d = simulate(py, (model, gpu, efficiency), requests, |pr, w| {
        let mut adm = EarlyReject::new(pr, w, slo_ttft_s, pred)?;
        let out = batch1::run(pr, w, &mut adm, trace);
        would = adm.would_first_token_s;
        Ok(out)
    })?;
    d.set_item("would_first_token_s", would.to_py(py)?)?;
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
    to_dict(py, py.detach(|| fixed_service::run(a, service_s, slo_s))?)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_static_batching<'py>(
    py: Python<'py>,
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    requests: Requests<'py>,
    batch_size: i64,
    max_wait_s: f64,
    ride_along: bool,
    trace: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let params = StaticParams { batch_size, max_wait_s, ride_along };
    params.validate()?;
    simulate(py, (model, gpu, efficiency), requests, |pr, w| static_batching::run(pr, w, &params, trace))
}

// `SimOutput`'s keys, then `reject_code` (int8, see `continuous::REJECT_*`), `n_preemptions`,
// the totals `preemptions` and `peak_kv_blocks`, and `batch_log` (a dict of CSR columns, or
// None); with the trace, this policy's columns join the common ones (in `ContinuousRun`).
dict_of!(ContinuousOutput { ..sim, reject_code, n_preemptions, preemptions, peak_kv_blocks, batch_log });

/// A continuous-batching run, with prefix caching's or speculation's columns when it was on
/// (joined into one dict).
struct ContinuousRun(ContinuousOutput, Option<PrefixOutput>, Option<SpecOutput>);

impl ToPy for ContinuousRun {
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let ContinuousRun(mut out, prefix, spec) = self;
        let extra = out.trace_extra.take();
        let d = to_dict(py, out)?;
        if let Some(x) = extra {
            merge(&d.get_item("trace")?.expect("set by to_dict").cast_into::<PyDict>()?, x)?;
        }
        if let Some(p) = prefix {
            merge(&d, p)?;
        }
        if let Some(s) = spec {
            merge(&d, s)?;
        }
        Ok(d.into_any())
    }
}

/// Continuous batching (`sim/continuous.rs`) with `card`, a dict keyed by `ContinuousParams`'
/// fields; the dict out is `ContinuousOutput`'s (above).
/// `per_step` (tests and benchmarks only) runs the per-sequence-step loop the event-driven
/// engine replaced (`sim/continuous_per_step.rs`): the same output, bit for bit, slower.
/// `prefix_caching` runs `sim/continuous_prefix.rs` over the shared prefixes `prefix_parent` /
/// `prefix_len` (None: nothing shared) and adds `cached_tokens`, `computed_tokens` and the
/// totals `prefix_hits`, `prefix_lookups`, `prefix_evictions`; `host_blocks` > 0 gives it a host
/// tier (`host_policy`; `host_s_per_token`: one token's KV over the host link) and adds
/// `host_hits`, `host_transfer_s`. `spec_k` (with `spec_acceptance`,
/// one rate per request, `spec_seed` and `draft_model`) runs the per-step loop with speculative
/// decoding (`sim/continuous_per_step.rs`) and adds `spec_proposed`, `spec_accepted`,
/// `spec_steps` and `draft_busy_s`.
#[pyfunction]
#[pyo3(signature = (model, gpu, efficiency, requests, card, trace, batch_log, per_step=false, prefix_caching=false,
    prefix_parent=None, prefix_len=None, spec_k=None, spec_acceptance=None, spec_seed=0, draft_model=None, host_blocks=0,
    host_policy="lru", host_s_per_token=0.0))]
#[allow(clippy::too_many_arguments)]
fn sim_continuous_batching<'py>(
    py: Python<'py>,
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    requests: Requests<'py>,
    card: ContinuousParams,
    trace: bool,
    batch_log: bool,
    per_step: bool,
    prefix_caching: bool,
    prefix_parent: Option<PyReadonlyArray1<'py, i64>>,
    prefix_len: Option<PyReadonlyArray1<'py, i64>>,
    spec_k: Option<i64>,
    spec_acceptance: Option<PyReadonlyArray1<'py, f64>>,
    spec_seed: u64,
    draft_model: Option<ModelSpec>,
    host_blocks: i64,
    host_policy: &str,
    host_s_per_token: f64,
) -> PyResult<Bound<'py, PyDict>> {
    card.validate()?;
    if per_step && prefix_caching {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "per_step=True has no prefix caching (the prefix-caching loop is per-step already)",
        ));
    }
    let n = requests.arrival_s.len()?;
    // None: nobody shares anything (only a preempted request's own computed blocks can hit)
    let no_parent = if prefix_parent.is_some() { Vec::new() } else { vec![-1i64; n] };
    let no_len = if prefix_len.is_some() { Vec::new() } else { vec![0i64; n] };
    let parent = match &prefix_parent { Some(x) => slice("prefix_parent", x)?, None => &no_parent[..] };
    let plen = match &prefix_len { Some(x) => slice("prefix_len", x)?, None => &no_len[..] };
    let draft = match (&spec_k, &draft_model) {
        (Some(_), Some(d)) => Some(Pricer::new(d, &gpu, &efficiency)?),
        (None, None) => None,
        _ => return Err(pyo3::exceptions::PyValueError::new_err("spec_k and draft_model go together")),
    };
    let acceptance = match &spec_acceptance { Some(x) => slice("spec_acceptance", x)?, None => &[][..] };
    if spec_k.is_some() && prefix_caching {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "speculative decoding runs without prefix caching (the per-step loop)",
        ));
    }
    simulate(py, (model, gpu, efficiency), requests, |pr, w| {
        if let (Some(k), Some(d)) = (spec_k, draft.as_ref()) {
            let sp = Speculation { k, acceptance, seed: spec_seed, draft: d };
            let (o, s) = continuous_per_step::run_speculative(pr, w, &card, &sp, trace, batch_log)?;
            Ok(ContinuousRun(o, None, Some(s)))
        } else if prefix_caching {
            let prefixes = Prefixes { parent, len: plen };
            let host = continuous_prefix::HostTierOption { host_blocks, policy: host_policy, s_per_token: host_s_per_token };
            let (o, p) = continuous_prefix::run_tiered(pr, w, &card, &prefixes, true, &host, trace, batch_log)?;
            Ok(ContinuousRun(o, Some(p), None))
        } else if per_step {
            Ok(ContinuousRun(continuous_per_step::run_per_step(pr, w, &card, trace, batch_log)?, None, None))
        } else {
            Ok(ContinuousRun(continuous::run(pr, w, &card, trace, batch_log)?, None, None))
        }
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_REQUEST_TOKENS", crate::sim::MAX_REQUEST_TOKENS)?;
    m.add("MAX_SPEC_K", continuous_per_step::MAX_SPEC_K)?;
    add_functions!(m, sim_batch1, sim_static_batching, sim_fixed_service, sim_continuous_batching);
    Ok(())
}
