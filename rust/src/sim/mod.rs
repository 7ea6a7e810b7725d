//! The serving simulator (lecture §4.5): requests arrive, a policy decides what the GPU runs in
//! each forward step, and the paper GPU (`cost.rs`) says how long each step takes. The clock
//! jumps from step to step; no wall time passes.
//!
//! One file per policy: [`batch1`] (one request at a time, FCFS) and [`static_batching`]
//! (start a batch when `batch_size` wait or the oldest has waited `max_wait_s`, run it until its
//! longest request ends), [`continuous`] (a folder: its event-driven, per-step and prefix-caching loops). The rules of
//! a continuous-batching step are carried out once, in `continuous/rules.rs`, for those three
//! loops.
//!
//! # What a step costs: the context convention
//!
//! Every step is priced as a list of sequences `(new_tokens, context_len)`, where `context_len`
//! is the number of tokens already in that sequence's KV cache when the step starts:
//!
//! * **prefill** of a prompt of `p` tokens is `(p, 0)`; it writes `p` tokens of KV and produces
//!   output token 1 (the first token is known at the end of the prefill step);
//! * **decode step `s`** (`s = 1 .. L_o - 1`) feeds output token `s` and produces token `s + 1`:
//!   `(1, p + s - 1)`. After it the cache holds `p + s` tokens. A request of `L_o` output tokens
//!   therefore takes one prefill and `L_o - 1` decode steps; its last token is never fed back
//!   (§2.1: 8 tokens = 1 prefill + 7 decodes).
//! * **riding along** (static batching with `ride_along = true`): a request whose tokens are all
//!   out keeps computing padding tokens until the batch ends, exactly as if it were still
//!   decoding: at decode step `s` it is `(1, p + s - 1)` like everyone else, so its KV keeps
//!   growing. With `ride_along = false` (exercise 5) it drops out of the step: the step holds
//!   only the requests with `L_o - 1 >= s` (the lecture's `works`), but its seat stays empty
//!   until the batch ends.
//!
//! The step trace's `kv_tokens` is the KV held by the sequences that computed in the step,
//! after it: `sum(context_len + new_tokens)`. Batch 1 and static batching do not model a KV
//! memory limit (the lecture's code does not either); `peak_kv_tokens` tells how close a run came.
//!
//! # Floating point
//!
//! A step's totals (tokens, sequences, attention keys, context tokens) are summed as integers
//! and converted to `f64` once; times accumulate as `t = t + step_time` in step order. The
//! course copy's pure-Python twin of the simulator performs the same IEEE-754 operations in the
//! same order, so the two agree bit for bit.

pub mod admission;
pub mod batch1;
pub mod continuous;
pub mod data_parallel;
pub mod decode_pool;
pub mod disaggregated;
pub mod fixed_service;
pub mod pool;
pub mod router;
pub mod static_batching;

use crate::cost::{fmt_f64, Pricer, StepCost};
use crate::error::{CoreError, CoreResult};

/// Largest prompt or output length of one request (16,777,216 tokens): far beyond any model's
/// context, small enough that a bad length can never make a run take forever or overflow.
pub const MAX_REQUEST_TOKENS: i64 = 1 << 24;

/// The requests of a run, as parallel columns, validated.
#[derive(Debug, Clone, Copy)]
pub struct Workload<'a> {
    pub arrival_s: &'a [f64],
    pub prompt_len: &'a [i64],
    pub output_len: &'a [i64],
}

