//! Prefix caching at event speed: an optimisation of the per-step twin ([`super::per_step`]) over the pool of [`super::prefix`]
//! that makes the same allocator calls in the same order, and so the same hits, evictions,
//! block ids and batches, without visiting every running request in every step. It is to
//! `prefix.rs` what `event_driven.rs` is to `per_step.rs`; the rules are
//! `servelab.engine.scheduler`'s, carried out by [`super::rules`].
//!
//! # What a decoding request asks of the allocator
//!
//! The per-step loop writes a decoder's slots lazily ([`PrefixPool`]'s `append`): the allocator
//! hears of it only when it takes a new block (the pool shrinks, maybe evicting a cached block)
//! and when it fills one (the block's key is registered). Between those two events nothing of
//! the decoder changes but its context, one token a step. So the decoders are kept as in
//! `event_driven.rs`: their count, the sum of their offsets `computed - step`, a count per
//! residue of the offset modulo the block size (how many take a block in a step: more than
//! are free, and rule 3 preempts, which runs the per-step way), a heap of the steps they
//! finish in, and a calendar of their next block events. The allocator is touched only when a
//! request crosses a block boundary, is admitted, finishes or is preempted.
//!
//! # The order of the calls
//!
//! The allocator's answers depend on the order of the calls (the free queue's order, first
//! wins), so each step makes them in the per-step loop's order: the decoders' block events in
//! running order, then the prefill chunks (their keys registered), the admissions, and after
//! the price the finishing decoders in running order, then the completed prefills. The
//! running order is the order of admission (a preempted request leaves it, and joins at the
//! back when it is admitted again), so both the heap and each day of the calendar are ordered
//! by (step, admission count).
//!
//! # A head that does not fit
//!
//! The head of a full queue is tried at every step; each KV pool skips the attempt until
//! blocks are freed or one of its keys could hit, which gives the same answers.
//!
//! # The pool
//!
//! The loop drives a KV pool through [`PrefixKv`]: by exact keys (`prefix_pool.rs`, the
//! default), or the real block allocator where a host tier is asked for; the test
//! `keyed_pool_is_the_allocator` holds the two equal under this loop.

use std::collections::VecDeque;

use super::aggregates::{self, return_running, StepReturn};
use super::prefix::{with_kv, Live, Pools, PrefixOptions, PrefixOutput, PrefixPool};
use super::prefix_pool::PrefixKv;
use super::rules::{
    add_entry, admit, arrive, batch_shape, counter_overflow, nothing_scheduled, plan_step, prefill_pieces, Books, Entry, Piece,
    StepPool, TwinPool,
};
use super::{ContinuousOutput, ContinuousParams, Inputs, DECODING, DONE, PREFILLING, WAITING};
use crate::error::CoreResult;
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
    let pool = PrefixPool::new(w, params, px.host, kv);
    let (rec, books) = Books::start(inp);
    let n = w.len();
    let mut run = Events {
        params,
        w,
        rec,
        books,
        pool,
        state: vec![WAITING; n],
        waiting: VecDeque::new(),
        dec: Decoders::new(params.block_size),
        events: Calendar::new(params.block_size),
        prefilling: Vec::new(),
        pieces: Vec::new(),
        running: Vec::new(),
        batch: Vec::new(),
    };
    run.run()?;
    let Events { rec, books, pool, .. } = run;
    Ok((books.finish(rec), pool.finish()))
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

struct Events<'a, 'p, K: PrefixKv> {
    params: &'a ContinuousParams,
    w: &'a Workload<'a>,
    rec: Recorder<'p>,
    books: Books,
    pool: PrefixPool<'a, K>,
    state: Vec<u8>,
    waiting: VecDeque<usize>,
    dec: Decoders,
    /// the step of each decoder's next block event (taking a block, or filling one)
    events: Calendar,
    /// running requests that are not decoding, in admission order (after every decoding one)
    prefilling: Vec<usize>,
    /// the step's prefill pieces
    pieces: Vec<Piece>,
    /// buffers of the per-step path
    running: Vec<usize>,
    batch: Vec<Entry>,
}

