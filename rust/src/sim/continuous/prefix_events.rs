//! Prefix caching at event speed: the one event loop (`event_driven.rs`) with prefix caching's
//! part ([`Prefixed`]: the pool of [`super::prefix`] and plain decoders kept as aggregates). It
//! makes the per-step twin's ([`super::per_step`]) allocator calls in the same order, and so the
//! same hits, evictions, block ids and batches, without visiting every running request in
//! every step. The rules are `servelab.engine.scheduler`'s, carried out by [`super::rules`].
//!
//! # What a decoding request asks of the allocator
//!
//! The per-step loop writes a decoder's slots lazily ([`PrefixPool`]'s `append`): the allocator
//! hears of it only when it takes a new block (the pool shrinks, maybe evicting a cached block)
//! and when it fills one (the block's key is registered). Between those two events nothing of
//! the decoder changes but its context, one token a step. So the decoders are kept as in
//! `event_driven.rs`: their count, the sum of their offsets `computed - step`, a count per
//! residue of the offset modulo the block size (how many take a block in a step: more than
//! are free, and rule 3 preempts, which runs the per-step way), and a heap of the steps they
//! finish in.
//!
//! The exact-key pool (the default) keeps the decoders' block events itself
//! (`prefix_pool/lazy.rs`): a step's takes are one bulk of pops, `n` from the residue count,
//! and a decoder's fills are written when a lookup, a registration or an eviction could tell
//! them apart, or when it leaves; no decoder is visited per block. The real allocator (a host
//! tier) hears of each one instead, from a calendar of the decoders' next block events: it is
//! touched when a request crosses a block boundary, is admitted, finishes or is preempted.
//!
//! # The order of the calls
//!
//! The allocator's answers depend on the order of the calls (the free queue's order, first
//! wins), so each step makes them in the per-step loop's order: the decoders' block events in
//! running order, then the prefill chunks (their keys registered), the admissions, and after
//! the price the finishing decoders in running order, then the completed prefills. The
//! running order is the order of admission (a preempted request leaves it, and joins at the
//! back when it is admitted again), so both the heap and each day of the calendar are ordered
//! by (step, admission count); the exact-key pool asks for it only where a take and a fill of
//! the same step race for one slot.
//!
//! # A head that does not fit
//!
//! The head of a full queue is tried at every step; each KV pool skips the attempt until
//! blocks are freed or one of its keys could hit, which gives the same answers.
//!
//! # The pool
//!
//! The part drives a KV pool through [`PrefixKv`]: by exact keys (`prefix_pool.rs`, the
//! default), or the real block allocator where a host tier is asked for; the test
//! `keyed_pool_is_the_allocator` holds the two equal under the loop.

use std::collections::VecDeque;

use super::aggregates::{self, return_running, StepReturn};
use super::event_driven::{Card, Part, RulesStep};
use super::prefix::{with_kv, Live, Pools, PrefixOptions, PrefixOutput, PrefixPool};
use super::prefix_pool::PrefixKv;
use super::rules::{admit, batch_shape, plan_step, prefill_pieces, Piece, Plan, StepPool, TwinPool};
use super::{BatchLog, ContinuousOutput, ContinuousParams, Inputs, DECODING, DONE, PREFILLING, WAITING};
use crate::error::{CoreError, CoreResult};
use crate::sim::{Recorder, StepShape, Workload};

/// The per-step twin with prefix caching ([`super::per_step::run`]) at a cost per event: the
/// same output, bit for bit.
pub fn run(inp: &Inputs<'_>, px: &PrefixOptions<'_>) -> CoreResult<(ContinuousOutput, PrefixOutput)> {
    run_with(inp, px, false)
}

/// [`run`], on the real block allocator if `allocator` (else on it only with a host tier).
fn run_with(inp: &Inputs<'_>, px: &PrefixOptions<'_>, allocator: bool) -> CoreResult<(ContinuousOutput, PrefixOutput)> {
    with_kv(inp.w, inp.params, px, allocator, |kv| match kv {
        Pools::Keyed(kv) => run_on(inp, px, kv),
        Pools::Allocator(kv) => run_on(inp, px, kv),
    })
}

