//! A shared first segment held as one (lecture §3.5: a system prompt that every request of a
//! chat service starts with): the requests whose chain starts with the same run of an origin's
//! keys hold it by one count, not by a pin on each of its blocks.
//!
//! # Why
//!
//! A request pins each block it hits when it is admitted and unpins each when it leaves; with
//! a system prompt of 64 blocks held by every running request, that was half of all the
//! pool's per-block work, for blocks that never leave the cache. A key's true reference count
//! is its slot's `pins` (holders block by block) plus the holders of a range covering it, so
//! only the moments at which that sum reaches or leaves 0 need the blocks one by one: the
//! first holder of the range (its free blocks leave the free queue) and the last (those no one
//! else holds join it, last first, as the per-block frees would have put them).
//!
//! # Which segments
//!
//! An origin whose own tokens begin in block 0 (`first == 0`): its keys sit at the same place
//! in every chain, the first segment, so only a chain's first segment is ever covered. One
//! range an origin at a time (`held`: how far, how many hold it); a request whose first
//! segment ends elsewhere pins its blocks one by one, checking the cover.
//!
//! # The free queue
//!
//! A covered block whose `pins` fall to 0 is not free: its stamp is set to a position already
//! popped, so any entry it still has in the queue is stale (no new entry is pushed without a
//! new stamp).

use super::{KeyedPool, NONE};

impl KeyedPool {
    /// Blocks `[0, covered)` of origin `o`'s segment starting at `lo` are held as a range.
    #[inline(always)]
    pub(super) fn covered(&self, o: usize, lo: i64) -> i64 {
        let (hi, n) = self.held[o];
        if lo == 0 && n > 0 {
            hi as i64
        } else {
            0
        }
    }

    /// A stamp no entry of the queue has (a position already popped).
    #[inline(always)]
    pub(super) fn no_entry(&self) -> u32 {
        self.qbase.wrapping_sub(1)
    }

    /// The first segment of the chain in `segs`, if it can be held as a range within `limit`
    /// hits: joined (its blocks all pinned by another range holder), or started (its blocks all
    /// cached; the free ones leave the free queue, as a hit takes them). Returns its blocks.
    pub(super) fn hold_first(&mut self, limit: i64) -> Option<i64> {
        let &(o, lo, hi) = self.segs.first()?;
        if lo != 0 || hi > limit {
            return None;
        }
        let (at, n) = self.held[o];
        if n > 0 {
            if at as i64 != hi {
                return None;
            }
            self.held[o].1 += 1;
            return Some(hi);
        }
        let base = self.origins[o].base;
        if base == NONE {
            return None;
        }
        let keys = base as usize..base as usize + hi as usize;
        if self.slots[keys.clone()].iter().any(|s| s.pins == NONE) {
            return None; // a hit walk stops at the first key not cached
        }
        let stale = self.no_entry();
        for s in &mut self.slots[keys] {
            if s.pins == 0 {
                s.qpos = stale;
                self.free -= 1;
                self.epoch += 1;
            }
        }
        self.held[o] = (hi as u32, 1);
        Some(hi)
    }

    /// A holder of origin `o`'s range leaves; the last one frees the blocks no one else holds
    /// (last first, after its other blocks: the order of the per-block frees).
    pub(super) fn leave_first(&mut self, o: usize) {
        self.held[o].1 -= 1;
        let (hi, n) = self.held[o];
        if n > 0 {
            return;
        }
        let base = self.origins[o].base as usize;
        let mut pos = self.qbase.wrapping_add(self.queue.len() as u32);
        for k in (base..base + hi as usize).rev() {
            if self.slots[k].pins == 0 {
                self.slots[k].qpos = pos;
                self.queue.push_back(k as u32);
                pos = pos.wrapping_add(1);
                self.free += 1;
            }
        }
    }
}
