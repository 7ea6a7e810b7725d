//! Bindings of the multi-card simulators (`sim/data_parallel.rs`, `sim/disaggregated.rs`): the
//! hardware and a `Requests` in, a dict of numpy columns out (the keys of
//! `sim_continuous_batching`'s dict, without trace or batch log, plus the per-card ones). It
//! shares the argument readers and `simulate` of `py/sim.rs`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::cost::Hardware;
use super::sim::{prefix_columns, simulate, Requests, Shared};
use super::{add_functions, dict_of};
use crate::sim::continuous::ContinuousParams;
use crate::sim::continuous_prefix::Prefixes;
use crate::sim::data_parallel::{self, PoolOutput};
use crate::sim::disaggregated::{self, DisaggOutput, Link};
use crate::sim::router::Router;

dict_of!(PoolOutput { ..sim, reject_code, n_preemptions, card, card_busy_s, card_steps, card_peak_kv_blocks });
dict_of!(DisaggOutput {
    ..pool, ready_s, decode_start_s, decode_card, decode_busy_s, decode_steps, decode_peak_kv_blocks,
});

/// Continuous batching on `n_replicas` cards behind `router` (`"round_robin"`,
/// `"least_tokens"`, or with prefix caching `"prefix_affinity"`); `card` is one card's
/// parameters, a dict keyed by `ContinuousParams`' fields. `prefix_caching` runs every card with
/// prefix caching over `shared` (`(parent, length)`; None: nothing shared) (`sim/data_parallel.rs`,
/// `run_prefix`) and adds `sim_continuous_batching`'s prefix columns (`cached_tokens`,
/// `computed_tokens`, the totals `prefix_hits`, `prefix_lookups`, `prefix_evictions`).
#[pyfunction]
#[pyo3(signature = (hw, requests, card, n_replicas, router, prefix_caching=false, shared=None))]
#[allow(clippy::too_many_arguments)]
fn sim_data_parallel<'py>(
    py: Python<'py>,
    hw: Hardware,
    requests: Requests<'py>,
    card: ContinuousParams,
    n_replicas: i64,
    router: &str,
    prefix_caching: bool,
    shared: Option<Shared<'py>>,
) -> PyResult<Bound<'py, PyDict>> {
    let router = Router::parse(router)?;
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

/// Disaggregated serving: `n_prefill` prefill cards, `n_decode` decode cards (each of `card`, as
/// above), the KV over a link of `(bandwidth, latency_s)`: B/s (`inf` allowed) and seconds.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sim_disaggregated<'py>(
    py: Python<'py>,
    hw: Hardware,
    requests: Requests<'py>,
    card: ContinuousParams,
    n_prefill: i64,
    n_decode: i64,
    router: &str,
    link: (f64, f64),
) -> PyResult<Bound<'py, PyDict>> {
    let router = Router::parse(router)?;
    let kv = hw.0.kv_bytes_per_token();
    simulate(py, hw, requests, |pr, w| {
        disaggregated::run(pr, w, &card, n_prefill, n_decode, router, Link { bandwidth: link.0, latency_s: link.1 }, kv)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_CARDS", crate::sim::router::MAX_CARDS)?;
    add_functions!(m, sim_data_parallel, sim_disaggregated);
    Ok(())
}