fn run_on<K: PrefixKv>(inp: &Inputs<'_>, px: &PrefixOptions<'_>, kv: K) -> CoreResult<(ContinuousOutput, PrefixOutput)> {
    let Inputs { w, params, .. } = *inp;
    let part = Prefixed {
        pool: PrefixPool::new(w, params, px.host, kv),
        state: vec![WAITING; w.len()],
        dec: Decoders::new(params.block_size),
        events: Calendar::new(params.block_size),
    };
    let mut card = Card::with_part(inp.pricer, params, w.len(), inp.trace, inp.batch_log, part)?;
    card.advance(w, f64::INFINITY)?;
    let (out, part) = card.finish_with_part();
    Ok((out, part.pool.finish()))
}

/// The decoders' next block events, by step: a calendar of at least `block_size + 1` days rather than a
/// heap. A decoder's next event is less than a block ahead ([`next_event`]: within `bs - 1`
/// steps of the step it is asked from, which is at most the next one), so the events of the
/// coming `bs + 1` steps never share a day, and a step's events are its day's, taken in running
/// order (sorted by admission count, a handful each step) with no heap to keep: a decoder meets
/// a block boundary twice a block, and at a heap's logarithm each time the events were the
/// loop's own largest cost after the allocator's.
struct Calendar {
    days: Vec<Vec<(u64, u32)>>,
    /// events on the calendar (to clear it at no cost when empty)
    len: usize,
}

impl Calendar {
    fn new(bs: i64) -> Self {
        // a power of two (at least bs + 1 days): a step's day is a mask, not a division
        Calendar { days: vec![Vec::new(); (bs as usize + 1).next_power_of_two()], len: 0 }
    }

    #[inline]
    fn day(&self, step: i64) -> usize {
        (step as u64 & (self.days.len() as u64 - 1)) as usize
    }

    /// Decoder `r` (admission count `seq`) has an event in step `at`, at most `bs` steps ahead
    /// of the step being run.
    #[inline]
    fn push(&mut self, at: i64, seq: u64, r: u32) {
        let d = self.day(at);
        self.days[d].push((seq, r));
        self.len += 1;
    }

    /// Step `step`'s events, in running order (the day is left empty; hand it back with
    /// [`Calendar::give_back`] to keep its buffer).
    #[inline]
    fn take(&mut self, step: i64) -> Vec<(u64, u32)> {
        let d = self.day(step);
        let mut today = std::mem::take(&mut self.days[d]);
        self.len -= today.len();
        insertion_sort(&mut today);
        today
    }

    #[inline]
    fn give_back(&mut self, step: i64, mut today: Vec<(u64, u32)>) {
        let d = self.day(step);
        debug_assert!(self.days[d].is_empty(), "no event lands on the day being run");
        today.clear();
        self.days[d] = today;
    }

    fn clear(&mut self) {
        if self.len > 0 {
            self.days.iter_mut().for_each(Vec::clear);
            self.len = 0;
        }
    }
}

