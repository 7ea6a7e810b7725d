//! Rules 1-6 of continuous batching, the only code for them. What the rules say is written once,
//! in `servelab.engine.scheduler` (python/servelab/engine/scheduler.py, its module docstring
//! numbers them); each function here names the rule it carries out and links there rather than
//! restating it.
//!
//! The functions carry out a step that visits every running request. The per-step twin
//! ([`super::per_step`], with any mix of features) steps this way, and so does the rare
//! preempting step of the event loops ([`super::event_driven`], whichever its decoders' part,
//! and [`super::prefix_events`]), whose fast path is an optimisation of these rules (integer
//! totals instead of visits) and plans its prefill pieces and admissions through
//! [`prefill_pieces`] and [`admit`]. Each loop says through [`StepPool`] (and [`TwinPool`]:
//! rule 6 and speculation) how its requests and its KV pool answer; the functions are generic,
//! so each loop gets its own machine code and pays nothing for the others. [`ReqPool`] is the
//! pool by counts ([`KvCounts`]) that the per-step and event-driven loops share; prefix
//! caching's is `prefix.rs`'s.

use std::collections::VecDeque;

use super::{
    blocks_for, BatchLog, ContinuousOutput, ContinuousParams, Inputs, KvCounts, Req, StepExtra, DECODING, DONE, PREFILLING,
    REJECT_BLOCKS, REJECT_BUDGET, REJECT_NONE, WAITING,
};
use crate::error::{CoreError, CoreResult};
use crate::sim::{Recorder, StepShape, Workload};

/// One batch entry, in batch order: (request, new tokens, decoding?).
pub(crate) type Entry = (usize, i64, bool);

/// What rules 2-5 ask of a loop's requests and KV pool.
pub(crate) trait StepPool {
    /// Request `r`'s tokens whose KV is in the pool, and the token slots the pool holds for it
    /// (0 while waiting): it decodes when the two are equal.
    fn counts(&self, r: usize) -> (i64, i64);
    /// Rule 2: `nt` more of `r`'s prompt tokens compute in this step (prefix caching registers
    /// their blocks now: a request admitted later in the step may hit them).
    fn schedule_chunk(&mut self, _r: usize, _nt: i64) -> CoreResult<()> {
        Ok(())
    }
    /// Rule 3: whether `r`'s next slot needs a new block and none is free.
    fn must_preempt(&self, r: usize) -> bool;
    /// Rule 2: decoding `r` takes the slot of this step's token.
    fn append(&mut self, r: usize) -> CoreResult<()>;
    /// Rule 3: frees `r`'s blocks and forgets its KV (`held = computed = 0`).
    fn preempt(&mut self, r: usize) -> CoreResult<()>;
    /// Rule 4: the tokens `r` needs KV for: its prompt plus what it generated before a preemption.
    fn tokens(&self, r: usize) -> i64;
    /// Rule 4: allocates `tokens` slots for `r` (`held = tokens`); `None` if the pool is short,
    /// else how many of them are cached (prefix hits: `computed = cached`).
    fn allocate(&mut self, r: usize, tokens: i64) -> CoreResult<Option<i64>>;
    fn blocks_used(&self) -> i64;
}

