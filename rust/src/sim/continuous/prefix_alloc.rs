//! The KV pool of prefix caching over the real block allocator of `blocks` (hashed chain keys,
//! stored tokens): the loops' pool when a host tier is asked for (`blocks/host_tier.rs` keeps
//! its entries by hashed key), and the reference that [`super::prefix_pool::KeyedPool`] is held
//! equal to (the test `keyed_pool_is_the_allocator` in `prefix_events.rs`).

use super::prefix_pool::PrefixKv;
use super::prefixes::Prefixes;
use crate::blocks::{block_key, BlockAllocator, ROOT_KEY};
use crate::error::{CoreError, CoreResult};

/// An allocator error other than OutOfBlocks would be a bug here: report it, never panic.
pub(super) fn internal(e: CoreError) -> CoreError {
    CoreError::invalid(format!("internal error: {e}"))
}

/// The allocator, and what spares hashing: the chain keys of finished requests whose tokens
/// later prompts start with, and the blocked queue head's.
pub(super) struct AllocatorKv<'a> {
    prefixes: &'a Prefixes<'a>,
    pub(super) kv: BlockAllocator,
    /// host recalls already counted by [`PrefixKv::take_recalled`]
    recalls_seen: u64,
    /// the waiting request whose allocation failed last, kept until it fits (see `allocate`)
    blocked: Option<Blocked>,
    /// per request: the chain keys it finished with, kept while requests that start with its
    /// tokens have not hashed theirs (`children_left` of them): theirs begin with these
    kept: Vec<Vec<u64>>,
    children_left: Vec<u32>,
    keyed: Vec<bool>,
    /// buffers of [`Prefixes::tokens`] and of the chain keys
    chain: Vec<(usize, usize)>,
    toks: Vec<u32>,
    keys: Vec<u64>,
}

/// A waiting request whose allocation of `tokens` failed: its token ids and chain keys (hashed
/// once), and the pool's free blocks and watched events then. Until either grows the same
/// allocation fails again (the allocator's `Watch` says why), so it is not tried, nor hashed.
struct Blocked {
    r: usize,
    tokens: i64,
    free: usize,
    events: u64,
    toks: Vec<u32>,
    keys: Vec<u64>,
}

impl<'a> AllocatorKv<'a> {
    /// An empty allocator of `num_blocks` blocks of `bs` slots (prefixes checked by the caller)
    /// with a host tier of `host_blocks` blocks dropping by `host_policy` (0: none).
    pub(super) fn new(prefixes: &'a Prefixes<'a>, num_blocks: i64, bs: i64, caching: bool, host_blocks: i64, host_policy: &str) -> CoreResult<Self> {
        let n = prefixes.parent.len();
        let mut children_left = vec![0u32; n];
        for &q in prefixes.parent {
            if q >= 0 {
                children_left[q as usize] += 1;
            }
        }
        Ok(AllocatorKv {
            prefixes,
            kv: BlockAllocator::with_host_tier(num_blocks, bs, caching, host_blocks, host_policy)?,
            recalls_seen: 0,
            blocked: None,
            kept: vec![Vec::new(); n],
            children_left,
            keyed: vec![false; n],
            chain: Vec::new(),
            toks: Vec::new(),
            keys: Vec::new(),
        })
    }

    /// The chain keys of `self.toks` (request `r`'s tokens), as the allocator computes them,
    /// but those of the blocks it shares with its prefix parent copied from the parent's (kept
    /// when it finished, or its allocation's while it runs) rather than hashed again: a turn of
    /// a chat shares all of the previous one.
    fn chain_keys(&mut self, r: usize) -> Vec<u64> {
        let bs = self.kv.block_size();
        let n_full = self.toks.len() / bs;
        let mut keys = Vec::with_capacity(n_full);
        let q = self.prefixes.parent[r];
        if q >= 0 {
            let q = q as usize;
            let shared = (self.prefixes.len[r] as usize).min(self.toks.len()) / bs;
            let src: &[u64] = if !self.kept[q].is_empty() { &self.kept[q] } else { self.kv.seq_keys(q as i64).unwrap_or(&[]) };
            keys.extend_from_slice(&src[..shared.min(src.len())]);
            if !self.keyed[r] {
                self.keyed[r] = true;
                self.children_left[q] -= 1;
                if self.children_left[q] == 0 {
                    self.kept[q] = Vec::new();
                }
            }
        }
        let mut parent = keys.last().copied().unwrap_or(ROOT_KEY);
        for chunk in self.toks[keys.len() * bs..].chunks_exact(bs) {
            parent = block_key(parent, chunk);
            keys.push(parent);
        }
        #[cfg(test)] // the copied keys are the hashed ones (every test run with sharing checks it)
        assert_eq!(keys, self.kv.chain_keys(&self.toks), "request {r}");
        keys
    }
}

