//! Prefill/decode disaggregation (DistServe, Splitwise; course project §8, milestone 4): a pool
//! of `n_prefill` cards only prefills, a pool of `n_decode` cards only decodes, and each
//! request's KV crosses a link in between.
//!
//! A request's way through:
//!
//! 1. at arrival it is rejected if it could never run: its `prompt + output - 1` tokens need
//!    more blocks than a decode card holds (`REJECT_BLOCKS`), or, without chunked prefill, its
//!    prompt exceeds the token budget (`REJECT_BUDGET`); rejected requests never reach a card;
//! 2. the prefill router sends it to a prefill card, which runs continuous batching
//!    (`continuous/event_driven.rs`, unchanged) on requests of one output token: the prefill samples the
//!    first token, so `first_token_s` is the end of the prefill and TTFT never waits for the
//!    link (as in DistServe). Its blocks free when the prefill ends (the copy to the link is
//!    not modelled as holding them);
//! 3. its KV, `kv_bytes_per_token x prompt` bytes, crosses the link:
//!    `transfer_s = link_latency_s + kv_bytes_per_token * prompt / link_bandwidth`, each
//!    request on its own (no contention between transfers); `ready_s = first_token_s + transfer_s`;
//! 4. the decode router (same policy) sends it, in `ready_s` order, to a decode card
//!    (`decode_pool.rs`), which decodes its other `output - 1` tokens. A request of one output
//!    token is done at step 2.
//!
//! Both pools use the same `ContinuousParams` (seats, token budget, KV blocks per card).

use super::continuous::event_driven;
use super::continuous::{ContinuousParams, REJECT_BLOCKS, REJECT_BUDGET, REJECT_NONE};
use super::data_parallel::{empty, PoolOutput};
use super::decode_pool::DecodeCard;
use super::pool::{serve, PoolRequests};
use super::router::{check_cards, Router};
use super::Workload;
use crate::cost::{fmt_f64, Pricer};
use crate::error::{CoreError, CoreResult};

/// The link between a prefill card and a decode card.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// bytes per second one way; `f64::INFINITY` for an instant link
    pub bandwidth: f64,
    /// seconds added to every transfer
    pub latency_s: f64,
}

impl Link {
    pub fn validate(&self) -> CoreResult<()> {
        if self.bandwidth.is_nan() || self.bandwidth <= 0.0 {
            return Err(CoreError::invalid(format!(
                "link_bandwidth must be a positive number of bytes per second (inf for an instant link), got {}",
                fmt_f64(self.bandwidth)
            )));
        }
        if !(self.latency_s >= 0.0 && self.latency_s.is_finite()) {
            return Err(CoreError::invalid(format!(
                "link_latency_s must be a finite number >= 0, got {}",
                fmt_f64(self.latency_s)
            )));
        }
        Ok(())
    }

    /// Seconds to move the KV of `tokens` tokens (the order of operations is the Python
    /// twin's, `hw_model.kv_transfer_s`).
    pub fn transfer_s(&self, kv_bytes_per_token: f64, tokens: i64) -> f64 {
        self.latency_s + kv_bytes_per_token * tokens as f64 / self.bandwidth
    }
}

