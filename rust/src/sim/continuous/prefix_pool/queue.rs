//! The free queue of the exact-key pool (lecture §3.5, vLLM's per-block LRU order): evictions
//! from its front, frees onto its back, and the compaction of its stale entries (the module
//! docs of `prefix_pool.rs`, "The free queue").

use std::collections::VecDeque;

use super::{internal, KeyedPool, Origin, Slot, NONE};
use crate::error::CoreResult;

/// Stale queue entries tolerated beyond the live ones (a few in the tests, so that they compact).
const SLACK: usize = if cfg!(test) { 2 } else { 1024 };

impl KeyedPool {
    /// Takes `n` blocks from the front of the free queue (the caller checked they are free).
    #[inline]
    pub(super) fn take(&mut self, n: i64) -> CoreResult<()> {
        self.evict(n, |pool, e, _| pool.settle_evicted(e))
    }

    /// Takes the `n` front blocks of the free queue for new content, evicting their keys;
    /// `lazy(pool, slot, k)` runs before the `k`-th where the key's origin is a decoder the pool
    /// keeps (`lazy.rs`). An origin's count of cached keys is updated once per run of its
    /// keys (a freed chain's keys sit side by side in the queue): one origin read a run, not
    /// one an eviction, which held each eviction up behind its slot's read.
    #[inline(always)]
    pub(super) fn evict(&mut self, n: i64, mut lazy: impl FnMut(&mut Self, u32, i64) -> CoreResult<()>) -> CoreResult<()> {
        let (mut owner, mut gone) = (NONE, 0u32);
        let mut k = 0;
        while k < n {
            // the evictions up to the next key of a kept decoder, in a loop that calls nothing
            // and gets the fields it needs as arguments (with the call to `lazy` in it, or with
            // them borrowed from `self`, the ring's and the slots' fields were read again and
            // written back at every entry)
            let KeyedPool { queue, qbase, slots, origins, spare, evictions, .. } = self;
            let mut run = (owner, gone);
            let kept = evict_plain(queue, qbase, slots, origins, spare, evictions, &mut run, &mut k, n)?;
            (owner, gone) = run;
            if kept == NONE {
                break;
            }
            // a kept decoder's key: its fills first (`lazy.rs`); its next key comes back here,
            // as the owner is forgotten (nothing is pending for it)
            lazy(self, kept, k)?;
            self.slots[kept as usize].pins = NONE;
            uncache(&mut self.origins, &mut self.spare, &mut self.evictions, owner, 1);
            owner = NONE;
            k += 1;
        }
        uncache(&mut self.origins, &mut self.spare, &mut self.evictions, owner, gone);
        Ok(())
    }

    /// Drops the stale entries of the free queue, restamping the live ones. Positions are
    /// u32 and wrap: a stale entry lives until the ring holds twice the free blocks (at most
    /// `2 * 2^24 + SLACK` entries), far fewer than `2^32` pushes, so no stamp is ever taken
    /// for another's.
    #[cold]
    fn compact(&mut self) {
        let (slots, base) = (&self.slots, self.qbase);
        let mut i = 0u32;
        self.queue.retain(|&e| {
            let live = e == NONE || (slots[e as usize].pins == 0 && slots[e as usize].qpos == base.wrapping_add(i));
            i = i.wrapping_add(1);
            live
        });
        for (i, &e) in self.queue.iter().enumerate() {
            if e != NONE {
                self.slots[e as usize].qpos = base.wrapping_add(i as u32);
            }
        }
    }

    /// Frees `r`'s blocks: those it alone held join the back of the free queue, last first.
    #[inline]
    pub(super) fn free_seq(&mut self, r: usize) {
        let mut chain = std::mem::take(&mut self.seqs[r].chain);
        if self.queue.len() + chain.len() > 2 * self.free as usize + SLACK {
            self.compact();
        }
        let (pos, stale) = (self.qbase.wrapping_add(self.queue.len() as u32), self.no_entry());
        // its first blocks held as a range, its own; those covered by another's (`shared.rs`)
        let ranged = self.seqs[r].ranged;
        let (first, cov) = match self.seqs[r].segs.first() {
            Some(&(o, 0, hi)) if !self.held.is_empty() => (o, (self.covered(o, 0).min(hi) as usize).clamp(ranged, chain.len())),
            _ => (NONE as usize, ranged),
        };
        // the freed entries gathered first, then joined to the queue in one copy (a push at a
        // time wrapped its index at every entry)
        self.freeing.clear();
        self.freeing.resize(chain.len(), NONE);
        let freed = free_entries(&mut self.slots, &chain, &mut self.freeing, ranged, cov, pos, stale);
        self.queue.extend(&self.freeing[..freed]);
        self.free += freed as i64;
        if ranged > 0 {
            self.leave_first(first);
        }
        chain.clear();
        self.chains.push(chain);
        let mut segs = std::mem::take(&mut self.seqs[r].segs);
        segs.clear();
        self.spare_segs.push(segs);
        self.seqs.close(r);
    }
}