impl PrefixKv for AllocatorKv<'_> {
    /// A queue head that does not fit is tried again at every step until it does; its tokens
    /// are hashed once ([`Blocked`]) and the allocation is skipped while nothing happened that
    /// could make it fit (the same answer: a failed allocation changes nothing, counters
    /// included).
    fn allocate(&mut self, r: usize, tokens: i64) -> CoreResult<Option<i64>> {
        let kept = self.blocked.as_ref().is_some_and(|b| b.r == r && b.tokens == tokens);
        if kept {
            let b = self.blocked.as_ref().expect("kept");
            if self.kv.num_free_blocks() <= b.free && self.kv.watch_events() == b.events {
                return Ok(None);
            }
        } else {
            self.prefixes.tokens(r, tokens as usize, &mut self.chain, &mut self.toks);
            self.keys = if self.kv.prefix_caching() { self.chain_keys(r) } else { Vec::new() };
        }
        // the keys become the sequence's own (hashed for this allocation, and no other)
        let fits = match (&mut self.blocked, kept) {
            (Some(b), true) => self.kv.allocate_keyed_vec(r as i64, &b.toks, &mut b.keys, 0),
            _ => self.kv.allocate_keyed_vec(r as i64, &self.toks, &mut self.keys, 0),
        };
        if !fits.map_err(internal)? {
            if !kept {
                self.kv.watch(&self.keys);
                let (toks, keys) = (std::mem::take(&mut self.toks), std::mem::take(&mut self.keys));
                self.blocked = Some(Blocked { r, tokens, free: 0, events: 0, toks, keys });
            }
            let b = self.blocked.as_mut().expect("set above");
            (b.free, b.events) = (self.kv.num_free_blocks(), self.kv.watch_events());
            return Ok(None);
        }
        if kept {
            self.blocked = None;
            self.kv.watch(&[]);
        }
        Ok(Some(self.kv.num_cached_tokens(r as i64).map_err(internal)? as i64))
    }

    fn mark_computed(&mut self, r: usize, computed: i64) -> CoreResult<()> {
        self.kv.mark_computed(r as i64, computed).map_err(internal)
    }

    fn append(&mut self, r: usize) -> CoreResult<()> {
        self.kv.append(r as i64, r as i64).map_err(internal).map(|_| ())
    }

    fn append_same(&mut self, r: usize, count: usize) -> CoreResult<()> {
        self.kv.append_same(r as i64, r as i64, count).map_err(internal)
    }

    /// Its keys are kept if a later prompt starts with its tokens.
    fn release(&mut self, r: usize) -> CoreResult<()> {
        if self.children_left[r] > 0 && self.kv.prefix_caching() {
            self.kept[r] = self.kv.free_keys(r as i64).map_err(internal)?;
        } else {
            self.kv.free(r as i64).map_err(internal)?;
        }
        Ok(())
    }

    fn preempt(&mut self, r: usize) -> CoreResult<()> {
        self.kv.free(r as i64).map_err(internal)
    }

    #[inline]
    fn num_free_blocks(&self) -> i64 {
        self.kv.num_free_blocks() as i64
    }

    fn num_blocks(&self) -> i64 {
        self.kv.num_blocks() as i64
    }

    fn take_recalled(&mut self) -> u64 {
        self.kv.take_transfers(); // counted by the host hits; the log must not grow
        let seen = self.kv.num_host_hits();
        seen - std::mem::replace(&mut self.recalls_seen, seen)
    }

    fn counters(&self) -> (u64, u64, u64, u64) {
        (self.kv.num_hits(), self.kv.num_lookups(), self.kv.num_evictions(), self.kv.num_host_hits())
    }
}