impl<K: PrefixKv> Events<'_, '_, K> {
    fn run(&mut self) -> CoreResult<()> {
        let n = self.w.len();
        let (mut next, mut step, mut t) = (0usize, 0i64, 0.0f64);
        loop {
            arrive(self.params, self.w, t, &mut next, &mut self.waiting, &mut self.books.reject_code, &mut self.rec); // rule 1
            if self.waiting.is_empty() && self.dec.live == 0 && self.prefilling.is_empty() {
                if next == n {
                    return Ok(());
                }
                t = self.w.arrival_s[next]; // idle: jump to the next arrival
                continue;
            }
            let after = step.checked_add(1).ok_or_else(counter_overflow)?;
            let short = self.dec.live > self.params.max_num_batched_tokens
                || self.dec.crossing(step) > self.pool.kv.num_free_blocks();
            t = if short { self.rules_step(t, step)? } else { self.event_step(t, step)? };
            step = after;
        }
    }

    /// A step in which nobody is preempted: rules 2-6 from the aggregates and the events, in
    /// the per-step loop's order of allocator calls (module docs). Returns the step's end.
    fn event_step(&mut self, t: f64, step: i64) -> CoreResult<f64> {
        let mut shape = self.decode_aggregate(step)?; // rule 2, decoding requests
        let mut left = self.params.max_num_batched_tokens - self.dec.live;
        let n_admitted = self.plan_pieces(&mut left, t)?; // rule 2, prefilling requests; rule 4
        if shape.seqs == 0 && self.pieces.is_empty() {
            return Err(nothing_scheduled(t));
        }
        for &(r, nt, c) in self.pieces.iter() {
            add_entry(&mut shape, self.books.log.as_mut(), r, nt, c, self.pool.live[r].held, false); // rule 5
        }
        self.books.end_batch();
        let extra_s = self.pool.copies_s(); // the host tier's copies back
        let end = if extra_s > 0.0 { self.rec.step_plus(t, shape, extra_s) } else { self.rec.step(t, shape) };
        self.retire_decoders(step, end)?; // rule 6, decoding requests
        self.end_prefill_pieces(step + 1, end)?; // rule 6, prefill pieces
        self.dec.compact(&self.state);
        self.books.end_step(self.pool.blocks_used(), 0, n_admitted);
        Ok(end)
    }

