//! Speculative decoding (§8, milestone 4a) at a cost per decoding entry, not per guess: an
//! optimisation of [`super::per_step::run_speculative`] that makes the same steps, bit for bit
//! (batches, clock, preemptions, every counter). It is to the speculative per-step loop what
//! [`super::event_driven`] is to [`super::per_step`]; the rules are
//! `servelab.engine.scheduler`'s, carried out by [`super::rules`], and what a speculative step
//! does is said once, in [`super::per_step`]'s module docs.
//!
//! # Why the decoders are still visited, and how cheaply
//!
//! Without speculation a decoder gains one token a step, so the event-driven loop keeps only
//! aggregates. With it a decoder gains `1 + kept` tokens, `kept` drawn anew each step, and the
//! guesses share the step's token budget and spare blocks in running order: every decoder
//! changes every step, so each step visits each decoder once. The visit is made cheap instead:
//!
//! * the decoders are one flat array of small records in running order ([`Dec`]: no request
//!   index chases, no per-request columns touched per step), compacted in the same pass;
//! * a step's `kept` is one draw ([`Speculation::kept_guesses`], the per-step loop's own
//!   function): one hash per decoder and step, not one per guess;
//! * a decoder's blocks are tracked by the free slots in its last block (`room`), so a block
//!   boundary is a comparison, not a division, and the pool ([`KvCounts`]) is touched once per
//!   step for all the decoders' new blocks;
//! * the draft's price needs, for each guess depth `j`, how many entries guess past `j` and
//!   their contexts: a count per guess length, summed from the top (`most` prices a step, as in
//!   the per-step loop, in the same order, so the clock's bits are the same);
//! * a decoder's `spec_steps` and `spec_accepted` are settled when it leaves the decoders
//!   (finished, or handed to the rules' step): it ran `now - joined` steps and gained
//!   `rem_joined - rem` tokens, one per step plus the kept guesses.
//!
//! The rare step in which the pool runs out of blocks (rule 3 preempts) runs the per-step
//! loop's own code ([`Run::rules_step`]: [`plan_step`], [`speculate`], [`keep_guesses`]), on the
//! decoders turned back into counts, and rebuilds the array. `tests/test_sim_spec_events.py`
//! and the test below hold the two loops equal bit for bit.

use std::collections::VecDeque;

use super::per_step::{keep_guesses, speculate, SpecOutput, Speculation};
use super::aggregates::{return_running, StepReturn};
use super::rules::{
    add_entry, admit, arrive, batch_shape, counter_overflow, nothing_scheduled, plan_step, prefill_pieces, Books, Entry,
    Piece, ReqPool,
};
use super::{blocks_for, check_count, ContinuousOutput, ContinuousParams, Inputs, KvCounts, Req, DECODING, DONE, PREFILLING, WAITING};
use crate::error::CoreResult;
use crate::sim::{price_shape, Recorder, StepShape, Workload};

/// Runs continuous batching with speculative decoding over a validated workload: the output of
/// [`super::per_step::run_speculative`], bit for bit, at a cost per decoding entry (module docs).
pub fn run(inp: &Inputs<'_>, spec: &Speculation<'_>) -> CoreResult<(ContinuousOutput, SpecOutput)> {
    let Inputs { w, params, .. } = *inp;
    spec.validate(w.len())?; // the per-step loop's order of checks, so its first message
    params.validate()?;
    let n = w.len();
    check_count(n)?;
    let (rec, books) = Books::start(inp);
    let mut run = Run {
        params,
        sp: spec,
        w,
        rec,
        books,
        req: vec![Req::default(); n],
        state: vec![WAITING; n],
        kv: KvCounts::new(params.num_blocks, params.block_size),
        waiting: VecDeque::new(),
        dec: Vec::new(),
        crossing: 0,
        prefilling: Vec::new(),
        pieces: Vec::new(),
        so: SpecOutput::empty(n),
        by_len: vec![(0, 0); spec.k as usize + 1],
        most: 0,
        depth: vec![(0, 0); spec.k as usize],
        finished: Vec::new(),
        running: Vec::new(),
        batch: Vec::new(),
        guessed: Vec::new(),
    };
    run.run()?;
    let Run { rec, books, so, .. } = run;
    Ok((books.finish(rec), so))
}