/// What a whole per-step loop ([`run_steps`]) does around the rules on its pool `P`.
pub(crate) trait StepHooks<P: StepPool> {
    /// Work added to the planned batch, in seconds of the step (speculation widens the decoding
    /// entries and prices the draft; a host tier prices its copies back).
    fn extra_s(&mut self, _pool: &mut P, _batch: &mut [Entry], _budget: i64) -> f64 {
        0.0
    }
    /// Rule 6 for entry `e` (request `r`, `nt` tokens) of the step ending at `end`: its tokens
    /// are computed; a request whose tokens are all computed samples. Returns whether it finished.
    fn sample(&mut self, pool: &mut P, rec: &mut Recorder<'_>, e: usize, r: usize, nt: i64, end: f64) -> CoreResult<bool>;
    /// Whether `r` has sampled its last token.
    fn done(&self, pool: &P, r: usize) -> bool;
    /// The step is over: the queues as they stand (`servelab trace` records them: [`super::trace`]).
    #[inline(always)]
    fn end_step(&mut self, _pool: &P, _waiting: &VecDeque<usize>, _running: &[usize]) {}
}

/// What a loop records beside the clock: rejections, preemptions, the trace's extra columns,
/// the batch log and the peak of blocks used.
pub(crate) struct Books {
    pub(crate) reject_code: Vec<i8>,
    n_preemptions: Vec<i64>,
    preemptions: u64,
    extra: Option<StepExtra>,
    pub(crate) log: Option<BatchLog>,
    peak_blocks: i64,
}

impl Books {
    pub(crate) fn new(n: usize, trace: bool, batch_log: bool) -> Self {
        Books {
            reject_code: vec![REJECT_NONE; n],
            n_preemptions: vec![0; n],
            preemptions: 0,
            extra: trace.then(StepExtra::default),
            log: batch_log.then(|| BatchLog { offsets: vec![0], ..Default::default() }),
            peak_blocks: 0,
        }
    }

    /// A whole run's recorder and books, keeping the columns `inp` asks for.
    pub(crate) fn start<'p>(inp: &Inputs<'p>) -> (Recorder<'p>, Books) {
        let n = inp.w.len();
        (Recorder::new(inp.pricer, n, inp.trace), Books::new(n, inp.trace, inp.batch_log))
    }

    /// Makes room for requests up to `n` (a resumable card is handed requests as it runs).
    pub(crate) fn grow(&mut self, n: usize) {
        if n > self.reject_code.len() {
            self.reject_code.resize(n, REJECT_NONE);
            self.n_preemptions.resize(n, 0);
        }
    }

    /// Rule 3 preempted request `r`.
    #[inline]
    pub(crate) fn preempted(&mut self, r: usize) -> CoreResult<()> {
        self.n_preemptions[r] = self.n_preemptions[r].checked_add(1).ok_or_else(counter_overflow)?;
        self.preemptions = self.preemptions.checked_add(1).ok_or_else(counter_overflow)?;
        Ok(())
    }

    /// Closes the batch log's row of this step.
    #[inline]
    pub(crate) fn end_batch(&mut self) {
        if let Some(l) = self.log.as_mut() {
            l.offsets.push(l.request_id.len() as i64);
        }
    }

    /// The step is over: `blocks_used` now, and how many it preempted and admitted.
    #[inline]
    pub(crate) fn end_step(&mut self, blocks_used: i64, n_preempted: i64, n_admitted: i64) {
        self.peak_blocks = self.peak_blocks.max(blocks_used);
        if let Some(x) = self.extra.as_mut() {
            x.kv_blocks.push(blocks_used);
            x.n_preempted.push(n_preempted);
            x.n_admitted.push(n_admitted);
        }
    }

    pub(crate) fn finish(self, rec: Recorder<'_>) -> ContinuousOutput {
        ContinuousOutput {
            sim: rec.finish(),
            reject_code: self.reject_code,
            n_preemptions: self.n_preemptions,
            preemptions: self.preemptions,
            trace_extra: self.extra,
            peak_kv_blocks: self.peak_blocks,
            batch_log: self.log,
        }
    }
}

pub(crate) fn counter_overflow() -> CoreError {
    CoreError::invalid(format!(
        "the run is too long: a step or preemption counter would pass {} (split the workload)",
        i64::MAX
    ))
}

/// Rules 1-4 rule an empty batch out while work is left (see the engine's docstring): an
/// error, never a hang.
pub(crate) fn nothing_scheduled(t: f64) -> CoreError {
    CoreError::invalid(format!("internal error: at t={t} work is left but nothing could be scheduled"))
}

/// A planned step: the token budget left, requests preempted (rule 3) and admitted (rule 4).
pub(crate) struct Plan {
    pub(crate) budget: i64,
    pub(crate) n_preempted: i64,
    pub(crate) n_admitted: i64,
}

