//! Bindings of the serving simulator (`sim/`): the hardware `(model, gpu, efficiency)` and a
//! `servelab.workload.Requests` in, a dict of numpy columns out.

use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::cost::Hardware;
use super::convert::{add_functions, dict_of, merge, slice, to_dict, ToPy};
use crate::cost::{ModelSpec, Pricer};
use crate::error::CoreResult;
use crate::sim::admission::EarlyReject;
use crate::sim::batch1::{self, AcceptAll};
use crate::sim::continuous::per_step::{self, SpecOutput, Speculation};
use crate::sim::continuous::prefix::{HostTierOption, PrefixOptions, PrefixOutput, Prefixes};
use crate::sim::continuous::{prefix_events, spec_events};
use crate::sim::continuous::trace::StepQueues;
use crate::sim::continuous::{event_driven, BatchLog, ContinuousOutput, ContinuousParams, Inputs, StepExtra};
use crate::sim::fixed_service::{self, FixedOutput};
use crate::sim::static_batching::{self, StaticParams};
use crate::sim::{SimOutput, StepTrace, Workload};

dict_of!(SimOutput { start_s, first_token_s, finish_s, rejected, batch_id, busy_s, flops, n_steps, peak_kv_tokens, trace });
dict_of!(StepTrace { start_s, step_s, batch_size, tokens, n_prefill, n_decode, kv_tokens });
dict_of!(StepExtra { kv_blocks, n_preempted, n_admitted });
dict_of!(BatchLog { offsets, request_id, new_tokens, context_len });
dict_of!(StepQueues { waiting_offsets, waiting, running_offsets, running, running_blocks });
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

/// The `(parent, length)` columns of a `servelab.workload.SharedPrefixes`.
pub(super) type Shared<'py> = (PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>);

/// The shared-prefix columns of `n` requests: `shared`'s, or (None) nobody shares anything and
/// only a preempted request's own computed blocks can hit.
pub(super) fn prefix_columns(shared: Option<Shared<'_>>, n: usize) -> (Vec<i64>, Vec<i64>) {
    match shared {
        Some((parent, len)) => (parent.as_array().to_vec(), len.as_array().to_vec()),
        None => (vec![-1; n], vec![0; n]),
    }
}

/// Validates everything, then runs `f` without the GIL; the dict of what it returns.
pub(super) fn simulate<'py, O: ToPy + Send>(
    py: Python<'py>,
    (model, gpu, efficiency): Hardware,
    r: Requests<'py>,
    f: impl FnOnce(&Pricer, &Workload<'_>) -> CoreResult<O> + Send,
) -> PyResult<Bound<'py, PyDict>> {
    simulate_priced(py, Pricer::new(&model, &gpu, &efficiency)?, r, f)
}

/// [`simulate`] with a pricer already built (continuous batching's `step_extra`).
fn simulate_priced<'py, O: ToPy + Send>(
    py: Python<'py>,
    pricer: Pricer,
    r: Requests<'py>,
    f: impl FnOnce(&Pricer, &Workload<'_>) -> CoreResult<O> + Send,
) -> PyResult<Bound<'py, PyDict>> {
    let a = slice("arrival_s", &r.arrival_s)?;
    let (p, l) = (slice("prompt_len", &r.prompt_len)?, slice("output_len", &r.output_len)?);
    let w = Workload::new(a, p, l)?;
    // A million-step run takes tens of milliseconds: let other Python threads run meanwhile.
    let out = py.detach(|| f(&pricer, &w))?;
    to_dict(py, out)
}

/// What early rejection adds to batch 1's dict.
struct Admission {
    would_first_token_s: Vec<f64>,
}
dict_of!(Admission { would_first_token_s });

/// Batch 1 (`sim/batch1.rs`). With `admission`, `(slo_ttft_s, predicted_len)` (the controller's
/// guess of each output length), early rejection against the SLO (§5.3): the dict then has one
/// more column, `would_first_token_s` (see `sim/admission.rs`).
#[pyfunction]
#[pyo3(signature = (hw, requests, trace, admission=None))]
fn sim_batch1<'py>(
    py: Python<'py>, hw: Hardware, requests: Requests<'py>, trace: bool, admission: Option<(f64, PyReadonlyArray1<'py, i64>)>,
) -> PyResult<Bound<'py, PyDict>> {
    let pred = match &admission { Some((slo, p)) => Some((*slo, slice("predicted_len", p)?)), None => None };
    simulate(py, hw, requests, |pr, w| match pred {
        None => Ok((batch1::run(pr, w, &mut AcceptAll, trace), None)),
        Some((slo, p)) => {
            let mut adm = EarlyReject::new(pr, w, slo, p)?;
            let out = batch1::run(pr, w, &mut adm, trace);
            Ok((out, Some(Admission { would_first_token_s: adm.would_first_token_s })))
        }
    })
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

/// Static batching (`sim/static_batching.rs`); `params` is `(batch_size, max_wait_s, ride_along)`.
#[pyfunction]
fn sim_static_batching<'py>(
    py: Python<'py>, hw: Hardware, requests: Requests<'py>, params: (i64, f64, bool), trace: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let params = StaticParams { batch_size: params.0, max_wait_s: params.1, ride_along: params.2 };
    params.validate()?;
    simulate(py, hw, requests, |pr, w| static_batching::run(pr, w, &params, trace))
}

// `SimOutput`'s keys, then `reject_code` (int8, see `continuous::REJECT_*`), `n_preemptions`,
// the totals `preemptions` and `peak_kv_blocks`, and `batch_log` (a dict of CSR columns, or
// None); with the trace, this policy's columns join the common ones (in `ContinuousRun`).
dict_of!(ContinuousOutput { ..sim, reject_code, n_preemptions, preemptions, peak_kv_blocks, batch_log });

