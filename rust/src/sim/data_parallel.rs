//! Data parallelism (course project §8.1, milestone 1): `n` identical cards, each running
//! continuous batching (the event-driven loop's resumable [`event_driven::Card`], fed by `pool.rs`) on
//! the requests a [`Router`] sends it.
//!
//! Each card is simulated on its own requests alone, so a card's clock, batches and KV pool are
//! exactly those of one card serving that sub-workload: with one replica the run *is*
//! `event_driven::run` on the whole workload, bit for bit. The per-request columns are gathered
//! back into request order; the totals (`busy_s`, `flops`, `n_steps`) add over cards, and
//! [`PoolOutput`] keeps them per card too.
//!
//! # With prefix caching (§3.5): [`run_prefix`]
//!
//! Each card runs `prefix_events::run` on its own requests. The routers then decide from
//! the request list alone ([`static_cards`]: round robin or prefix affinity), so no card needs
//! to pause. A request's prefix parent may sit on another card (round robin): [`card_prefixes`]
//! then re-points it at the earlier request on its own card with which it shares the longest
//! true common prefix (from the parent chains), or at none. So round robin still finds a
//! system prompt through another conversation on the card, as a real cache matching tokens
//! would. What it can miss: a prefix shared with two card-mates at once where the best one has
//! been evicted and a shorter one is cached (the simulator follows one parent).

use super::continuous::event_driven;
use super::continuous::prefix::{PrefixOptions, PrefixOutput, Prefixes};
use super::continuous::prefix_events;
use super::continuous::{ContinuousParams, Inputs};
use super::pool::{serve, PoolRequests};
use super::router::{by_card, check_cards, static_cards, Router};
use super::{Recorder, SimOutput, Workload};
use crate::cost::Pricer;
use crate::error::CoreResult;

/// Per-request columns in request order, totals over all cards, and per-card totals.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolOutput {
    pub sim: SimOutput,
    /// which card served each request
    pub card: Vec<i64>,
    pub reject_code: Vec<i8>,
    pub n_preemptions: Vec<i64>,
    pub card_busy_s: Vec<f64>,
    pub card_steps: Vec<u64>,
    pub card_peak_kv_blocks: Vec<i64>,
}

/// An empty output for `n` requests and `cards` cards, to gather card runs into.
pub(crate) fn empty(pricer: &Pricer, n: usize, cards: usize) -> PoolOutput {
    PoolOutput {
        sim: Recorder::new(pricer, n, false).finish(), // NaN times, no step run yet
        card: vec![-1; n],
        reject_code: vec![0; n],
        n_preemptions: vec![0; n],
        card_busy_s: vec![0.0; cards],
        card_steps: vec![0; cards],
        card_peak_kv_blocks: vec![0; cards],
    }
}

impl PoolOutput {
    /// Adds card `c`'s run `o` of the requests `idx` (totals in card order, so the sums'
    /// bits do not depend on anything but the cards' own runs).
    pub(crate) fn gather(&mut self, c: usize, idx: &[usize], o: &SimOutput, peak_blocks: i64) {
        for (k, &i) in idx.iter().enumerate() {
            let s = &mut self.sim;
            s.start_s[i] = o.start_s[k];
            s.first_token_s[i] = o.first_token_s[k];
            s.finish_s[i] = o.finish_s[k];
            s.rejected[i] = o.rejected[k];
            s.batch_id[i] = o.batch_id[k];
            self.card[i] = c as i64;
        }
        self.sim.busy_s += o.busy_s;
        self.sim.flops += o.flops;
        self.sim.n_steps += o.n_steps;
        self.sim.peak_kv_tokens = self.sim.peak_kv_tokens.max(o.peak_kv_tokens);
        self.card_busy_s[c] = o.busy_s;
        self.card_steps[c] = o.n_steps;
        self.card_peak_kv_blocks[c] = peak_blocks;
    }
}

