//! Policy 3 of §4.5: continuous batching (Orca's iteration-level scheduling) with a paged KV
//! pool (vLLM's PagedAttention, §2.4 and §3.5), optional chunked prefill and preemption by
//! recompute.
//!
//! The scheduling rules are exactly those of `servelab.engine.scheduler` (its module docstring
//! numbers them 1-6), so that on the same requests this simulator and the engine, which runs real
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
//! 6. a request whose tokens are all computed samples one; the first sets `first_token_s` (the
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
//! # A cost per event, not per sequence-step
//!
//! A step's price needs only integer totals (sequences, new tokens, attention keys, cached
//! tokens), and in a decode step every decoding request adds exactly one token to its context.
//! So [`run`] does not visit the decoding requests: it keeps their count and the sum of their
//! contexts, and stores for each one `computed - step`, which stays put while it decodes. The
//! events are found by counters, not divisions: the requests that need a new KV block in step
//! `s` are those whose offset is `-s` modulo `block_size` (a count per residue), and the step in
//! which a request samples its last token is known when it starts decoding (a min-heap). A step
//! then costs O(1) plus its events: arrivals, admissions, prefill chunks, finishes.
//!
//! The rare step in which the pool runs out of blocks (rule 3 preempts) runs the per-step way:
//! the offsets are turned back into counts, the step runs as in `continuous_per_step.rs`, and
//! the aggregates are rebuilt. The clock is bit for bit that of the per-step loop: the step's
//! totals are exact integers, priced by the same [`Pricer`] arithmetic and added to the clock
//! one step at a time (`t + a + a` is not `t + 2a` in floating point: no step is skipped).
//! `tests/test_sim_events.py` checks it on 200 random workloads against the per-step loop,
//! which stays available to the tests and the benchmark (`per_step` in the bindings).
//!
//! # Memory
//!
//! Per request a fixed number of words (its 17-byte state and its output columns); the waiting
//! queue and the running list hold indices. Per-step data (the trace, the batch log) is kept
//! only when asked for.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::step_rules::{admit, batch_shape, counter_overflow, nothing_scheduled, plan_step, Books, Entry, StepPool};
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
#[cfg_attr(feature = "python", derive(pyo3::FromPyObject), pyo3(from_item_all))] // a dict of these keys
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

    /// `count` appends that each need a new block (the caller checked that enough are free).
    pub fn take(&mut self, count: i64) {
        self.free -= count;
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

/// Rule 1: the requests from `*next` on that have arrived by `t` join the back of `waiting`, in
/// order; one that could never run is rejected at once with its reason. Shared by the three
/// continuous-batching loops (this file, `continuous_per_step.rs`, `continuous_prefix.rs`).
pub(crate) fn arrive(
    params: &ContinuousParams,
    w: &Workload<'_>,
    t: f64,
    next: &mut usize,
    waiting: &mut VecDeque<usize>,
    reject_code: &mut [i8],
    rec: &mut Recorder<'_>,
) {
    while *next < w.len() && w.arrival_s[*next] <= t {
        let i = *next;
        let code = params.unservable(w.prompt_len[i], w.output_len[i]);
        if code == REJECT_NONE {
            waiting.push_back(i);
        } else {
            reject_code[i] = code;
            rec.out().rejected[i] = true;
        }
        *next += 1;
    }
}

/// Rule 5 for one batch entry: request `r` computes `nt` new tokens on top of `c` in its KV
/// (it holds `held` slots); adds them to the step's integer totals and, when kept, to the
/// batch log. A prefilling entry that reaches `held` ends its (re)prefill: it samples a token.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn add_entry(
    shape: &mut StepShape,
    log: Option<&mut BatchLog>,
    r: usize,
    nt: i64,
    c: i64,
    held: i64,
    decoding: bool,
) {
    let (nn, cc) = (nt as i128, c as i128);
    shape.seqs += 1;
    shape.tokens += nt;
    shape.keys += nn * cc + nn * (nn + 1) / 2;
    shape.ctx_tokens += cc;
    if decoding {
        shape.n_decode += 1;
    } else if c + nt == held {
        shape.n_prefill += 1;
    }
    if let Some(l) = log {
        l.request_id.push(r as i64);
        l.new_tokens.push(nt);
        l.context_len.push(c);
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

/// Where a request is (one byte per request).
pub(crate) const WAITING: u8 = 0; // not arrived yet, waiting, preempted or rejected
const PREFILLING: u8 = 1; // running, some of its tokens not computed yet
const DECODING: u8 = 2; // running, all its tokens computed: it decodes one token a step
pub(crate) const DONE: u8 = 3;

/// The state of one request, 16 bytes (the run's memory stays linear and small).
///
/// `c` is the number of tokens whose KV is in the pool, except for a decoding request, which
/// stores `computed - step` instead: every decoding request gains one token per step, so this
/// offset stays put while the clock runs and no step has to visit it. For a decoding request
/// `held == computed` and `generated == computed + 1 - prompt` (every token but the last
/// sampled one is computed), so neither needs storing.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Req {
    pub(crate) c: i64,
    /// token slots the pool holds for it (0 while waiting; unused while decoding)
    pub(crate) held: i32,
    /// output tokens sampled so far (unused while decoding)
    pub(crate) generated: i32,
}

/// The decoding requests, by their aggregates: what a step of them costs and which events
/// (a block boundary, a last token) fall in which step are known without visiting them.
struct Decoders {
    /// decoding requests in admission order (the order of `running` in the rules); entries of
    /// finished requests stay as tombstones until the next compaction
    order: Vec<u32>,
    live: i64,
    /// sum of `c` over the live ones: the step's context tokens are `sum_c + live * step`
    sum_c: i128,
    /// how many live ones have `c` congruent to `k` modulo `block_size`: those whose held slots
    /// are a multiple of `block_size` in step `s` (they need a new block) have `k = -s mod bs`
    by_residue: Vec<u32>,
    /// (step in which it samples its last token, request), earliest first
    finish: BinaryHeap<Reverse<(i64, u32)>>,
}

impl Decoders {
    fn new(block_size: i64) -> Self {
        Decoders {
            order: Vec::new(),
            live: 0,
            sum_c: 0,
            // a block size is at most MAX_BLOCK_SIZE (65,536): one counter per residue
            by_residue: vec![0; block_size as usize],
            finish: BinaryHeap::new(),
        }
    }

    /// Adds request `r` (prompt `p`, `out` output tokens), which holds `computed` tokens after
    /// step `step - 1`, at the end of the admission order.
    fn push(&mut self, r: usize, req: &mut Req, p: i64, out: i64, step: i64) {
        let c = req.c - step;
        req.c = c;
        self.order.push(r as u32);
        self.live += 1;
        self.sum_c += c as i128;
        let k = c.rem_euclid(self.by_residue.len() as i64) as usize;
        self.by_residue[k] += 1;
        // after step s it has generated c + s + 2 - p tokens: the last one comes in step
        // out + p - 2 - c (>= step, since it has not generated all of them yet)
        self.finish.push(Reverse((out + p - 2 - c, r as u32)));
    }

    /// Removes a finished request (its `order` entry becomes a tombstone).
    fn remove(&mut self, c: i64) {
        self.live -= 1;
        self.sum_c -= c as i128;
        let k = c.rem_euclid(self.by_residue.len() as i64) as usize;
        self.by_residue[k] -= 1;
    }

    /// How many of them need a new block in step `step`.
    fn crossing(&self, step: i64) -> i64 {
        let bs = self.by_residue.len() as i64;
        self.by_residue[(-step).rem_euclid(bs) as usize] as i64
    }

    fn clear(&mut self) {
        self.order.clear();
        self.live = 0;
        self.sum_c = 0;
        self.by_residue.iter_mut().for_each(|k| *k = 0);
        self.finish.clear();
    }
}

/// Runs continuous batching over a validated workload, at a cost per event (arrival,
/// admission, end of a prefill chunk, finish, preemption) rather than per sequence-step; the
/// module docs say how, and why the clock's bits are those of the per-step loop
/// ([`super::continuous_per_step::run_per_step`]).
pub fn run(
    pricer: &Pricer,
    w: &Workload<'_>,
    params: &ContinuousParams,
    trace: bool,
    batch_log: bool,
) -> CoreResult<ContinuousOutput> {
    let mut card = Card::new(pricer, params, w.len(), trace, batch_log)?;
    card.advance(w, f64::INFINITY)?;
    Ok(card.finish())
}

/// One card running [`run`]'s loop, resumable: it can stop at any time `t`, be handed more
/// requests (arriving at `t` or later), and go on. Several cards behind a router
/// (`router.rs`) advance this way side by side, so the router sees what each card has
/// finished by each arrival without running any card twice.
///
/// Why stopping changes nothing: [`Card::advance`] runs exactly the steps that *start* before
/// `until`, and a step starting at `s` only sees requests that arrived by `s`; requests handed
/// over later arrive at `until` or after, so no step already run could have seen them. The card
/// stops at the top of the loop (before rule 1 admits the requests of the next step), which is
/// where the uninterrupted run would be at that time too; so any sequence of `advance` calls on
/// growing prefixes of a workload gives [`run`]'s output on the whole of it, bit for bit
/// (`stopping_anywhere_changes_nothing` checks it).
pub struct Card<'p> {
    params: ContinuousParams,
    rec: Recorder<'p>,
    books: Books,
    req: Vec<Req>,
    state: Vec<u8>,
    kv: KvCounts,
    waiting: VecDeque<usize>,
    dec: Decoders,
    /// the running requests that are not decoding, in admission order: they always come after
    /// every decoding one in the rules' `running` order (see `prefilling_is_a_suffix`)
    prefilling: Vec<usize>,
    /// (request, new tokens, context) of the step's prefill pieces
    pieces: Vec<(usize, i64, i64)>,
    scratch: Scratch,
    /// first request not arrived yet
    next: usize,
    /// steps run so far
    step: i64,
    /// the clock: when the next step may start
    t: f64,
}