/// One decoding request, 32 bytes. Between steps all its tokens are computed (`held == c`).
#[derive(Debug, Clone, Copy)]
struct Dec {
    /// tokens whose KV is in the pool, and the slots it holds
    c: i64,
    /// output tokens left to sample (at least 1: a request leaves when it samples its last)
    rem: i64,
    /// guesses proposed since it joined the decoders (settled into `spec_proposed` when it leaves)
    proposed: i64,
    r: u32,
    /// free slots in its last block: 0, and its next slot takes a new block
    room: u32,
}

struct Run<'a, 'p> {
    params: &'a ContinuousParams,
    sp: &'a Speculation<'a>,
    w: &'a Workload<'a>,
    rec: Recorder<'p>,
    books: Books,
    /// per request, while not decoding (waiting, prefilling, done): the rules' counts
    req: Vec<Req>,
    state: Vec<u8>,
    kv: KvCounts,
    waiting: VecDeque<usize>,
    /// the decoding requests, in running order (admission order)
    dec: Vec<Dec>,
    /// how many of them take a new block in the next step (`room == 0`)
    crossing: i64,
    /// running requests that are not decoding, in admission order (after every decoding one)
    prefilling: Vec<usize>,
    /// the step's prefill pieces
    pieces: Vec<Piece>,
    so: SpecOutput,
    /// per guess length `g` in `0..=k`: the step's decoding entries that guessed `g`, their
    /// contexts' sum (below 2^57: fewer than 2^32 requests of fewer than 2^25 tokens)
    by_len: Vec<(i64, i64)>,
    /// the step's longest guess (`by_len` is zero past it)
    most: usize,
    /// per guess depth `j`: the entries guessing past `j`, their contexts' sum
    depth: Vec<(i64, i128)>,
    /// (request, slots held) of the decoders that sampled their last token in the step
    finished: Vec<(u32, i64)>,
    /// buffers of the rules' step
    running: Vec<usize>,
    batch: Vec<Entry>,
    guessed: Vec<(i64, i64)>,
}

impl Run<'_, '_> {
    fn run(&mut self) -> CoreResult<()> {
        let n = self.w.len();
        let (mut next, mut step, mut t) = (0usize, 0i64, 0.0f64);
        loop {
            arrive(self.params, self.w, t, &mut next, &mut self.waiting, &mut self.books.reject_code, &mut self.rec); // rule 1
            if self.waiting.is_empty() && self.dec.is_empty() && self.prefilling.is_empty() {
                if next == n {
                    return Ok(());
                }
                t = self.w.arrival_s[next]; // idle: jump to the next arrival
                continue;
            }
            let after = step.checked_add(1).ok_or_else(counter_overflow)?;
            // rule 3 preempts when more decoders take a block than are free (the budget never
            // cuts the decoders short, see `event_driven.rs`: a guard)
            let short = self.dec.len() as i64 > self.params.max_num_batched_tokens || self.crossing > self.kv.num_free_blocks();
            t = if short { self.rules_step(t, step)? } else { self.event_step(t, step)? };
            step = after;
        }
    }

    /// Decoder `d` leaves the decoders before step `now`: its speculation counters settled.
    fn settle(so: &mut SpecOutput, d: &Dec, now: i64) {
        let r = d.r as usize;
        so.spec_proposed[r] += d.proposed;
        so.spec_steps[r] += now;
        so.spec_accepted[r] -= d.rem + now;
    }