/// Continuous batching on `n_replicas` cards behind `router`.
pub fn run(
    pricer: &Pricer,
    w: &Workload<'_>,
    params: &ContinuousParams,
    n_replicas: i64,
    router: Router,
) -> CoreResult<PoolOutput> {
    params.validate()?;
    let cards = check_cards("n_replicas", n_replicas)?;
    let order: Vec<usize> = (0..w.len()).collect();
    let reqs = PoolRequests {
        order: &order,
        arrival: w.arrival_s,
        prompt: w.prompt_len,
        output: w.output_len,
        one_token: false,
    };
    let mut out = empty(pricer, w.len(), cards);
    let new_card = || event_driven::Card::new(pricer, params, 0, false, false);
    for (c, card) in serve(cards, new_card, reqs, router)?.into_iter().enumerate() {
        let o = card.sim.finish();
        out.gather(c, &card.idx, &o.sim, o.peak_kv_blocks);
        for (k, &i) in card.idx.iter().enumerate() {
            out.reject_code[i] = o.reject_code[k];
            out.n_preemptions[i] = o.n_preemptions[k];
        }
    }
    Ok(out)
}

/// Request `r`'s whole sequence (prompt and output, `total` tokens) as runs `(origin, end)`:
/// positions up to `end` past the previous run hold `origin`'s own tokens (the synthetic token
/// ids of `continuous/prefix.rs`).
fn runs(prefixes: &Prefixes<'_>, r: usize, total: i64) -> Vec<(usize, i64)> {
    let mut chain = Vec::new();
    let (mut cur, mut lim) = (r, total);
    loop {
        chain.push((cur, lim));
        let p = prefixes.parent[cur];
        lim = lim.min(prefixes.len[cur]);
        if p < 0 || lim == 0 {
            break;
        }
        cur = p as usize;
    }
    let mut out: Vec<(usize, i64)> = Vec::with_capacity(chain.len());
    for &(origin, end) in chain.iter().rev() {
        if end > out.last().map_or(0, |&(_, e)| e) {
            out.push((origin, end));
        }
    }
    out
}

/// The tokens two run lists agree on from the start. An origin's own tokens start at the same
/// position in every sequence holding them, so runs of one origin differ only in their ends.
fn common_prefix(a: &[(usize, i64)], b: &[(usize, i64)]) -> i64 {
    let mut start = 0;
    for (&(oa, ea), &(ob, eb)) in a.iter().zip(b) {
        if oa != ob {
            return start;
        }
        if ea != eb {
            return ea.min(eb);
        }
        start = ea;
    }
    start
}

/// One card's prefix columns for its requests `idx` (global indices, in order), renumbered
/// within the card: each request points at the earlier request *on the card* with which it
/// has the longest true common prefix (the latest on a tie), at most its prompt and that
/// request's prompt + output; none: no sharing. Under prefix affinity that is a request as
/// good as its own parent; under round robin it finds what a real cache would find among the
/// card's requests (module docs). Only requests of one first origin (one system prompt or
/// first prompt) are compared.
pub fn card_prefixes(prefixes: &Prefixes<'_>, w: &Workload<'_>, idx: &[usize]) -> (Vec<i64>, Vec<i64>) {
    let total = |i: usize| w.prompt_len[i] + w.output_len[i];
    let seqs: Vec<Vec<(usize, i64)>> = idx.iter().map(|&i| runs(prefixes, i, total(i))).collect();
    let mut by_root: std::collections::HashMap<usize, Vec<usize>> = std::collections::HashMap::new();
    let (mut parent, mut len) = (vec![-1i64; idx.len()], vec![0i64; idx.len()]);
    for (k, &i) in idx.iter().enumerate() {
        let group = by_root.entry(seqs[k][0].0).or_default();
        for &j in group.iter() {
            let l = common_prefix(&seqs[k], &seqs[j]).min(w.prompt_len[i]).min(total(idx[j]));
            if l > 0 && l >= len[k] {
                (parent[k], len[k]) = (j as i64, l);
            }
        }
        group.push(k);
    }
    (parent, len)
}

