//! What the event-driven loops share beside the rules: the decoding requests kept as
//! aggregates ([`Decoders`], for [`super::event_driven`] and [`super::prefix_events`]; the
//! first's module docs say why a step of them costs O(1) plus its events), and the pass that
//! ends every loop's rare rules step, returning the running requests to the loop's own arrays
//! ([`StepReturn`], for both loops, whichever decoders' part).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{BatchLog, DECODING};
use crate::error::{CoreError, CoreResult};
use crate::sim::StepShape;

/// The key of [`Decoders`]' finish heap, compared field by field: the step in which a decoder
/// samples its last token, then the loop's tie-break `T` (none, or the admission count where
/// the allocator must hear of the finishes in running order: `prefix_events.rs`), then the
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct FinishAt<T> {
    pub(super) last: i64,
    pub(super) tie: T,
    pub(super) r: u32,
}

/// The decoding requests, by their aggregates: each stores the offset `c = computed - step`,
/// which stays put while it decodes, so what a step of them costs and which events (a block
/// boundary, a last token) fall in which step are known without visiting them.
pub(super) struct Decoders<T: Ord + Copy> {
    /// decoding requests in admission order (the order of `running` in the rules); entries of
    /// finished requests stay as tombstones until the next compaction
    pub(super) order: Vec<u32>,
    pub(super) live: i64,
    /// sum of `c` over the live ones: the step's context tokens are `sum_c + live * step`
    sum_c: i128,
    /// how many live ones have `c` congruent to `k` modulo `block_size`: those whose held slots
    /// are a multiple of `block_size` in step `s` (they need a new block) have `k = -s mod bs`
    by_residue: Vec<u32>,
    /// when each live one samples its last token, earliest first
    finish: BinaryHeap<Reverse<FinishAt<T>>>,
}

impl<T: Ord + Copy> Decoders<T> {
    pub(super) fn new(block_size: i64) -> Self {
        Decoders {
            order: Vec::new(),
            live: 0,
            sum_c: 0,
            // a block size is at most MAX_BLOCK_SIZE (65,536): one counter per residue
            by_residue: vec![0; block_size as usize],
            finish: BinaryHeap::new(),
        }
    }

    #[inline(always)]
    pub(super) fn block_size(&self) -> i64 {
        self.by_residue.len() as i64
    }

    /// Request `r`, of offset `c`, joins at the end of the admission order; it samples its last
    /// token in step `last` (`tie`: the loop's tie-break).
    #[inline]
    pub(super) fn push(&mut self, r: usize, c: i64, last: i64, tie: T) {
        self.order.push(r as u32);
        self.live += 1;
        self.sum_c += c as i128;
        let k = c.rem_euclid(self.block_size()) as usize;
        self.by_residue[k] += 1;
        self.finish.push(Reverse(FinishAt { last, tie, r: r as u32 }));
    }

    /// A live one of offset `c` leaves (it finished, or the rules' step takes it over; its
    /// `order` entry becomes a tombstone).
    #[inline]
    pub(super) fn remove(&mut self, c: i64) {
        self.live -= 1;
        self.sum_c -= c as i128;
        let k = c.rem_euclid(self.block_size()) as usize;
        self.by_residue[k] -= 1;
    }

    /// How many of them need a new block in step `step`.
    #[inline(always)]
    pub(super) fn crossing(&self, step: i64) -> i64 {
        self.by_residue[(-step).rem_euclid(self.block_size()) as usize] as i64
    }

    /// The next request whose last token step `step` samples (the heap's front), taken off the
    /// heap; `None` once none is left. The caller [`Self::remove`]s it.
    #[inline(always)]
    pub(super) fn pop_finished(&mut self, step: i64) -> Option<usize> {
        let &Reverse(FinishAt { last, r, .. }) = self.finish.peek()?;
        if last > step {
            return None;
        }
        debug_assert_eq!(last, step, "a decoding request outlived its last token");
        self.finish.pop();
        Some(r as usize)
    }

    /// Rule 2 for all of them in step `step`, one token each, and their share of the step's
    /// shape (rule 5) from the aggregates; the batch log, when kept, is the only thing that
    /// visits them (`offset(r)`: decoder `r`'s `c`).
    #[inline(always)]
    pub(super) fn shape(&self, step: i64, log: Option<&mut BatchLog>, state: &[u8], offset: impl Fn(usize) -> i64) -> StepShape {
        let ctx = self.sum_c + (self.live as i128) * (step as i128);
        if let Some(l) = log {
            for &r in &self.order {
                if state[r as usize] == DECODING {
                    l.request_id.push(r as i64);
                    l.new_tokens.push(1);
                    l.context_len.push(offset(r as usize) + step);
                }
            }
        }
        StepShape { seqs: self.live, tokens: self.live, keys: ctx + self.live as i128, ctx_tokens: ctx, n_prefill: 0, n_decode: self.live }
    }

    /// Drops the tombstones from `order` once they outnumber the live entries (by a margin).
    #[inline(always)]
    pub(super) fn compact(&mut self, state: &[u8]) {
        if self.order.len() > 2 * self.live as usize + 64 {
            self.order.retain(|&r| state[r as usize] == DECODING);
        }
    }

    pub(super) fn clear(&mut self) {
        self.order.clear();
        self.live = 0;
        self.sum_c = 0;
        self.by_residue.iter_mut().for_each(|k| *k = 0);
        self.finish.clear();
    }
}

/// An event-driven loop's requests as its rules step (rule 3 preempted, and the step ran the
/// rules of [`super::rules`] on every running request) leaves them, each loop over its own
/// state: where [`return_running`] sends each one.
pub(super) trait StepReturn {
    /// Whether `r` sampled its last token (then it is marked done and goes nowhere).
    fn finished(&mut self, r: usize) -> bool;
    /// Whether all of `r`'s tokens are computed: it decodes from the next step on.
    fn decodes(&self, r: usize) -> bool;
    /// `r` joins the decoders at the end of the running order, decoding from step `step` on.
    fn push_decoder(&mut self, r: usize, step: i64);
    /// `r`, its prompt not all computed, joins the prefilling requests at the end.
    fn push_prefilling(&mut self, r: usize);
}

/// The end of the rules' step at `t`: the requests of `running` (in running order, the loop's
/// prefilling list emptied into it before the step) back to the loop's arrays, the decoding ones
/// first, the prefilling ones after, decoding from `next_step` on. A request is only admitted
/// once every older one is decoding or ends its prefill in that step (a partial chunk uses up
/// the budget), so the prefilling ones are a suffix of `running`; a decoder after one would be
/// a bug, reported, never papered over.
pub(super) fn return_running(l: &mut impl StepReturn, running: &[usize], t: f64, next_step: i64) -> CoreResult<()> {
    let mut prefilling = false;
    for &r in running {
        if l.finished(r) {
            continue;
        }
        if l.decodes(r) {
            if prefilling {
                return Err(CoreError::invalid(format!("internal error: at t={t} request {r} decodes after a prefilling request")));
            }
            l.push_decoder(r, next_step);
        } else {
            prefilling = true;
            l.push_prefilling(r);
        }
    }
    Ok(())
}
