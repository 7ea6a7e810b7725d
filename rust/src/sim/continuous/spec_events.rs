//! Speculative decoding (§8, milestone 4a) at a cost per decoding entry, not per guess: an
//! optimisation of [`super::per_step::run_speculative`] that makes the same steps, bit for bit
//! (batches, clock, preemptions, every counter). It is to the speculative per-step loop what
//! [`super::event_driven`] is to [`super::per_step`]; the rules are
//! `servelab.engine.scheduler`'s, carried out by [`super::rules`], and what a speculative step
//! does is said once, in [`super::per_step`]'s module docs.
//!
//! The decoders and what a step does to them are a part of their own, [`SpecDecoders`]
//! (`spec_decoders.rs`: why a step is cheap although it visits every decoder); this loop
//! drives it beside the prefill pieces and the rules.
//!
//! The rare step in which the pool runs out of blocks (rule 3 preempts) runs the per-step
//! loop's own code ([`Run::rules_step`]: [`plan_step`], [`speculate`], [`keep_guesses`]), on the
//! decoders turned back into counts, and rebuilds the array. `tests/test_sim_spec_events.py`
//! and the test below hold the two loops equal bit for bit.

use std::collections::VecDeque;

use super::aggregates::{return_running, StepReturn};
use super::per_step::{speculate, SpecOutput, Speculation};
use super::rules::{
    add_entry, admit, arrive, batch_shape, counter_overflow, nothing_scheduled, plan_step, prefill_pieces, Books, Entry,
    Piece, ReqPool, TwinPool,
};
use super::spec_decoders::SpecDecoders;
use super::{check_count, ContinuousOutput, ContinuousParams, Inputs, KvCounts, Req, DECODING, DONE, PREFILLING, WAITING};
use crate::error::CoreResult;
use crate::sim::{Recorder, Workload};

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
        dec: SpecDecoders::new(spec.k),
        prefilling: Vec::new(),
        pieces: Vec::new(),
        so: SpecOutput::empty(n),
        running: Vec::new(),
        batch: Vec::new(),
        guessed: Vec::new(),
    };
    run.run()?;
    let Run { rec, books, so, .. } = run;
    Ok((books.finish(rec), so))
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
    /// the decoding requests (running order: admission order)
    dec: SpecDecoders,
    /// running requests that are not decoding, in admission order (after every decoding one)
    prefilling: Vec<usize>,
    /// the step's prefill pieces
    pieces: Vec<Piece>,
    so: SpecOutput,
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
            let short = self.dec.len() as i64 > self.params.max_num_batched_tokens || self.dec.crossing() > self.kv.num_free_blocks();
            t = if short { self.rules_step(t, step)? } else { self.event_step(t, step)? };
            step = after;
        }
    }

    /// A step in which nobody is preempted: rules 2-6 on the decoder array and the prefill
    /// pieces, speculation in the same pass as the decoders' share of the step. Returns the
    /// step's end.
    fn event_step(&mut self, t: f64, step: i64) -> CoreResult<f64> {
        self.kv.take(self.dec.crossing()); // rule 2: each decoder's slot for this step's token
        let mut left = self.params.max_num_batched_tokens - self.dec.len() as i64;
        let n_admitted = self.plan_pieces(&mut left, t)?; // rule 2, prefilling requests; rule 4
        if self.dec.is_empty() && self.pieces.is_empty() {
            return Err(nothing_scheduled(t));
        }
        // speculation, rules 5 and 6 for the decoders
        let bs = self.params.block_size;
        let (mut shape, draft_s) = self.dec.step(self.sp, bs, left, &mut self.kv, step + 1, &mut self.so, self.books.log.as_mut());
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

    /// Rule 6 for the decoders that sampled their last token (in running order): each frees
    /// its blocks and finishes at `end`.
    fn retire_decoders(&mut self, end: f64) {
        for &(r, held) in self.dec.finished() {
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
        let Run { params, sp, w, rec, req, state, kv, dec, so, prefilling, pieces, .. } = self;
        let (ol, bs) = (w.output_len, params.block_size);
        let mut pool = ReqPool { pl: w.prompt_len, req, state, kv };
        let completed = pool.end_pieces(rec, pieces, ol, end, |r, s| dec.push(sp, so, bs, r, s, ol[r], next_step));
        prefilling.drain(..completed);
    }

    /// The rare step in which the pool runs out of blocks (rule 3 preempts): the per-step
    /// loop's own step ([`plan_step`], [`speculate`], [`keep_guesses`]) on the decoders turned
    /// back into counts, then the decoder array rebuilt. Returns the step's end.
    #[inline(never)]
    fn rules_step(&mut self, t: f64, step: i64) -> CoreResult<f64> {
        let (params, pl, ol) = (self.params, self.w.prompt_len, self.w.output_len);
        self.running.clear();
        let Run { dec, so, req, running, .. } = self;
        dec.drain(so, step, |r, c, rem| {
            req[r] = Req { c, held: c as i32, generated: (ol[r] - rem) as i32 };
            running.push(r);
        });
        self.running.append(&mut self.prefilling);

        let Run { rec, books, req, state, kv, waiting, running, batch, guessed, so, sp, .. } = self;
        let mut pool = ReqPool { pl, req, state, kv };
        let plan = plan_step(&mut pool, params, running, waiting, batch, books, rec, t)?; // rules 2-4
        let draft_s = speculate(sp, &pool, ol, plan.budget, batch, guessed, so);
        let shape = batch_shape(&pool, batch, books); // rule 5
        let end = if draft_s > 0.0 { rec.step_plus(t, shape, draft_s) } else { rec.step(t, shape) };
        for (e, &(r, nt, _)) in batch.iter().enumerate() {
            pool.keep_guesses(r, guessed[e])?;
            pool.compute(rec, r, nt, 1 + guessed[e].1, ol[r], end); // rule 6
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
        self.dec.push(self.sp, &mut self.so, bs, r, &self.req[r], out, step);
    }

    fn push_prefilling(&mut self, r: usize) {
        self.state[r] = PREFILLING;
        self.prefilling.push(r);
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

    /// The same on wide batches (8 to 128 seats, up to 200 requests), where a step's decoders
    /// are visited a block at a time: without the batch log (which needs the running order),
    /// with budgets and pools that cut the guesses short or not, `k <= 16`.
    #[test]
    fn events_agree_on_wide_batches() {
        let mut rnd = rng(0x2545_f491_4f6c_dd1d);
        let pr = pricer();
        let before = super::super::spec_decoders::BLOCKS_RUN.with(|b| b.get());
        for case in 0..300 {
            let (a, p, l) = random_requests(&mut rnd, 200, (4, 0.01), 300, (1, 300));
            let n = a.len();
            let bs = [1, 4, 16, 16][rnd(4) as usize];
            let blocks = (200 + rnd(20_000) as i64) / bs;
            let prm = params(8 + rnd(121) as i64, [300, 2048, 8192][rnd(3) as usize], bs, blocks, rnd(2) == 0);
            let k = [0, 1, 4, 4, 8, 16][rnd(6) as usize];
            let acceptance: Vec<f64> = match rnd(3) {
                0 => vec![0.8; n],
                1 => vec![rnd(1001) as f64 / 1000.0; n],
                _ => (0..n).map(|_| rnd(1001) as f64 / 1000.0).collect(),
            };
            let sp = Speculation { k, acceptance: &acceptance, seed: rnd(1 << 40), draft: &pr };
            let w = Workload::new(&a, &p, &l).unwrap();
            let inp = Inputs::new(&pr, &w, &prm, case % 2 == 0, false);
            let (want, got) = (run_speculative(&inp, &sp), run(&inp, &sp));
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "case {case} {prm:?} k {k}");
        }
        let blocks = super::super::spec_decoders::BLOCKS_RUN.with(|b| b.get()) - before;
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            assert!(blocks > 10_000, "the vectorized pass must run: {blocks} blocks");
        }
        let _ = blocks;
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
