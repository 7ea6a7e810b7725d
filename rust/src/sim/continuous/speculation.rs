//! Speculative decoding (§8, milestone 4a) on the event loop (`event_driven.rs`): the
//! decoding requests as the loop's speculative part ([`SpecPart`], over the decoder columns of
//! `spec_decoders.rs`, which say why a step is cheap although it visits every decoder), at a
//! cost per decoding entry, not per guess. It makes the per-step twin's steps
//! ([`super::per_step::run_speculative`]) bit for bit (batches, clock, preemptions, every
//! counter); what a speculative step does is said once, in `per_step.rs`'s module docs.
//!
//! The rare step in which the pool runs out of blocks (rule 3 preempts) is the loop's rules
//! step, with the twin's own code for speculation ([`speculate`], [`TwinPool::keep_guesses`])
//! on the decoders turned back into counts. `tests/test_sim_spec_events.py` and the tests below
//! hold the two equal.

use super::event_driven::{Card, Counts, Decode};
use super::per_step::{speculate, SpecOutput, Speculation};
use super::rules::{Entry, ReqPool, TwinPool};
use super::spec_decoders::SpecDecoders;
use super::{BatchLog, ContinuousOutput, Inputs, Req, DONE};
use crate::error::CoreResult;
use crate::sim::{Recorder, StepShape};

/// Runs continuous batching with speculative decoding over a validated workload: the output of
/// [`super::per_step::run_speculative`], bit for bit, on the event loop (module docs).
pub fn run(inp: &Inputs<'_>, spec: &Speculation<'_>) -> CoreResult<(ContinuousOutput, SpecOutput)> {
    let Inputs { w, params, .. } = *inp;
    spec.validate(w.len())?; // the twin's order of checks, so its first message
    let part = SpecPart { sp: spec, dec: SpecDecoders::new(spec.k), so: SpecOutput::empty(w.len()), bs: params.block_size, guessed: Vec::new() };
    let mut card = Card::with_part(inp.pricer, params, w.len(), inp.trace, inp.batch_log, Counts::new(params, w.len(), part)?)?;
    card.advance(w, f64::INFINITY)?;
    let (out, counts) = card.finish_with_part();
    Ok((out, counts.dec.so))
}

/// The speculative decoding requests as the event loop's part: the decoder columns, what
/// speculation counted, and the rules step's verdicts.
struct SpecPart<'a> {
    sp: &'a Speculation<'a>,
    dec: SpecDecoders,
    so: SpecOutput,
    bs: i64,
    /// the rules step's verdicts, per batch entry: (guesses, kept)
    guessed: Vec<(i64, i64)>,
}

impl Decode for SpecPart<'_> {
    #[inline(always)]
    fn live(&self) -> i64 {
        self.dec.len() as i64
    }

    #[inline(always)]
    fn crossing(&self, _step: i64) -> i64 {
        self.dec.crossing()
    }

    /// Speculation, rule 5 and rule 6's slots for the decoders, in one pass.
    #[inline(always)]
    fn step(&mut self, step: i64, left: i64, pool: &mut ReqPool<'_>, log: Option<&mut BatchLog>) -> (StepShape, f64) {
        self.dec.step(self.sp, self.bs, left, pool.kv, step + 1, &mut self.so, log)
    }

    /// Those that sampled their last token in the step (in running order).
    #[inline(always)]
    fn retire(&mut self, _step: i64, end: f64, pool: &mut ReqPool<'_>, rec: &mut Recorder<'_>, ol: &[i64]) {
        for &(r, held) in self.dec.finished() {
            let r = r as usize;
            pool.kv.free(held);
            pool.req[r] = Req { c: held, held: 0, generated: ol[r] as i32 };
            pool.state[r] = DONE;
            rec.set_finish(r, end);
        }
    }

    #[inline]
    fn push(&mut self, r: usize, req: &mut Req, _p: i64, out: i64, step: i64) {
        self.dec.push(self.sp, &mut self.so, self.bs, r, req, out, step);
    }

    fn drain(&mut self, step: i64, pool: &mut ReqPool<'_>, ol: &[i64], running: &mut Vec<usize>) {
        let req = &mut pool.req;
        self.dec.drain(&mut self.so, step, |r, c, rem| {
            req[r] = Req { c, held: c as i32, generated: (ol[r] - rem) as i32 };
            running.push(r);
        });
    }

    fn plan_extra(&mut self, pool: &ReqPool<'_>, ol: &[i64], budget: i64, batch: &mut [Entry]) -> f64 {
        speculate(self.sp, pool, ol, budget, batch, &mut self.guessed, &mut self.so)
    }

    fn sampled(&mut self, pool: &mut ReqPool<'_>, e: usize, r: usize) -> CoreResult<i64> {
        let guess = self.guessed[e];
        pool.keep_guesses(r, guess)?;
        Ok(1 + guess.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::continuous::per_step::run_speculative;
    use crate::sim::Workload;
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
