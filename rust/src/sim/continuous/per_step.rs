//! The per-step twin of continuous batching: every step visits every running sequence (its
//! slot check, its share of the step's totals, its sampling), with any mix of the features
//! ([`Features`]): prefix caching over the pool of [`super::prefix`] (with its host tier), else
//! the pool by counts ([`ReqPool`]); speculation (below); the record of the queues for
//! `servelab trace` ([`super::trace`]). Chunked prefill is a card parameter of the rules. The
//! rules are `servelab.engine.scheduler`'s, carried out by [`super::rules`] on a pool that says
//! how it answers ([`TwinPool`]). It is the readable reference that the faster loops
//! (`event_driven.rs` with either decoders' part, `prefix_events.rs`) are held equal to, bit for bit,
//! and it runs the mixes they do not carry (speculation with prefix caching, any recorded run).

//! # Speculative decoding (§8, milestone 4a)
//!
//! The reference of [`super::speculation`] (the default, the same output bit for bit at a cost
//! per decoding entry; `tests/test_sim_spec_events.py`). [`run_speculative`] adds the engine's speculative step (`servelab.engine.speculative`): once
//! rules 2-4 have planned the step, each decoding entry gets up to `k` draft guesses, within
//! the token budget and the free blocks left (the blocks every guess being kept would need are
//! reserved, so speculation never preempts anyone), never past the request's last token. The
//! simulator has no tokens: each guess is kept with the request's acceptance rate `a`, and the
//! guesses after the first rejection are thrown away, so a step emits `1 + kept` tokens,
//! `(1 - a^(k+1)) / (1 - a)` on average (the `1` is the token the target samples after the
//! kept ones, whether a guess was rejected or all `g` were kept).
//!
//! `kept` is one draw per decoding step, not one per guess ([`Speculation::kept_guesses`]): a
//! seeded uniform `u` in `[0, 1)` per (request, output tokens it has left before the step), and
//! `kept` the largest `j <= g` with `u < a^j`, i.e. `min(g, floor(ln u / ln a))` (but for ties)
//! computed with products, which are exact and the same on every platform, not logarithms. Its law is
//! that of `g` sequential draws `u_i < a` stopped at the first rejection: `P(kept >= j) =
//! P(u < a^j) = a^j` for `j <= g` (up to the rounding of `a^j` and of `u` to 53 bits), `a = 0`
//! keeping nothing and `a = 1` everything. A step used to draw once per guess, about once per
//! output token; one draw per step is the same distribution at a fraction of the hashing. Both
//! loops draw with the same function ([`uniform_of`]) and count the same powers, multiplied up
//! in the same order (the event loop's pass over blocks of decoders counts them a power at a
//! time for the whole block: `spec_decoders.rs`, whose tests hold it to [`kept_of`]), so they
//! keep the same guesses.
//!
//! The target's forward is priced as an entry of `1 + g` tokens; the draft's `g` steps as
//! batched decode steps of the draft model at contexts `c, c + 1, ..` (the engine's
//! `draft_cost_s`). Kept guesses take their slots after the step, as in the engine.

use std::collections::VecDeque;

use super::prefix::{with_kv, Pools, PrefixOptions, PrefixOutput, PrefixPool};
use super::prefix_pool::PrefixKv;
use super::rules::{run_steps, Books, Entry, ReqPool, StepHooks, TwinPool};
use super::trace::StepQueues;
use super::{blocks_for, ContinuousOutput, Inputs, KvCounts, Req, WAITING};
use crate::sim::{price_shape, Recorder, StepShape};
use crate::cost::{fmt_f64, Pricer};
use crate::error::{CoreError, CoreResult};

/// The speculative option (see the module docs).
#[derive(Clone, Copy)]
pub struct Speculation<'a> {
    /// Draft guesses per decoding request and step, `>= 0`.
    pub k: i64,
    /// Per request: the chance that each guess is kept, in `[0, 1]`.
    pub acceptance: &'a [f64],
    /// Seeds the acceptance draws.
    pub seed: u64,
    /// Prices the draft's steps.
    pub draft: &'a Pricer,
}

/// Largest `k`: far beyond any useful draft length, small enough to keep a step's work bounded.
pub const MAX_SPEC_K: i64 = 1 << 16;

