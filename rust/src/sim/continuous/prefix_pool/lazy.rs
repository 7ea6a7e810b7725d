//! The event loop's decoders kept by the exact-key pool (lecture §3.5 with §3.3's decoders as
//! aggregates): no call per decoder per block, the allocator's answers unchanged.
//!
//! # Why a decoder needs no call
//!
//! A decoding request asks two things of the allocator: a new block when its slots reach a
//! block boundary (the front of the free queue, evicting its key: which decoder takes which
//! block never matters, so a step's takes are one bulk of `n` pops, `n` the decoders' count
//! at that residue), and the registration of its key when it fills a block. A fill can only
//! change an answer through the fill's slot (its origin is the decoder itself), and that slot
//! changes between cached and not only where (a) another request registers it, (b) a lookup
//! walks it or (c) an eviction takes it. So a fill is written late, the decoder's slots up to
//! the current step in one [`KeyedPool::materialize`], right before any of these touch its
//! origin, and when it leaves (finish, preemption, the loop's rules step): written then, it
//! wins or loses its slot exactly as it would have at its own step, since nothing between
//! changed whether that slot was cached.
//!
//! # The one race within a step
//!
//! A step's fills come before anything else in it but the other decoders' takes, which run in
//! running order among them: a take that evicts exactly the slot a decoder fills in the same
//! step decides the fill (evicted first, the fill wins the slot; filled first, the fill loses
//! to the cached copy). Only then does the pool ask the loop for the running order (`before`).

use super::{internal, KeyedPool, Seq, NONE};
use crate::error::CoreResult;

impl KeyedPool {
    /// Decoder `r` of offset `offset` is kept: its slots written so far are `tokens`.
    pub(super) fn keep_decoder(&mut self, r: usize, offset: i64) {
        self.seqs[r].offset = offset;
        self.origins[r].lazy = true;
    }

    /// Decoder `r` is no longer kept, its slots written up to step `through`.
    pub(super) fn drop_decoder(&mut self, r: usize, through: i64) -> CoreResult<()> {
        if self.origins[r].lazy {
            self.materialize(r, through)?;
            self.origins[r].lazy = false;
        }
        Ok(())
    }

    /// Kept decoder `o`'s slots up to step `through`'s (its blocks opened, by the bulk takes
    /// already; its full ones offered to the cache, as its fills would have).
    pub(super) fn materialize(&mut self, o: usize, through: i64) -> CoreResult<()> {
        let bs = self.bs;
        let Seq { chain, tokens, offset, .. } = &mut self.seqs[o];
        let target = *offset + through + 1;
        if target <= *tokens {
            return Ok(());
        }
        chain.resize(((target + bs - 1) / bs) as usize, NONE);
        *tokens = target;
        if self.caching {
            self.offer(o, (target / bs) as usize)?;
        }
        Ok(())
    }

    /// The fills of the kept decoders among the segments being looked up, written (a lookup
    /// walks their slots).
    pub(super) fn settle_segments(&mut self) -> CoreResult<()> {
        for i in 0..self.segs.len() {
            let o = self.segs[i].0;
            if self.origins[o].lazy {
                self.materialize(o, self.now)?;
            }
        }
        Ok(())
    }

    /// Key index of slot `e` (its origin's range is live).
    fn key_of(&self, e: u32) -> usize {
        let g = self.origins[self.slots[e as usize].owner as usize];
        (e - g.base + g.first) as usize
    }

    /// Slot `e`, of a kept decoder's origin, is evicted after this step's takes (a prefix
    /// admission's): the decoder's fills up to now come first.
    pub(super) fn settle_evicted(&mut self, e: u32) -> CoreResult<()> {
        let o = self.slots[e as usize].owner as usize;
        if self.key_of(e) >= self.seqs[o].marked {
            self.materialize(o, self.now)?;
        }
        Ok(())
    }

    /// Step `step`'s takes of `n` kept decoders in one bulk (module docs; `before(o)`: how many
    /// of them run before decoder `o`).
    pub(super) fn bulk_take(&mut self, n: i64, step: i64, mut before: impl FnMut(usize) -> i64) -> CoreResult<()> {
        if n > self.free {
            return Err(internal("the decoders' takes found too few free blocks"));
        }
        self.evict(n, |pool, e, k| pool.settle_taken(e, step, k, &mut before))?;
        self.free -= n;
        self.now = step;
        Ok(())
    }

    /// Slot `e` of kept decoder `o` is evicted by the `k`-th take of step `step`: `o`'s fills
    /// of earlier steps come first, and its fill of this step too where it runs before that
    /// take (module docs, "The one race within a step").
    #[cold]
    fn settle_taken(&mut self, e: u32, step: i64, k: i64, before: &mut impl FnMut(usize) -> i64) -> CoreResult<()> {
        let o = self.slots[e as usize].owner as usize;
        let j = self.key_of(e);
        if j < self.seqs[o].marked {
            return Ok(());
        }
        self.materialize(o, step - 1)?;
        let bs = self.bs;
        let filled = self.seqs[o].offset + step + 1; // its slots after this step's
        if filled % bs == 0 && (filled / bs - 1) as usize == j {
            // with blocks of one slot it takes a block too, its own take before its fill
            let m = before(o);
            let first = if bs == 1 { m < k } else { m <= k };
            if first {
                self.materialize(o, step)?;
            }
        }
        Ok(())
    }
}