impl<'p> Card<'p> {
    /// An empty card; `n` requests' worth of columns are allocated up front (more grow as
    /// needed).
    pub fn new(pricer: &'p Pricer, params: &ContinuousParams, n: usize, trace: bool, batch_log: bool) -> CoreResult<Self> {
        params.validate()?;
        check_count(n)?;
        Ok(Card {
            params: *params,
            rec: Recorder::new(pricer, n, trace),
            books: Books::new(n, trace, batch_log),
            req: vec![Req::default(); n],
            state: vec![WAITING; n],
            kv: KvCounts::new(params.num_blocks, params.block_size),
            waiting: VecDeque::new(),
            dec: Decoders::new(params.block_size),
            prefilling: Vec::new(),
            pieces: Vec::new(),
            scratch: Scratch::default(),
            next: 0,
            step: 0,
            t: 0.0,
        })
    }

    pub fn params(&self) -> &ContinuousParams {
        &self.params
    }

    /// From now on, list the requests that finish, for [`Card::drain_finished`].
    pub fn track_finished(&mut self) {
        self.rec.track_finished();
    }

    /// Calls `f(request, finish_s)` for each request finished since the last call, in the
    /// order they finished.
    pub fn drain_finished(&mut self, f: impl FnMut(usize, f64)) {
        self.rec.drain_finished(f);
    }