/// A continuous-batching run and the columns prefix caching or speculation adds, in one dict; the
/// trace's extra columns join the trace's; `step_queues` (a dict of CSR columns, or None) is
/// `servelab trace`'s record.
struct ContinuousRun(ContinuousOutput, Option<PrefixOutput>, Option<SpecOutput>, Option<StepQueues>);

impl ToPy for ContinuousRun {
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let ContinuousRun(mut out, prefix, spec, queues) = self;
        let trace_extra = out.trace_extra.take();
        let d = ((out, prefix), spec).to_py(py)?.cast_into::<PyDict>()?;
        d.set_item(pyo3::intern!(py, "step_queues"), queues.to_py(py)?)?;
        if let Some(x) = trace_extra {
            merge(&d.get_item("trace")?.expect("set by to_dict").cast_into::<PyDict>()?, x)?;
        }
        Ok(d.into_any())
    }
}

/// `sim_continuous_batching`'s options, a dict of these keys (`serving_core.run_continuous_batching`
/// builds it): `card`, a dict keyed by `ContinuousParams`' fields; `per_step` (tests and
/// benchmarks: the per-step loop of `sim/continuous/per_step.rs`, the same output bit for bit,
/// with speculation too);
/// `prefix_caching` over `shared` (`sim/continuous/prefix_events.rs`), with a host tier if `host` =
/// `(host_blocks, host_policy, host_s_per_token)`; speculative decoding if `spec` = `(k,
/// acceptance per request, seed, draft_model)` (`sim/continuous/spec_events.rs`); `queues` (`servelab trace`) records the queues
/// after each step on the per-step loop (`sim/continuous/trace.rs`); `step_extra` =
/// `(per_token_s, per_seq_s)` adds that many seconds to each step per new token and per
/// sequence (`Pricer::with_step_extra`).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct OneCard<'py> {
    card: ContinuousParams,
    trace: bool,
    batch_log: bool,
    #[pyo3(default)] per_step: bool,
    #[pyo3(default)] prefix_caching: bool,
    #[pyo3(default)] shared: Option<Shared<'py>>,
    #[pyo3(default)] host: Option<(i64, String, f64)>,
    #[pyo3(default)] spec: Option<(i64, PyReadonlyArray1<'py, f64>, u64, ModelSpec)>,
    #[pyo3(default)] queues: bool,
    #[pyo3(default)] step_extra: Option<(f64, f64)>,
}

/// Continuous batching (`sim/continuous/event_driven.rs`) on one card: the dict has `ContinuousOutput`'s keys
/// and the columns each option adds (listed in `serving_core.SimResult`).
#[pyfunction]
fn sim_continuous_batching<'py>(
    py: Python<'py>, hw: Hardware, requests: Requests<'py>, options: OneCard<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let OneCard { card, trace, batch_log, per_step, prefix_caching, shared, host, spec, queues, step_extra } = options;
    card.validate()?;
    if queues && (prefix_caching || spec.is_some()) {
        return Err(PyValueError::new_err("queues=True records plain continuous batching only (no prefix caching, no speculation)"));
    }
    if prefix_caching && (per_step || spec.is_some()) {
        return Err(PyValueError::new_err(match per_step {
            true => "per_step=True has no prefix caching (the prefix-caching loop is per-step already)",
            false => "speculative decoding runs without prefix caching",
        }));
    }
    let (parent, plen) = prefix_columns(shared, requests.arrival_s.len()?);
    let (host_blocks, policy, s_per_token) = host.unwrap_or((0, "lru".into(), 0.0));
    let draft = match &spec {
        Some((k, acceptance, seed, d)) => Some((*k, slice("spec_acceptance", acceptance)?, *seed, Pricer::new(d, &hw.1, &hw.2)?)),
        None => None,
    };
    let mut pricer = Pricer::new(&hw.0, &hw.1, &hw.2)?;
    if let Some((per_token_s, per_seq_s)) = step_extra {
        pricer = pricer.with_step_extra(per_token_s, per_seq_s)?;
    }
    simulate_priced(py, pricer, requests, |pr, w| {
        let inp = Inputs::new(pr, w, &card, trace, batch_log);
        let out = if let Some((k, acceptance, seed, d)) = &draft {
            let sp = Speculation { k: *k, acceptance, seed: *seed, draft: d };
            let (o, s) = match per_step {
                true => per_step::run_speculative(&inp, &sp)?,
                false => spec_events::run(&inp, &sp)?,
            };
            ContinuousRun(o, None, Some(s), None)
        } else if prefix_caching {
            let prefixes = Prefixes { parent: &parent, len: &plen };
            let host = HostTierOption { host_blocks, policy: &policy, s_per_token };
            let px = PrefixOptions { prefixes: &prefixes, prefix_caching: true, host: &host };
            let (o, p) = prefix_events::run(&inp, &px)?;
            ContinuousRun(o, Some(p), None, None)
        } else if queues {
            // the per-step loop records; the event-driven one, its equal bit for bit, does not
            let (o, q) = per_step::run_recorded(&inp)?;
            ContinuousRun(o, None, None, Some(q))
        } else if per_step {
            ContinuousRun(per_step::run_per_step(&inp)?, None, None, None)
        } else {
            ContinuousRun(event_driven::run(&inp)?, None, None, None)
        };
        Ok(out)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_REQUEST_TOKENS", crate::sim::MAX_REQUEST_TOKENS)?;
    m.add("MAX_SPEC_K", per_step::MAX_SPEC_K)?;
    add_functions!(m, sim_batch1, sim_static_batching, sim_fixed_service, sim_continuous_batching);
    Ok(())
}