impl Speculation<'_> {
    /// Checks `k` and the acceptance column; the error names the first bad value.
    pub fn validate(&self, n: usize) -> CoreResult<()> {
        if !(0..=MAX_SPEC_K).contains(&self.k) {
            return Err(CoreError::invalid(format!("k must be an integer in [0, {MAX_SPEC_K}], got {}", self.k)));
        }
        if self.acceptance.len() != n {
            return Err(CoreError::invalid(format!(
                "acceptance must have one entry per request ({n}), got {}",
                self.acceptance.len()
            )));
        }
        if let Some((i, &a)) = self.acceptance.iter().enumerate().find(|(_, &a)| !(0.0..=1.0).contains(&a)) {
            return Err(CoreError::invalid(format!("acceptance[{i}] must be a number in [0, 1], got {}", fmt_f64(a))));
        }
        Ok(())
    }

    /// The part of request `r`'s draws that does not change from step to step (the event
    /// loop keeps it per decoder): the seed and the request, mixed.
    #[inline(always)]
    pub(super) fn key(&self, r: usize) -> u64 {
        self.seed ^ (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// The uniform in `[0, 1)` that judges the guesses of request `r`'s step when it has `left`
    /// output tokens to sample (a count that falls every step, so a fresh draw each step, and
    /// that the event loop's decoder record holds): SplitMix64 of the three, so it does not
    /// depend on the batch it falls in.
    #[cfg(test)]
    fn uniform(&self, r: usize, left: i64) -> f64 {
        uniform_of(self.key(r), left)
    }

    /// How many of the `g` guesses of request `r`'s step are kept when it has `left` output
    /// tokens to sample (module docs): the largest `j <= g` with `u < a^j`, `u` the step's one
    /// draw. The powers are multiplied up in order, so both loops (the event loop's vectorized
    /// pass counts the same powers) round them alike; they never grow (`a <= 1`), so that `j`
    /// is also the number of powers above `u`.
    #[inline(always)]
    pub(super) fn kept_guesses(&self, r: usize, left: i64, g: i64) -> i64 {
        if g <= 0 {
            return 0;
        }
        kept_of(self.acceptance[r], uniform_of(self.key(r), left), g)
    }
}

/// The step's uniform for a request of draw key `key` (see [`Speculation::key`]) with `left`
/// output tokens to sample: 53 bits of SplitMix64 of the two, over 2^53. (The bits, below 2^53,
/// convert exactly through `i64`, which is one instruction where `u64` is several.) Written
/// without a branch, so that the event loop's pass over its decoders vectorizes it.
#[inline(always)]
pub(super) fn uniform_of(key: u64, left: i64) -> f64 {
    let mut x = key ^ (left as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as i64 as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The kept guesses of `g >= 1` at acceptance `a` for the draw `u`: how many of `a, a^2, ..,
/// a^g` (multiplied up in this order) are above `u`, counted 4 at a time without a branch per
/// power (where the count stops is random, and a mispredicted branch per step costs more than
/// the multiplies). The event loop's vectorized pass counts the same powers, in the same order.
#[inline(always)]
pub(super) fn kept_of(a: f64, u: f64, g: i64) -> i64 {
    let (mut kept, mut judged, mut power) = (0i64, 0i64, a);
    while judged < g {
        let end = g.min(judged + 4);
        while judged < end {
            kept += (u < power) as i64;
            power *= a;
            judged += 1;
        }
        if kept < judged {
            break; // a power at or below u: every later one is too
        }
    }
    kept
}

/// What speculation did, per request (summed over its decoding steps).
#[derive(Debug, Clone, PartialEq)]
pub struct SpecOutput {
    /// Guesses proposed.
    pub spec_proposed: Vec<i64>,
    /// Guesses kept.
    pub spec_accepted: Vec<i64>,
    /// Decoding steps (target steps after the one that produced the first token).
    pub spec_steps: Vec<i64>,
    /// Seconds the draft's steps took, over the run (included in the clock and `busy_s`).
    pub draft_busy_s: f64,
}

impl SpecOutput {
    /// Nothing proposed yet, for `n` requests.
    pub(super) fn empty(n: usize) -> SpecOutput {
        SpecOutput { spec_proposed: vec![0; n], spec_accepted: vec![0; n], spec_steps: vec![0; n], draft_busy_s: 0.0 }
    }
}

/// The features a per-step run combines, each independent of the others: prefix caching (with
/// its host tier, over the pool of [`super::prefix`]; else the pool by counts), speculation
/// (module docs), and `servelab trace`'s record of the queues ([`super::trace`]).
#[derive(Clone, Copy, Default)]
pub struct Features<'a> {
    pub prefix: Option<&'a PrefixOptions<'a>>,
    pub spec: Option<&'a Speculation<'a>>,
    pub queues: bool,
}

/// A per-step run's output: the run, and what each feature that was on adds.
#[derive(Debug)]
pub struct TwinOutput {
    pub out: ContinuousOutput,
    pub prefix: Option<PrefixOutput>,
    pub spec: Option<SpecOutput>,
    pub queues: Option<StepQueues>,
}

/// Runs continuous batching over a validated workload, one sequence-step at a time, with any
/// mix of `features`: the readable twin that every faster loop is held equal to.
pub fn run(inp: &Inputs<'_>, features: &Features<'_>) -> CoreResult<TwinOutput> {
    if let Some(sp) = features.spec {
        sp.validate(inp.w.len())?; // first: its messages came first before the features composed
    }
    match features.prefix {
        None => {
            inp.params.validate()?;
            let Inputs { w, params, .. } = *inp;
            let n = w.len();
            let (mut req, mut state) = (vec![Req::default(); n], vec![WAITING; n]);
            let mut kv = KvCounts::new(params.num_blocks, params.block_size);
            let mut pool = ReqPool { pl: w.prompt_len, req: &mut req, state: &mut state, kv: &mut kv };
            let (out, spec, queues) = run_on(inp, features, &mut pool)?;
            Ok(TwinOutput { out, prefix: None, spec, queues })
        }
        Some(px) => with_kv(inp.w, inp.params, px, false, |kv| match kv {
            Pools::Keyed(kv) => run_prefix(inp, features, px, kv),
            Pools::Allocator(kv) => run_prefix(inp, features, px, kv),
        }),
    }
}

fn run_prefix<K: PrefixKv>(inp: &Inputs<'_>, features: &Features<'_>, px: &PrefixOptions<'_>, kv: K) -> CoreResult<TwinOutput> {
    let mut pool = PrefixPool::new(inp.w, inp.params, px.host, kv);
    let (out, spec, queues) = run_on(inp, features, &mut pool)?;
    Ok(TwinOutput { out, prefix: Some(pool.finish()), spec, queues })
}

type LoopOutput = (ContinuousOutput, Option<SpecOutput>, Option<StepQueues>);

fn run_on<P: TwinPool>(inp: &Inputs<'_>, features: &Features<'_>, pool: &mut P) -> CoreResult<LoopOutput> {
    let Inputs { w, params, .. } = *inp;
    let (mut rec, mut books) = Books::start(inp);
    let mut hooks = Twin {
        ol: w.output_len,
        spec: features.spec.map(|sp| (sp, SpecOutput::empty(w.len()))),
        guessed: Vec::new(),
        queues: features.queues.then(StepQueues::default),
    };
    run_steps(pool, &mut hooks, params, w, &mut rec, &mut books)?;
    Ok((books.finish(rec), hooks.spec.map(|(_, so)| so), hooks.queues))
}

/// [`run`] with no feature on.
pub fn run_per_step(inp: &Inputs<'_>) -> CoreResult<ContinuousOutput> {
    run(inp, &Features::default()).map(|o| o.out)
}

/// [`run`] with the queues recorded after each step ([`super::trace`]).
pub fn run_recorded(inp: &Inputs<'_>) -> CoreResult<(ContinuousOutput, StepQueues)> {
    let o = run(inp, &Features { queues: true, ..Features::default() })?;
    Ok((o.out, o.queues.expect("recording was on")))
}

/// [`run`] with speculative decoding (see the module docs).
pub fn run_speculative(inp: &Inputs<'_>, spec: &Speculation<'_>) -> CoreResult<(ContinuousOutput, SpecOutput)> {
    let o = run(inp, &Features { spec: Some(spec), ..Features::default() })?;
    Ok((o.out, o.spec.expect("speculation was on")))
}

/// The twin's own part around the rules, whatever the pool: speculation and the record.
struct Twin<'a, 's> {
    ol: &'a [i64],
    spec: Option<(&'a Speculation<'s>, SpecOutput)>,
    /// per batch entry with speculation: (guesses, kept)
    guessed: Vec<(i64, i64)>,
    /// `servelab trace`'s record, when asked
    queues: Option<StepQueues>,
}

impl<P: TwinPool> StepHooks<P> for Twin<'_, '_> {
    fn extra_s(&mut self, pool: &mut P, batch: &mut [Entry], budget: i64) -> f64 {
        let copies_s = pool.copies_s();
        match self.spec.as_mut() {
            Some((sp, so)) => copies_s + speculate(sp, pool, self.ol, budget, batch, &mut self.guessed, so),
            None => copies_s,
        }
    }

    #[inline]
    fn sample(&mut self, pool: &mut P, rec: &mut Recorder<'_>, e: usize, r: usize, nt: i64, end: f64) -> CoreResult<bool> {
        let sampled = match self.guessed.get(e) {
            Some(&guess) => {
                pool.keep_guesses(r, guess)?;
                1 + guess.1
            }
            None => 1,
        };
        pool.end_entry(rec, r, nt, sampled, self.ol[r], end)
    }

    #[inline]
    fn done(&self, pool: &P, r: usize) -> bool {
        pool.is_done(r)
    }

    #[inline]
    fn end_step(&mut self, pool: &P, waiting: &VecDeque<usize>, running: &[usize]) {
        if let Some(q) = self.queues.as_mut() {
            q.record(waiting, running, |r| (pool.blocks_of(r), pool.generated(r)));
        }
    }
}

/// The speculative step on a planned batch: guesses for its decoding entries (widening them
/// to `1 + g` tokens), their verdicts into `guessed` (one per entry), and the draft's price.
#[allow(clippy::too_many_arguments)]
pub(super) fn speculate<P: TwinPool>(
    sp: &Speculation<'_>,
    pool: &P,
    ol: &[i64],
    mut budget: i64,
    batch: &mut [Entry],
    guessed: &mut Vec<(i64, i64)>,
    so: &mut SpecOutput,
) -> f64 {
    guessed.clear();
    let mut spare = pool.free_blocks();
    let bs = pool.block_size();
    // (context, guesses) of the entries that guess, for the draft's price
    let mut draft: Vec<(i64, i64)> = Vec::new();
    for (r, nt, decoding) in batch.iter_mut() {
        let (c, held) = pool.counts(*r);
        let generated = pool.generated(*r);
        let mut g = 0;
        if *decoding {
            g = sp.k.min(budget).min(ol[*r] - generated - 1).max(0);
            // `held` counts the slot rule 2 appended for this step's token
            while g > 0 && blocks_for(held + g, bs) - blocks_for(held, bs) > spare {
                g -= 1;
            }
            spare -= blocks_for(held + g, bs) - blocks_for(held, bs);
            budget -= g;
            so.spec_steps[*r] += 1;
        }
        let kept = sp.kept_guesses(*r, ol[*r] - generated, g);
        if g > 0 {
            draft.push((c, g));
            so.spec_proposed[*r] += g;
            so.spec_accepted[*r] += kept;
        }
        *nt += g;
        guessed.push((g, kept));
    }
    let mut total = 0.0;
    let most = draft.iter().map(|&(_, g)| g).max().unwrap_or(0);
    for j in 0..most {
        let (mut count, mut ctx) = (0i64, 0i128);
        for &(c, g) in &draft {
            if g > j {
                count += 1;
                ctx += (c + j) as i128;
            }
        }
        total += price_shape(sp.draft, &StepShape::decode(count, ctx, count)).time_s;
    }
    so.draft_busy_s += total;
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::continuous::ContinuousParams;
    use crate::sim::test_util::{self, price, pricer};
    use crate::sim::Workload;

    fn params(budget: i64, bs: i64, blocks: i64) -> ContinuousParams {
        test_util::params(8, budget, bs, blocks, false)
    }

    /// A perfect draft (a = 1) at k = 3: a prefill, then 1 + 3 tokens per step, none guessed at
    /// the end;
    /// every step costs the verify forward plus the draft's guesses.
    #[test]
    fn a_perfect_draft_by_hand() {
        let w = Workload::new(&[0.0], &[8], &[10]).unwrap();
        let pr = pricer();
        let sp = Speculation { k: 3, acceptance: &[1.0], seed: 0, draft: &pr };
        let (o, s) = run_speculative(&Inputs::new(&pr, &w, &params(64, 4, 16), false, true), &sp).unwrap();
        let l = o.batch_log.unwrap();
        assert_eq!(l.new_tokens, vec![8, 4, 4, 1]);
        assert_eq!(l.context_len, vec![0, 8, 12, 16]);
        assert_eq!((s.spec_proposed[0], s.spec_accepted[0], s.spec_steps[0]), (6, 6, 3));
        let draft: f64 = [8, 9, 10, 12, 13, 14].iter().map(|&c| price(&[(1, c)])).sum();
        assert!((s.draft_busy_s - draft).abs() < 1e-12, "{} vs {draft}", s.draft_busy_s);
    }

    /// k = 0 is the plain loop, bit for bit; a = 0 keeps nothing but pays for the guesses.
    #[test]
    fn k_zero_is_the_plain_run() {
        let (a, p, l) = ([0.0, 0.0, 0.001, 0.002], [30, 5, 17, 9], [12, 40, 3, 25]);
        let w = Workload::new(&a, &p, &l).unwrap();
        let pr = pricer();
        for prm in [params(64, 4, 20), params(40, 1, 60), params(128, 16, 5)] {
            let want = run_per_step(&Inputs::new(&pr, &w, &prm, true, true)).unwrap();
            let zero = Speculation { k: 0, acceptance: &[0.5; 4], seed: 3, draft: &pr };
            let (got, s) = run_speculative(&Inputs::new(&pr, &w, &prm, true, true), &zero).unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}")); // NaN times: compare the bits as text
            assert_eq!(s.draft_busy_s, 0.0);
            let none = Speculation { k: 4, acceptance: &[0.0; 4], seed: 3, draft: &pr };
            let (got, s) = run_speculative(&Inputs::new(&pr, &w, &prm, false, false), &none).unwrap();
            assert_eq!(s.spec_accepted, vec![0; 4]);
            assert!(got.sim.busy_s > want.sim.busy_s);
        }
    }

    /// One draw per step keeps guesses with the law of one draw per guess stopped at the first
    /// rejection: `P(kept >= j) = a^j` for `j <= g` (within 4 standard errors over 200,000
    /// steps), nothing at `a = 0`, everything at `a = 1`, the same count for the same
    /// (seed, request, index), and the first guess judged by `u < a`.
    #[test]
    fn one_draw_per_step_has_the_law_of_a_draw_per_guess() {
        let pr = pricer();
        let rates = [0.0, 1.0, 0.3, 0.8, 0.999];
        let sp = Speculation { k: 4, acceptance: &rates, seed: 0x9e37_79b9, draft: &pr };
        let steps = 200_000i64;
        for (r, &a) in rates.iter().enumerate() {
            let mut at_least = [0i64; 5]; // steps that kept at least j guesses
            for index in 0..steps {
                let kept = sp.kept_guesses(r, index, 4);
                assert_eq!(kept, sp.kept_guesses(r, index, 4));
                assert_eq!(kept >= 1, sp.uniform(r, index) < a);
                assert_eq!(sp.kept_guesses(r, index, 2), kept.min(2)); // fewer guesses: the same draw, cut
                (0..=kept as usize).for_each(|j| at_least[j] += 1);
            }
            for (j, &count) in at_least.iter().enumerate() {
                let want = a.powi(j as i32);
                let got = count as f64 / steps as f64;
                let se = (want * (1.0 - want) / steps as f64).sqrt();
                assert!((got - want).abs() <= 4.0 * se + 1e-12, "a {a} j {j}: {got} vs {want}");
            }
        }
        assert_eq!(sp.kept_guesses(0, 7, 1000), 0);
        assert_eq!(sp.kept_guesses(1, 7, 1000), 1000);
        assert_eq!(sp.kept_guesses(3, 7, 0), 0);
    }

    #[test]
    fn bad_options_name_the_value() {
        let w = Workload::new(&[0.0], &[8], &[10]).unwrap();
        let pr = pricer();
        for (k, acc, msg) in [
            (-1, vec![0.5], "k must be an integer in [0, 65536], got -1"),
            (2, vec![0.5, 0.5], "acceptance must have one entry per request (1), got 2"),
            (2, vec![f64::NAN], "acceptance[0] must be a number in [0, 1], got nan"),
        ] {
            let sp = Speculation { k, acceptance: &acc, seed: 0, draft: &pr };
            let e = run_speculative(&Inputs::new(&pr, &w, &params(64, 4, 16), false, false), &sp).unwrap_err().to_string();
            assert!(e.starts_with(msg), "{e}");
        }
    }
}