    /// Runs every step that starts before `until` (`f64::INFINITY`: to the end) over `w`, a
    /// workload of which every earlier call saw a prefix; the requests it adds must arrive no
    /// earlier than any earlier call's `until` (the type's docs say why then nothing changes).
    pub fn advance(&mut self, w: &Workload<'_>, until: f64) -> CoreResult<()> {
        let n = w.len();
        if n > self.state.len() {
            check_count(n)?;
            self.rec.grow(n);
            self.books.grow(n);
            self.req.resize(n, Req::default());
            self.state.resize(n, WAITING);
        }
        let (a, pl, ol) = (w.arrival_s, w.prompt_len, w.output_len);
        let Card {
            params,
            rec,
            books,
            req,
            state,
            kv,
            waiting,
            dec,
            prefilling,
            pieces,
            scratch,
            ..
        } = self;
        let params = &*params;
        // the counters live in locals while the loop runs (registers, not memory)
        let (mut next, mut step, mut t) = (self.next, self.step, self.t);
        loop {
            arrive(params, w, t, &mut next, waiting, &mut books.reject_code, rec); // rule 1
            if waiting.is_empty() && dec.live == 0 && prefilling.is_empty() {
                if next == n {
                    break; // done, unless more requests come
                }
                t = a[next]; // idle: jump to the next arrival
                continue;
            }
            if t >= until {
                break;
            }

            let budget = params.max_num_batched_tokens;
            let crossing = dec.crossing(step);
            if dec.live > budget || crossing > kv.num_free_blocks() {
                // Rare: the pool runs out of blocks mid-step (rule 3 preempts). Run this step the
                // per-step way. (The budget never cuts the decoding requests short: every running
                // request took at least one token of the budget in the step that admitted or ran
                // it, so at most `max_num_batched_tokens` run; the test is a guard.)
                let mut ctx = SlowStep {
                    params,
                    ol,
                    rec: &mut *rec,
                    pool: ReqPool { pl, req: &mut *req, state: &mut *state, kv: &mut *kv },
                    waiting: &mut *waiting,
                    dec: &mut *dec,
                    prefilling: &mut *prefilling,
                    books: &mut *books,
                    scratch: &mut *scratch,
                };
                let (end, n_preempted, n_admitted) = ctx.run(t, step)?;
                books.end_step(kv.blocks_used(), n_preempted, n_admitted);
                step = step.checked_add(1).ok_or_else(counter_overflow)?;
                t = end;
                continue;
            }

            // rule 2, decoding requests: all of them, one token each; `crossing` of them take a
            // new block (enough are free: nobody is preempted, so rule 3 does not apply)
            let mut left = budget - dec.live;
            kv.take(crossing);
            let ctx_dec = dec.sum_c + (dec.live as i128) * (step as i128);
            let mut shape = StepShape {
                seqs: dec.live,
                tokens: dec.live,
                keys: ctx_dec + dec.live as i128,
                ctx_tokens: ctx_dec,
                n_prefill: 0,
                n_decode: dec.live,
            };
            if let Some(l) = books.log.as_mut() {
                for &r in &dec.order {
                    if state[r as usize] == DECODING {
                        l.request_id.push(r as i64);
                        l.new_tokens.push(1);
                        l.context_len.push(req[r as usize].c + step);
                    }
                }
            }
            // rule 2, prefilling requests: the rest of their prompt, while the budget lasts
            pieces.clear();
            for &r in prefilling.iter() {
                if left == 0 {
                    break;
                }
                let s = req[r];
                let nt = (s.held as i64 - s.c).min(left);
                pieces.push((r, nt, s.c));
                left -= nt;
            }
            // rule 4: admission (nobody was preempted); most steps have nobody waiting
            let mut n_admitted = 0;
            if !waiting.is_empty() {
                let mut pool = ReqPool { pl, req: &mut *req, state: &mut *state, kv: &mut *kv };
                let piece = |r, nt| pieces.push((r, nt, 0));
                n_admitted = admit(&mut pool, params, dec.live, prefilling, waiting, &mut left, rec, t, piece)?;
            }
            if shape.seqs == 0 && pieces.is_empty() {
                return Err(nothing_scheduled(t));
            }

            // rule 5: the step's shape (integer totals, as the per-step loop sums them) and price
            for &(r, nt, c) in pieces.iter() {
                add_entry(&mut shape, books.log.as_mut(), r, nt, c, req[r].held as i64, false);
            }
            books.end_batch();
            let end = rec.step(t, shape);

            // rule 6, decoding requests: those whose last token this step samples leave
            while let Some(&Reverse((last, r))) = dec.finish.peek() {
                if last > step {
                    break;
                }
                debug_assert_eq!(last, step, "a decoding request outlived its last token");
                dec.finish.pop();
                let r = r as usize;
                let c = req[r].c;
                dec.remove(c);
                kv.free(c + step + 1); // it held every computed token
                state[r] = DONE;
                rec.set_finish(r, end);
            }
            step = step.checked_add(1).ok_or_else(counter_overflow)?;
            // rule 6, prefill pieces: a completed prefill samples a token; the completed ones are
            // the first pieces (only the last piece can be a partial chunk)
            let mut completed = 0;
            for &(r, nt, _) in pieces.iter() {
                let s = &mut req[r];
                s.c += nt;
                if s.c < s.held as i64 {
                    break;
                }
                completed += 1;
                if !sample_token(rec, kv, s, &mut state[r], r, 1, ol[r], end) {
                    state[r] = DECODING;
                    dec.push(r, s, pl[r], ol[r], step);
                }
            }
            prefilling.drain(..completed);
            if dec.order.len() > 2 * dec.live as usize + 64 {
                dec.order.retain(|&r| state[r as usize] == DECODING);
            }
            books.end_step(kv.blocks_used(), 0, n_admitted);
            t = end;
        }
        (self.next, self.step, self.t) = (next, step, t);
        Ok(())
    }

