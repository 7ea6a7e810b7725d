//! Bindings of the multi-card simulators (`sim/data_parallel.rs`, `sim/disaggregated.rs`): a
//! `Requests` in, a dict of numpy columns out (the keys of `sim_continuous_batching`'s dict,
//! without trace or batch log, plus the per-card ones). Self-contained on purpose: it shares
//! only `simulate`/`Requests` and the `ToPy` conversions with the other binding files.

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::sim::{simulate, Requests};
use super::{add_functions, dict_of, merge, slice, to_dict, ToPy};
use crate::cost::{Efficiency, GpuSpec, ModelSpec};
use crate::sim::continuous::ContinuousParams;
use crate::sim::continuous_prefix::{PrefixOutput, Prefixes};
use crate::sim::data_parallel::{self, PoolOutput};
use crate::sim::disaggregated::{self, DisaggOutput, Link};
use crate::sim::router::Router;

dict_of!(PoolOutput { ..sim, reject_code, n_preemptions, card, card_busy_s, card_steps, card_peak_kv_blocks });
dict_of!(DisaggOutput {
    ..pool, ready_s, decode_start_s, decode_card, decode_busy_s, decode_steps, decode_peak_kv_blocks,
});

/// A pool run with prefix caching: the pool's dict and prefix caching's columns, joined.
struct PrefixPool(PoolOutput, PrefixOutput);

impl ToPy for PrefixPool {
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = to_dict(py, self.0)?;
        merge(&d, self.1)?;
        Ok(d.into_any())
    }
}

/// Continuous batching on `n_replicas` cards behind `router` (`"round_robin"`,
/// `"least_tokens"`, or with prefix caching `"prefix_affinity"`); `card` is one card's
/// parameters, a dict keyed by `ContinuousParams`' fields. `prefix_caching` runs every card with
/// prefix caching over `prefix_parent` / `prefix_len` (`sim/data_parallel.rs`, `run_prefix`) and
/// adds `sim_continuous_batching`'s prefix columns (`cached_tokens`, `computed_tokens`, the
/// totals `prefix_hits`, `prefix_lookups`, `prefix_evictions`).
#[pyfunction]
#[pyo3(signature = (model, gpu, efficiency, requests, card, n_replicas, router, prefix_caching=false,
    prefix_parent=None, prefix_len=None))]
#[allow(clippy::too_many_arguments)]
fn sim_data_parallel<'py>(
    py: Python<'py>,
    model: ModelSpec,
    gpu: GpuSpec,
    efficiency: Efficiency,
    requests: Requests<'py>,
    card: ContinuousParams,
    n_replicas: i64,
    router: &str,
    prefix_caching: bool,
    prefix_parent: Option<PyReadonlyArray1<'py, i64>>,
    prefix_len: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<Bound<'py, PyDict>> {
    let router = Router::parse(router)?;
    if !prefix_caching {
        if prefix_parent.is_some() || prefix_len.is_some() {
            return Err(pyo3::exceptions::PyValueError::new_err("prefix_parent/prefix_len need prefix_caching=True"));
        }
        return simulate(py, (model, gpu, efficiency), requests, |pr, w| data_parallel::run(pr, w, &card, n_replicas, router));
    }
    let n = requests.arrival_s.len()?;
    // None: nobody shares anything
    let no_parent = if prefix_parent.is_some() { Vec::new() } else { vec![-1i64; n] };
    let no_len = if prefix_len.is_some() { Vec::new() } else { vec![0i64; n] };
    let parent = match &prefix_parent { Some(x) => slice("prefix_parent", x)?, None => &no_parent[..] };
    let plen = match &prefix_len { Some(x) => slice("prefix_len", x)?, None => &no_len[..] };
    simulate(py, (model, gpu, efficiency), requests, |pr, w| {
        let prefixes = Prefixes { parent, len: plen };
        let (o, p) = data_parallel::run_prefix(pr, w, &card, &prefixes, n_replicas, router)?;
        Ok(PrefixPool(o, p))
    })
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
