//! The event loop over the KV pool by counts, the default: an optimisation of [`super::rules`]
//! that makes the same steps without visiting every running request in every step. The rules
//! themselves (what a step does, in which order) are `servelab.engine.scheduler`'s; this file
//! only changes how much each step costs to compute, never what it decides.
//!
//! It is the one event loop: what differs between features is a *part* it drives ([`Part`]):
//! the requests and KV pool by counts ([`Counts`]) with decoders that are plain, kept as
//! aggregates ([`Plain`], below), or speculative (`speculation.rs` over `spec_decoders.rs`, a
//! cost per decoder); or prefix caching's pool with plain decoders (`prefix_events.rs`). The
//! arrivals, the order of a step's rules, the idle jump and the clock are this loop's for every
//! part; each part is held bit for bit equal to the per-step twin (`per_step.rs`) with the
//! same features, and the mixes no part carries (speculation with prefix caching, a recorded
//! run) run on the twin.
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
//! then costs O(1) plus its events: arrivals, admissions, prefill chunks, finishes
//! ([`Card::event_step`], each of its parts named for the rule it stands in for).
//!
//! The rare step in which the pool runs out of blocks (rule 3 preempts) runs the rules
//! themselves ([`Card::rules_step`]): the offsets are turned back into counts, the step runs as
//! in [`super::per_step`], and the aggregates are rebuilt. The clock is bit for bit that of the
//! per-step loop: the step's totals are exact integers, priced by the same [`Pricer`]
//! arithmetic and added to the clock one step at a time (`t + a + a` is not `t + 2a` in floating
//! point: no step is skipped). `tests/test_sim_events.py` checks it on 200 random workloads
//! against the per-step loop, which stays available to the tests and the benchmark (`per_step`
//! in the bindings).
//!
//! When nothing is waiting or running, the clock jumps to the next arrival (the engine logs an
//! idle step of cost 0 there instead; the batches are the same).
//!
//! # Memory
//!
//! Per request a fixed number of words (its 16-byte state, one state byte and its output
//! columns); the waiting queue and the running list hold indices. Per-step data (the trace, the
//! batch log) is kept only when asked for.

use std::collections::VecDeque;

use super::aggregates::{self, return_running, StepReturn};
use super::rules::{
    add_entry, admit, arrive, batch_shape, counter_overflow, nothing_scheduled, plan_step, prefill_pieces, Books, Entry,
    Piece, Plan, ReqPool,
};
use super::{check_count, BatchLog, ContinuousOutput, ContinuousParams, Inputs, KvCounts, Req, DECODING, DONE, PREFILLING, WAITING};
use crate::cost::Pricer;
use crate::error::CoreResult;
use crate::sim::{Recorder, StepShape, Workload};

