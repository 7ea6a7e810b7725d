//! Policy 3 of §4.5: continuous batching (Orca's iteration-level scheduling) with a paged KV
//! pool (vLLM's PagedAttention, §2.4 and §3.5), optional chunked prefill and preemption by
//! recompute.
//!
//! The scheduling rules are exactly those of `servelab.engine` (its package docstring numbers
//! them 1-7), so that on the same requests this simulator and the engine, which runs real
//! tokens on tiny_llm, make the same batches step for step. In short, a step starting at `t`:
//!
//! 1. requests with `arrival_s <= t` arrive in order; one whose `need = prompt + output - 1`
//!    tokens need more than `num_blocks` blocks, or (without chunked prefill) more than
//!    `max_num_batched_tokens` tokens, is rejected at once with a reason (it could never run:
//!    never a hang); the others join the back of the waiting queue;
//! 2. running requests, oldest admitted first, while the token budget lasts: a prefilling one
//!    (chunked prefill) takes what is left of its prompt, capped by the budget; a decoding one
//!    takes 1 token, which first needs a KV slot;
//! 3. if that slot needs a new block and none is free, the newest running request is preempted
//!    (its blocks freed, its KV forgotten, front of the waiting queue) until the slot is free or
//!    the current request was itself preempted;
//! 4. only in a step without preemption: strict FCFS admission while seats
//!    (`max_num_seqs`), budget and blocks last; a request needs blocks for all its tokens
//!    (prompt plus the tokens generated before a preemption) and, without chunked prefill, all
//!    of them within the budget;
//! 5. the step is priced by the paper GPU ([`Pricer`], the same numbers as
//!    `hw_model.step_cost`);
//! 6. (prefix-cache readiness: not modelled, see below);
//! 7. a request whose tokens are all computed samples one; the first sets `first_token_s` (the
//!    end of the step); the last frees its blocks at once.
//!
//! When nothing is waiting or running, the clock jumps to the next arrival (the engine logs an
//! idle step of cost 0 there instead; the batches are the same).
//!
//! # The KV pool, by counts
//!
//! Without prefix caching, `blocks.rs`'s allocator decides success or failure from counts
//! alone: `allocate` of `n` tokens needs `ceil(n / block_size)` free blocks, `append` needs one
//! new block exactly when the sequence's token count is a multiple of `block_size`, and `free`
//! returns every block of the sequence. [`KvCounts`] keeps just those counts (no token ids, no
//! block tables), so a run of a million requests needs no memory per token; the test
//! `counts_agree_with_the_block_allocator` replays the same operations on the real allocator.
//! There is no prefix caching here: the simulator knows lengths, not tokens, so it cannot
//! tell which prompts share a prefix.
//!
//! # Memory
//!
//! Per request a fixed number of words (its state and its output columns); the waiting queue
//! and the running list hold indices. Per-step data (the trace, the batch log) is kept only
//! when asked for.

use std::collections::VecDeque;

use super::{Recorder, SimOutput, StepShape, Workload};
use crate::blocks::{MAX_BLOCK_SIZE, MAX_NUM_BLOCKS};
use crate::cost::Pricer;
use crate::error::{CoreError, CoreResult};

/// `reject_code`: why a request was rejected (0: it was not).
pub const REJECT_NONE: i8 = 0;
/// It needs more KV blocks than the whole pool holds.
pub const REJECT_BLOCKS: i8 = 1;
/// Without chunked prefill, a (re)prefill of all its tokens would exceed the token budget.
pub const REJECT_BUDGET: i8 = 2;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContinuousParams {
    pub max_num_seqs: i64,
    pub max_num_batched_tokens: i64,
    pub block_size: i64,
    pub num_blocks: i64,
    pub chunked_prefill: bool,
}

impl ContinuousParams {
    pub fn validate(&self) -> CoreResult<()> {
        for (name, v, hi) in [
            ("max_num_seqs", self.max_num_seqs, i64::MAX),
            ("max_num_batched_tokens", self.max_num_batched_tokens, i64::MAX),
            ("block_size", self.block_size, MAX_BLOCK_SIZE),
            ("num_blocks", self.num_blocks, MAX_NUM_BLOCKS),
        ] {
            if !(1..=hi).contains(&v) {
                return Err(CoreError::invalid(format!("{name} must be an integer in [1, {hi}], got {v}")));
            }
        }
        Ok(())
    }