/// Sorts a day's events: a few dozen, in runs already sorted (each pushed in running order by
/// the events of an earlier day), where an insertion sort does less than a general one.
/// A long day (thousands of decoders) goes to the general sort.
fn insertion_sort(v: &mut [(u64, u32)]) {
    if v.len() > 64 {
        v.sort_unstable();
        return;
    }
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && v[j - 1] > x {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

/// The decoding requests ([`aggregates::Decoders`], module docs), the heap's ties broken by
/// admission count (running order).
type Decoders = aggregates::Decoders<u64>;

/// The first step from `from` on in which a decoder of offset `c` takes or fills a block (its
/// held slots `c + s` or `c + s + 1` a multiple of the block size `bs`).
fn next_event(bs: i64, c: i64, from: i64) -> i64 {
    let to_take = (-(c + from)).rem_euclid(bs);
    let to_fill = (-(c + from + 1)).rem_euclid(bs);
    from + to_take.min(to_fill)
}

/// Prefix caching's requests, KV pool and plain decoders: the event loop's part with prefix
/// caching (module docs).
struct Prefixed<'a, K: PrefixKv> {
    pool: PrefixPool<'a, K>,
    state: Vec<u8>,
    dec: Decoders,
    /// the step of each decoder's next block event (taking a block, or filling one)
    events: Calendar,
}

impl<K: PrefixKv> Part for Prefixed<'_, K> {
    /// A run is handed its whole workload at once (the pool was built for it).
    fn grow(&mut self, n: usize) -> CoreResult<()> {
        if n > self.state.len() {
            return Err(CoreError::invalid(format!("internal error: a prefix-caching card was built for {} requests, got {n}", self.state.len())));
        }
        Ok(())
    }

    #[inline(always)]
    fn live(&self) -> i64 {
        self.dec.live
    }

    #[inline(always)]
    fn runs_short(&self, step: i64) -> bool {
        self.dec.crossing(step) > self.pool.kv.num_free_blocks()
    }

    /// The decoders at a block boundary this step take or fill their block, in running order:
    /// in one bulk where the pool keeps them (`prefix_pool/lazy.rs`), else one by one.
    fn take_slots(&mut self, step: i64) -> CoreResult<()> {
        if K::LAZY {
            let Prefixed { pool, state, dec, .. } = self;
            let (live, bs, order) = (&pool.live, dec.block_size(), &dec.order);
            // how many takers run before decoder `o` (asked only in a race: the pool's docs)
            let before = |o: usize| {
                let takes = |&&q: &&u32| state[q as usize] == DECODING && (live[q as usize].computed + step).rem_euclid(bs) == 0;
                order.iter().take_while(|&&q| q as usize != o).filter(takes).count() as i64
            };
            return pool.kv.take_for_decoders(dec.crossing(step), step, before);
        }
        let bs = self.dec.block_size();
        let today = self.events.take(step);
        for &(seq, r) in &today {
            let r = r as usize;
            let live = &mut self.pool.live[r];
            let held = live.computed + step; // slots before this step's token
            if held % bs == 0 {
                // a new block (the slot of this step's token in it); with blocks of one slot
                // that fills it too
                self.pool.kv.append(r)?;
            } else {
                // the slot that fills the last block: the slots since the last event with it
                self.pool.kv.append_same(r, (held + 1 - live.pending) as usize)?;
            }
            live.pending = held + 1;
            let c = live.computed;
            let ev = next_event(bs, c, step + 1);
            let last = self.pool.last_step(r);
            if ev <= last {
                self.events.push(ev, seq, r as u32);
            }
        }
        self.events.give_back(step, today);
        Ok(())
    }

    /// Each chunk's blocks registered as it is scheduled.
    fn plan_pieces(
        &mut self, _w: &Workload<'_>, params: &ContinuousParams, prefilling: &mut Vec<usize>, waiting: &mut VecDeque<usize>,
        left: &mut i64, pieces: &mut Vec<Piece>, rec: &mut Recorder<'_>, t: f64,
    ) -> CoreResult<i64> {
        let Prefixed { pool, state, dec, .. } = self;
        prefill_pieces(pool, prefilling, left, pieces)?;
        let first = prefilling.len();
        let n = admit(pool, params, dec.live, prefilling, waiting, left, rec, t, |r, nt, c| pieces.push((r, nt, c)))?;
        for &r in &prefilling[first..] {
            state[r] = PREFILLING;
        }
        Ok(n)
    }

    /// One token each, from the aggregates; the host tier's copies back of this step's recalls.
    fn decode(&mut self, _w: &Workload<'_>, step: i64, _left: i64, log: Option<&mut BatchLog>) -> (StepShape, f64) {
        let live = &self.pool.live;
        let shape = self.dec.shape(step, log, &self.state, |r| live[r].computed);
        (shape, self.pool.copies_s())
    }

    #[inline(always)]
    fn held(&self, r: usize) -> i64 {
        self.pool.live[r].held
    }

    /// Each frees its blocks, in running order.
    fn retire(&mut self, w: &Workload<'_>, step: i64, end: f64, rec: &mut Recorder<'_>) -> CoreResult<()> {
        while let Some(r) = self.dec.pop_finished(step) {
            let c = self.pool.live[r].computed;
            self.dec.remove(c);
            self.pool.release(r)?;
            self.pool.live[r] = Live { computed: 0, held: 0, pending: 0, generated: w.output_len[r] };
            self.state[r] = DONE;
            rec.set_finish(r, end);
        }
        Ok(())
    }

    fn end_pieces(&mut self, w: &Workload<'_>, pieces: &[Piece], next_step: i64, end: f64, rec: &mut Recorder<'_>) -> CoreResult<usize> {
        let mut completed = 0;
        for &(r, nt, _) in pieces {
            if self.pool.end_entry(rec, r, nt, 1, w.output_len[r], end)? {
                self.state[r] = DONE;
            } else if self.pool.live[r].computed == self.pool.live[r].held {
                self.push_decoder(r, next_step);
            } else {
                break;
            }
            completed += 1;
        }
        Ok(completed)
    }

    fn compact(&mut self) {
        self.dec.compact(&self.state);
    }

    #[inline(always)]
    fn blocks_used(&self) -> i64 {
        self.pool.blocks_used()
    }

    /// The per-step twin's own step on the decoders turned back into counts, then the
    /// aggregates rebuilt.
    fn rules_step(&mut self, w: &Workload<'_>, c: RulesStep<'_, '_>, t: f64, step: i64) -> CoreResult<(f64, Plan)> {
        let RulesStep { params, rec, books, waiting, prefilling, running, batch } = c;
        running.clear();
        let order = std::mem::take(&mut self.dec.order);
        for &r in &order {
            let r = r as usize;
            if self.state[r] != DECODING {
                continue;
            }
            let p = w.prompt_len[r];
            let s = self.pool.live[r];
            let computed = s.computed + step;
            // the steps it will not run as an aggregate any more
            self.pool.pre.computed_tokens[r] -= self.pool.last_step(r) - step + 1;
            // a decoder the pool kept has its slots written now
            self.pool.kv.stop_decoding(r, step - 1)?;
            let written = if K::LAZY { computed } else { s.pending };
            self.pool.live[r] = Live { computed, held: computed, pending: computed - written, generated: computed + 1 - p };
            self.state[r] = PREFILLING;
            running.push(r);
        }
        self.dec.order = order;
        self.dec.clear();
        self.events.clear();
        running.append(prefilling);

        let plan = plan_step(&mut self.pool, params, running, waiting, batch, books, rec, t)?; // rules 2-4
        for &r in waiting.iter().take(plan.n_preempted as usize) {
            self.state[r] = WAITING;
        }
        let extra_s = self.pool.copies_s();
        let shape = batch_shape(&self.pool, batch, books); // rule 5
        let end = if extra_s > 0.0 { rec.step_plus(t, shape, extra_s) } else { rec.step(t, shape) };
        for &(r, nt, _) in batch.iter() {
            self.pool.end_entry(rec, r, nt, 1, w.output_len[r], end)?; // rule 6
        }
        let mut back = Back { part: self, prefilling };
        return_running(&mut back, running, t, step + 1)?; // back to aggregates
        Ok((end, plan))
    }
}