/// The decoding requests, as a part the event loop drives: what a step does to them and what
/// they add to the rare rules step. The loop calls them in the per-step twin's order, so that
/// every part makes the twin's steps.
pub(crate) trait Decode {
    /// How many decode.
    fn live(&self) -> i64;
    /// How many take a new block for the token of step `step` (rule 2: more than are free and
    /// rule 3 preempts, which runs the rules step instead).
    fn crossing(&self, step: i64) -> i64;
    /// Rule 2 for all of them in step `step`, once the pool gave their [`Self::crossing`]
    /// blocks and the prefill pieces and admissions are planned, `left` of the token budget
    /// unused (speculation's guesses take it, and rule 6's kept guesses their blocks). Returns
    /// their share of the step's shape (rule 5; their batch log entries into `log`, when kept)
    /// and the seconds they add to the step (the draft's).
    fn step(&mut self, step: i64, left: i64, pool: &mut ReqPool<'_>, log: Option<&mut BatchLog>) -> (StepShape, f64);
    /// Rule 6 for those whose last token step `step` sampled, in running order: each frees its
    /// blocks and finishes at `end`.
    fn retire(&mut self, step: i64, end: f64, pool: &mut ReqPool<'_>, rec: &mut Recorder<'_>, ol: &[i64]);
    /// Request `r` (its counts `req`: all its tokens computed after step `step - 1`; prompt
    /// `p`, `out` output tokens) joins at the end of the running order.
    fn push(&mut self, r: usize, req: &mut Req, p: i64, out: i64, step: i64);
    /// All of them leave before step `step`, in running order, their counts turned back
    /// (`req`): each is pushed on `running` (the rules step takes them over).
    fn drain(&mut self, step: i64, pool: &mut ReqPool<'_>, ol: &[i64], running: &mut Vec<usize>);
    /// Housekeeping at the end of an event step.
    #[inline(always)]
    fn compact(&mut self, _state: &[u8]) {}
    /// The rules step's part: what they add to the planned `batch` (speculation widens the
    /// decoding entries within `budget`) and the seconds it costs.
    #[inline(always)]
    fn plan_extra(&mut self, _pool: &ReqPool<'_>, _ol: &[i64], _budget: i64, _batch: &mut [Entry]) -> f64 {
        0.0
    }
    /// The rules step's rule 6 for entry `e` (request `r`): the tokens it samples once its
    /// tokens are all computed (1, or `1 + kept` with speculation, whose slots it takes now).
    #[inline(always)]
    fn sampled(&mut self, _pool: &mut ReqPool<'_>, _e: usize, _r: usize) -> CoreResult<i64> {
        Ok(1)
    }
}

/// The plain decoding requests ([`aggregates::Decoders`], the heap's ties broken by request):
/// one token each a step, at a cost per event (module docs).
pub(crate) struct Plain(aggregates::Decoders<()>);

impl Plain {
    pub(super) fn new(block_size: i64) -> Plain {
        Plain(aggregates::Decoders::new(block_size))
    }
}

impl Decode for Plain {
    #[inline(always)]
    fn live(&self) -> i64 {
        self.0.live
    }

    #[inline(always)]
    fn crossing(&self, step: i64) -> i64 {
        self.0.crossing(step)
    }

    /// Their share of the step's shape from the aggregates; the batch log, when kept, is the
    /// only thing that visits them.
    #[inline(always)]
    fn step(&mut self, step: i64, _left: i64, pool: &mut ReqPool<'_>, log: Option<&mut BatchLog>) -> (StepShape, f64) {
        let req = &pool.req;
        (self.0.shape(step, log, pool.state, |r| req[r].c), 0.0)
    }

    /// Those whose last token step `step` samples (known since they started decoding: the
    /// heap's front).
    #[inline(always)]
    fn retire(&mut self, step: i64, end: f64, pool: &mut ReqPool<'_>, rec: &mut Recorder<'_>, _ol: &[i64]) {
        while let Some(r) = self.0.pop_finished(step) {
            let c = pool.req[r].c;
            self.0.remove(c);
            pool.kv.free(c + step + 1); // it held every computed token
            pool.state[r] = DONE;
            rec.set_finish(r, end);
        }
    }

    /// `req.c` becomes its offset (module docs).
    #[inline]
    fn push(&mut self, r: usize, req: &mut Req, p: i64, out: i64, step: i64) {
        let c = req.c - step;
        req.c = c;
        // after step s it has generated c + s + 2 - p tokens: the last one comes in step
        // out + p - 2 - c (>= step, since it has not generated all of them yet)
        self.0.push(r, c, out + p - 2 - c, ());
    }

    fn drain(&mut self, step: i64, pool: &mut ReqPool<'_>, _ol: &[i64], running: &mut Vec<usize>) {
        for &r in &self.0.order {
            let r = r as usize;
            if pool.state[r] == DECODING {
                let computed = pool.req[r].c + step;
                pool.req[r] = Req { c: computed, held: computed as i32, generated: (computed + 1 - pool.pl[r]) as i32 };
                running.push(r);
            }
        }
        self.0.clear();
    }

    #[inline(always)]
    fn compact(&mut self, state: &[u8]) {
        self.0.compact(state);
    }
}

/// Runs continuous batching over a validated workload, at a cost per event (arrival,
/// admission, end of a prefill chunk, finish, preemption) rather than per sequence-step; the
/// module docs say how, and why the clock's bits are those of the per-step twin
/// ([`super::per_step::run_per_step`]).
pub fn run(inp: &Inputs<'_>) -> CoreResult<ContinuousOutput> {
    let mut card = Card::new(inp.pricer, inp.params, inp.w.len(), inp.trace, inp.batch_log)?;
    card.advance(inp.w, f64::INFINITY)?;
    Ok(card.finish())
}

/// What the event loop asks of its requests, its KV pool and its decoding requests together
/// (a *part*): the pool by counts with plain or speculative decoders ([`Counts`]), or prefix
/// caching's pool with plain decoders (`prefix_events.rs`). The loop calls them in the per-step
/// twin's order of rules, so that every part makes the twin's steps.
pub(crate) trait Part {
    /// Makes room for requests up to `n` (a resumable card is handed requests as it runs).
    fn grow(&mut self, n: usize) -> CoreResult<()>;
    /// How many requests decode.
    fn live(&self) -> i64;
    /// Whether step `step` must preempt (rule 3): more decoders take a block than are free.
    fn runs_short(&self, step: i64) -> bool;
    /// Rule 2 for the decoders' slots of step `step`, before anything else of the step (the
    /// prefill pieces and admissions find the pool as the twin's rules leave it).
    fn take_slots(&mut self, step: i64) -> CoreResult<()>;
    /// Rule 2 for the prefilling requests and rule 4 (nobody was preempted), through the rules'
    /// own [`prefill_pieces`] and [`admit`], `left` of the token budget: the step's pieces
    /// beside the decoders, each admitted request's first one last. Returns how many it
    /// admitted.
    #[allow(clippy::too_many_arguments)]
    fn plan_pieces(
        &mut self, w: &Workload<'_>, params: &ContinuousParams, prefilling: &mut Vec<usize>, waiting: &mut VecDeque<usize>,
        left: &mut i64, pieces: &mut Vec<Piece>, rec: &mut Recorder<'_>, t: f64,
    ) -> CoreResult<i64>;
    /// The decoders' part of step `step` once the pieces are planned (`left` of the budget
    /// unused): their share of the shape (their batch log entries into `log`) and the seconds
    /// the step adds beside its forward (a draft's steps, a host tier's copies).
    fn decode(&mut self, w: &Workload<'_>, step: i64, left: i64, log: Option<&mut BatchLog>) -> (StepShape, f64);
    /// The token slots request `r` holds (rule 5 for a prefill piece).
    fn held(&self, r: usize) -> i64;
    /// Rule 6 for the decoders whose last token step `step` sampled, in running order: each
    /// frees its blocks and finishes at `end`.
    fn retire(&mut self, w: &Workload<'_>, step: i64, end: f64, rec: &mut Recorder<'_>) -> CoreResult<()>;
    /// Rule 6 for the prefill pieces, in order: a completed prefill samples a token and, unless
    /// that was its last, decodes from step `next_step` on. Returns how many completed (only
    /// the last piece can be a partial chunk).
    fn end_pieces(&mut self, w: &Workload<'_>, pieces: &[Piece], next_step: i64, end: f64, rec: &mut Recorder<'_>) -> CoreResult<usize>;
    /// Housekeeping at the end of an event step.
    fn compact(&mut self) {}
    fn blocks_used(&self) -> i64;
    /// The rare step in which the pool runs out of blocks: the rules themselves on every
    /// running request (the decoders turned back into counts, then handed back). Returns the
    /// step's end and the plan.
    fn rules_step(&mut self, w: &Workload<'_>, c: RulesStep<'_, '_>, t: f64, step: i64) -> CoreResult<(f64, Plan)>;
}

/// What the loop hands a part's rules step: the card's parameters, its books and queues.
pub(crate) struct RulesStep<'a, 'r> {
    pub(crate) params: &'a ContinuousParams,
    pub(crate) rec: &'a mut Recorder<'r>,
    pub(crate) books: &'a mut Books,
    pub(crate) waiting: &'a mut VecDeque<usize>,
    pub(crate) prefilling: &'a mut Vec<usize>,
    pub(crate) running: &'a mut Vec<usize>,
    pub(crate) batch: &'a mut Vec<Entry>,
}

/// One card running the event loop, resumable: it can stop at any time `t`, be handed more
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
pub(crate) struct Card<'p, X: Part = Counts<Plain>> {
    params: ContinuousParams,
    rec: Recorder<'p>,
    books: Books,
    part: X,
    waiting: VecDeque<usize>,
    /// the running requests that are not decoding, in admission order: they always come after
    /// every decoding one in the rules' `running` order (see [`return_running`])
    prefilling: Vec<usize>,
    /// the step's prefill pieces
    pieces: Vec<Piece>,
    /// buffers of the rules step, kept between its (rare) steps
    running: Vec<usize>,
    batch: Vec<Entry>,
    /// first request not arrived yet
    next: usize,
    /// steps run so far
    step: i64,
    /// the clock: when the next step may start
    t: f64,
}

impl<'p> Card<'p, Counts<Plain>> {
    /// An empty card; `n` requests' worth of columns are allocated up front (more grow as
    /// needed).
    pub fn new(pricer: &'p Pricer, params: &ContinuousParams, n: usize, trace: bool, batch_log: bool) -> CoreResult<Self> {
        Card::with_part(pricer, params, n, trace, batch_log, Counts::new(params, n, Plain::new(params.block_size))?)
    }
}

impl<'p, X: Part> Card<'p, X> {
    /// [`Card::new`] with the requests, pool and decoders kept by `part` (with room for `n`
    /// requests).
    pub(super) fn with_part(pricer: &'p Pricer, params: &ContinuousParams, n: usize, trace: bool, batch_log: bool, part: X) -> CoreResult<Self> {
        params.validate()?;
        check_count(n)?;
        Ok(Card {
            params: *params,
            rec: Recorder::new(pricer, n, trace),
            books: Books::new(n, trace, batch_log),
            part,
            waiting: VecDeque::new(),
            prefilling: Vec::new(),
            pieces: Vec::new(),
            running: Vec::new(),
            batch: Vec::new(),
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
        self.grow(w.len())?;
        // the counters live in locals while the loop runs (registers, not memory)
        let (mut next, mut step, mut t) = (self.next, self.step, self.t);
        loop {
            arrive(&self.params, w, t, &mut next, &mut self.waiting, &mut self.books.reject_code, &mut self.rec); // rule 1
            if self.waiting.is_empty() && self.part.live() == 0 && self.prefilling.is_empty() {
                if next == w.len() {
                    break; // done, unless more requests come
                }
                t = w.arrival_s[next]; // idle: jump to the next arrival
                continue;
            }
            if t >= until {
                break;
            }
            let after = step.checked_add(1).ok_or_else(counter_overflow)?;
            // rule 3 preempts when more decoders take a block than are free (the budget never
            // cuts the decoders short: every running request took at least one token of the
            // budget in the step that admitted or ran it, so at most max_num_batched_tokens
            // run; the test is a guard)
            let short = self.part.live() > self.params.max_num_batched_tokens || self.part.runs_short(step);
            t = if short { self.rules_step(w, t, step)? } else { self.event_step(w, t, step)? };
            step = after;
        }
        (self.next, self.step, self.t) = (next, step, t);
        Ok(())
    }

    /// Makes room for the requests of a workload of `n` (a router hands them over as it goes).
    fn grow(&mut self, n: usize) -> CoreResult<()> {
        if n > self.books.reject_code.len() {
            check_count(n)?;
            self.part.grow(n)?;
            self.rec.grow(n);
            self.books.grow(n);
        }
        Ok(())
    }

    /// A step in which nobody is preempted, from integer totals: the decoding requests as one
    /// part, the prefill pieces and admissions one by one. Each part stands in for the rule it
    /// names and makes the same decision. Returns the step's end.
    #[inline(always)]
    fn event_step(&mut self, w: &Workload<'_>, t: f64, step: i64) -> CoreResult<f64> {
        self.part.take_slots(step)?; // rule 2: each decoder's slot for this step's token
        let mut left = self.params.max_num_batched_tokens - self.part.live();
        let Card { params, rec, books, part, waiting, prefilling, pieces, .. } = self;
        let n_admitted = part.plan_pieces(w, params, prefilling, waiting, &mut left, pieces, rec, t)?; // rule 2, prefilling requests; rule 4
        if part.live() == 0 && pieces.is_empty() {
            return Err(nothing_scheduled(t));
        }
        let (mut shape, extra_s) = part.decode(w, step, left, books.log.as_mut()); // rule 2, decoders
        for &(r, nt, c) in pieces.iter() {
            add_entry(&mut shape, books.log.as_mut(), r, nt, c, part.held(r), false); // rule 5
        }
        books.end_batch();
        let end = if extra_s > 0.0 { rec.step_plus(t, shape, extra_s) } else { rec.step(t, shape) };
        part.retire(w, step, end, rec)?; // rule 6, decoders
        let completed = part.end_pieces(w, pieces, step + 1, end, rec)?; // rule 6, prefill pieces
        prefilling.drain(..completed);
        part.compact();
        books.end_step(part.blocks_used(), 0, n_admitted);
        Ok(end)
    }

    /// The rare step in which the pool runs out of blocks (rule 3 preempts): the part's rules
    /// step. Kept out of line: a rare step must not crowd the fast path's registers.
    #[inline(never)]
    fn rules_step(&mut self, w: &Workload<'_>, t: f64, step: i64) -> CoreResult<f64> {
        let Card { params, rec, books, part, waiting, prefilling, running, batch, .. } = self;
        let c = RulesStep { params, rec, books, waiting, prefilling, running, batch };
        let (end, plan) = part.rules_step(w, c, t, step)?;
        self.books.end_step(self.part.blocks_used(), plan.n_preempted, plan.n_admitted);
        Ok(end)
    }

    /// The run so far (after `advance(.., f64::INFINITY)`: the whole run).
    pub fn finish(self) -> ContinuousOutput {
        self.books.finish(self.rec)
    }

    /// [`Card::finish`], and the part (what it counted).
    pub(super) fn finish_with_part(self) -> (ContinuousOutput, X) {
        (self.books.finish(self.rec), self.part)
    }
}

/// The requests and the KV pool by counts, with decoders `D`: the event loop's part without
/// prefix caching.
pub(crate) struct Counts<D: Decode> {
    req: Vec<Req>,
    state: Vec<u8>,
    kv: KvCounts,
    pub(super) dec: D,
}

impl<D: Decode> Counts<D> {
    /// Room for `n` requests (more grow as needed).
    pub(super) fn new(params: &ContinuousParams, n: usize, dec: D) -> CoreResult<Self> {
        params.validate()?;
        Ok(Counts { req: vec![Req::default(); n], state: vec![WAITING; n], kv: KvCounts::new(params.num_blocks, params.block_size), dec })
    }
}

impl<D: Decode> Part for Counts<D> {
    fn grow(&mut self, n: usize) -> CoreResult<()> {
        self.req.resize(n, Req::default());
        self.state.resize(n, WAITING);
        Ok(())
    }

    #[inline(always)]
    fn live(&self) -> i64 {
        self.dec.live()
    }

    #[inline(always)]
    fn runs_short(&self, step: i64) -> bool {
        self.dec.crossing(step) > self.kv.num_free_blocks()
    }

    #[inline(always)]
    fn take_slots(&mut self, step: i64) -> CoreResult<()> {
        self.kv.take(self.dec.crossing(step));
        Ok(())
    }

    #[inline(always)]
    fn plan_pieces(
        &mut self, w: &Workload<'_>, params: &ContinuousParams, prefilling: &mut Vec<usize>, waiting: &mut VecDeque<usize>,
        left: &mut i64, pieces: &mut Vec<Piece>, rec: &mut Recorder<'_>, t: f64,
    ) -> CoreResult<i64> {
        let Counts { req, state, kv, dec } = self;
        let mut pool = ReqPool { pl: w.prompt_len, req, state, kv };
        prefill_pieces(&mut pool, prefilling, left, pieces)?;
        admit(&mut pool, params, dec.live(), prefilling, waiting, left, rec, t, |r, nt, c| pieces.push((r, nt, c)))
    }

    #[inline(always)]
    fn decode(&mut self, w: &Workload<'_>, step: i64, left: i64, log: Option<&mut BatchLog>) -> (StepShape, f64) {
        let Counts { req, state, kv, dec } = self;
        dec.step(step, left, &mut ReqPool { pl: w.prompt_len, req, state, kv }, log)
    }

    #[inline(always)]
    fn held(&self, r: usize) -> i64 {
        self.req[r].held as i64
    }

    #[inline(always)]
    fn retire(&mut self, w: &Workload<'_>, step: i64, end: f64, rec: &mut Recorder<'_>) -> CoreResult<()> {
        let Counts { req, state, kv, dec } = self;
        dec.retire(step, end, &mut ReqPool { pl: w.prompt_len, req, state, kv }, rec, w.output_len);
        Ok(())
    }

    #[inline(always)]
    fn end_pieces(&mut self, w: &Workload<'_>, pieces: &[Piece], next_step: i64, end: f64, rec: &mut Recorder<'_>) -> CoreResult<usize> {
        let (pl, ol) = (w.prompt_len, w.output_len);
        let Counts { req, state, kv, dec } = self;
        let mut pool = ReqPool { pl, req, state, kv };
        Ok(pool.end_pieces(rec, pieces, ol, end, |r, s| dec.push(r, s, pl[r], ol[r], next_step)))
    }

    #[inline(always)]
    fn compact(&mut self) {
        self.dec.compact(&self.state);
    }

    #[inline(always)]
    fn blocks_used(&self) -> i64 {
        self.kv.blocks_used()
    }

    /// The rules as the per-step twin runs them: the decoders turned back into counts, the step
    /// planned, widened by the decoders' part (speculation), priced and sampled, and the
    /// decoders handed back.
    fn rules_step(&mut self, w: &Workload<'_>, c: RulesStep<'_, '_>, t: f64, step: i64) -> CoreResult<(f64, Plan)> {
        let (pl, ol) = (w.prompt_len, w.output_len);
        let RulesStep { params, rec, books, waiting, prefilling, running, batch } = c;
        let Counts { req, state, kv, dec } = self;
        running.clear();
        let mut pool = ReqPool { pl, req, state, kv };
        dec.drain(step, &mut pool, ol, running);
        running.append(prefilling);

        let plan = plan_step(&mut pool, params, running, waiting, batch, books, rec, t)?; // rules 2-4
        let extra_s = dec.plan_extra(&pool, ol, plan.budget, batch);
        let shape = batch_shape(&pool, batch, books); // rule 5
        let end = if extra_s > 0.0 { rec.step_plus(t, shape, extra_s) } else { rec.step(t, shape) };
        for (e, &(r, nt, _)) in batch.iter().enumerate() {
            let sampled = dec.sampled(&mut pool, e, r)?;
            pool.compute(rec, r, nt, sampled, ol[r], end); // rule 6
        }
        let mut back = Back { pool, dec, prefilling, ol };
        return_running(&mut back, running, t, step + 1)?; // back to the decoders' part
        Ok((end, plan))
    }
}

/// Where the rules step's running requests go back to ([`return_running`]).
struct Back<'a, 'b, D: Decode> {
    pool: ReqPool<'a>,
    dec: &'b mut D,
    prefilling: &'b mut Vec<usize>,
    ol: &'a [i64],
}

impl<D: Decode> StepReturn for Back<'_, '_, D> {
    fn finished(&mut self, r: usize) -> bool {
        self.pool.state[r] == DONE
    }

    fn decodes(&self, r: usize) -> bool {
        self.pool.req[r].c == self.pool.req[r].held as i64
    }

    fn push_decoder(&mut self, r: usize, step: i64) {
        self.pool.state[r] = DECODING;
        self.dec.push(r, &mut self.pool.req[r], self.pool.pl[r], self.ol[r], step);
    }

    fn push_prefilling(&mut self, r: usize) {
        self.pool.state[r] = PREFILLING; // it was not decoding in the step
        self.prefilling.push(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::continuous::{REJECT_BLOCKS, REJECT_BUDGET, REJECT_NONE};
    use crate::sim::test_util::{params, price, pricer, random_requests, rng, steps, with_batch1};

    fn go(a: &[f64], p: &[i64], l: &[i64], prm: ContinuousParams) -> ContinuousOutput {
        let w = Workload::new(a, p, l).unwrap();
        run(&Inputs::new(&pricer(), &w, &prm, true, true)).unwrap()
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
            assert_eq!(run(&Inputs::new(&pricer(), &w, &prm, false, false)).unwrap_err().to_string(), msg);
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
        use crate::sim::continuous::per_step::run_per_step;
        let mut rnd = rng(0x9e37_79b9_7f4a_7c15u64);
        for case in 0..300 {
            let (a, p, l, prm) = random_case(&mut rnd);
            let w = Workload::new(&a, &p, &l).unwrap();
            let trace = case % 2 == 0;
            let want = run_per_step(&Inputs::new(&pricer(), &w, &prm, trace, trace));
            let got = run(&Inputs::new(&pricer(), &w, &prm, trace, trace));
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
        let (got, want) = with_batch1(|w| run(&Inputs::new(&pricer(), w, &params(1, 1 << 20, 16, 1 << 16, false), true, false)).unwrap().sim);
        assert_eq!(got.start_s, want.start_s);
        assert_eq!(got.first_token_s, want.first_token_s);
        assert_eq!(got.finish_s, want.finish_s);
        assert_eq!(got.busy_s, want.busy_s);
        assert_eq!(got.batch_id, want.batch_id);
    }
}