/// The run: `pool.sim` holds the request columns (`start_s`: prefill start, `first_token_s`:
/// prefill end, `finish_s`: last token) and the totals of both pools; `pool.card` the prefill
/// card, `pool.card_*` the prefill pool's totals.
#[derive(Debug, Clone, PartialEq)]
pub struct DisaggOutput {
    pub pool: PoolOutput,
    /// when each request's KV reached the decode pool (NaN: rejected or one output token)
    pub ready_s: Vec<f64>,
    /// when its decode card admitted it
    pub decode_start_s: Vec<f64>,
    pub decode_card: Vec<i64>,
    pub decode_busy_s: Vec<f64>,
    pub decode_steps: Vec<u64>,
    pub decode_peak_kv_blocks: Vec<i64>,
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    pricer: &Pricer,
    w: &Workload<'_>,
    params: &ContinuousParams,
    n_prefill: i64,
    n_decode: i64,
    router: Router,
    link: Link,
    kv_bytes_per_token: f64,
) -> CoreResult<DisaggOutput> {
    params.validate()?;
    link.validate()?;
    let (np, nd) = (check_cards("n_prefill", n_prefill)?, check_cards("n_decode", n_decode)?);
    let n = w.len();
    let (pl, ol) = (w.prompt_len, w.output_len);
    let mut out = empty(pricer, n, np);

    // 1. requests that could never run
    let mut served = Vec::with_capacity(n);
    for i in 0..n {
        let code = if (pl[i] + ol[i] - 1 + params.block_size - 1) / params.block_size > params.num_blocks {
            REJECT_BLOCKS
        } else if !params.chunked_prefill && pl[i] > params.max_num_batched_tokens {
            REJECT_BUDGET
        } else {
            served.push(i);
            REJECT_NONE
        };
        out.reject_code[i] = code;
        out.sim.rejected[i] = code != REJECT_NONE;
    }

    // 2. the prefill pool: continuous batching of one-token requests
    let prefill = PoolRequests { order: &served, arrival: w.arrival_s, prompt: pl, output: ol, one_token: true };
    let new_card = || event_driven::Card::new(pricer, params, 0, false, false);
    for (c, card) in serve(np, new_card, prefill, router)?.into_iter().enumerate() {
        let o = card.sim.finish();
        out.gather(c, &card.idx, &o.sim, o.peak_kv_blocks);
    }

    // 3. the link
    let mut ready_s = vec![f64::NAN; n];
    let mut decoding: Vec<usize> = Vec::new();
    for &i in &served {
        if ol[i] >= 2 {
            ready_s[i] = out.sim.first_token_s[i] + link.transfer_s(kv_bytes_per_token, pl[i]);
            decoding.push(i);
        }
    }
    // ready order; ties by request index (a stable sort keeps arrival order)
    decoding.sort_by(|&x, &y| ready_s[x].total_cmp(&ready_s[y]));

    // 4. the decode pool
    let mut res = DisaggOutput {
        ready_s,
        decode_start_s: vec![f64::NAN; n],
        decode_card: vec![-1; n],
        decode_busy_s: vec![0.0; nd],
        decode_steps: vec![0; nd],
        decode_peak_kv_blocks: vec![0; nd],
        pool: out,
    };
    for i in served.iter().copied().filter(|&i| ol[i] < 2) {
        res.pool.sim.finish_s[i] = res.pool.sim.first_token_s[i];
    }
    let decode = PoolRequests { order: &decoding, arrival: &res.ready_s, prompt: pl, output: ol, one_token: false };
    for (c, card) in serve(nd, || DecodeCard::new(pricer, params, 0), decode, router)?.into_iter().enumerate() {
        let o = card.sim.finish();
        for (k, &i) in card.idx.iter().enumerate() {
            if o.reject_code[k] != REJECT_NONE {
                // step 1 rules this out (a decode card holds as many blocks as the check assumed)
                return Err(CoreError::invalid(format!("internal error: request {i} does not fit a decode card")));
            }
            res.pool.sim.finish_s[i] = o.sim.finish_s[k];
            res.decode_start_s[i] = o.sim.start_s[k];
            res.decode_card[i] = c as i64;
        }
        let s = &mut res.pool.sim;
        s.busy_s += o.sim.busy_s;
        s.flops += o.sim.flops;
        s.n_steps += o.sim.n_steps;
        s.peak_kv_tokens = s.peak_kv_tokens.max(o.sim.peak_kv_tokens);
        res.decode_busy_s[c] = o.sim.busy_s;
        res.decode_steps[c] = o.sim.n_steps;
        res.decode_peak_kv_blocks[c] = o.peak_kv_blocks;
    }
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::test_util::{card_params as params, price, pricer};


    /// One request by hand: prefill alone, the link, then two decodes alone.
    #[test]
    fn one_request_by_hand() {
        let w = Workload::new(&[0.5], &[100], &[3]).unwrap();
        let link = Link { bandwidth: 1e9, latency_s: 1e-3 };
        let o = run(&pricer(), &w, &params(), 1, 1, Router::RoundRobin, link, 131072.0).unwrap();
        let first = 0.5 + price(&[(100, 0)]);
        let ready = first + (1e-3 + 131072.0 * 100.0 / 1e9);
        assert_eq!(o.pool.sim.first_token_s, vec![first]);
        assert_eq!(o.ready_s, vec![ready]);
        assert_eq!(o.pool.sim.finish_s, vec![ready + price(&[(1, 100)]) + price(&[(1, 101)])]);
    }

    #[test]
    fn unservable_requests_never_reach_a_card() {
        // 64 blocks of 16 = 1024 tokens: 1000 + 30 - 1 needs 65 blocks; 600 > the budget of 512
        let w = Workload::new(&[0.0, 0.0, 0.0], &[1000, 600, 5], &[30, 2, 1]).unwrap();
        let inf = Link { bandwidth: f64::INFINITY, latency_s: 0.0 };
        let o = run(&pricer(), &w, &params(), 2, 1, Router::LeastTokens, inf, 1.0).unwrap();
        assert_eq!(o.pool.reject_code, vec![REJECT_BLOCKS, REJECT_BUDGET, REJECT_NONE]);
        assert_eq!(o.pool.sim.finish_s[2], o.pool.sim.first_token_s[2]); // one output token
        assert!(o.ready_s[2].is_nan());
        let bad = Link { bandwidth: 0.0, latency_s: 0.0 };
        let e = run(&pricer(), &w, &params(), 1, 1, Router::RoundRobin, bad, 1.0).unwrap_err();
        assert!(e.to_string().starts_with("link_bandwidth must be"));
    }
}