    /// A step in which nobody is preempted: rules 2-6 on the decoder array and the prefill
    /// pieces, speculation in the same pass as the decoders' share of the step. Returns the
    /// step's end.
    fn event_step(&mut self, t: f64, step: i64) -> CoreResult<f64> {
        self.kv.take(self.crossing); // rule 2: each decoder's slot for this step's token
        let mut left = self.params.max_num_batched_tokens - self.dec.len() as i64;
        let n_admitted = self.plan_pieces(&mut left, t)?; // rule 2, prefilling requests; rule 4
        if self.dec.is_empty() && self.pieces.is_empty() {
            return Err(nothing_scheduled(t));
        }
        // speculation, rules 5 and 6 for the decoders
        if self.books.log.is_some() {
            self.decode_and_guess::<true>(left, step + 1);
        } else {
            self.decode_and_guess::<false>(left, step + 1);
        }
        let (mut shape, draft_s) = self.decoders_shape();
        for &(r, nt, c) in self.pieces.iter() {
            add_entry(&mut shape, self.books.log.as_mut(), r, nt, c, self.req[r].held as i64, false); // rule 5
        }
        self.books.end_batch();
        let end = if draft_s > 0.0 { self.rec.step_plus(t, shape, draft_s) } else { self.rec.step(t, shape) };
        self.retire_decoders(end); // rule 6, decoders that sampled their last token
        self.end_prefill_pieces(step + 1, end); // rule 6, prefill pieces
        self.books.end_step(self.kv.blocks_used(), 0, n_admitted);
        Ok(end)
    }

    /// Rule 2 for the prefilling requests and rule 4, through the rules' own [`prefill_pieces`]
    /// and [`admit`]. Returns how many it admitted.
    fn plan_pieces(&mut self, left: &mut i64, t: f64) -> CoreResult<i64> {
        let Run { params, w, rec, req, state, kv, waiting, dec, prefilling, pieces, .. } = self;
        let mut pool = ReqPool { pl: w.prompt_len, req, state, kv };
        prefill_pieces(&mut pool, prefilling, left, pieces)?;
        admit(&mut pool, params, dec.len() as i64, prefilling, waiting, left, rec, t, |r, nt, c| pieces.push((r, nt, c)))
    }

    /// The decoders' part of the step, one pass in running order (`LOG`: the batch log is
    /// kept, their entries written in it): each one's guesses `g` within the budget `budget` and
    /// the spare blocks (as [`speculate`] decides them), its verdicts, and what rule 6 does to it
    /// after the step (the kept guesses' slots, `1 + kept` tokens sampled; one that samples its
    /// last token leaves the array for `finished`). Its entry of `1 + g` tokens at context `c`
    /// goes into `by_len[g]` (a count and a sum of contexts): that is all the step's shape and
    /// the draft's price need ([`Self::decoders_shape`]).
    #[inline(always)]
    fn decode_and_guess<const LOG: bool>(&mut self, mut budget: i64, now: i64) {
        let Run { params, sp, kv, dec, by_len, finished, books, so, .. } = self;
        let (bs, k) = (params.block_size, sp.k);
        let mut spare = kv.num_free_blocks();
        let (mut taken, mut crossing, mut kept_at) = (0i64, 0i64, 0usize);
        // the entries guessing all `k` (most of them), kept out of `by_len` in registers
        let (mut full, mut full_c, mut most) = (0i64, 0i64, 0i64);
        let mut log = books.log.as_mut();
        finished.clear();
        for i in 0..dec.len() {
            // its fields in locals (registers), the record written back whole
            let Dec { c, rem, mut proposed, r, room } = dec[i];
            // rule 2 took this step's slot (a new block when none was left)
            let room = if room == 0 { bs - 1 } else { room as i64 - 1 };
            // speculation: guesses within the budget, the last token and the spare blocks (the
            // guesses up to `room` fit in its last block, each `bs` more take one)
            // (no branch on `g > room`: it goes either way at random, and a mispredicted branch
            // costs more than the arithmetic)
            let g = k.min(budget).min(rem - 1).min(room + spare * bs);
            spare -= blocks_past(g - room, bs);
            budget -= g;
            let kept = sp.kept_guesses(r as usize, rem, g);
            proposed += g;
            if g == k {
                full += 1;
                full_c += c;
            } else {
                let b = &mut by_len[g as usize];
                b.0 += 1;
                b.1 += c;
                most = most.max(g);
            }
            if LOG {
                if let Some(l) = log.as_mut() {
                    l.request_id.push(r as i64);
                    l.new_tokens.push(1 + g);
                    l.context_len.push(c);
                }
            }
            // rule 6: the kept guesses' slots and KV, then 1 + kept tokens sampled
            let nb = blocks_past(kept - room, bs);
            taken += nb;
            let room = room - kept + nb * bs;
            let d = Dec { c: c + 1 + kept, rem: rem - 1 - kept, proposed, r, room: room as u32 };
            if d.rem == 0 {
                finished.push((r, d.c));
                Self::settle(so, &d, now);
            } else {
                crossing += (room == 0) as i64;
                dec[kept_at] = d;
                kept_at += 1;
            }
        }
        let b = &mut by_len[k as usize];
        b.0 += full;
        b.1 += full_c;
        self.most = if full > 0 { k as usize } else { most as usize };
        dec.truncate(kept_at);
        kv.take(taken);
        self.crossing = crossing;
    }