impl<'a> Workload<'a> {
    /// Checks the columns: equal lengths; arrival times finite, `>= 0` and sorted; prompt and
    /// output lengths in `[1, MAX_REQUEST_TOKENS]`. The error names the first bad value.
    pub fn new(arrival_s: &'a [f64], prompt_len: &'a [i64], output_len: &'a [i64]) -> CoreResult<Self> {
        let n = arrival_s.len();
        if prompt_len.len() != n || output_len.len() != n {
            return Err(CoreError::invalid(format!(
                "arrival_s, prompt_len and output_len must have the same length, got {}, {} and {}",
                n,
                prompt_len.len(),
                output_len.len()
            )));
        }
        check_arrivals(arrival_s)?;
        for (name, col) in [("prompt_len", prompt_len), ("output_len", output_len)] {
            if let Some((i, v)) = col.iter().enumerate().find(|(_, &v)| !(1..=MAX_REQUEST_TOKENS).contains(&v)) {
                return Err(CoreError::invalid(format!(
                    "{name}[{i}] must be an integer in [1, {MAX_REQUEST_TOKENS}], got {v}"
                )));
            }
        }
        Ok(Workload { arrival_s, prompt_len, output_len })
    }

    pub fn len(&self) -> usize {
        self.arrival_s.len()
    }

    pub fn is_empty(&self) -> bool {
        self.arrival_s.is_empty()
    }
}

/// Arrival times must be finite, `>= 0` and sorted; the error names the first bad value.
pub fn check_arrivals(arrival_s: &[f64]) -> CoreResult<()> {
    for (i, &a) in arrival_s.iter().enumerate() {
        if !(a.is_finite() && a >= 0.0) {
            return Err(CoreError::invalid(format!(
                "arrival_s[{i}] must be a finite number >= 0, got {}",
                fmt_f64(a)
            )));
        }
        if i > 0 && a < arrival_s[i - 1] {
            return Err(CoreError::invalid(format!(
                "arrival_s must be sorted, got arrival_s[{}]={} after arrival_s[{}]={}",
                i,
                fmt_f64(a),
                i - 1,
                fmt_f64(arrival_s[i - 1])
            )));
        }
    }
    Ok(())
}

/// One row per forward step (filled only when asked for: a long run has millions of steps).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTrace {
    /// When the step starts.
    pub start_s: Vec<f64>,
    /// How long it takes (the paper GPU's price).
    pub step_s: Vec<f64>,
    /// Sequences that compute in the step (riders included).
    pub batch_size: Vec<i64>,
    /// New tokens computed in the step (prompt tokens of a prefill, one per decoding sequence).
    pub tokens: Vec<i64>,
    /// Sequences whose prefill ends in this step (each produces its first output token).
    pub n_prefill: Vec<i64>,
    /// Sequences that produce a real (not padding) later output token in this step.
    pub n_decode: Vec<i64>,
    /// KV tokens held by the sequences of the step, after it.
    pub kv_tokens: Vec<i64>,
}

/// Per-request timestamps and run totals. Rejected requests have NaN times and batch `-1`.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOutput {
    pub start_s: Vec<f64>,
    pub first_token_s: Vec<f64>,
    pub finish_s: Vec<f64>,
    pub rejected: Vec<bool>,
    /// Which batch served the request (batch 1: its rank among the served requests).
    pub batch_id: Vec<i64>,
    /// Sum of step times: time the GPU computed.
    pub busy_s: f64,
    /// Sum of the FLOPs of every step.
    pub flops: f64,
    pub n_steps: u64,
    pub peak_kv_tokens: i64,
    pub trace: Option<StepTrace>,
}

/// What one step holds, summed over its sequences (see the module docs for the convention).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepShape {
    pub seqs: i64,
    pub tokens: i64,
    /// sum over sequences of `n * c + n * (n + 1) / 2`
    pub keys: i128,
    /// sum over sequences of `c`
    pub ctx_tokens: i128,
    pub n_prefill: i64,
    pub n_decode: i64,
}

impl StepShape {
    /// `count` sequences decoding one token each on top of `ctx_sum` cached tokens in total,
    /// `useful` of which produce a real output token.
    pub fn decode(count: i64, ctx_sum: i128, useful: i64) -> Self {
        StepShape {
            seqs: count,
            tokens: count,
            keys: ctx_sum + count as i128,
            ctx_tokens: ctx_sum,
            n_prefill: 0,
            n_decode: useful,
        }
    }

