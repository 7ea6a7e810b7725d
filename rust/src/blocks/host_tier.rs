//! The host (CPU) tier of the prefix cache (lecture §8, milestone 4b: tiered KV cache).
//!
//! When the GPU pool evicts a cached free block, its key and content move here instead of
//! being lost; a later prompt that misses the GPU cache but finds the key here gets the block
//! back by a copy over the host link (priced by `kv_host_transfer_s`), not a recomputation.
//! A key lives in at most one tier. The tier holds `capacity` blocks and, when full, drops one
//! entry chosen by its [`HostPolicy`].
//!
//! Each entry carries an insertion stamp (a counter, so the order is total and the same in the
//! pure-Python twin) and the block's hit count: prefix hits on the GPU while it lived there,
//! plus one per recall from this tier.

use std::collections::BTreeSet;

use super::keys::{block_key, Map};
use crate::error::{CoreError, CoreResult};

/// Which entry a full host tier drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPolicy {
    /// The entry offloaded longest ago. An entry is never touched while on the host (a hit
    /// moves it back to the GPU), so this is least recently used.
    Lru,
    /// The entry with the fewest hits, the oldest among equals: a shared system prompt, hit by
    /// every request, survives a stream of one-off prompts that LRU would let flush it out.
    Hits,
}

impl HostPolicy {
    pub fn parse(name: &str) -> CoreResult<Self> {
        match name {
            "lru" => Ok(HostPolicy::Lru),
            "hits" => Ok(HostPolicy::Hits),
            _ => Err(CoreError::invalid(format!("host_policy must be 'lru' or 'hits', got {name:?}"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HostPolicy::Lru => "lru",
            HostPolicy::Hits => "hits",
        }
    }
}

/// One offloaded block: what a recall needs to verify and rebuild it.
#[derive(Debug, Clone)]
pub struct HostEntry {
    pub parent_key: u64,
    pub tokens: Vec<u32>,
    pub hits: u32,
    pub stamp: u64,
}

#[derive(Debug, Clone)]
pub struct HostTier {
    capacity: usize,
    policy: HostPolicy,
    entries: Map<u64, HostEntry>,
    /// `(rank, stamp, key)`, the next victim first.
    order: BTreeSet<(u64, u64, u64)>,
    clock: u64,
}

impl HostTier {
    pub fn new(capacity: usize, policy: HostPolicy) -> Self {
        HostTier { capacity, policy, entries: Map::default(), order: BTreeSet::new(), clock: 0 }
    }

    fn rank(&self, e: &HostEntry) -> (u64, u64) {
        match self.policy {
            HostPolicy::Lru => (0, e.stamp),
            HostPolicy::Hits => (e.hits as u64, e.stamp),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn policy(&self) -> HostPolicy {
        self.policy
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: u64) -> Option<&HostEntry> {
        self.entries.get(&key)
    }

    /// Stores an evicted block (its key is in no tier); returns the key dropped to make room,
    /// with its hits.
    pub fn insert(&mut self, key: u64, parent_key: u64, tokens: Vec<u32>, hits: u32) -> Option<(u64, u32)> {
        let victim = if self.entries.len() >= self.capacity { self.order.first().map(|v| v.2) } else { None };
        let victim = victim.map(|v| (v, self.take(v).expect("an ordered key has an entry").hits));
        let entry = HostEntry { parent_key, tokens, hits, stamp: self.clock };
        self.clock += 1;
        let (r, s) = self.rank(&entry);
        self.order.insert((r, s, key));
        self.entries.insert(key, entry);
        victim
    }

    /// Removes and returns the entry of `key` (a recall, a drop, or a GPU copy superseding it).
    pub fn take(&mut self, key: u64) -> Option<HostEntry> {
        let e = self.entries.remove(&key)?;
        let (r, s) = self.rank(&e);
        self.order.remove(&(r, s, key));
        Some(e)
    }

    /// Keys in the order the policy would drop them, the next victim first.
    pub fn keys(&self) -> Vec<u64> {
        self.order.iter().map(|v| v.2).collect()
    }

    /// The stored entries agree with the order index and the capacity (for tests).
    pub fn check(&self) -> Result<(), String> {
        if self.entries.len() > self.capacity || self.order.len() != self.entries.len() {
            return Err(format!("host tier: {} entries, {} ordered, capacity {}",
                               self.entries.len(), self.order.len(), self.capacity));
        }
        for &(r, s, k) in &self.order {
            match self.entries.get(&k) {
                Some(e) if self.rank(e) == (r, s) && block_key(e.parent_key, &e.tokens) == k => {}
                _ => return Err(format!("host tier: key {k} out of step with its entry")),
            }
        }
        Ok(())
    }
}

/// What moved between the tiers (see `BlockAllocator::take_transfers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferKind {
    /// A cached GPU block was evicted: copy its KV to the host under `key` before the block is
    /// written again.
    Offload,
    /// A prompt hit `key` on the host: copy its KV into the fresh GPU block.
    Recall,
    /// The host dropped `key` (tier full, or a GPU copy of the same prefix was registered).
    Drop,
}

impl TransferKind {
    pub fn name(self) -> &'static str {
        match self {
            TransferKind::Offload => "offload",
            TransferKind::Recall => "recall",
            TransferKind::Drop => "drop",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub kind: TransferKind,
    /// The GPU block (none for a drop).
    pub block: Option<u32>,
    pub key: u64,
    /// The hit count of the entry that moved (what the `hits` policy ranks by).
    pub hits: u32,
}

/// The host tier and the log of what crossed the host link, borrowed apart from the blocks.
#[derive(Debug, Clone)]
pub(super) struct Tier {
    pub(super) host: HostTier,
    pub(super) log: Vec<Transfer>,
    pub(super) num_host_hits: u64,
    pub(super) num_offloads: u64,
    pub(super) num_host_evictions: u64,
}

impl Tier {
    /// A key is being registered on the GPU: a host copy of it is now redundant.
    pub(super) fn supersede(&mut self, key: u64) {
        if let Some(e) = if self.host.is_empty() { None } else { self.host.take(key) } {
            self.log.push(Transfer { kind: TransferKind::Drop, block: None, key, hits: e.hits });
        }
    }
}