/// Rules 2-4 (`servelab.engine.scheduler`) of the step starting at `t`: fills `batch` from
/// `running`, preempting into `waiting`, then admits from `waiting`; an empty batch is an error.
#[allow(clippy::too_many_arguments)]
#[inline(always)] // one copy per loop: its visits must not pay a call each
pub(crate) fn plan_step<P: StepPool>(
    pool: &mut P,
    params: &ContinuousParams,
    running: &mut Vec<usize>,
    waiting: &mut VecDeque<usize>,
    batch: &mut Vec<Entry>,
    books: &mut Books,
    rec: &mut Recorder<'_>,
    t: f64,
) -> CoreResult<Plan> {
    batch.clear();
    let mut budget = params.max_num_batched_tokens;
    let mut n_preempted = 0i64;
    let mut i = 0;
    'running: while i < running.len() && budget > 0 {
        let r = running[i];
        let (computed, held) = pool.counts(r);
        let decoding = computed == held;
        let nt = if !decoding {
            let nt = (held - computed).min(budget); // a chunk of the prompt
            pool.schedule_chunk(r, nt)?;
            nt
        } else {
            while pool.must_preempt(r) {
                let victim = running.pop().expect("r itself is running");
                pool.preempt(victim)?;
                books.preempted(victim)?;
                waiting.push_front(victim);
                n_preempted += 1;
                if victim == r {
                    break 'running;
                }
            }
            pool.append(r)?;
            1
        };
        batch.push((r, nt, decoding));
        budget -= nt;
        i += 1;
    }
    // Rule 4 waits for a step without preemption. Without prefix caching the guard never changes
    // a batch: the front of the queue is then the last victim, the pool had no free block before
    // it was preempted, and the request it made room for took one of the blocks it gave back, so
    // it cannot fit anyway. Kept for the engine's rules (with prefix caching a hit could make it
    // fit); tests/test_sim_continuous.py shows it.
    let mut n_admitted = 0;
    if n_preempted == 0 {
        n_admitted = admit(pool, params, 0, running, waiting, &mut budget, rec, t, |r, nt, _| batch.push((r, nt, false)))?;
    }
    if batch.is_empty() {
        return Err(nothing_scheduled(t));
    }
    Ok(Plan { budget, n_preempted, n_admitted })
}

/// Rule 4 (`servelab.engine.scheduler`) at `t`: the seats taken are `others` (running
/// elsewhere: the event-driven loop's decoders) plus `running`; each admitted request joins
/// `running` and hands `piece(request, new tokens, context)` its first piece (its context: the
/// tokens the pool had cached). Returns how many it admitted.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn admit<P: StepPool>(
    pool: &mut P,
    params: &ContinuousParams,
    others: i64,
    running: &mut Vec<usize>,
    waiting: &mut VecDeque<usize>,
    budget: &mut i64,
    rec: &mut Recorder<'_>,
    t: f64,
    mut piece: impl FnMut(usize, i64, i64),
) -> CoreResult<i64> {
    if waiting.is_empty() {
        return Ok(0); // most steps of an event-driven loop
    }
    let mut n_admitted = 0;
    while *budget > 0 && others + (running.len() as i64) < params.max_num_seqs {
        let Some(&r) = waiting.front() else { break };
        let tokens = pool.tokens(r);
        if !params.chunked_prefill && tokens > *budget {
            break; // all its tokens, cached or not: the hits are known only after allocating
        }
        let Some(cached) = pool.allocate(r, tokens)? else { break };
        waiting.pop_front();
        running.push(r);
        rec.start(r, t);
        let mut nt = tokens - cached;
        if params.chunked_prefill {
            nt = nt.min(*budget);
        }
        pool.schedule_chunk(r, nt)?;
        piece(r, nt, cached);
        n_admitted += 1;
        *budget -= nt;
    }
    Ok(n_admitted)
}

/// One prefill piece of an event-driven loop's step: (request, new tokens, context).
pub(crate) type Piece = (usize, i64, i64);