    /// The run so far (after `advance(.., f64::INFINITY)`: the whole run).
    pub fn finish(self) -> ContinuousOutput {
        self.books.finish(self.rec)
    }
}

/// Rule 6 for request `r`, all of whose tokens are computed at `end`: it samples `sampled` (1,
/// or more with speculation; the first sets `first_token_s`); the last (`output` of them)
/// finishes it and frees its blocks. Returns whether it finished.
#[allow(clippy::too_many_arguments)]
#[inline]
fn sample_token(rec: &mut Recorder<'_>, kv: &mut KvCounts, s: &mut Req, state: &mut u8, r: usize, sampled: i64, output: i64, end: f64) -> bool {
    s.generated += sampled as i32; // <= output
    let last = s.generated as i64 == output;
    rec.sampled(r, end, last);
    if last {
        kv.free(s.held as i64);
        s.held = 0;
        *state = DONE;
    }
    last
}

/// Requests are kept as u32 indices (and counted in u32 per block residue).
fn check_count(n: usize) -> CoreResult<()> {
    if n > u32::MAX as usize {
        return Err(CoreError::invalid(format!(
            "arrival_s must hold at most {} requests for continuous batching, got {n} (split the workload)",
            u32::MAX
        )));
    }
    Ok(())
}

/// Buffers of the per-step path, kept between its (rare) steps.
#[derive(Default)]
struct Scratch {
    running: Vec<usize>,
    batch: Vec<Entry>,
}