    /// From `by_len` (cleared after): the decoders' share of the step's shape, each entry `1 +
    /// g` tokens on `c` (rule 5: `n * c + n * (n + 1) / 2` keys), and the draft's `g` steps as
    /// [`speculate`] prices them: depth `j` is one batched decode step of the draft over the
    /// entries with `g > j`, at their contexts plus `j`, the depths priced and added in order.
    /// Returns (the shape, the draft's seconds).
    fn decoders_shape(&mut self) -> (StepShape, f64) {
        let Run { sp, by_len, depth, so, .. } = self;
        let by_len = &mut by_len[..=self.most];
        let mut shape = StepShape::default();
        let mut most = 0;
        for (g, &(count, sum)) in by_len.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let (n, g128) = (count as i128, g as i128);
            shape.seqs += count;
            shape.tokens += count * (1 + g as i64);
            shape.keys += (1 + g128) * sum as i128 + n * (1 + g128) * (2 + g128) / 2;
            shape.ctx_tokens += sum as i128;
            most = g;
        }
        shape.n_decode = shape.seqs;
        if most == 0 {
            by_len[0] = (0, 0);
            return (shape, 0.0);
        }
        let depth = &mut depth[..most]; // k entries, allocated once
        let (mut count, mut sum) = (0i64, 0i128);
        for g in (1..=most).rev() {
            count += by_len[g].0;
            sum += by_len[g].1 as i128;
            depth[g - 1] = (count, sum); // the entries with g' >= g, i.e. g' > g - 1
        }
        by_len[..=most].iter_mut().for_each(|b| *b = (0, 0));
        let mut total = 0.0;
        for (j, &(count, sum)) in depth.iter().enumerate() {
            total += price_shape(sp.draft, &StepShape::decode(count, sum + (j as i128) * (count as i128), count)).time_s;
        }
        so.draft_busy_s += total;
        (shape, total)
    }

    /// Rule 6 for the decoders that sampled their last token (in running order): each frees
    /// its blocks and finishes at `end`.
    fn retire_decoders(&mut self, end: f64) {
        for &(r, held) in self.finished.iter() {
            let r = r as usize;
            self.kv.free(held);
            self.req[r] = Req { c: held, held: 0, generated: self.w.output_len[r] as i32 };
            self.state[r] = DONE;
            self.rec.set_finish(r, end);
        }
    }

    /// Rule 6 for the prefill pieces, in order: a completed prefill samples a token and, unless
    /// it was its last, decodes from step `next_step` on (only the last piece can be partial).
    fn end_prefill_pieces(&mut self, next_step: i64, end: f64) {
        let Run { params, w, rec, req, state, kv, dec, crossing, so, prefilling, pieces, .. } = self;
        let (ol, bs) = (w.output_len, params.block_size);
        let mut pool = ReqPool { pl: w.prompt_len, req, state, kv };
        let completed = pool.end_pieces(rec, pieces, ol, end, |r, s| push_decoder(dec, crossing, so, bs, r, s, ol[r], next_step));
        prefilling.drain(..completed);
    }

    /// The rare step in which the pool runs out of blocks (rule 3 preempts): the per-step
    /// loop's own step ([`plan_step`], [`speculate`], [`keep_guesses`]) on the decoders turned
    /// back into counts, then the decoder array rebuilt. Returns the step's end.
    #[inline(never)]
    fn rules_step(&mut self, t: f64, step: i64) -> CoreResult<f64> {
        let (params, pl, ol) = (self.params, self.w.prompt_len, self.w.output_len);
        self.running.clear();
        for d in self.dec.drain(..) {
            let r = d.r as usize;
            Self::settle(&mut self.so, &d, step);
            self.req[r] = Req { c: d.c, held: d.c as i32, generated: (ol[r] - d.rem) as i32 };
            self.running.push(r);
        }
        self.crossing = 0;
        self.running.append(&mut self.prefilling);

        let Run { rec, books, req, state, kv, waiting, running, batch, guessed, so, sp, .. } = self;
        let mut pool = ReqPool { pl, req, state, kv };
        let plan = plan_step(&mut pool, params, running, waiting, batch, books, rec, t)?; // rules 2-4
        let draft_s = speculate(sp, params, &pool, ol, plan.budget, batch, guessed, so);
        let shape = batch_shape(&pool, batch, books); // rule 5
        let end = if draft_s > 0.0 { rec.step_plus(t, shape, draft_s) } else { rec.step(t, shape) };
        for (e, &(r, nt, _)) in batch.iter().enumerate() {
            let sampled = keep_guesses(&mut pool, params.block_size, r, guessed[e]);
            pool.compute(rec, r, nt, sampled, ol[r], end); // rule 6
        }

        let running = std::mem::take(&mut self.running);
        return_running(self, &running, t, step + 1)?; // back to the array
        self.running = running;
        self.books.end_step(self.kv.blocks_used(), plan.n_preempted, plan.n_admitted);
        Ok(end)
    }
}