/// Rule 2 for the prefilling requests alone, in an event-driven loop's step in which nobody is
/// preempted (its decoders, kept as aggregates, took their tokens already): the rest of each
/// one's prompt, in admission order, while the budget `left` lasts (only the last piece can be
/// a partial chunk), as [`plan_step`] schedules them.
#[inline(always)]
pub(crate) fn prefill_pieces<P: StepPool>(pool: &mut P, prefilling: &[usize], left: &mut i64, pieces: &mut Vec<Piece>) -> CoreResult<()> {
    pieces.clear();
    for &r in prefilling {
        if *left == 0 {
            break;
        }
        let (computed, held) = pool.counts(r);
        let nt = (held - computed).min(*left);
        pool.schedule_chunk(r, nt)?;
        pieces.push((r, nt, computed));
        *left -= nt;
    }
    Ok(())
}

/// Rule 5: the batch's shape (integer totals) and its row of the batch log.
#[inline(always)]
pub(crate) fn batch_shape<P: StepPool>(pool: &P, batch: &[Entry], books: &mut Books) -> StepShape {
    let mut shape = StepShape::default();
    for &(r, nt, decoding) in batch {
        let (computed, held) = pool.counts(r);
        add_entry(&mut shape, books.log.as_mut(), r, nt, computed, held, decoding);
    }
    books.end_batch();
    shape
}

/// A whole run of a per-step loop over a validated workload: rule 1 and the idle jump, then
/// each step planned, priced and sampled.
pub(crate) fn run_steps<P: StepPool, H: StepHooks<P>>(
    pool: &mut P,
    hooks: &mut H,
    params: &ContinuousParams,
    w: &Workload<'_>,
    rec: &mut Recorder<'_>,
    books: &mut Books,
) -> CoreResult<()> {
    let n = w.len();
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let mut running: Vec<usize> = Vec::new();
    let mut batch: Vec<Entry> = Vec::new();
    let mut next = 0; // first request not arrived yet
    let mut t = 0.0f64;
    loop {
        arrive(params, w, t, &mut next, &mut waiting, &mut books.reject_code, rec); // rule 1
        if waiting.is_empty() && running.is_empty() {
            if next == n {
                return Ok(());
            }
            t = w.arrival_s[next]; // idle: jump to the next arrival
            continue;
        }
        let plan = plan_step(pool, params, &mut running, &mut waiting, &mut batch, books, rec, t)?;
        let extra_s = hooks.extra_s(pool, &mut batch, plan.budget);
        let shape = batch_shape(pool, &batch, books);
        let end = if extra_s > 0.0 { rec.step_plus(t, shape, extra_s) } else { rec.step(t, shape) };
        let mut finished = false;
        for (e, &(r, nt, _)) in batch.iter().enumerate() {
            finished |= hooks.sample(pool, rec, e, r, nt, end)?;
        }
        if finished {
            running.retain(|&r| !hooks.done(pool, r));
        }
        books.end_step(pool.blocks_used(), plan.n_preempted, plan.n_admitted);
        hooks.end_step(pool, &waiting, &running);
        t = end;
    }
}

impl ContinuousParams {
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

/// Rule 1 (`servelab.engine.scheduler`) at `t`, for the requests from `*next` on: each joins
/// `waiting` or is rejected with its reason ([`ContinuousParams::unservable`]). Shared by every
/// continuous-batching loop.
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

/// Rule 6 for request `r`, all of whose tokens are computed at `end`: it samples `sampled` (1,
/// or more with speculation; the first sets `first_token_s`); the last (`output` of them)
/// finishes it and frees its blocks. Returns whether it finished.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn sample_token(rec: &mut Recorder<'_>, kv: &mut KvCounts, s: &mut Req, state: &mut u8, r: usize, sampled: i64, output: i64, end: f64) -> bool {
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

/// The requests and pool by counts as the rules see them, for [`super::per_step`] and the
/// per-step path of [`super::event_driven`]: `c` is the computed tokens of a
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
    #[inline(always)]
    pub(crate) fn compute(&mut self, rec: &mut Recorder<'_>, r: usize, nt: i64, sampled: i64, output: i64, end: f64) -> bool {
        let s = &mut self.req[r];
        s.c += nt;
        s.c >= s.held as i64 && sample_token(rec, self.kv, s, &mut self.state[r], r, sampled, output, end)
    }
}