    /// Adds the prefill of one prompt of `p` tokens onto an empty cache.
    pub fn add_prefill(&mut self, p: i64) {
        let p128 = p as i128;
        self.seqs += 1;
        self.tokens += p;
        self.keys += p128 * (p128 + 1) / 2;
        self.n_prefill += 1;
    }
}

/// The price of one step. Admission control (`admission.rs`) prices its estimated steps with
/// this very function, so that an exact estimate reproduces the simulator's clock bit for bit.
#[inline]
pub(crate) fn price_shape(pricer: &Pricer, shape: &StepShape) -> StepCost {
    pricer.price_totals(shape.tokens, shape.seqs, to_f64(shape.keys), to_f64(shape.ctx_tokens))
}

/// `x as f64`, through `i64` when it fits: both casts round to nearest (ties to even), so the
/// bits are the same, and the 64-bit one is a single instruction where the 128-bit one is a
/// library call (6% of a long continuous-batching run). `black_box` keeps the optimizer from
/// folding the two branches back into the library call (they are equal, so it would).
#[inline]
fn to_f64(x: i128) -> f64 {
    match i64::try_from(x) {
        Ok(v) => std::hint::black_box(v) as f64,
        Err(_) => x as f64,
    }
}

/// Runs the clock: prices steps, accumulates totals, and keeps the trace.
pub(crate) struct Recorder<'p> {
    pricer: &'p Pricer,
    out: SimOutput,
    /// with [`Recorder::track_finished`]: requests finished since the last drain
    finished: Option<Vec<u32>>,
    /// requests started so far: the next one's `batch_id`
    n_started: i64,
}

impl<'p> Recorder<'p> {
    pub(crate) fn new(pricer: &'p Pricer, n: usize, trace: bool) -> Self {
        Recorder {
            pricer,
            out: SimOutput {
                start_s: vec![f64::NAN; n],
                first_token_s: vec![f64::NAN; n],
                finish_s: vec![f64::NAN; n],
                rejected: vec![false; n],
                batch_id: vec![-1; n],
                busy_s: 0.0,
                flops: 0.0,
                n_steps: 0,
                peak_kv_tokens: 0,
                trace: trace.then(StepTrace::default),
            },
            finished: None,
            n_started: 0,
        }
    }

    /// Request `r` is admitted at `t`: its first admission sets `start_s` and `batch_id`, the
    /// rank of first admission (a recompute after preemption keeps both).
    #[inline]
    pub(crate) fn start(&mut self, r: usize, t: f64) {
        let o = &mut self.out;
        if o.start_s[r].is_nan() {
            o.start_s[r] = t;
            o.batch_id[r] = self.n_started;
            self.n_started += 1;
        }
    }

    /// Request `r` samples a token at `end`: the first sets `first_token_s`, the `last` one
    /// `finish_s`.
    #[inline]
    pub(crate) fn sampled(&mut self, r: usize, end: f64, last: bool) {
        if self.out.first_token_s[r].is_nan() {
            self.out.first_token_s[r] = end;
        }
        if last {
            self.set_finish(r, end);
        }
    }

    /// From now on, list the requests that finish, for [`Recorder::drain_finished`] (what a
    /// router needs of a resumable card; a lone run does not pay for the list).
    pub(crate) fn track_finished(&mut self) {
        self.finished.get_or_insert_with(Vec::new);
    }

    /// Request `r` (an index below `u32::MAX`) finishes at `end`.
    #[inline]
    pub(crate) fn set_finish(&mut self, r: usize, end: f64) {
        self.out.finish_s[r] = end;
        if let Some(list) = self.finished.as_mut() {
            list.push(r as u32);
        }
    }

    /// Calls `f(request, finish_s)` for each request finished since the last call, in the
    /// order they finished.
    pub(crate) fn drain_finished(&mut self, mut f: impl FnMut(usize, f64)) {
        if let Some(list) = self.finished.as_mut() {
            for r in list.drain(..) {
                f(r as usize, self.out.finish_s[r as usize]);
            }
        }
    }