/// Continuous batching with prefix caching on `n_replicas` cards behind `router` (round robin
/// or prefix affinity; see the module docs). The prefix columns are gathered like the others;
/// the counters add over cards.
pub fn run_prefix(
    pricer: &Pricer,
    w: &Workload<'_>,
    params: &ContinuousParams,
    prefixes: &Prefixes<'_>,
    n_replicas: i64,
    router: Router,
) -> CoreResult<(PoolOutput, PrefixOutput)> {
    params.validate()?;
    let cards = check_cards("n_replicas", n_replicas)?;
    prefixes.validate(w)?;
    let n = w.len();
    let card = static_cards(prefixes.parent, cards, router)?;
    let mut out = empty(pricer, n, cards);
    let mut pre = PrefixOutput::empty(n);
    for (c, idx) in by_card(&card, cards).into_iter().enumerate() {
        let col = |v: &[i64]| idx.iter().map(|&i| v[i]).collect::<Vec<_>>();
        let at: Vec<f64> = idx.iter().map(|&i| w.arrival_s[i]).collect();
        let (pl, ol) = (col(w.prompt_len), col(w.output_len));
        let sub = Workload::new(&at, &pl, &ol)?;
        let (parent, len) = card_prefixes(prefixes, w, &idx);
        let sub_pf = Prefixes { parent: &parent, len: &len };
        let (o, p) = prefix_events::run(&Inputs::new(pricer, &sub, params, false, false), &PrefixOptions::new(&sub_pf, true))?;
        out.gather(c, &idx, &o.sim, o.peak_kv_blocks);
        for (k, &i) in idx.iter().enumerate() {
            out.reject_code[i] = o.reject_code[k];
            out.n_preemptions[i] = o.n_preemptions[k];
            pre.cached_tokens[i] = p.cached_tokens[k];
            pre.computed_tokens[i] = p.computed_tokens[k];
        }
        pre.prefix_hits += p.prefix_hits;
        pre.prefix_lookups += p.prefix_lookups;
        pre.prefix_evictions += p.prefix_evictions;
    }
    Ok((out, pre))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::test_util::{card_params as params, pricer, rng};


    #[test]
    fn one_replica_is_one_card() {
        let (a, p, l) = ([0.0, 0.001, 0.002, 0.5], [100, 30, 200, 7], [20, 50, 3, 9]);
        let w = Workload::new(&a, &p, &l).unwrap();
        let want = event_driven::run(&Inputs::new(&pricer(), &w, &params(), false, false)).unwrap();
        for router in [Router::RoundRobin, Router::LeastTokens] {
            let got = run(&pricer(), &w, &params(), 1, router).unwrap();
            assert_eq!(got.sim, want.sim);
            assert_eq!(got.card, vec![0; 4]);
        }
    }

    #[test]
    fn one_replica_with_prefixes_is_one_card() {
        let (a, p, l) = ([0.0, 0.001, 0.002, 0.5], [100, 130, 200, 70], [20, 50, 3, 9]);
        let w = Workload::new(&a, &p, &l).unwrap();
        let (parent, len) = ([-1, 0, 1, 0], [0, 100, 130, 64]);
        let pf = Prefixes { parent: &parent, len: &len };
        let want = prefix_events::run(&Inputs::new(&pricer(), &w, &params(), false, false), &PrefixOptions::new(&pf, true)).unwrap();
        for router in [Router::RoundRobin, Router::PrefixAffinity] {
            let (got, pre) = run_prefix(&pricer(), &w, &params(), &pf, 1, router).unwrap();
            assert_eq!(got.sim, want.0.sim);
            assert_eq!(pre, want.1);
        }
        assert!(run_prefix(&pricer(), &w, &params(), &pf, 2, Router::LeastTokens).is_err());
    }

    /// Round robin on 2 cards. Card 1: r3 (a turn after r2, after r1) shares r1's first 80
    /// tokens (50 of r0's, then r1's own). Card 0: r4 shares r0's first 30 with r0 and r2, and
    /// takes the later. Alone with r1, r4 finds those 30 in r1, another conversation's turn.
    #[test]
    fn parents_elsewhere_are_repointed_at_the_longest_common_prefix() {
        let (parent, len) = ([-1, 0, 1, 2, 0, -1], [0, 50, 80, 90, 30, 0]);
        let pf = Prefixes { parent: &parent, len: &len };
        let (p, l) = ([60, 70, 100, 120, 40, 9], [5, 40, 10, 10, 10, 5]);
        let w = Workload::new(&[0.0; 6], &p, &l).unwrap();
        assert_eq!(card_prefixes(&pf, &w, &[1, 3, 5]), (vec![-1, 0, -1], vec![0, 80, 0]));
        assert_eq!(card_prefixes(&pf, &w, &[0, 2, 4]), (vec![-1, 0, 1], vec![0, 50, 30]));
        assert_eq!(card_prefixes(&pf, &w, &[1, 4]), (vec![-1, 0], vec![0, 30]));
    }

    /// Round robin on two cards: each card serves every other request as if alone.
    #[test]
    fn round_robin_cards_run_alone() {
        let (a, p, l) = ([0.0, 0.0, 0.01, 0.01], [100, 30, 200, 7], [20, 50, 3, 9]);
        let w = Workload::new(&a, &p, &l).unwrap();
        let got = run(&pricer(), &w, &params(), 2, Router::RoundRobin).unwrap();
        let w0 = Workload::new(&[0.0, 0.01], &[100, 200], &[20, 3]).unwrap();
        let alone = event_driven::run(&Inputs::new(&pricer(), &w0, &params(), false, false)).unwrap();
        assert_eq!(got.sim.finish_s[0], alone.sim.finish_s[0]);
        assert_eq!(got.sim.finish_s[2], alone.sim.finish_s[1]);
        assert_eq!(got.card, vec![0, 1, 0, 1]);
        assert_eq!(got.card_busy_s[0], alone.sim.busy_s);
    }

    /// Least-tokens advances each card step by step between arrivals; replaying every card from
    /// its start before every choice (the plain definition) must route every request the same
    /// way, and each card's run must be the lone run of its requests.
    #[test]
    fn incremental_cards_route_as_full_replays() {
        let mut rnd = rng(0x51_7cc1_b727_220a);
        for case in 0..200 {
            let n = 1 + rnd(50) as usize;
            let mut t = 0.0;
            let mut a = Vec::new();
            for _ in 0..n {
                t += [0.0, 0.002, 0.02, 0.3][rnd(4) as usize] * rnd(3) as f64;
                a.push(t);
            }
            // some prompts over the 512-token budget: rejected at once, they weigh nothing
            let p: Vec<i64> = (0..n).map(|_| 1 + rnd(560) as i64).collect();
            let l: Vec<i64> = (0..n).map(|_| 1 + rnd(40) as i64).collect();
            let w = Workload::new(&a, &p, &l).unwrap();
            let prm = ContinuousParams { num_blocks: 8 + rnd(60) as i64, ..params() };
            let cards = 2 + rnd(3) as usize;
            let alone = |idx: &[usize]| {
                let col = |v: &[i64]| idx.iter().map(|&i| v[i]).collect::<Vec<_>>();
                let at: Vec<f64> = idx.iter().map(|&i| a[i]).collect();
                event_driven::run(&Inputs::new(&pricer(), &Workload::new(&at, &col(&p), &col(&l)).unwrap(), &prm, false, false)).unwrap()
            };
            let got = run(&pricer(), &w, &prm, cards as i64, Router::LeastTokens).unwrap();
            // the plain definition
            let mut want: Vec<i64> = Vec::new();
            for k in 0..n {
                let load = |c: usize| -> i64 {
                    let idx: Vec<usize> = (0..k).filter(|&j| want[j] as usize == c).collect();
                    let f = if idx.is_empty() { Vec::new() } else { alone(&idx).sim.finish_s };
                    idx.iter().zip(f).filter(|&(_, f)| f > a[k]).map(|(&j, _)| p[j] + l[j]).sum()
                };
                want.push((0..cards).min_by_key(|&c| (load(c), c)).unwrap() as i64);
            }
            assert_eq!(got.card, want, "case {case}");
            for c in 0..cards {
                let idx: Vec<usize> = (0..n).filter(|&j| want[j] as usize == c).collect();
                let o = alone(&idx);
                let mine: Vec<f64> = idx.iter().map(|&i| got.sim.finish_s[i]).collect();
                assert_eq!(format!("{mine:?}"), format!("{:?}", o.sim.finish_s), "case {case} card {c}");
                assert_eq!(got.card_busy_s[c].to_bits(), o.sim.busy_s.to_bits(), "case {case} card {c}");
            }
        }
    }
}