impl StepReturn for Run<'_, '_> {
    fn finished(&mut self, r: usize) -> bool {
        self.state[r] == DONE
    }

    fn decodes(&self, r: usize) -> bool {
        self.req[r].c == self.req[r].held as i64
    }

    fn push_decoder(&mut self, r: usize, step: i64) {
        self.state[r] = DECODING;
        let (bs, out) = (self.params.block_size, self.w.output_len[r]);
        push_decoder(&mut self.dec, &mut self.crossing, &mut self.so, bs, r, &self.req[r], out, step);
    }

    fn push_prefilling(&mut self, r: usize) {
        self.state[r] = PREFILLING;
        self.prefilling.push(r);
    }
}

/// Request `r`, all of whose tokens are computed (`s`; `out` output tokens), joins the decoders
/// `dec` at the end of the running order, decoding from step `step` on (blocks of `bs`;
/// `crossing` counts it if its next slot takes a block).
#[allow(clippy::too_many_arguments)]
#[inline]
fn push_decoder(dec: &mut Vec<Dec>, crossing: &mut i64, so: &mut SpecOutput, bs: i64, r: usize, s: &Req, out: i64, step: i64) {
    let (c, rem) = (s.c, out - s.generated as i64);
    let room = blocks_for(c, bs) * bs - c;
    *crossing += (room == 0) as i64;
    // settled when it leaves (`settle`): steps `now - step`, kept `rem - rem_now - steps`
    so.spec_steps[r] -= step;
    so.spec_accepted[r] += rem + step;
    dec.push(Dec { c, rem, proposed: 0, r: r as u32, room: room as u32 });
}