    /// Makes room for requests up to `n` (a resumable card is handed requests as it runs):
    /// the new ones start as a fresh recorder's do.
    pub(crate) fn grow(&mut self, n: usize) {
        let o = &mut self.out;
        if n > o.start_s.len() {
            o.start_s.resize(n, f64::NAN);
            o.first_token_s.resize(n, f64::NAN);
            o.finish_s.resize(n, f64::NAN);
            o.rejected.resize(n, false);
            o.batch_id.resize(n, -1);
        }
    }

    /// Executes one step starting at `now`; returns when it ends.
    pub(crate) fn step(&mut self, now: f64, shape: StepShape) -> f64 {
        self.step_plus(now, shape, 0.0) // + 0.0 changes no bit of a step's time
    }

    /// [`Self::step`] plus `extra_s` seconds of other work in the step (a speculative step's
    /// draft model, a tiered cache's copies back from the host): one step time `priced +
    /// extra_s` in the clock, `busy_s` and the trace's `step_s`, as the engine adds them.
    pub(crate) fn step_plus(&mut self, now: f64, shape: StepShape, extra_s: f64) -> f64 {
        let cost: StepCost = price_shape(self.pricer, &shape);
        let step_s = cost.time_s + extra_s;
        let o = &mut self.out;
        o.busy_s += step_s;
        o.flops += cost.flops;
        o.n_steps += 1;
        let kv = (shape.ctx_tokens + shape.tokens as i128).min(i64::MAX as i128) as i64;
        o.peak_kv_tokens = o.peak_kv_tokens.max(kv);
        if let Some(t) = o.trace.as_mut() {
            t.start_s.push(now);
            t.step_s.push(step_s);
            t.batch_size.push(shape.seqs);
            t.tokens.push(shape.tokens);
            t.n_prefill.push(shape.n_prefill);
            t.n_decode.push(shape.n_decode);
            t.kv_tokens.push(kv);
        }
        now + step_s
    }

    pub(crate) fn out(&mut self) -> &mut SimOutput {
        &mut self.out
    }