impl<K: PrefixKv> Prefixed<'_, K> {
    /// Decoder `r`, whose tokens are all computed after step `step - 1`, joins the aggregates;
    /// its KV slots are all written into the allocator but `pending`.
    fn push_decoder(&mut self, r: usize, step: i64) {
        let s = &mut self.pool.live[r];
        let c = s.computed - step;
        let flushed = s.held - s.pending;
        *s = Live { computed: c, held: 0, pending: flushed, generated: 0 };
        self.state[r] = DECODING;
        let seq = self.pool.admitted[r];
        // it samples its last token in step out + p - 2 - c (the one that makes c + s + 2 - p
        // tokens generated); it computes one token in each step until then
        let last = self.pool.last_step(r);
        self.pool.pre.computed_tokens[r] += last - step + 1;
        self.dec.push(r, c, last, seq);
        if K::LAZY {
            self.pool.kv.start_decoding(r, c);
            return;
        }
        let ev = next_event(self.dec.block_size(), c, step);
        if ev <= last {
            self.events.push(ev, seq, r as u32);
        }
    }
}

/// Where the rules step's running requests go back to ([`return_running`]).
struct Back<'b, 'a, K: PrefixKv> {
    part: &'b mut Prefixed<'a, K>,
    prefilling: &'b mut Vec<usize>,
}

impl<K: PrefixKv> StepReturn for Back<'_, '_, K> {
    fn finished(&mut self, r: usize) -> bool {
        let done = self.part.pool.is_done(r);
        if done {
            self.part.state[r] = DONE;
        }
        done
    }

    fn decodes(&self, r: usize) -> bool {
        self.part.pool.live[r].computed == self.part.pool.live[r].held
    }

    fn push_decoder(&mut self, r: usize, step: i64) {
        self.part.push_decoder(r, step);
    }

