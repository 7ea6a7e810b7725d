//! Rules 1-6 of continuous batching (numbered in `continuous.rs`'s module docs) for a step that
//! visits every running request, written once. Three loops step this way:
//! `continuous_per_step.rs` (the baseline, and speculative decoding), `continuous_prefix.rs`
//! (over the real block allocator) and the rare preempting step of the event-driven
//! `continuous.rs`, whose fast path also admits through [`admit`]. Each loop says through
//! [`StepPool`] how its requests and its KV pool answer; the functions are generic, so each loop
//! gets its own machine code and pays nothing for the others.

use std::collections::VecDeque;

use super::continuous::{add_entry, arrive, BatchLog, ContinuousOutput, ContinuousParams, StepExtra, REJECT_NONE};
use super::{Recorder, StepShape, Workload};
use crate::error::{CoreError, CoreResult};

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

/// Rules 2-4 of the step starting at `t`: the running requests, oldest admitted first, while
/// the budget lasts (a prefilling one takes a chunk of its prompt, a decoding one a slot, for
/// which rule 3 preempts the newest running requests), then admission if nobody was preempted.
/// Fills `batch`; an empty batch is an error.
#[allow(clippy::too_many_arguments)]
#[inline]
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
        n_admitted = admit(pool, params, 0, running, waiting, &mut budget, rec, t, |r, nt| batch.push((r, nt, false)))?;
    }
    if batch.is_empty() {
        return Err(nothing_scheduled(t));
    }
    Ok(Plan { budget, n_preempted, n_admitted })
}

/// Rule 4: strict FCFS admission at `t` while seats (`others` running elsewhere plus
/// `running`), `budget` and blocks last; each admitted request joins `running` and hands
/// `piece(request, new tokens)` its first piece. Returns how many it admitted.
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
    mut piece: impl FnMut(usize, i64),
) -> CoreResult<i64> {
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
        piece(r, nt);
        n_admitted += 1;
        *budget -= nt;
    }
    Ok(n_admitted)
}

/// Rule 5: the batch's shape (integer totals) and its row of the batch log.
#[inline]
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
        t = end;
    }
}