    /// Rule 2 for the decoding requests: one token each, from the aggregates; those at a block
    /// boundary this step take or fill their block, in running order.
    fn decode_aggregate(&mut self, step: i64) -> CoreResult<StepShape> {
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
            let (p, out) = (self.w.prompt_len[r], self.w.output_len[r]);
            let ev = next_event(bs, live.computed, step + 1);
            if ev <= out + p - 2 - live.computed {
                self.events.push(ev, seq, r as u32);
            }
        }
        self.events.give_back(step, today);
        let live = &self.pool.live;
        Ok(self.dec.shape(step, self.books.log.as_mut(), &self.state, |r| live[r].computed))
    }

    /// Rule 2 for the prefilling requests (each chunk's blocks registered as it is scheduled)
    /// and rule 4, through the rules' own [`prefill_pieces`] and [`admit`]. Returns how many it
    /// admitted.
    fn plan_pieces(&mut self, left: &mut i64, t: f64) -> CoreResult<i64> {
        let Events { params, rec, pool, waiting, dec, prefilling, pieces, state, .. } = self;
        prefill_pieces(pool, prefilling, left, pieces)?;
        let first = prefilling.len();
        let n = admit(pool, params, dec.live, prefilling, waiting, left, rec, t, |r, nt, c| pieces.push((r, nt, c)))?;
        for &r in &prefilling[first..] {
            state[r] = PREFILLING;
        }
        Ok(n)
    }

    /// Rule 6 for the decoding requests whose last token this step samples: in running order,
    /// each frees its blocks.
    fn retire_decoders(&mut self, step: i64, end: f64) -> CoreResult<()> {
        while let Some(r) = self.dec.pop_finished(step) {
            let c = self.pool.live[r].computed;
            self.dec.remove(c);
            self.pool.release(r)?;
            self.pool.live[r] = Live { computed: 0, held: 0, pending: 0, generated: self.w.output_len[r] };
            self.state[r] = DONE;
            self.rec.set_finish(r, end);
        }
        Ok(())
    }

    /// Rule 6 for the prefill pieces, in order: a completed prefill samples a token and, unless
    /// it was its last, decodes from step `next_step` on (only the last piece can be partial).
    fn end_prefill_pieces(&mut self, next_step: i64, end: f64) -> CoreResult<()> {
        let mut completed = 0;
        for k in 0..self.pieces.len() {
            let (r, nt, _) = self.pieces[k];
            if self.pool.end_entry(&mut self.rec, r, nt, 1, self.w.output_len[r], end)? {
                self.state[r] = DONE;
            } else if self.pool.live[r].computed == self.pool.live[r].held {
                self.push_decoder(r, next_step);
            } else {
                break;
            }
            completed += 1;
        }
        self.prefilling.drain(..completed);
        Ok(())
    }

    /// The rare step in which the pool runs out of blocks (rule 3 preempts): the per-step
    /// loop's own step on the decoders turned back into counts, then the aggregates rebuilt.
    #[inline(never)]
    fn rules_step(&mut self, t: f64, step: i64) -> CoreResult<f64> {
        self.running.clear();
        let order = std::mem::take(&mut self.dec.order);
        for &r in &order {
            let r = r as usize;
            if self.state[r] != DECODING {
                continue;
            }
            let (p, out) = (self.w.prompt_len[r], self.w.output_len[r]);
            let s = self.pool.live[r];
            let computed = s.computed + step;
            // the steps it will not run as an aggregate any more
            self.pool.pre.computed_tokens[r] -= out + p - 2 - s.computed - step + 1;
            self.pool.live[r] = Live { computed, held: computed, pending: computed - s.pending, generated: computed + 1 - p };
            self.state[r] = PREFILLING;
            self.running.push(r);
        }
        self.dec.order = order;
        self.dec.clear();
        self.events.clear();
        self.running.append(&mut self.prefilling);

        let plan = plan_step(&mut self.pool, self.params, &mut self.running, &mut self.waiting, &mut self.batch, &mut self.books, &mut self.rec, t)?; // rules 2-4
        for &r in self.waiting.iter().take(plan.n_preempted as usize) {
            self.state[r] = WAITING;
        }
        let extra_s = self.pool.copies_s();
        let shape = batch_shape(&self.pool, &self.batch, &mut self.books); // rule 5
        let end = if extra_s > 0.0 { self.rec.step_plus(t, shape, extra_s) } else { self.rec.step(t, shape) };
        for e in 0..self.batch.len() {
            let (r, nt, _) = self.batch[e];
            self.pool.end_entry(&mut self.rec, r, nt, 1, self.w.output_len[r], end)?; // rule 6
        }
        let running = std::mem::take(&mut self.running);
        return_running(self, &running, t, step + 1)?; // back to aggregates
        self.running = running;
        self.books.end_step(self.pool.blocks_used(), plan.n_preempted, plan.n_admitted);
        Ok(end)
    }
}

impl<K: PrefixKv> StepReturn for Events<'_, '_, K> {
    fn finished(&mut self, r: usize) -> bool {
        let done = self.pool.is_done(r);
        if done {
            self.state[r] = DONE;
        }
        done
    }

    fn decodes(&self, r: usize) -> bool {
        self.pool.live[r].computed == self.pool.live[r].held
    }

    /// Decoder `r`, whose tokens are all computed after step `step - 1`, joins the aggregates;
    /// its KV slots are all written into the allocator but `pending`.
    fn push_decoder(&mut self, r: usize, step: i64) {
        let (p, out) = (self.w.prompt_len[r], self.w.output_len[r]);
        let s = &mut self.pool.live[r];
        let c = s.computed - step;
        let flushed = s.held - s.pending;
        *s = Live { computed: c, held: 0, pending: flushed, generated: 0 };
        self.state[r] = DECODING;
        let seq = self.pool.admitted[r];
        // it samples its last token in step out + p - 2 - c (the one that makes c + s + 2 - p
        // tokens generated); it computes one token in each step until then
        let last = out + p - 2 - c;
        self.pool.pre.computed_tokens[r] += last - step + 1;
        self.dec.push(r, c, last, seq);
        let ev = next_event(self.dec.block_size(), c, step);
        if ev <= last {
            self.events.push(ev, seq, r as u32);
        }
    }

    fn push_prefilling(&mut self, r: usize) {
        self.state[r] = PREFILLING;
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