    fn push_prefilling(&mut self, r: usize) {
        self.part.state[r] = PREFILLING;
        self.prefilling.push(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::continuous::per_step::{self, Features};
    use crate::sim::continuous::prefix::{HostTierOption, Prefixes};
    use crate::sim::test_util::{params, pricer, random_requests, rng};

    /// The event-driven prefix loop against the per-step one, bit for bit (batches, clock,
    /// hits, evictions, host recalls, every counter), on small pseudo-random workloads whose
    /// prompts share prefixes at random, in pools tight enough to preempt and evict, with and
    /// without chunked prefill and a host tier.
    #[test]
    fn events_agree_with_the_per_step_prefix_loop() {
        let mut rnd = rng(0x243f_6a88_85a3_08d3);
        let mut preempted = 0;
        for case in 0..400 {
            let (a, p, l) = random_requests(&mut rnd, 40, (4, 0.002), 60, (1, 40));
            let n = a.len();
            let mut parent = vec![-1i64; n];
            let mut len = vec![0i64; n];
            for i in 1..n {
                if rnd(4) != 0 {
                    let q = rnd(i as u64) as usize;
                    parent[i] = q as i64;
                    len[i] = rnd((p[i].min(p[q] + l[q]) + 1) as u64) as i64;
                }
            }
            let pf = Prefixes { parent: &parent, len: &len };
            let bs = 1 + rnd(6) as i64;
            let prm = params(1 + rnd(10) as i64, 1 + rnd(90) as i64, bs, 1 + rnd(60) as i64, rnd(2) == 0);
            let caching = rnd(5) != 0;
            let policy = if rnd(2) == 0 { "lru" } else { "hits" };
            let host = HostTierOption { host_blocks: if caching { rnd(3) as i64 * rnd(20) as i64 } else { 0 }, policy, s_per_token: 1e-6 };
            let w = Workload::new(&a, &p, &l).unwrap();
            let trace = case % 2 == 0;
            let (pr, px) = (pricer(), PrefixOptions { prefixes: &pf, prefix_caching: caching, host: &host });
            let inp = Inputs::new(&pr, &w, &prm, trace, trace);
            let want = per_step::run(&inp, &Features { prefix: Some(&px), ..Features::default() }).map(|o| (o.out, o.prefix.expect("on")));
            let got = run(&inp, &px);
            if let Ok((o, _)) = &want {
                preempted += (o.preemptions > 0) as i32;
            }
            // Debug prints each f64 so that it parses back to the same bits (and NaN as NaN)
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "case {case} {prm:?} caching {caching} {host:?}");
        }
        assert!(preempted > 40, "the cases must reach the per-step path: {preempted}");
    }

    /// The exact-key pool against the real allocator, under the event-driven loop, bit for
    /// bit (batches, clock, hits, lookups, evictions, every counter): random workloads whose
    /// prompts share prefixes at random (chains of turns among them), in pools tight enough to
    /// preempt and evict, with and without chunked prefill and prefix caching.
    #[test]
    fn keyed_pool_is_the_allocator() {
        let mut rnd = rng(0x1319_8a2e_0370_7344);
        let (mut preempted, mut evicted, mut hit) = (0, 0, 0);
        for case in 0..600 {
            let (a, p, l) = random_requests(&mut rnd, 40, (4, 0.002), 60, (1, 40));
            let n = a.len();
            let mut parent = vec![-1i64; n];
            let mut len = vec![0i64; n];
            for i in 1..n {
                if rnd(4) != 0 {
                    // mostly the previous request (a chat's turns), else any earlier one
                    let q = if rnd(2) == 0 { i - 1 } else { rnd(i as u64) as usize };
                    parent[i] = q as i64;
                    let most = p[i].min(p[q] + l[q]);
                    len[i] = if rnd(2) == 0 { most } else { rnd((most + 1) as u64) as i64 };
                }
            }
            let pf = Prefixes { parent: &parent, len: &len };
            let bs = 1 + rnd(6) as i64;
            let prm = params(1 + rnd(10) as i64, 1 + rnd(90) as i64, bs, 1 + rnd(60) as i64, rnd(2) == 0);
            let caching = rnd(6) != 0;
            let w = Workload::new(&a, &p, &l).unwrap();
            let trace = case % 2 == 0;
            let pr = pricer();
            let px = PrefixOptions::new(&pf, caching);
            let inp = Inputs::new(&pr, &w, &prm, trace, trace);
            let want = run_with(&inp, &px, true);
            let got = run_with(&inp, &px, false);
            if let Ok((o, x)) = &want {
                preempted += (o.preemptions > 0) as i32;
                evicted += (x.prefix_evictions > 0) as i32;
                hit += (x.prefix_hits > 0) as i32;
            }
            // Debug prints each f64 so that it parses back to the same bits (and NaN as NaN)
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "case {case} {prm:?} caching {caching}");
        }
        assert!(preempted > 40 && evicted > 100 && hit > 100, "the cases must preempt, evict and hit: {preempted} {evicted} {hit}");
    }
}