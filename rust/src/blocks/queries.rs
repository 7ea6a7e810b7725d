//! What the pool holds, read-only: per sequence, per block, the counters, [`Stats`], and the
//! check of every invariant the operations keep (for the tests and the bindings).

use super::{block_key, unknown, BlockAllocator, HostPolicy, Seq, Stats, Transfer};
use crate::error::{CoreError, CoreResult};

impl BlockAllocator {
    fn seq(&self, seq_id: i64) -> CoreResult<&Seq> {
        self.seqs.get(&seq_id).ok_or_else(|| unknown(seq_id))
    }

    pub fn block_table(&self, seq_id: i64) -> CoreResult<&[u32]> {
        Ok(&self.seq(seq_id)?.table)
    }

    pub fn num_tokens(&self, seq_id: i64) -> CoreResult<usize> {
        Ok(self.seq(seq_id)?.num_tokens)
    }

    pub fn num_cached_tokens(&self, seq_id: i64) -> CoreResult<usize> {
        Ok(self.seq(seq_id)?.num_cached_tokens)
    }

    /// Whether `allocate` of `n_tokens` tokens surely succeeds (prefix hits can only help).
    pub fn can_allocate(&self, n_tokens: i64) -> CoreResult<bool> {
        if n_tokens < 0 {
            return Err(CoreError::invalid(format!(
                "n_tokens must be a non-negative integer, got {n_tokens}"
            )));
        }
        Ok((n_tokens as u64).div_ceil(self.block_size as u64) <= self.free.len() as u64)
    }

    /// Whether `append` to `seq_id` succeeds now.
    pub fn can_append(&self, seq_id: i64) -> CoreResult<bool> {
        let seq = self.seq(seq_id)?;
        let last = *seq.table.last().unwrap();
        let needs_block = seq.num_tokens.is_multiple_of(self.block_size) || self.blocks[last as usize].ref_count > 1;
        Ok(!needs_block || self.free.len() > 0)
    }

    /// The chain keys of `seq_id`'s full blocks so far (none without prefix caching).
    pub fn seq_keys(&self, seq_id: i64) -> Option<&[u64]> {
        self.seqs.get(&seq_id).map(|s| &s.keys[..])
    }

    pub fn contains(&self, seq_id: i64) -> bool {
        self.seqs.contains_key(&seq_id)
    }

