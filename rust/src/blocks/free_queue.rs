//! The free queue (module docs of `blocks`, "Free queue (LRU)") as an array of block ids with
//! lazy removal, rather than vLLM's doubly linked list of blocks.
//!
//! The list's operations are O(1), but each step of it is a dependent load: the next block to
//! take is known only once the current one has been read, so a prompt taking a hundred blocks
//! from a pool larger than the cache waits a hundred times for memory in a row, and a prefix
//! hit on a free block writes both its neighbours. Here the queue is a ring of ids: taking
//! reads the next ids from consecutive memory (the blocks they name can be fetched side by
//! side), and a hit on a free block removes nothing, it only makes the block's entry stale.
//!
//! Each push stamps the block with its absolute position in the queue (`qpos`); the entry at
//! position `p` holds block `b` if `b` is free and stamped `p`, and is stale otherwise (the
//! block was taken as a hit since, and maybe freed again further back). So every free block has
//! exactly one live entry, and the live entries in queue order are the linked list's order.
//! Stale entries are dropped as the front passes them, and compacted away when they outnumber
//! the live ones, so the ring holds at most about twice the free blocks.

use std::collections::VecDeque;

/// What the queue reads and stamps of a block (the allocator's `Block` implements it, so this
/// module names nothing of its parent): whether it is referenced, and its position stamp.
pub(super) trait Queued {
    fn referenced(&self) -> bool;
    fn qpos(&self) -> u64;
    fn set_qpos(&mut self, pos: u64);
}

/// Stale entries tolerated beyond the live ones (a few in the tests, so that they compact).
const SLACK: usize = if cfg!(test) { 2 } else { 1024 };

/// How far ahead of the front a take fetches the block it will take.
const PREFETCH: usize = 6;

/// Asks for `blk`'s cache line, without waiting for it.
#[inline(always)]
fn prefetch<B>(blk: &B) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing and faults on no address
    unsafe {
        std::arch::x86_64::_mm_prefetch(blk as *const B as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = blk;
}

#[derive(Debug, Clone)]
pub(super) struct FreeQueue {
    ids: VecDeque<u32>,
    /// the absolute position of `ids[0]`
    base: u64,
    /// live entries: the free blocks
    len: usize,
}

impl FreeQueue {
    /// The queue `0, 1, ..., n-1`, stamping the blocks.
    pub(super) fn new<B: Queued>(blocks: &mut [B]) -> Self {
        for (i, blk) in blocks.iter_mut().enumerate() {
            blk.set_qpos(i as u64);
        }
        FreeQueue { ids: (0..blocks.len() as u32).collect(), base: 0, len: blocks.len() }
    }

    #[inline]
    fn live<B: Queued>(blocks: &[B], b: u32, pos: u64) -> bool {
        let blk = &blocks[b as usize];
        !blk.referenced() && blk.qpos() == pos
    }

    /// Free blocks.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Takes the front block out (the caller has checked that one is free, and gives it a
    /// reference at once).
    #[inline]
    pub(super) fn pop_front<B: Queued>(&mut self, blocks: &[B]) -> u32 {
        debug_assert!(self.len > 0);
        self.len -= 1;
        if let Some(&ahead) = self.ids.get(PREFETCH) {
            prefetch(&blocks[ahead as usize]);
        }
        loop {
            let b = self.ids.pop_front().expect("a free block has a live entry");
            self.base += 1;
            if Self::live(blocks, b, self.base - 1) {
                return b;
            }
        }
    }

    /// A free block is taken out wherever it is (a prefix hit): its entry goes stale when the
    /// caller gives it a reference, which it does at once.
    #[inline]
    pub(super) fn remove(&mut self) {
        self.len -= 1;
    }

    /// Appends block `b`, which has just lost its last reference.
    #[inline]
    pub(super) fn push_back<B: Queued>(&mut self, blocks: &mut [B], b: u32) {
        if self.ids.len() > 2 * self.len + SLACK {
            self.compact(blocks);
        }
        blocks[b as usize].set_qpos(self.base + self.ids.len() as u64);
        self.ids.push_back(b);
        self.len += 1;
    }

    /// Drops the stale entries, restamping the live ones (each stale entry was made by one
    /// removal, and there are more of them than live ones: O(1) a removal).
    #[cold]
    fn compact<B: Queued>(&mut self, blocks: &mut [B]) {
        let mut pos = self.base;
        let mut kept = 0;
        for i in 0..self.ids.len() {
            let b = self.ids[i];
            if Self::live(blocks, b, self.base + i as u64) {
                self.ids[kept] = b;
                kept += 1;
            }
        }
        self.ids.truncate(kept);
        for &b in &self.ids {
            blocks[b as usize].set_qpos(pos);
            pos += 1;
        }
    }

    /// The free blocks, front first.
    pub(super) fn iter<'a, B: Queued>(&'a self, blocks: &'a [B]) -> impl Iterator<Item = u32> + 'a {
        let base = self.base;
        self.ids.iter().enumerate().filter(move |&(i, &b)| Self::live(blocks, b, base + i as u64)).map(|(_, &b)| b)
    }
}