    /// Rule 1: why a request of `prompt` and `output` tokens can never run (or `REJECT_NONE`).
    pub fn unservable(&self, prompt: i64, output: i64) -> i8 {
        let need = prompt + output - 1; // the last token is never fed back (§2.1)
        if blocks_for(need, self.block_size) > self.num_blocks {
            REJECT_BLOCKS
        } else if !self.chunked_prefill && need > self.max_num_batched_tokens {
            REJECT_BUDGET
        } else {
            REJECT_NONE
        }
    }
}

/// Blocks that hold `tokens` slots (`tokens >= 0`, `block_size >= 1`): `ceil(tokens / bs)`.
fn blocks_for(tokens: i64, block_size: i64) -> i64 {
    (tokens + block_size - 1) / block_size
}

/// The block allocator of `blocks.rs` without prefix caching, reduced to what decides success:
/// how many blocks are free, and how many token slots each sequence holds.
#[derive(Debug, Clone)]
pub struct KvCounts {
    block_size: i64,
    num_blocks: i64,
    free: i64,
}

impl KvCounts {
    pub fn new(num_blocks: i64, block_size: i64) -> Self {
        KvCounts { block_size, num_blocks, free: num_blocks }
    }

    /// `allocate` of `tokens` slots: false (and nothing changes) if the pool is short.
    pub fn allocate(&mut self, tokens: i64) -> bool {
        let need = blocks_for(tokens, self.block_size);
        if need > self.free {
            return false;
        }
        self.free -= need;
        true
    }

    /// Whether `append` to a sequence holding `held` slots succeeds now.
    pub fn can_append(&self, held: i64) -> bool {
        held % self.block_size != 0 || self.free > 0
    }

    /// `append` to a sequence holding `held` slots (the caller checked `can_append`).
    pub fn append(&mut self, held: i64) {
        if held % self.block_size == 0 {
            self.free -= 1;
        }
    }

    /// `free` of a sequence holding `held` slots.
    pub fn free(&mut self, held: i64) {
        self.free += blocks_for(held, self.block_size);
    }

    pub fn num_free_blocks(&self) -> i64 {
        self.free
    }

    pub fn blocks_used(&self) -> i64 {
        self.num_blocks - self.free
    }
}

/// The batches, step by step, in compressed rows: step `s` holds entries
/// `offsets[s]..offsets[s + 1]`, each `(request_id, new_tokens, context_len)` as in
/// `servelab.engine`'s `batch_log()`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchLog {
    pub offsets: Vec<i64>,
    pub request_id: Vec<i64>,
    pub new_tokens: Vec<i64>,
    pub context_len: Vec<i64>,
}

/// Trace columns of this policy, one row per step (beside [`super::StepTrace`]'s).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepExtra {
    /// KV blocks in use at the end of the step.
    pub kv_blocks: Vec<i64>,
    /// Requests preempted in the step (rule 3).
    pub n_preempted: Vec<i64>,
    /// Requests admitted in the step (rule 4).
    pub n_admitted: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ContinuousOutput {
    pub sim: SimOutput,
    pub reject_code: Vec<i8>,
    pub n_preemptions: Vec<i64>,
    /// Total preemptions of the run.
    pub preemptions: u64,
    /// With the trace: this policy's own columns.
    pub trace_extra: Option<StepExtra>,
    pub peak_kv_blocks: i64,
    pub batch_log: Option<BatchLog>,
}

/// The live state of one request (one per request: memory stays linear).
#[derive(Debug, Clone, Copy, Default)]
struct Live {
    /// prompt plus the tokens generated so far
    tokens: i64,
    /// tokens whose KV is in the pool
    computed: i64,
    /// token slots the pool holds for it (0 while waiting)
    held: i64,
    generated: i64,
}