impl ReqPool<'_> {
    /// Rule 6 for an event-driven loop's prefill pieces, in order, in the step ending at `end`:
    /// each one's tokens computed; a completed prefill samples a token ([`sample_token`]) and,
    /// unless that was its last, decodes: `decodes(r, req)` hands it to the loop's decoders.
    /// The completed ones are the first pieces (only the last can be a partial chunk); returns
    /// how many they are.
    #[inline(always)]
    pub(crate) fn end_pieces(&mut self, rec: &mut Recorder<'_>, pieces: &[Piece], ol: &[i64], end: f64, mut decodes: impl FnMut(usize, &mut Req)) -> usize {
        let mut completed = 0;
        for &(r, nt, _) in pieces {
            let s = &mut self.req[r];
            s.c += nt;
            if s.c < s.held as i64 {
                break;
            }
            completed += 1;
            if !sample_token(rec, self.kv, s, &mut self.state[r], r, 1, ol[r], end) {
                self.state[r] = DECODING;
                decodes(r, s);
            }
        }
        completed
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

/// What the twin asks of a KV pool and its requests beyond the rules' [`StepPool`]: rule 6,
/// and what speculation reads and writes. Two pools answer: by counts ([`ReqPool`]) and
/// prefix-cached ([`PrefixPool`]).
pub(crate) trait TwinPool: StepPool {
    /// Output tokens `r` has sampled.
    fn generated(&self, r: usize) -> i64;
    /// Blocks a new slot may take now (with prefix caching: free cached ones too, evicted).
    fn free_blocks(&self) -> i64;
    fn block_size(&self) -> i64;
    /// Rule 6's part of speculation for request `r`, whose entry made `(g, kept)`: the kept
    /// guesses take their slots now (reserved by [`super::per_step::speculate`]), the others' KV is dropped.
    fn keep_guesses(&mut self, r: usize, guess: (i64, i64)) -> CoreResult<()>;
    /// Rule 6 for request `r`, which computed `nt` tokens in the step ending at `end`: once
    /// all its tokens are computed, it samples `sampled` of its `output`. Returns whether it
    /// finished.
    fn end_entry(&mut self, rec: &mut Recorder<'_>, r: usize, nt: i64, sampled: i64, output: i64, end: f64) -> CoreResult<bool>;
    /// Whether `r` has sampled its last token.
    fn is_done(&self, r: usize) -> bool;
    /// Seconds the pool adds to the step being planned (a host tier's copies back).
    fn copies_s(&mut self) -> f64 {
        0.0
    }
    /// The KV blocks `r` holds (`servelab trace`).
    fn blocks_of(&self, r: usize) -> i64;
}

impl TwinPool for ReqPool<'_> {
    #[inline]
    fn generated(&self, r: usize) -> i64 {
        self.req[r].generated as i64
    }

    #[inline]
    fn free_blocks(&self) -> i64 {
        self.kv.num_free_blocks()
    }

    #[inline]
    fn block_size(&self) -> i64 {
        self.kv.block_size()
    }

    #[inline]
    fn keep_guesses(&mut self, r: usize, (g, kept): (i64, i64)) -> CoreResult<()> {
        let bs = self.kv.block_size();
        let s = &mut self.req[r];
        let held = s.held as i64;
        self.kv.take(blocks_for(held + kept, bs) - blocks_for(held, bs));
        s.held += kept as i32;
        s.c -= g - kept;
        Ok(())
    }

    #[inline]
    fn end_entry(&mut self, rec: &mut Recorder<'_>, r: usize, nt: i64, sampled: i64, output: i64, end: f64) -> CoreResult<bool> {
        Ok(self.compute(rec, r, nt, sampled, output, end))
    }

    #[inline]
    fn is_done(&self, r: usize) -> bool {
        self.state[r] == DONE
    }

    fn blocks_of(&self, r: usize) -> i64 {
        blocks_for(self.req[r].held as i64, self.kv.block_size())
    }
}