/// Blocks that `over` slots past the end of a sequence's last block take: `ceil(over / bs)`,
/// 0 for `over <= 0`; without a division or an unpredictable branch when it is at most one
/// block (guesses of at most `bs`).
#[inline(always)]
fn blocks_past(over: i64, bs: i64) -> i64 {
    if over <= bs {
        (over > 0) as i64
    } else {
        (over + bs - 1) / bs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::continuous::per_step::run_speculative;
    use crate::sim::test_util::{params, pricer, random_requests, rng};

    /// The speculative loop at a cost per entry against the per-step one, bit for bit (batches,
    /// clock, trace, preemptions and every speculation counter), on small pseudo-random
    /// workloads in pools tight enough to preempt, budgets that cut the guesses short, blocks
    /// of one slot, chunked prefill or not; `k` in {0, 1, 4}, up to 8 or far past it (70),
    /// acceptance 0, 0.5, 0.8, 1 or per request.
    #[test]
    fn events_agree_with_the_per_step_speculative_loop() {
        let mut rnd = rng(0x3c6e_f372_fe94_f82b);
        let pr = pricer();
        let (mut preempted, mut guessed, mut cut) = (0, 0, 0);
        for case in 0..1500 {
            let long = rnd(4) == 0; // outputs long enough for k = 70 to guess in full
            let (a, p, l) = random_requests(&mut rnd, 40, (4, 0.003), 60, if long { (1, 200) } else { (1, 40) });
            let n = a.len();
            let prm = params(1 + rnd(12) as i64, 1 + rnd(120) as i64, 1 + rnd(8) as i64, 1 + rnd(60) as i64, rnd(2) == 0);
            let k = [0, 1, 4, 4, 1 + rnd(8) as i64, 70][rnd(6) as usize];
            let acceptance: Vec<f64> = match rnd(5) {
                0 => vec![0.0; n],
                1 => vec![0.5; n],
                2 => vec![0.8; n],
                3 => vec![1.0; n],
                _ => (0..n).map(|_| rnd(1001) as f64 / 1000.0).collect(),
            };
            let sp = Speculation { k, acceptance: &acceptance, seed: rnd(1 << 40), draft: &pr };
            let w = Workload::new(&a, &p, &l).unwrap();
            let trace = case % 2 == 0;
            let inp = Inputs::new(&pr, &w, &prm, trace, trace);
            let want = run_speculative(&inp, &sp);
            let got = run(&inp, &sp);
            if let Ok((o, s)) = &want {
                preempted += (o.preemptions > 0) as i32;
                guessed += (s.spec_accepted.iter().sum::<i64>() > 0) as i32;
                cut += (s.spec_proposed.iter().zip(&s.spec_steps).any(|(&g, &st)| g < k * st)) as i32;
            }
            // Debug prints each f64 so that it parses back to the same bits (and NaN as NaN)
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "case {case} {prm:?} k {k}");
        }
        assert!(preempted > 200 && guessed > 500 && cut > 500, "the cases must reach every path: {preempted} {guessed} {cut}");
    }

    /// Bad options are refused with the per-step loop's messages (its checks, in its order).
    #[test]
    fn bad_options_name_the_value() {
        let w = Workload::new(&[0.0], &[8], &[10]).unwrap();
        let pr = pricer();
        for (k, acc, bs, msg) in [
            (-1, vec![0.5], 4, "k must be an integer in [0, 65536], got -1"),
            (1 << 17, vec![0.5], 4, "k must be an integer in [0, 65536], got 131072"),
            (2, vec![0.5, 0.5], 4, "acceptance must have one entry per request (1), got 2"),
            (2, vec![f64::NAN], 4, "acceptance[0] must be a number in [0, 1], got nan"),
            (2, vec![1.5], 0, "acceptance[0] must be a number in [0, 1], got 1.5"),
            (2, vec![0.5], 0, "block_size must be an integer in [1, 65536], got 0"),
        ] {
            let sp = Speculation { k, acceptance: &acc, seed: 0, draft: &pr };
            let prm = params(8, 64, bs, 16, false);
            let inp = Inputs::new(&pr, &w, &prm, false, false);
            let want = run_speculative(&inp, &sp).unwrap_err().to_string();
            let got = run(&inp, &sp).unwrap_err().to_string();
            assert!(got.starts_with(msg), "{got}");
            assert_eq!(got, want);
        }
    }

    /// Room for every guess: a request's guesses are `k` but at its end, whatever its block
    /// boundaries (`room` counts the slots left in its last block), and a = 1 keeps them all.
    #[test]
    fn a_perfect_draft_by_hand() {
        let w = Workload::new(&[0.0], &[8], &[10]).unwrap();
        let pr = pricer();
        let sp = Speculation { k: 3, acceptance: &[1.0], seed: 0, draft: &pr };
        let (o, s) = run(&Inputs::new(&pr, &w, &params(8, 64, 4, 16, false), false, true), &sp).unwrap();
        let l = o.batch_log.unwrap();
        assert_eq!(l.new_tokens, vec![8, 4, 4, 1]);
        assert_eq!(l.context_len, vec![0, 8, 12, 16]);
        assert_eq!((s.spec_proposed[0], s.spec_accepted[0], s.spec_steps[0]), (6, 6, 3));
        // 16 slots after step 2; step 3 takes a fifth block for its token and frees all at once
        assert_eq!(o.peak_kv_blocks, 4);
    }
}