/// The requests and pool as the per-step rules (`step_rules.rs`) see them, for
/// `continuous_per_step.rs` and this file's per-step path: `c` is the computed tokens of a
/// request (the per-step path turns the decoders' offsets back first).
pub(crate) struct ReqPool<'a> {
    pub(crate) pl: &'a [i64],
    pub(crate) req: &'a mut [Req],
    pub(crate) state: &'a mut [u8],
    pub(crate) kv: &'a mut KvCounts,
}

impl ReqPool<'_> {
    /// Rule 6 for request `r`, which computed `nt` tokens in the step ending at `end`: once all
    /// its tokens are computed, it samples `sampled` ([`sample_token`]). Returns whether it
    /// finished.
    #[inline]
    pub(crate) fn compute(&mut self, rec: &mut Recorder<'_>, r: usize, nt: i64, sampled: i64, output: i64, end: f64) -> bool {
        let s = &mut self.req[r];
        s.c += nt;
        s.c >= s.held as i64 && sample_token(rec, self.kv, s, &mut self.state[r], r, sampled, output, end)
    }
}

impl StepPool for ReqPool<'_> {
    #[inline]
    fn counts(&self, r: usize) -> (i64, i64) {
        (self.req[r].c, self.req[r].held as i64)
    }

    #[inline]
    fn must_preempt(&self, r: usize) -> bool {
        !self.kv.can_append(self.req[r].held as i64)
    }

    #[inline]
    fn append(&mut self, r: usize) -> CoreResult<()> {
        self.kv.append(self.req[r].held as i64);
        self.req[r].held += 1;
        Ok(())
    }

    #[inline]
    fn preempt(&mut self, r: usize) -> CoreResult<()> {
        self.kv.free(self.req[r].held as i64);
        self.req[r].c = 0;
        self.req[r].held = 0;
        self.state[r] = WAITING;
        Ok(())
    }

    #[inline]
    fn tokens(&self, r: usize) -> i64 {
        self.pl[r] + self.req[r].generated as i64
    }

    #[inline]
    fn allocate(&mut self, r: usize, tokens: i64) -> CoreResult<Option<i64>> {
        if !self.kv.allocate(tokens) {
            return Ok(None);
        }
        self.state[r] = PREFILLING;
        self.req[r].held = tokens as i32; // <= prompt + output (both <= MAX_REQUEST_TOKENS)
        self.req[r].c = 0;
        Ok(Some(0))
    }

    #[inline]
    fn blocks_used(&self) -> i64 {
        self.kv.blocks_used()
    }
}

/// One step the per-step way (rules 2-6 visiting every running request), for the steps the
/// aggregates cannot take: it turns the decoding requests' offsets back into counts, runs the
/// step with the rules of `step_rules.rs` (as `continuous_per_step.rs` does), and rebuilds the
/// aggregates.
struct SlowStep<'a, 'b> {
    params: &'a ContinuousParams,
    ol: &'a [i64],
    rec: &'a mut Recorder<'b>,
    pool: ReqPool<'a>,
    waiting: &'a mut VecDeque<usize>,
    dec: &'a mut Decoders,
    prefilling: &'a mut Vec<usize>,
    books: &'a mut Books,
    scratch: &'a mut Scratch,
}