/// Runs continuous batching over a validated workload.
pub fn run(
    pricer: &Pricer,
    w: &Workload<'_>,
    params: &ContinuousParams,
    trace: bool,
    batch_log: bool,
) -> CoreResult<ContinuousOutput> {
    params.validate()?;
    let n = w.len();
    let (a, pl, ol) = (w.arrival_s, w.prompt_len, w.output_len);
    let mut rec = Recorder::new(pricer, n, trace);
    let mut reject_code = vec![REJECT_NONE; n];
    let mut n_preemptions = vec![0i64; n];
    let mut extra = trace.then(StepExtra::default);
    let mut log = batch_log.then(|| BatchLog { offsets: vec![0], ..Default::default() });
    let mut live: Vec<Live> = pl.iter().map(|&p| Live { tokens: p, ..Default::default() }).collect();
    let mut kv = KvCounts::new(params.num_blocks, params.block_size);
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let mut running: Vec<usize> = Vec::new();
    // (request, new tokens, decoding?) in batch order
    let mut batch: Vec<(usize, i64, bool)> = Vec::new();
    let (mut preemptions, mut peak_blocks) = (0u64, 0i64);
    let mut next = 0; // first request not arrived yet
    let mut n_started = 0i64;
    let mut t = 0.0f64;
    loop {
        // rule 1: arrivals
        while next < n && a[next] <= t {
            let code = params.unservable(pl[next], ol[next]);
            if code == REJECT_NONE {
                waiting.push_back(next);
            } else {
                reject_code[next] = code;
                rec.out().rejected[next] = true;
            }
            next += 1;
        }
        if waiting.is_empty() && running.is_empty() {
            if next == n {
                break;
            }
            t = a[next]; // idle: jump to the next arrival
            continue;
        }

        // rules 2-3: running requests, oldest admitted first
        batch.clear();
        let mut budget = params.max_num_batched_tokens;
        let (mut n_preempted, mut n_admitted) = (0i64, 0i64);
        let mut i = 0;
        'running: while i < running.len() && budget > 0 {
            let r = running[i];
            let decoding = live[r].computed == live[r].held;
            let nt = if !decoding {
                (live[r].held - live[r].computed).min(budget) // a chunk of the prompt
            } else {
                while !kv.can_append(live[r].held) {
                    let victim = running.pop().expect("r itself is running");
                    kv.free(live[victim].held);
                    live[victim].computed = 0;
                    live[victim].held = 0;
                    n_preemptions[victim] += 1;
                    preemptions += 1;
                    waiting.push_front(victim);
                    n_preempted += 1;
                    if victim == r {
                        break 'running;
                    }
                }
                kv.append(live[r].held);
                live[r].held += 1;
                1
            };
            batch.push((r, nt, decoding));
            budget -= nt;
            i += 1;
        }

        // rule 4: admission, only in a step that preempted nobody. Without prefix caching the
        // guard never changes a batch: the front of the queue is then the last victim, the pool
        // had no free block before it was preempted, and the request it made room for took one
        // of the blocks it gave back, so it cannot fit anyway. Kept for the engine's rules
        // (with prefix caching a hit could make it fit); tests/test_sim_continuous.py shows it.
        if n_preempted == 0 {
            while budget > 0 && (running.len() as i64) < params.max_num_seqs {
                let Some(&r) = waiting.front() else { break };
                let tokens = live[r].tokens;
                if !params.chunked_prefill && tokens > budget {
                    break;
                }
                if !kv.allocate(tokens) {
                    break;
                }
                waiting.pop_front();
                running.push(r);
                live[r].held = tokens;
                live[r].computed = 0;
                let o = rec.out();
                if o.start_s[r].is_nan() {
                    // a recompute keeps its first start; `batch_id` is the rank of first admission
                    o.start_s[r] = t;
                    o.batch_id[r] = n_started;
                    n_started += 1;
                }
                let nt = if params.chunked_prefill { tokens.min(budget) } else { tokens };
                batch.push((r, nt, false));
                n_admitted += 1;
                budget -= nt;
            }
        }
        if batch.is_empty() {
            // rules 1-4 rule this out (see the engine's docstring); an error, never a hang
            return Err(CoreError::invalid(format!(
                "internal error: at t={t} work is left but nothing could be scheduled"
            )));
        }

        // rule 5: the step's shape and price
        let mut shape = StepShape::default();
        for &(r, nt, decoding) in &batch {
            let (nn, c) = (nt as i128, live[r].computed as i128);
            shape.seqs += 1;
            shape.tokens += nt;
            shape.keys += nn * c + nn * (nn + 1) / 2;
            shape.ctx_tokens += c;
            if decoding {
                shape.n_decode += 1;
            } else if live[r].computed + nt == live[r].held {
                shape.n_prefill += 1; // a (re)prefill ends: it samples a token
            }
            if let Some(l) = log.as_mut() {
                l.request_id.push(r as i64);
                l.new_tokens.push(nt);
                l.context_len.push(live[r].computed);
            }
        }
        if let Some(l) = log.as_mut() {
            l.offsets.push(l.request_id.len() as i64);
        }
        let end = rec.step(t, shape);

        // rule 7: sampling and leaving
        let mut finished = false;
        for &(r, nt, _) in &batch {
            let s = &mut live[r];
            s.computed += nt;
            if s.computed < s.held {
                continue; // a chunk that is not the prompt's last
            }
            s.generated += 1;
            s.tokens += 1;
            let o = rec.out();
            if o.first_token_s[r].is_nan() {
                o.first_token_s[r] = end;
            }
            if s.generated == ol[r] {
                o.finish_s[r] = end;
                kv.free(s.held);
                s.held = 0;
                finished = true;
            }
        }
        if finished {
            running.retain(|&r| live[r].generated < ol[r]);
        }
        peak_blocks = peak_blocks.max(kv.blocks_used());
        if let Some(x) = extra.as_mut() {
            x.kv_blocks.push(kv.blocks_used());
            x.n_preempted.push(n_preempted);
            x.n_admitted.push(n_admitted);
        }
        t = end;
    }
    Ok(ContinuousOutput {
        sim: rec.finish(),
        reject_code,
        n_preemptions,
        preemptions,
        trace_extra: extra,
        peak_kv_blocks: peak_blocks,
        batch_log: log,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::BlockAllocator;
    use crate::sim::test_util::{price, pricer};

    fn params(seqs: i64, budget: i64, bs: i64, blocks: i64, chunked: bool) -> ContinuousParams {
        ContinuousParams {
            max_num_seqs: seqs,
            max_num_batched_tokens: budget,
            block_size: bs,
            num_blocks: blocks,
            chunked_prefill: chunked,
        }
    }

    fn go(a: &[f64], p: &[i64], l: &[i64], prm: ContinuousParams) -> ContinuousOutput {
        let w = Workload::new(a, p, l).unwrap();
        run(&pricer(), &w, &prm, true, true).unwrap()
    }

    fn steps(o: &ContinuousOutput) -> Vec<Vec<(i64, i64, i64)>> {
        let l = o.batch_log.as_ref().unwrap();
        l.offsets
            .windows(2)
            .map(|w| (w[0] as usize..w[1] as usize).map(|k| (l.request_id[k], l.new_tokens[k], l.context_len[k])).collect())
            .collect()
    }

    /// Two requests by hand: r1 arrives while r0 decodes and joins the running batch at once.
    #[test]
    fn a_late_request_joins_the_running_batch() {
        let p = params(8, 256, 4, 16, false);
        let t1 = price(&[(5, 0)]);
        let o = go(&[0.0, t1], &[5, 11], &[4, 3], p);
        assert_eq!(
            steps(&o),
            vec![
                vec![(0, 5, 0)],
                vec![(0, 1, 5), (1, 11, 0)],
                vec![(0, 1, 6), (1, 1, 11)],
                vec![(0, 1, 7), (1, 1, 12)],
            ]
        );
        let t2 = t1 + price(&[(1, 5), (11, 0)]);
        let t3 = t2 + price(&[(1, 6), (1, 11)]);
        let t4 = t3 + price(&[(1, 7), (1, 12)]);
        assert_eq!(o.sim.start_s, vec![0.0, t1]);
        assert_eq!(o.sim.first_token_s, vec![t1, t2]);
        assert_eq!(o.sim.finish_s, vec![t4, t4]);
        let tr = o.sim.trace.as_ref().unwrap();
        assert_eq!(tr.n_prefill, vec![1, 1, 0, 0]);
        assert_eq!(tr.n_decode, vec![0, 1, 2, 2]);
        // blocks of 4: r0 holds 5..8 slots (2 blocks), r1 11..13 (3, then 4 blocks at 13)
        assert_eq!(o.trace_extra.as_ref().unwrap().kv_blocks, vec![2, 5, 5, 0]);
    }

    /// A pool of 3 blocks of 2 slots, three requests at t = 0, by hand.
    /// * step 0: r0 (2 tokens, 1 block), r1 (2, 1) and r2 (1, 1) are admitted; r2 (one output
    ///   token) finishes at once and frees its block;
    /// * step 1: r0's slot 3 needs a block: it takes the free one; r1's needs one too, none is
    ///   left: r1, the newest, is preempted (its block freed) and goes back to the queue;
    /// * steps 2-3: r0 decodes alone; r1 needs 2 blocks for its 3 tokens (prompt + 1 generated)
    ///   and only 1 is free until r0 finishes at the end of step 3;
    /// * step 4: r1 recomputes its 3 tokens in one prefill, step 5 decodes its last token.
    #[test]
    fn preemption_by_recompute_by_hand() {
        let o = go(&[0.0, 0.0, 0.0], &[2, 2, 1], &[4, 3, 1], params(8, 64, 2, 3, false));
        assert_eq!(
            steps(&o),
            vec![
                vec![(0, 2, 0), (1, 2, 0), (2, 1, 0)],
                vec![(0, 1, 2)],
                vec![(0, 1, 3)],
                vec![(0, 1, 4)],
                vec![(1, 3, 0)],
                vec![(1, 1, 3)],
            ]
        );
        let t1 = price(&[(2, 0), (2, 0), (1, 0)]);
        let t4 = t1 + price(&[(1, 2)]) + price(&[(1, 3)]) + price(&[(1, 4)]);
        let t6 = t4 + price(&[(3, 0)]) + price(&[(1, 3)]);
        assert_eq!(o.sim.start_s, vec![0.0, 0.0, 0.0]); // a recompute keeps the first start
        assert_eq!(o.sim.batch_id, vec![0, 1, 2]);
        assert_eq!(o.sim.first_token_s, vec![t1, t1, t1]); // ... and the first token
        assert_eq!(o.sim.finish_s, vec![t4, t6, t1]);
        assert_eq!((o.preemptions, o.n_preemptions.clone()), (1, vec![0, 1, 0]));
        let x = o.trace_extra.as_ref().unwrap();
        assert_eq!(x.kv_blocks, vec![2, 2, 2, 0, 2, 0]);
        assert_eq!(x.n_preempted, vec![0, 1, 0, 0, 0, 0]);
        assert_eq!(x.n_admitted, vec![3, 0, 0, 0, 1, 0]);
        let tr = o.sim.trace.as_ref().unwrap();
        assert_eq!(tr.n_prefill, vec![3, 0, 0, 0, 1, 0]);
        assert_eq!(tr.n_decode, vec![0, 1, 1, 1, 0, 1]);
    }

    #[test]
    fn chunked_prefill_splits_a_long_prompt_over_steps() {
        let p = params(8, 8, 16, 64, true);
        let o = go(&[0.0, 0.0], &[20, 3], &[2, 2], p);
        assert_eq!(
            steps(&o),
            vec![vec![(0, 8, 0)], vec![(0, 8, 8)], vec![(0, 4, 16), (1, 3, 0)], vec![(0, 1, 20), (1, 1, 3)]]
        );
        let tr = o.sim.trace.unwrap();
        assert_eq!(tr.n_prefill, vec![0, 0, 2, 0]);
        assert_eq!(tr.tokens, vec![8, 8, 7, 2]);
        // r0 starts with its first chunk, r1 when it is admitted (step 2)
        assert_eq!(o.sim.start_s, vec![0.0, tr.start_s[2]]);
        assert_eq!(o.sim.first_token_s, vec![tr.start_s[3], tr.start_s[3]]);
    }

    #[test]
    fn unservable_requests_are_rejected_with_a_reason() {
        let p = params(8, 16, 4, 8, false);
        // r0: need = 17 + 1 - 1 = 17 tokens > the budget of 16 (5 blocks would fit);
        // r1: need = 30 + 8 - 1 = 37 tokens, 10 blocks > 8
        let o = go(&[0.0, 0.0, 1.0], &[17, 30, 3], &[1, 8, 2], p);
        assert_eq!(o.reject_code, vec![REJECT_BUDGET, REJECT_BLOCKS, REJECT_NONE]);
        assert_eq!(o.sim.rejected, vec![true, true, false]);
        assert!(o.sim.start_s[0].is_nan() && o.sim.finish_s[1].is_nan());
        assert_eq!(o.sim.start_s[2], 1.0);
        // with chunked prefill the budget no longer matters
        let o = go(&[0.0], &[17], &[1], params(8, 16, 4, 5, true));
        assert_eq!(o.reject_code, vec![REJECT_NONE]);
    }

    #[test]
    fn bad_params_name_the_argument() {
        let w = Workload::new(&[0.0], &[1], &[1]).unwrap();
        for (prm, msg) in [
            (params(0, 1, 1, 1, false), "max_num_seqs must be an integer in [1, 9223372036854775807], got 0"),
            (params(1, -2, 1, 1, false), "max_num_batched_tokens must be an integer in [1, 9223372036854775807], got -2"),
            (params(1, 1, 0, 1, false), "block_size must be an integer in [1, 65536], got 0"),
            (params(1, 1, 1, 1 << 30, false), "num_blocks must be an integer in [1, 16777216], got 1073741824"),
        ] {
            assert_eq!(run(&pricer(), &w, &prm, false, false).unwrap_err().to_string(), msg);
        }
    }

    /// `KvCounts` makes the same decisions as the real allocator without prefix caching, on a
    /// long pseudo-random sequence of allocate / append / free.
    #[test]
    fn counts_agree_with_the_block_allocator() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |k: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % k
        };
        for (blocks, bs) in [(1, 1), (3, 2), (8, 4), (20, 16)] {
            let mut real = BlockAllocator::new(blocks, bs, false).unwrap();
            let mut counts = KvCounts::new(blocks, bs);
            let mut held: Vec<(i64, i64)> = Vec::new(); // (seq id, slots)
            for op in 0..5000i64 {
                match rnd(3) {
                    0 => {
                        let n = 1 + rnd((blocks * bs) as u64 + 3) as i64;
                        let ok = counts.allocate(n);
                        assert_eq!(ok, real.allocate(op, &vec![0; n as usize]).is_ok());
                        if ok {
                            held.push((op, n));
                        }
                    }
                    1 if !held.is_empty() => {
                        let k = rnd(held.len() as u64) as usize;
                        let (id, slots) = held[k];
                        assert_eq!(counts.can_append(slots), real.can_append(id).unwrap());
                        if counts.can_append(slots) {
                            counts.append(slots);
                            real.append(id, 0).unwrap();
                            held[k].1 += 1;
                        }
                    }
                    _ if !held.is_empty() => {
                        let (id, slots) = held.swap_remove(rnd(held.len() as u64) as usize);
                        counts.free(slots);
                        real.free(id).unwrap();
                    }
                    _ => {}
                }
                assert_eq!(counts.num_free_blocks(), real.num_free_blocks() as i64);
            }
        }
    }

    /// Seats: with max_num_seqs = 1 continuous batching is batch 1 FCFS.
    #[test]
    fn one_seat_is_batch1() {
        use crate::sim::batch1::{self, AcceptAll};
        let a = [0.0, 0.1, 0.1, 3.0, 3.5];
        let p = [300, 7, 1, 4096, 12];
        let l = [20, 1, 500, 3, 9];
        let w = Workload::new(&a, &p, &l).unwrap();
        let want = batch1::run(&pricer(), &w, &mut AcceptAll, true);
        let got = run(&pricer(), &w, &params(1, 1 << 20, 16, 1 << 16, false), true, false).unwrap();
        assert_eq!(got.sim.start_s, want.start_s);
        assert_eq!(got.sim.first_token_s, want.first_token_s);
        assert_eq!(got.sim.finish_s, want.finish_s);
        assert_eq!(got.sim.busy_s, want.busy_s);
    }
}