    /// Live sequence ids, ascending.
    pub fn seq_ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.seqs.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Every block table as CSR: `(seq_ids ascending, offsets, blocks)`.
    pub fn block_tables(&self) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
        let ids = self.seq_ids();
        let mut offsets = Vec::with_capacity(ids.len() + 1);
        let mut blocks = Vec::new();
        offsets.push(0);
        for id in &ids {
            blocks.extend(self.seqs[id].table.iter().map(|&b| b as i64));
            offsets.push(blocks.len() as i64);
        }
        (ids, offsets, blocks)
    }

    fn check_block(&self, block_id: i64) -> CoreResult<usize> {
        if !(0..self.blocks.len() as i64).contains(&block_id) {
            return Err(CoreError::invalid(format!(
                "block_id must be in [0, {}), got {block_id}",
                self.blocks.len()
            )));
        }
        Ok(block_id as usize)
    }

    /// The tokens stored in a block (a free block keeps its last content until reused).
    pub fn block_tokens(&self, block_id: i64) -> CoreResult<&[u32]> {
        Ok(&self.blocks[self.check_block(block_id)?].tokens)
    }

    /// The block's cache key, if the cache currently maps that key to it.
    pub fn block_key_of(&self, block_id: i64) -> CoreResult<Option<u64>> {
        Ok(self.blocks[self.check_block(block_id)?].key)
    }

    pub fn ref_counts(&self) -> Vec<i64> {
        self.blocks.iter().map(|b| b.ref_count as i64).collect()
    }

    /// Free block ids in the order they will be reused.
    pub fn free_queue(&self) -> Vec<i64> {
        self.free.iter(&self.blocks).map(|b| b as i64).collect()
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }
    pub fn block_size(&self) -> usize {
        self.block_size
    }
    pub fn prefix_caching(&self) -> bool {
        self.prefix_caching
    }
    pub fn num_free_blocks(&self) -> usize {
        self.free.len()
    }
    pub fn num_cached_blocks(&self) -> usize {
        self.cache.len()
    }
    pub fn num_seqs(&self) -> usize {
        self.seqs.len()
    }
    pub fn num_hits(&self) -> u64 {
        self.num_hits
    }
    pub fn num_lookups(&self) -> u64 {
        self.num_lookups
    }
    pub fn num_evictions(&self) -> u64 {
        self.num_evictions
    }
    pub fn num_copies(&self) -> u64 {
        self.num_copies
    }

    /// Host tier capacity, in blocks (0: no tier).
    pub fn host_blocks(&self) -> usize {
        self.tier.host.capacity()
    }
    pub fn host_policy(&self) -> HostPolicy {
        self.tier.host.policy()
    }
    /// Blocks the host tier holds now.
    pub fn num_host_cached_blocks(&self) -> usize {
        self.tier.host.len()
    }
    pub fn num_host_hits(&self) -> u64 {
        self.tier.num_host_hits
    }
    /// The host tier's keys in the order its policy would drop them, the next victim first.
    pub fn host_keys(&self) -> Vec<u64> {
        self.tier.host.keys()
    }

    /// Everything that crossed the host link since the last call, in order, and forgets it:
    /// an engine copies KV accordingly before it writes into any block (an offloaded block's
    /// data is intact until then), a simulator prices it.
    pub fn take_transfers(&mut self) -> Vec<Transfer> {
        std::mem::take(&mut self.tier.log)
    }

    pub fn stats(&self) -> Stats {
        Stats {
            num_blocks: self.blocks.len(),
            block_size: self.block_size,
            num_free_blocks: self.free.len(),
            num_cached_blocks: self.cache.len(),
            num_seqs: self.seqs.len(),
            num_hits: self.num_hits,
            num_lookups: self.num_lookups,
            num_evictions: self.num_evictions,
            num_copies: self.num_copies,
            host_blocks: self.tier.host.capacity(),
            num_host_cached_blocks: self.tier.host.len(),
            num_host_hits: self.tier.num_host_hits,
            num_offloads: self.tier.num_offloads,
            num_host_evictions: self.tier.num_host_evictions,
        }
    }

    /// Checks every internal invariant; returns the first broken one. For tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.blocks.len();
        let mut refs = vec![0u32; n];
        for (id, seq) in &self.seqs {
            if seq.table.len() != seq.num_tokens.div_ceil(self.block_size) || seq.num_tokens == 0 {
                return Err(format!("seq {id}: {} blocks for {} tokens", seq.table.len(), seq.num_tokens));
            }
            for (i, &b) in seq.table.iter().enumerate() {
                refs[b as usize] += 1;
                let want = if i + 1 < seq.table.len() {
                    self.block_size
                } else {
                    seq.num_tokens - i * self.block_size
                };
                if self.blocks[b as usize].tokens.len() != want {
                    return Err(format!("seq {id}: block {b} holds {} tokens, not {want}",
                                       self.blocks[b as usize].tokens.len()));
                }
            }
        }
        for (b, blk) in self.blocks.iter().enumerate() {
            if blk.ref_count != refs[b] {
                return Err(format!("block {b}: ref_count {} but {} tables hold it", blk.ref_count, refs[b]));
            }
            if let Some(k) = blk.key {
                if self.cache.get(&k) != Some(&(b as u32)) {
                    return Err(format!("block {b}: key not in cache"));
                }
                if block_key(blk.parent_key, &blk.tokens) != k || blk.tokens.len() != self.block_size {
                    return Err(format!("block {b}: key does not match its content"));
                }
            }
        }
        self.tier.host.check()?;
        for (&k, &b) in &self.cache {
            if self.tier.host.get(k).is_some() {
                return Err(format!("key {k} is in both tiers"));
            }
            if self.blocks[b as usize].key != Some(k) {
                return Err(format!("cache key {k} points to block {b} that has another key"));
            }
        }
        let queue = self.free_queue();
        let n_zero = refs.iter().filter(|&&r| r == 0).count();
        if queue.len() != self.free.len() || n_zero != self.free.len() {
            return Err(format!("free queue {} / num_free {} / unreferenced {}", queue.len(), self.free.len(), n_zero));
        }
        if queue.iter().any(|&b| refs[b as usize] != 0) {
            return Err("a referenced block is in the free queue".into());
        }
        Ok(())
    }
}