impl SlowStep<'_, '_> {
    /// Returns (end of the step, requests preempted, requests admitted). Kept out of line: a
    /// rare step must not crowd the fast path's registers.
    #[inline(never)]
    fn run(&mut self, t: f64, step: i64) -> CoreResult<(f64, i64, i64)> {
        let (params, pl, ol) = (self.params, self.pool.pl, self.ol);
        let Scratch { running, batch } = &mut *self.scratch;
        running.clear();
        for &r in &self.dec.order {
            let r = r as usize;
            if self.pool.state[r] == DECODING {
                let computed = self.pool.req[r].c + step;
                self.pool.req[r] = Req { c: computed, held: computed as i32, generated: (computed + 1 - pl[r]) as i32 };
                running.push(r);
            }
        }
        running.extend(self.prefilling.drain(..));
        self.dec.clear();

        let plan = plan_step(&mut self.pool, params, running, self.waiting, batch, self.books, self.rec, t)?; // rules 2-4
        let shape = batch_shape(&self.pool, batch, self.books); // rule 5
        let end = self.rec.step(t, shape);

        for &(r, nt, _) in batch.iter() {
            self.pool.compute(self.rec, r, nt, 1, ol[r], end); // rule 6
        }
        let ReqPool { req, state, .. } = &mut self.pool;

        // back to aggregates: the decoding requests first, the prefilling ones after (a request
        // is only admitted once every older one is decoding or ends its prefill in that step:
        // a partial chunk uses up the budget; so the prefilling ones are a suffix of `running`)
        for &r in running.iter() {
            match state[r] {
                DONE => {}
                _ if req[r].c == req[r].held as i64 => {
                    if !self.prefilling.is_empty() {
                        return Err(CoreError::invalid(format!(
                            "internal error: at t={t} request {r} decodes after a prefilling request"
                        )));
                    }
                    state[r] = DECODING;
                    self.dec.push(r, &mut req[r], pl[r], ol[r], step + 1);
                }
                _ => self.prefilling.push(r),
            }
        }
        Ok((end, plan.n_preempted, plan.n_admitted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::BlockAllocator;
    use crate::sim::test_util::{params, price, pricer, random_requests, rng, steps, with_batch1};

    fn go(a: &[f64], p: &[i64], l: &[i64], prm: ContinuousParams) -> ContinuousOutput {
        let w = Workload::new(a, p, l).unwrap();
        run(&pricer(), &w, &prm, true, true).unwrap()
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
        let mut rnd = rng(0x2545_f491_4f6c_dd1du64);
        for (blocks, bs) in [(1, 1), (3, 2), (8, 4), (20, 16)] {
            let mut real = BlockAllocator::new(blocks, bs, false).unwrap();
            let mut counts = KvCounts::new(blocks, bs);
            let mut held: Vec<(i64, i64)> = Vec::new(); // (seq id, slots)
            for op in 0..5000i64 {
                match rnd(3) {
                    0 => {
                        let n = 1 + rnd((blocks * bs) as u64 + 3) as i64;
                        let ok = counts.allocate(n);
                        assert_eq!(ok, real.allocate(op, &vec![0; n as usize], None).is_ok());
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

    /// A small pseudo-random workload and card that hit every rare path: tight pools
    /// (preemption), budgets below the seat count, chunked prefill, block sizes of 1.
    fn random_case(rnd: &mut impl FnMut(u64) -> u64) -> (Vec<f64>, Vec<i64>, Vec<i64>, ContinuousParams) {
        let (a, p, l) = random_requests(rnd, 40, (4, 0.003), 60, (1, 40));
        let prm = params(1 + rnd(12) as i64, 1 + rnd(90) as i64, 1 + rnd(8) as i64, 1 + rnd(40) as i64, rnd(2) == 0);
        (a, p, l, prm)
    }

    /// A [`Card`] handed the requests one at a time, as a router does (advanced to each
    /// arrival first, and now and then to a time in between), gives the uninterrupted run bit
    /// for bit, trace and batch log included; and by each stop it has listed, once each and
    /// with their final finish times, the requests that finish by then (and maybe those of the
    /// one step it ran that ends later).
    #[test]
    fn stopping_anywhere_changes_nothing() {
        let mut rnd = rng(0x6a09_e667_f3bc_c908);
        for case in 0..300 {
            let (a, p, l, prm) = random_case(&mut rnd);
            let n = a.len();
            let want = go(&a, &p, &l, prm);
            let pr = pricer();
            let mut card = Card::new(&pr, &prm, rnd(n as u64) as usize, true, true).unwrap();
            card.track_finished();
            let mut listed = vec![0; n];
            let mut stop = |card: &mut Card<'_>, k: usize, until: f64| {
                card.advance(&Workload::new(&a[..k], &p[..k], &l[..k]).unwrap(), until).unwrap();
                card.drain_finished(|r, f| {
                    assert_eq!(f.to_bits(), want.sim.finish_s[r].to_bits(), "case {case} request {r}");
                    listed[r] += 1;
                });
                // every request finished by `until` is listed (NaN, rejected: never); a request
                // listed early finished in the one step run that ends after `until`
                let mut early = Vec::new();
                for r in 0..n {
                    let f = want.sim.finish_s[r];
                    assert!(listed[r] <= 1 && (listed[r] == 1) >= (f <= until), "case {case}: request {r} by {until}");
                    if listed[r] == 1 && f > until {
                        early.push(f);
                    }
                }
                assert!(early.windows(2).all(|x| x[0] == x[1]), "case {case}: {early:?} by {until}");
            };
            for k in 0..n {
                if k > 0 && rnd(3) == 0 {
                    let mid = a[k - 1] + (a[k] - a[k - 1]) * rnd(5) as f64 / 4.0;
                    stop(&mut card, k, mid);
                }
                stop(&mut card, k, a[k]);
            }
            stop(&mut card, n, f64::INFINITY);
            // Debug prints each f64 so that it parses back to the same bits (and NaN as NaN)
            assert_eq!(format!("{:?}", card.finish()), format!("{want:?}"), "case {case} {prm:?}");
        }
    }

    /// The event-driven engine against the per-step loop it replaces, bit for bit, on small
    /// pseudo-random workloads that hit every rare path: tight pools (preemption), budgets
    /// below the seat count, chunked prefill, block sizes of 1.
    #[test]
    fn events_agree_with_the_per_step_loop() {
        use crate::sim::continuous_per_step::run_per_step;
        let mut rnd = rng(0x9e37_79b9_7f4a_7c15u64);
        for case in 0..300 {
            let (a, p, l, prm) = random_case(&mut rnd);
            let w = Workload::new(&a, &p, &l).unwrap();
            let trace = case % 2 == 0;
            let want = run_per_step(&pricer(), &w, &prm, trace, trace);
            let got = run(&pricer(), &w, &prm, trace, trace);
            match (want, got) {
                (Ok(want), Ok(got)) => {
                    // f64 columns with NaN: compare bits
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got.sim.start_s), bits(&want.sim.start_s), "case {case} {prm:?}");
                    assert_eq!(bits(&got.sim.first_token_s), bits(&want.sim.first_token_s), "case {case}");
                    assert_eq!(bits(&got.sim.finish_s), bits(&want.sim.finish_s), "case {case}");
                    assert_eq!(got.sim.busy_s.to_bits(), want.sim.busy_s.to_bits(), "case {case}");
                    assert_eq!(got.sim.flops.to_bits(), want.sim.flops.to_bits(), "case {case}");
                    let strip = |mut o: ContinuousOutput| {
                        o.sim.start_s.clear();
                        o.sim.first_token_s.clear();
                        o.sim.finish_s.clear();
                        o
                    };
                    assert_eq!(strip(got), strip(want), "case {case} {prm:?}");
                }
                (Err(e1), Err(e2)) => assert_eq!(e1, e2),
                (want, got) => panic!("case {case}: {want:?} vs {got:?}"),
            }
        }
    }

    /// Seats: with max_num_seqs = 1 continuous batching is batch 1 FCFS.
    #[test]
    fn one_seat_is_batch1() {
        let (got, want) = with_batch1(|w| run(&pricer(), w, &params(1, 1 << 20, 16, 1 << 16, false), true, false).unwrap().sim);
        assert_eq!(got.start_s, want.start_s);
        assert_eq!(got.first_token_s, want.first_token_s);
        assert_eq!(got.finish_s, want.finish_s);
        assert_eq!(got.busy_s, want.busy_s);
        assert_eq!(got.batch_id, want.batch_id);
    }
}
