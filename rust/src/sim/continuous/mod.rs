//! Continuous batching (§4.5 policy 3: Orca's iteration-level scheduling over vLLM's paged KV
//! pool, §2.4 and §3.5), simulated. The rules are those of `servelab.engine.scheduler`, the one
//! authority (its module docstring numbers them 1-6); on the same requests these loops and the
//! engine, which runs real tokens on tiny_llm, make the same batches step for step.
//!
//! This file is the vocabulary every loop shares: the card's parameters, the outputs, the
//! reject codes, the KV pool by counts and a request's state. The rest, one job a file:
//!
//! * [`rules`]: rules 1-6 carried out on a step that visits every running request, the only
//!   code for them;
//! * [`per_step`]: the per-step twin, which runs [`rules`] step by step with any mix of the
//!   features (prefix caching, its host tier, speculation, the record for `servelab trace`):
//!   the reference every faster loop is held equal to;
//! * [`event_driven`]: the one event loop, an optimisation of [`rules`] that prices a step from
//!   integer totals and visits a request only at its events (and runs [`rules`] itself in the
//!   rare step that preempts), over a part: the pool by counts with plain decoders (its own),
//!   speculation's ([`speculation`]) or prefix caching's ([`prefix_events`]);
//! * [`prefix`]: prefix caching's KV pool for the loops, over one of two allocators:
//!   `prefix_pool` (exact keys: the default) or `prefix_alloc` (the real block allocator: with
//!   a host tier), both on `prefixes` (which prompts share what);
//! * [`prefix_events`]: prefix caching's part of the event loop (the default with prefix
//!   caching), bit for bit the twin's run;
//! * [`speculation`]: speculation's part of the event loop, its decoders columns of their own
//!   (`spec_decoders`), bit for bit the twin's speculative run;
//! * [`aggregates`]: what the event-driven loops share beside the rules (the decoders as
//!   aggregates, the end of their rare rules step);
//! * [`trace`]: the per-step record of the queues and the KV pool (`servelab trace`).
//!
//! # The KV pool, by counts
//!
//! Without prefix caching, `blocks`' allocator decides success or failure from counts alone:
//! `allocate` of `n` tokens needs `ceil(n / block_size)` free blocks, `append` needs one new
//! block exactly when the sequence's token count is a multiple of `block_size`, and `free`
//! returns every block of the sequence. [`KvCounts`] keeps just those counts (no token ids, no
//! block tables), so a run of a million requests needs no memory per token; the test
//! `counts_agree_with_the_block_allocator` replays the same operations on the real allocator.
//! There is no prefix caching in those counts: the simulator knows lengths, not tokens, so it
//! cannot tell which prompts share a prefix unless told ([`prefix`]).

mod aggregates;
pub mod event_driven;
pub mod per_step;
pub mod prefix;
mod prefix_alloc;
pub mod prefix_events;
mod prefix_pool;
mod prefixes;
pub(crate) mod rules;
mod spec_decoders;
pub mod speculation;
pub mod trace;

use crate::blocks::{MAX_BLOCK_SIZE, MAX_NUM_BLOCKS};
use crate::cost::Pricer;
use crate::error::{CoreError, CoreResult};
use crate::sim::{SimOutput, Workload};

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
}

/// What every continuous-batching loop is given, whichever runs: the card's step prices, the
/// requests, the card's parameters, and what to keep beside the output (the per-step trace,
/// the batch log). The loops' own options (speculation, prefix caching) come beside it.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    pub pricer: &'a Pricer,
    pub w: &'a Workload<'a>,
    pub params: &'a ContinuousParams,
    pub trace: bool,
    pub batch_log: bool,
}

impl<'a> Inputs<'a> {
    pub fn new(pricer: &'a Pricer, w: &'a Workload<'a>, params: &'a ContinuousParams, trace: bool, batch_log: bool) -> Self {
        Inputs { pricer, w, params, trace, batch_log }
    }
}

/// Blocks that hold `tokens` slots (`tokens >= 0`, `block_size >= 1`): `ceil(tokens / bs)`.
pub(crate) fn blocks_for(tokens: i64, block_size: i64) -> i64 {
    (tokens + block_size - 1) / block_size
}

/// The block allocator of `blocks` without prefix caching, reduced to what decides success:
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

    pub fn block_size(&self) -> i64 {
        self.block_size
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

/// Where a request is (one byte per request).
pub(crate) const WAITING: u8 = 0; // not arrived yet, waiting, preempted or rejected
pub(crate) const PREFILLING: u8 = 1; // running, some of its tokens not computed yet
pub(crate) const DECODING: u8 = 2; // running, all its tokens computed: it decodes one token a step
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

/// Requests are kept as u32 indices (and counted in u32 per block residue).
pub(crate) fn check_count(n: usize) -> CoreResult<()> {
    if n > u32::MAX as usize {
        return Err(CoreError::invalid(format!(
            "arrival_s must hold at most {} requests for continuous batching, got {n} (split the workload)",
            u32::MAX
        )));
    }
    Ok(())
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::BlockAllocator;
    use crate::sim::test_util::rng;

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
}
