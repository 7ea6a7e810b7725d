//! Bindings of the serving simulator (`sim/`): the hardware `(model, gpu, efficiency)` and a
//! `servelab.workload.Requests` in, a dict of numpy columns out.

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::cost::Hardware;
use super::convert::{add_functions, dict_of, merge, slice, to_dict, ToPy};
use crate::cost::{ModelSpec, Pricer};
use crate::error::CoreResult;
use crate::sim::admission::EarlyReject;
use crate::sim::batch1::{self, AcceptAll};
use crate::sim::continuous::per_step::{self, Features, SpecOutput, Speculation};
use crate::sim::continuous::prefix::{HostTierOption, PrefixOptions, PrefixOutput, Prefixes};
use crate::sim::continuous::{prefix_events, speculation};
use crate::sim::continuous::trace::StepQueues;
use crate::sim::continuous::{event_driven, BatchLog, ContinuousOutput, ContinuousParams, Inputs, StepExtra};
use crate::sim::fixed_service::{self, FixedOutput};
use crate::sim::static_batching::{self, StaticParams};
use crate::sim::{SimOutput, StepTrace, Workload};

dict_of!(SimOutput { start_s, first_token_s, finish_s, rejected, batch_id, busy_s, flops, n_steps, peak_kv_tokens, trace });
dict_of!(StepTrace { start_s, step_s, batch_size, tokens, n_prefill, n_decode, kv_tokens });
dict_of!(StepExtra { kv_blocks, n_preempted, n_admitted });
dict_of!(BatchLog { offsets, request_id, new_tokens, context_len });
dict_of!(StepQueues { waiting_offsets, waiting, running_offsets, running, running_blocks, running_generated });
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

/// A `servelab.continuous_options.ContinuousOptions`, read by attribute name into typed fields.
/// The record's constructor has checked every option (it is the one place they are written);
/// `num_blocks` has been resolved (`ContinuousOptions.pool_blocks`). Every mix of the features
/// runs. `step_extra_s` = `(per_token_s,
/// per_seq_s)` adds that many seconds to each step per new token and per sequence
/// (`Pricer::with_step_extra`).
#[derive(FromPyObject)]
struct Options<'py> {
    max_num_seqs: i64,
    max_num_batched_tokens: i64,
    block_size: i64,
    num_blocks: i64,
    chunked_prefill: bool,
    trace: bool,
    batch_log: bool,
    prefix_caching: bool,
    shared_prefixes: Option<SharedPrefixes<'py>>,
    host_blocks: i64,
    host_policy: String,
    speculative: Option<SpeculationRecord<'py>>,
    step_extra_s: (f64, f64),
}

/// A `servelab.workload.SharedPrefixes`' columns.
#[derive(FromPyObject)]
struct SharedPrefixes<'py> {
    parent: PyReadonlyArray1<'py, i64>,
    length: PyReadonlyArray1<'py, i64>,
}

/// A `servelab.continuous_options.Speculation` (§8, milestone 4a).
#[derive(FromPyObject)]
struct SpeculationRecord<'py> {
    k: i64,
    draft: ModelSpec,
    acceptance: Acceptance<'py>,
    seed: u64,
}

/// One acceptance rate for every request, or one per request (the core checks the count).
#[derive(FromPyObject)]
enum Acceptance<'py> {
    Rate(f64),
    PerRequest(PyReadonlyArray1<'py, f64>),
}

/// Continuous batching (`sim/continuous/event_driven.rs`) on one card, with the options of one
/// record and the host tier's copy price per token (`hw_model.kv_host_transfer_s`; read only
/// when `host_blocks > 0`): the dict has `ContinuousOutput`'s keys and the columns each option
/// adds (listed in `serving_core.SimResult`). The library's own switches, not options of a run
/// (`serving_core.run_twin`): `twin` runs the per-step twin (`sim/continuous/per_step.rs`, the
/// same output bit for bit), `queues` the twin recording the queues after each step for
/// `servelab trace` (`sim/continuous/trace.rs`).
#[pyfunction]
#[pyo3(signature = (hw, requests, options, host_s_per_token, twin=false, queues=false))]
fn sim_continuous_batching<'py>(
    py: Python<'py>, hw: Hardware, requests: Requests<'py>, options: Options<'py>, host_s_per_token: f64, twin: bool,
    queues: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let Options {
        max_num_seqs, max_num_batched_tokens, block_size, num_blocks, chunked_prefill, trace, batch_log,
        prefix_caching, shared_prefixes, host_blocks, host_policy, speculative, step_extra_s,
    } = options;
    let card = ContinuousParams { max_num_seqs, max_num_batched_tokens, block_size, num_blocks, chunked_prefill };
    card.validate()?;
    let n = requests.arrival_s.len()?;
    let (parent, plen) = prefix_columns(shared_prefixes.map(|s| (s.parent, s.length)), n);
    let draft = match &speculative {
        Some(s) => {
            let acceptance = match &s.acceptance {
                Acceptance::Rate(a) => vec![*a; n],
                Acceptance::PerRequest(a) => slice("speculative.acceptance", a)?.to_vec(),
            };
            Some((s.k, acceptance, s.seed, Pricer::new(&s.draft, &hw.1, &hw.2)?))
        }
        None => None,
    };
    let mut pricer = Pricer::new(&hw.0, &hw.1, &hw.2)?;
    if step_extra_s != (0.0, 0.0) {
        pricer = pricer.with_step_extra(step_extra_s.0, step_extra_s.1)?;
    }
    let prefixes = Prefixes { parent: &parent, len: &plen };
    let host = HostTierOption { host_blocks, policy: &host_policy, s_per_token: host_s_per_token };
    let px = PrefixOptions { prefixes: &prefixes, prefix_caching: true, host: &host };
    simulate_priced(py, pricer, requests, |pr, w| {
        let inp = Inputs::new(pr, w, &card, trace, batch_log);
        let sp = draft.as_ref().map(|(k, acceptance, seed, d)| Speculation { k: *k, acceptance, seed: *seed, draft: d });
        let features = Features { prefix: prefix_caching.then_some(&px), spec: sp.as_ref(), queues };
        // the fast loops, each for the features it carries; the per-step twin for every mix
        let out = match (&features, twin) {
            (Features { prefix: None, spec: None, queues: false }, false) => {
                ContinuousRun(event_driven::run(&inp)?, None, None, None)
            }
            (Features { prefix: None, spec: Some(sp), queues: false }, false) => {
                let (o, s) = speculation::run(&inp, sp)?;
                ContinuousRun(o, None, Some(s), None)
            }
            (Features { prefix: Some(px), spec: None, queues: false }, false) => {
                let (o, p) = prefix_events::run(&inp, px)?;
                ContinuousRun(o, Some(p), None, None)
            }
            _ => {
                let o = per_step::run(&inp, &features)?;
                ContinuousRun(o.out, o.prefix, o.spec, o.queues)
            }
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