/// `gone` cached keys of origin `o` (or [`NONE`]) were evicted; at its last, its range goes back
/// for reuse (all its slots NONE). (The pool's fields apart: the eviction loop holds the others.)
#[inline(always)]
fn uncache(origins: &mut [Origin], spare: &mut [Vec<u32>], evictions: &mut u64, o: u32, gone: u32) {
    if gone == 0 {
        return;
    }
    *evictions += gone as u64;
    let g = &mut origins[o as usize];
    g.cached -= gone;
    if g.cached == 0 {
        spare[g.class as usize].push(g.base);
        g.base = NONE;
    }
}

/// [`KeyedPool::evict`]'s walk of the free queue from its front, up to `n` takes (counted in
/// `k`) or to the first live key whose origin is a kept decoder: that key is returned, its
/// entry used, its eviction left to the caller ([`NONE`] when there was none). `run` is the
/// origin whose evictions are pending and how many. The ring is read in place and its front
/// dropped at the end in one drain.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn evict_plain(
    queue: &mut VecDeque<u32>,
    qbase: &mut u32,
    slots: &mut [Slot],
    origins: &mut [Origin],
    spare: &mut [Vec<u32>],
    evictions: &mut u64,
    run: &mut (u32, u32),
    k: &mut i64,
    n: i64,
) -> CoreResult<u32> {
    let ((mut owner, mut gone), mut took, mut pos) = (*run, *k, *qbase);
    let (mut used, mut kept) = (0usize, NONE);
    let (front, back) = queue.as_slices();
    for &e in front.iter().chain(back) {
        if took == n {
            break;
        }
        let at = pos;
        (used, pos) = (used + 1, pos.wrapping_add(1));
        if e == NONE {
            took += 1;
            continue;
        }
        let s = &mut slots[e as usize];
        if s.pins != 0 || s.qpos != at {
            continue; // stale: hit since it was freed
        }
        if s.owner != owner {
            uncache(origins, spare, evictions, owner, gone);
            (owner, gone) = (s.owner, 0);
            if origins[owner as usize].lazy {
                kept = e;
                break;
            }
        }
        s.pins = NONE;
        gone += 1;
        took += 1;
    }
    if took < n && kept == NONE {
        return Err(internal("a free block has a live entry"));
    }
    queue.drain(..used);
    (*run, *k, *qbase) = ((owner, gone), took, pos);
    Ok(kept)
}

/// [`KeyedPool::free_seq`]'s unpinning of `chain` (its first `ranged` blocks held as a range,
/// up to `cov` covered by another's), last first: the entries that join the free queue are
/// written to `out`, stamped from `pos` on; how many. A function of the fields it needs, so
/// that their vectors' fields are not read again at every block.
#[inline(always)]
fn free_entries(slots: &mut [Slot], chain: &[u32], out: &mut [u32], ranged: usize, cov: usize, pos: u32, stale: u32) -> usize {
    let mut freed = 0;
    for &e in chain[cov..].iter().rev() {
        if e != NONE {
            let s = &mut slots[e as usize];
            s.pins -= 1;
            if s.pins > 0 {
                continue;
            }
            s.qpos = pos.wrapping_add(freed as u32);
        }
        out[freed] = e;
        freed += 1;
    }
    // covered by another's range: not free when no one holds them block by block
    for &e in chain[ranged..cov].iter().rev() {
        if e != NONE {
            let s = &mut slots[e as usize];
            s.pins -= 1;
            if s.pins == 0 {
                s.qpos = stale;
            }
            continue;
        }
        out[freed] = e;
        freed += 1;
    }
    freed
}