    pub(crate) fn finish(self) -> SimOutput {
        self.out
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use crate::cost::tests::{h100, llama3_8b};
    use crate::cost::{Efficiency, Pricer};
    use crate::sim::continuous::{ContinuousOutput, ContinuousParams};
    use crate::sim::{batch1, SimOutput, Workload};

    /// Llama-3-8B on an H100 with the lecture's efficiency.
    pub fn pricer() -> Pricer {
        Pricer::new(&llama3_8b(), &h100(), &Efficiency::default()).unwrap()
    }

    /// A card of `seqs` seats, a budget of `budget` tokens, `blocks` blocks of `bs` tokens.
    pub fn params(seqs: i64, budget: i64, bs: i64, blocks: i64, chunked: bool) -> ContinuousParams {
        ContinuousParams {
            max_num_seqs: seqs,
            max_num_batched_tokens: budget,
            block_size: bs,
            num_blocks: blocks,
            chunked_prefill: chunked,
        }
    }

    /// A small card: 8 seats, a 512-token budget, 64 blocks of 16 tokens, no chunked prefill.
    pub fn card_params() -> ContinuousParams {
        params(8, 512, 16, 64, false)
    }

    /// A batch log's steps, each a list of `(request_id, new_tokens, context_len)`.
    pub fn steps(o: &ContinuousOutput) -> Vec<Vec<(i64, i64, i64)>> {
        let l = o.batch_log.as_ref().unwrap();
        l.offsets
            .windows(2)
            .map(|w| (w[0] as usize..w[1] as usize).map(|k| (l.request_id[k], l.new_tokens[k], l.context_len[k])).collect())
            .collect()
    }

    /// Five requests of mixed lengths (a 4,096-token prompt, a 500-token output, two arriving
    /// together) run by `policy` and by batch 1 (FCFS, traced): `(policy's run, batch 1's)`, for
    /// the policies that are batch 1 when they have one seat.
    pub fn with_batch1(policy: impl Fn(&Workload<'_>) -> SimOutput) -> (SimOutput, SimOutput) {
        let (a, p, l) = ([0.0, 0.1, 0.1, 3.0, 3.5], [300, 7, 1, 4096, 12], [20, 1, 500, 3, 9]);
        let w = Workload::new(&a, &p, &l).unwrap();
        (policy(&w), batch1::run(&pricer(), &w, &mut batch1::AcceptAll, true))
    }

    /// `1 + rnd(most)` requests arriving `gap_s * rnd(gaps)` apart, with prompts of
    /// `1 + rnd(prompt)` tokens and outputs of `min_output + rnd(output)`: the random workloads
    /// of the tests that hold two loops equal.
    pub fn random_requests(
        rnd: &mut impl FnMut(u64) -> u64,
        most: u64,
        (gaps, gap_s): (u64, f64),
        prompt: u64,
        (min_output, output): (i64, u64),
    ) -> (Vec<f64>, Vec<i64>, Vec<i64>) {
        let n = 1 + rnd(most) as usize;
        let mut t = 0.0;
        let a: Vec<f64> = (0..n).map(|_| { t += rnd(gaps) as f64 * gap_s; t }).collect();
        let p: Vec<i64> = (0..n).map(|_| 1 + rnd(prompt) as i64).collect();
        let l: Vec<i64> = (0..n).map(|_| min_output + rnd(output) as i64).collect();
        (a, p, l)
    }

    /// A seeded xorshift64 for the tests' pseudo-random cases: `rnd(k)` is a number in `0..k`.
    pub fn rng(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |k| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % k
        }
    }

    /// The price of one step given as `(new_tokens, context_len)` per sequence, through the
    /// checked path of `cost.rs`.
    pub fn price(batch: &[(i64, i64)]) -> f64 {
        let p = pricer();
        p.price(batch.iter().map(|&(n, c)| crate::cost::SeqGroup::one(n, c)), |k| format!("batch[{k}]."))
            .unwrap()
            .time_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_f64_rounds_as_the_128_bit_cast() {
        let mut x = 1i128;
        for _ in 0..120 {
            for d in [-3i128, -1, 0, 1, 2, 5] {
                for v in [x + d, -(x + d)] {
                    assert_eq!(to_f64(v).to_bits(), (v as f64).to_bits(), "{v}");
                }
            }
            x = x * 3 / 2 + 7;
        }
    }

    #[test]
    fn workload_errors_name_the_value() {
        let e = Workload::new(&[0.0, -1.0], &[1, 1], &[1, 1]).unwrap_err();
        assert_eq!(e.to_string(), "arrival_s[1] must be a finite number >= 0, got -1.0");
        let e = Workload::new(&[f64::NAN], &[1], &[1]).unwrap_err();
        assert_eq!(e.to_string(), "arrival_s[0] must be a finite number >= 0, got nan");
        let e = Workload::new(&[2.0, 1.0], &[1, 1], &[1, 1]).unwrap_err();
        assert_eq!(e.to_string(), "arrival_s must be sorted, got arrival_s[1]=1.0 after arrival_s[0]=2.0");
        let e = Workload::new(&[0.0], &[0], &[1]).unwrap_err();
        assert_eq!(e.to_string(), format!("prompt_len[0] must be an integer in [1, {MAX_REQUEST_TOKENS}], got 0"));
        let e = Workload::new(&[0.0], &[1], &[-3]).unwrap_err();
        assert!(e.to_string().starts_with("output_len[0] must be an integer"));
        let e = Workload::new(&[0.0], &[1, 2], &[1]).unwrap_err();
        assert!(e.to_string().contains("same length"));
        assert!(Workload::new(&[], &[], &[]).unwrap().is_empty());
    }
}
