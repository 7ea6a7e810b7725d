//! Bindings of the multi-card simulators (`sim/data_parallel.rs`, `sim/disaggregated.rs`): the
//! hardware and a `Requests` in, a dict of numpy columns out (the keys of
//! `sim_continuous_batching`'s dict, without trace or batch log, plus the per-card ones). It
//! shares the argument readers and `simulate` of `py/sim.rs`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::cost::Hardware;
use super::sim::{prefix_columns, simulate, Requests, Shared};
use super::convert::{add_functions, dict_of};
use crate::sim::continuous::ContinuousParams;
use crate::sim::continuous::prefix::Prefixes;
use crate::sim::data_parallel::{self, PoolOutput};
use crate::sim::disaggregated::{self, DisaggOutput, Link};
use crate::sim::router::Router;

dict_of!(PoolOutput { ..sim, reject_code, n_preemptions, card, card_busy_s, card_steps, card_peak_kv_blocks });
dict_of!(DisaggOutput {
    ..pool, ready_s, decode_start_s, decode_card, decode_busy_s, decode_steps, decode_peak_kv_blocks,
});

/// `sim_data_parallel`'s options, a dict of these keys (`parallel_sim.run_data_parallel` builds
/// it): `n_replicas` cards of `card` (a dict keyed by `ContinuousParams`' fields) behind `router`
/// (`"round_robin"`, `"least_tokens"`, or with prefix caching `"prefix_affinity"`);
/// `prefix_caching` on every card over `shared` (`(parent, length)`; None: nothing shared).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct DataParallel<'py> {
    card: ContinuousParams,
    n_replicas: i64,
    router: String,
    #[pyo3(default)] prefix_caching: bool,
    #[pyo3(default)] shared: Option<Shared<'py>>,
}

/// Continuous batching on many cards (`sim/data_parallel.rs`); with prefix caching (`run_prefix`)
/// the dict adds `sim_continuous_batching`'s prefix columns.
#[pyfunction]
fn sim_data_parallel<'py>(
    py: Python<'py>, hw: Hardware, requests: Requests<'py>, options: DataParallel<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let DataParallel { card, n_replicas, router, prefix_caching, shared } = options;
    let router = Router::parse(&router)?;
    if !prefix_caching && shared.is_some() {
        return Err(pyo3::exceptions::PyValueError::new_err("shared prefixes need prefix_caching=True"));
    }
    let (parent, len) = prefix_columns(shared, if prefix_caching { requests.arrival_s.len()? } else { 0 });
    simulate(py, hw, requests, |pr, w| match prefix_caching {
        false => Ok((data_parallel::run(pr, w, &card, n_replicas, router)?, None)),
        true => {
            let (o, p) = data_parallel::run_prefix(pr, w, &card, &Prefixes { parent: &parent, len: &len }, n_replicas, router)?;
            Ok((o, Some(p)))
        }
    })
}

/// `sim_disaggregated`'s options, a dict of these keys (`parallel_sim.run_disaggregated` builds
/// it): `n_prefill` prefill cards and `n_decode` decode cards, each of `card` (as above), behind
/// `router`; the KV crosses a link of `(bandwidth, latency_s)`: B/s (`inf` allowed) and seconds.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct Disaggregated {
    card: ContinuousParams,
    n_prefill: i64,
    n_decode: i64,
    router: String,
    link: (f64, f64),
}

/// Disaggregated serving (`sim/disaggregated.rs`).
#[pyfunction]
fn sim_disaggregated<'py>(
    py: Python<'py>, hw: Hardware, requests: Requests<'py>, options: Disaggregated,
) -> PyResult<Bound<'py, PyDict>> {
    let Disaggregated { card, n_prefill, n_decode, router, link: (bandwidth, latency_s) } = options;
    let (router, kv) = (Router::parse(&router)?, hw.0.kv_bytes_per_token());
    simulate(py, hw, requests, |pr, w| {
        disaggregated::run(pr, w, &card, n_prefill, n_decode, router, Link { bandwidth, latency_s }, kv)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_CARDS", crate::sim::router::MAX_CARDS)?;
    add_functions!(m, sim_data_parallel, sim_disaggregated);
    Ok(())
}
