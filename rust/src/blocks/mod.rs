//! The paged KV block allocator (lecture §2.4, §3.5; PagedAttention; the course project's
//! milestones 2-3). vLLM's semantics, kept exact so that the course copy's pure-Python twin of
//! the allocator and this file make the same choices block for block.
//!
//! The pool holds `num_blocks` blocks of `block_size` token slots. A sequence owns a block table
//! (block ids in order); its `n` tokens fill `ceil(n / block_size)` blocks, the last one maybe
//! partly. A block records the tokens written into it (the stand-in for their KV).
//!
//! * **Reference counts.** `fork` shares every block of the parent with the child. A block with
//!   no reference is free, whatever it holds; `num_free_blocks` counts them all.
//! * **Copy-on-write.** `append` into a shared, partly filled last block first copies it into a
//!   fresh block (the copy is reported as `(src, dst)` so the KV cache can copy the data). A
//!   shared *full* block is never written: the new token goes to a new block.
//! * **Free queue (LRU).** Free blocks wait in one queue, initially `0, 1, ..., num_blocks-1`.
//!   A new block is always taken from the front; `free` appends a sequence's newly unreferenced
//!   blocks at the back, last block first, so the least recently freed block is reused first and,
//!   within one sequence, tail blocks go before head blocks (vLLM v1's `FreeKVCacheBlockQueue`;
//!   kept here as an array with lazy removal, `free_queue.rs`, for the same order at fewer
//!   waits on memory).
//! * **Prefix caching.** A full block gets a *key*: a 64-bit hash chain
//!   `key_i = block_key(key_{i-1}, tokens of block i)`, with `key_{-1} = ROOT_KEY`. The cache maps
//!   a key to at most one block ("first wins": a block whose key is already cached elsewhere
//!   stays uncached). A free block keeps its key, and stays findable, until it is taken from the
//!   free queue for new content: that is an eviction. `allocate` walks the prompt's full blocks
//!   and reuses cached ones until the first miss; a hit must have the same tokens *and* the same
//!   parent key (checked on the stored data, never on the hash alone), so a hit differs from
//!   the request only if two different token chains of equal length collide on all 64 bits of
//!   an earlier key. At most `(n - 1) / block_size` blocks can hit: at least one prompt token is
//!   always left to compute (vLLM: the model needs one token to produce logits).
//! * **Registered when computed** (vLLM v1's `cache_blocks`, lecture §3.5). A key may be found
//!   only once its block's KV exists, or a reader could skip tokens nobody has computed yet. So
//!   `allocate(seq, tokens, Some(c))` takes all its new blocks first (evicting as it goes), then
//!   registers only the new full blocks lying inside the first `c` tokens (the hits are
//!   registered already); `mark_computed(seq, c)` registers the rest as an engine computes them.
//!   `allocate(.., None)` registers every full block at once, for standalone use where tokens
//!   stand for computed KV. `append` registers a block when it writes its last slot, together
//!   with any earlier block still unregistered: appending a token means every token before it
//!   has been computed (a decode step runs on the whole sequence). Each full block is offered to
//!   the cache once, in order; `Seq::marked` counts those offered.
//! * **Failure changes nothing.** `allocate`/`append` check the pool before touching it and
//!   return [`CoreError::OutOfBlocks`]; an unknown or duplicate `seq_id` is [`CoreError::Key`].
//!
//! The hash ([`block_key`]) is SplitMix64's finaliser folded over the parent key and the
//! tokens: deterministic across runs, machines and languages (the reference computes the same
//! integers), unlike Python's `hash()` of a tuple.

use std::collections::HashMap;

use crate::error::{CoreError, CoreResult};

pub mod bulk;
mod free_queue;
mod host_tier;
mod keys;
mod queries;

pub use host_tier::{HostPolicy, Transfer, TransferKind};
use free_queue::{FreeQueue, Queued};
use host_tier::{HostTier, Tier};
pub use keys::{block_key, ROOT_KEY};
use keys::Map;

/// Largest pool, in blocks (16 Mi: far beyond any GPU's KV pool at 16 tokens a block).
pub const MAX_NUM_BLOCKS: i64 = 1 << 24;
/// Largest block, in tokens.
pub const MAX_BLOCK_SIZE: i64 = 1 << 16;
/// Token ids are integers in `[0, TOKEN_LIMIT)` (they are stored as `u32`).
pub const TOKEN_LIMIT: i64 = 1 << 32;

#[derive(Debug, Clone)]
struct Block {
    ref_count: u32,
    /// `Some(k)` iff the cache maps `k` to this block.
    key: Option<u64>,
    /// The parent key this block's key was made with (meaningful when `key` is `Some`).
    parent_key: u64,
    tokens: Vec<u32>,
    /// Prefix hits on this content (GPU hits, plus one per recall from the host tier): the
    /// host tier's `hits` policy keeps the most used.
    hits: u32,
    /// Where the block was last pushed on the free queue (its entry while `ref_count == 0`).
    qpos: u64,
}

impl Queued for Block {
    #[inline(always)]
    fn referenced(&self) -> bool {
        self.ref_count > 0
    }
    #[inline(always)]
    fn qpos(&self) -> u64 {
        self.qpos
    }
    #[inline(always)]
    fn set_qpos(&mut self, pos: u64) {
        self.qpos = pos;
    }
}

#[derive(Debug, Clone)]
struct Seq {
    table: Vec<u32>,
    /// Chain keys of the sequence's full blocks (prefix caching only), whether or not each block
    /// is the cached copy of its key.
    keys: Vec<u64>,
    /// Leading full blocks already offered to the cache (registered, or left uncached because
    /// another block held their key: first wins). Only these count as computed.
    marked: usize,
    num_tokens: usize,
    num_cached_tokens: usize,
}

/// Counters and sizes, for `stats()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    pub num_blocks: usize,
    pub block_size: usize,
    pub num_free_blocks: usize,
    pub num_cached_blocks: usize,
    pub num_seqs: usize,
    pub num_hits: u64,
    pub num_lookups: u64,
    pub num_evictions: u64,
    pub num_copies: u64,
    pub host_blocks: usize,
    pub num_host_cached_blocks: usize,
    pub num_host_hits: u64,
    pub num_offloads: u64,
    pub num_host_evictions: u64,
}

#[derive(Debug, Clone)]
pub struct BlockAllocator {
    block_size: usize,
    prefix_caching: bool,
    blocks: Vec<Block>,
    free: FreeQueue,
    cache: Map<u64, u32>,
    seqs: Map<i64, Seq>,
    num_hits: u64,
    num_lookups: u64,
    num_evictions: u64,
    num_copies: u64,
    tier: Tier,
    watch: Watch,
    /// `try_allocate_keyed`'s list of hits, kept between calls (no allocation per call)
    hits: Vec<Option<u32>>,
}

/// The keys a waiting request's allocation failed on, and a count of the events that could
/// make it succeed now (a simulator's blocked queue head is retried only after one: a failed
/// allocation changes nothing, so retrying it unchanged is wasted hashing). Whether an
/// allocation fits depends on the free blocks and on its hits on blocks in use; beside a free
/// (seen by the caller as more free blocks), only these raise the hits: one of its keys
/// registered, or a block holding one of its keys taken out of the free queue as another
/// sequence's hit. Evictions and host-tier moves only ever lower them.
#[derive(Debug, Clone, Default)]
struct Watch {
    keys: Map<u64, ()>,
    events: u64,
}

impl Watch {
    #[inline]
    fn saw(&mut self, key: u64) {
        if !self.keys.is_empty() && self.keys.contains_key(&key) {
            self.events += 1;
        }
    }
}

/// The chain keys handed to an allocation: copied, or taken over.
enum KeysIn<'a> {
    Borrowed(&'a [u64]),
    Owned(&'a mut Vec<u64>),
}

pub(super) fn check_token(name: &str, t: i64) -> CoreResult<u32> {
    if !(0..TOKEN_LIMIT).contains(&t) {
        return Err(CoreError::invalid(format!("{name} must be in [0, {TOKEN_LIMIT}), got {t}")));
    }
    Ok(t as u32)
}

/// Validates token ids (`token_ids[i] must be in [0, 2^32)`, non-empty) and narrows them.
pub fn check_tokens(tokens: &[i64]) -> CoreResult<Vec<u32>> {
    if let Some(i) = tokens.iter().position(|t| !(0..TOKEN_LIMIT).contains(t)) {
        check_token(&format!("token_ids[{i}]"), tokens[i])?;
    }
    if tokens.is_empty() {
        return Err(CoreError::invalid("token_ids must not be empty"));
    }
    Ok(tokens.iter().map(|&t| t as u32).collect())
}

/// `num_computed` as a count of tokens in `[0, num_tokens]`; `None` means all of them.
fn check_num_computed(num_computed: Option<i64>, num_tokens: usize) -> CoreResult<usize> {
    match num_computed {
        None => Ok(num_tokens),
        Some(c) if (0..=num_tokens as i64).contains(&c) => Ok(c as usize),
        Some(c) => Err(CoreError::invalid(format!(
            "num_computed must be an integer in [0, {num_tokens}], got {c}"
        ))),
    }
}

fn unknown(seq_id: i64) -> CoreError {
    CoreError::key(format!("seq_id {seq_id} is not allocated"))
}

fn duplicate(seq_id: i64) -> CoreError {
    CoreError::key(format!("seq_id {seq_id} is already allocated"))
}

fn out_of_blocks(seq_id: i64, need: usize, free: usize) -> CoreError {
    let s = if need == 1 { "" } else { "s" };
    CoreError::OutOfBlocks(format!("seq_id {seq_id} needs {need} new block{s}, {free} free"))
}

/// Why an op failed, its message not formatted yet: bulk calls (`replay`, `append_many`) meet
/// many refusals and keep none of their messages, so an `OutOfBlocks` is only spelled out when
/// it reaches the user.
#[derive(Debug)]
pub(super) enum OpError {
    OutOfBlocks { seq_id: i64, need: usize, free: usize },
    Other(CoreError),
}

impl From<CoreError> for OpError {
    fn from(e: CoreError) -> Self {
        OpError::Other(e)
    }
}

impl From<OpError> for CoreError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::OutOfBlocks { seq_id, need, free } => out_of_blocks(seq_id, need, free),
            OpError::Other(e) => e,
        }
    }
}

impl BlockAllocator {
    pub fn new(num_blocks: i64, block_size: i64, prefix_caching: bool) -> CoreResult<Self> {
        Self::with_host_tier(num_blocks, block_size, prefix_caching, 0, "lru")
    }

    /// An allocator whose evicted prefix blocks move to a host tier of `host_blocks` blocks
    /// (0: none, exactly [`BlockAllocator::new`]) dropping by `host_policy` (`"lru"`, `"hits"`).
    pub fn with_host_tier(
        num_blocks: i64,
        block_size: i64,
        prefix_caching: bool,
        host_blocks: i64,
        host_policy: &str,
    ) -> CoreResult<Self> {
        if !(1..=MAX_NUM_BLOCKS).contains(&num_blocks) {
            return Err(CoreError::invalid(format!(
                "num_blocks must be an integer in [1, {MAX_NUM_BLOCKS}], got {num_blocks}"
            )));
        }
        if !(1..=MAX_BLOCK_SIZE).contains(&block_size) {
            return Err(CoreError::invalid(format!(
                "block_size must be an integer in [1, {MAX_BLOCK_SIZE}], got {block_size}"
            )));
        }
        if !(0..=MAX_NUM_BLOCKS).contains(&host_blocks) {
            return Err(CoreError::invalid(format!(
                "host_blocks must be an integer in [0, {MAX_NUM_BLOCKS}], got {host_blocks}"
            )));
        }
        if host_blocks > 0 && !prefix_caching {
            return Err(CoreError::invalid(format!(
                "host_blocks={host_blocks} needs prefix_caching=True (the host tier holds cached prefixes)"
            )));
        }
        let policy = HostPolicy::parse(host_policy)?;
        let n = num_blocks as u32;
        let mut blocks: Vec<Block> = (0..n)
            .map(|_| Block {
                ref_count: 0,
                key: None,
                parent_key: ROOT_KEY,
                tokens: Vec::new(),
                hits: 0,
                qpos: 0,
            })
            .collect();
        let free = FreeQueue::new(&mut blocks);
        Ok(BlockAllocator {
            block_size: block_size as usize,
            prefix_caching,
            blocks,
            free,
            cache: HashMap::default(),
            seqs: Map::default(),
            num_hits: 0,
            num_lookups: 0,
            num_evictions: 0,
            num_copies: 0,
            tier: Tier {
                host: HostTier::new(host_blocks as usize, policy),
                log: Vec::new(),
                num_host_hits: 0,
                num_offloads: 0,
                num_host_evictions: 0,
            },
            watch: Watch::default(),
            hits: Vec::new(),
        })
    }

    // ---- free queue ------------------------------------------------------------------------

    /// Takes the least recently freed block for new content, evicting its cached key.
    /// The caller has checked that a block is free.
    fn take_free(&mut self) -> u32 {
        let b = self.free.pop_front(&self.blocks);
        let blk = &mut self.blocks[b as usize];
        if let Some(k) = blk.key.take() {
            self.cache.remove(&k);
            self.num_evictions += 1;
            let t = &mut self.tier;
            if t.host.capacity() > 0 {
                // §8 milestone 4b: the evicted prefix moves to the host instead of vanishing.
                t.num_offloads += 1;
                t.log.push(Transfer { kind: TransferKind::Offload, block: Some(b), key: k, hits: blk.hits });
                if let Some((v, hits)) = t.host.insert(k, blk.parent_key, std::mem::take(&mut blk.tokens), blk.hits) {
                    t.num_host_evictions += 1;
                    t.log.push(Transfer { kind: TransferKind::Drop, block: None, key: v, hits });
                }
            }
        }
        blk.tokens.clear();
        blk.hits = 0;
        blk.ref_count = 1;
        b
    }

    /// Offers `seq`'s full blocks `seq.marked..upto` to the cache, in order: each becomes the
    /// cached block of its key unless another block already is (first wins).
    /// A free function over the fields it needs, so that a sequence can be borrowed meanwhile.
    fn mark_blocks(cache: &mut Map<u64, u32>, blocks: &mut [Block], tier: &mut Tier, watch: &mut Watch, seq: &mut Seq, upto: usize) {
        for i in seq.marked..upto {
            let key = seq.keys[i];
            if let std::collections::hash_map::Entry::Vacant(e) = cache.entry(key) {
                let b = seq.table[i];
                e.insert(b);
                tier.supersede(key);
                watch.saw(key);
                let blk = &mut blocks[b as usize];
                blk.key = Some(key);
                blk.parent_key = if i == 0 { ROOT_KEY } else { seq.keys[i - 1] };
            }
        }
        seq.marked = seq.marked.max(upto);
    }

    // ---- operations ------------------------------------------------------------------------

    /// Gives `seq_id` the blocks for `tokens` (reusing cached full blocks with prefix caching)
    /// and returns its block table. `num_computed`: how many leading tokens already have their
    /// KV (`None`: all of them); only full blocks inside them are registered (module docs).
    pub fn allocate(&mut self, seq_id: i64, tokens: &[i64], num_computed: Option<i64>) -> CoreResult<&[u32]> {
        let tokens = check_tokens(tokens)?;
        let computed = check_num_computed(num_computed, tokens.len())?;
        Ok(self.try_allocate(seq_id, &tokens, computed)?)
    }

    /// `allocate` of checked tokens (`tokens` must not be empty; `computed <= tokens.len()`).
    pub(super) fn try_allocate(&mut self, seq_id: i64, tokens: &[u32], computed: usize) -> Result<&[u32], OpError> {
        let keys = if self.prefix_caching { self.chain_keys(tokens) } else { Vec::new() };
        self.try_allocate_keyed(seq_id, tokens, &keys, computed)
    }

    /// The chain keys of `tokens`' full blocks, as `allocate` computes them: a caller that may
    /// allocate the same tokens many times (a simulator's waiting queue head) hashes them once
    /// and hands them to [`BlockAllocator::allocate_keyed`].
    pub fn chain_keys(&self, tokens: &[u32]) -> Vec<u64> {
        let mut keys = Vec::with_capacity(tokens.len() / self.block_size);
        let mut parent = ROOT_KEY;
        for chunk in tokens.chunks_exact(self.block_size) {
            parent = block_key(parent, chunk);
            keys.push(parent);
        }
        keys
    }

    /// `allocate(seq_id, tokens, Some(computed))` of checked tokens whose chain keys are
    /// `keys` (from [`BlockAllocator::chain_keys`] on the same tokens and allocator; empty
    /// without prefix caching). `Ok(false)`: the pool is short, and nothing changed.
    pub fn allocate_keyed(&mut self, seq_id: i64, tokens: &[u32], keys: &[u64], computed: usize) -> CoreResult<bool> {
        debug_assert_eq!(keys.len(), if self.prefix_caching { tokens.len() / self.block_size } else { 0 });
        match self.try_allocate_keyed(seq_id, tokens, keys, computed.min(tokens.len())) {
            Ok(_) => Ok(true),
            Err(OpError::OutOfBlocks { .. }) => Ok(false),
            Err(OpError::Other(e)) => Err(e),
        }
    }

    /// [`BlockAllocator::allocate_keyed`] that keeps `keys` as the sequence's own on success
    /// (leaving the vector empty) rather than copying them: a simulator hashes a prompt's keys
    /// for one allocation. On `Ok(false)` `keys` is untouched.
    pub fn allocate_keyed_vec(&mut self, seq_id: i64, tokens: &[u32], keys: &mut Vec<u64>, computed: usize) -> CoreResult<bool> {
        debug_assert_eq!(keys.len(), if self.prefix_caching { tokens.len() / self.block_size } else { 0 });
        match self.try_allocate_inner(seq_id, tokens, KeysIn::Owned(keys), computed.min(tokens.len())) {
            Ok(_) => Ok(true),
            Err(OpError::OutOfBlocks { .. }) => Ok(false),
            Err(OpError::Other(e)) => Err(e),
        }
    }

    /// Watches `keys` (a waiting request's, after its allocation failed): from now on
    /// [`BlockAllocator::watch_events`] counts the events that could make it fit (see
    /// `Watch`). An empty slice stops watching.
    pub fn watch(&mut self, keys: &[u64]) {
        self.watch.keys.clear();
        self.watch.keys.extend(keys.iter().map(|&k| (k, ())));
    }

    pub fn watch_events(&self) -> u64 {
        self.watch.events
    }

    fn try_allocate_keyed(&mut self, seq_id: i64, tokens: &[u32], keys: &[u64], computed: usize) -> Result<&[u32], OpError> {
        self.try_allocate_inner(seq_id, tokens, KeysIn::Borrowed(keys), computed)
    }

    fn try_allocate_inner(&mut self, seq_id: i64, tokens: &[u32], keys_in: KeysIn<'_>, computed: usize) -> Result<&[u32], OpError> {
        let keys: &[u64] = match &keys_in {
            KeysIn::Borrowed(k) => k,
            KeysIn::Owned(k) => k,
        };
        if tokens.is_empty() {
            return Err(CoreError::invalid("token_ids must not be empty").into());
        }
        if self.seqs.contains_key(&seq_id) {
            return Err(duplicate(seq_id).into());
        }
        let bs = self.block_size;
        let n = tokens.len();
        let n_blocks = n.div_ceil(bs);
        // Longest verified cached prefix, leaving at least one token to compute.
        let max_hits = if self.prefix_caching { (n - 1) / bs } else { 0 };
        // A hit is `Some(b)` (GPU block b) or `None` (a key found on the host tier).
        let mut hits = std::mem::take(&mut self.hits);
        hits.clear();
        let mut hits_free = 0;
        for i in 0..max_hits {
            let parent = if i == 0 { ROOT_KEY } else { keys[i - 1] };
            let chunk = &tokens[i * bs..(i + 1) * bs];
            if let Some(&b) = self.cache.get(&keys[i]) {
                let blk = &self.blocks[b as usize];
                if blk.parent_key != parent || blk.tokens[..] != *chunk {
                    break;
                }
                hits.push(Some(b));
                hits_free += (blk.ref_count == 0) as usize;
            } else {
                match self.tier.host.get(keys[i]) {
                    Some(e) if e.parent_key == parent && e.tokens[..] == *chunk => hits.push(None),
                    _ => break,
                }
            }
        }
        let n_host = hits.iter().filter(|h| h.is_none()).count();
        let need = n_blocks - (hits.len() - n_host); // a recalled block needs a fresh GPU block
        let free = self.free.len() - hits_free;
        if need > free {
            self.hits = hits;
            return Err(OpError::OutOfBlocks { seq_id, need, free });
        }
        // Commit: nothing below can fail.
        self.num_lookups += max_hits as u64;
        self.num_hits += (hits.len() - n_host) as u64;
        self.tier.num_host_hits += n_host as u64;
        for &b in hits.iter().flatten() {
            let blk = &mut self.blocks[b as usize];
            if blk.ref_count == 0 {
                if let Some(k) = blk.key {
                    self.watch.saw(k); // a free hit becomes a hit on a block in use
                }
                self.free.remove();
            }
            let blk = &mut self.blocks[b as usize];
            blk.ref_count += 1;
            blk.hits += 1;
        }
        // Out of the host tier before any eviction below could push it out.
        let recalled: Vec<_> = if n_host == 0 {
            Vec::new()
        } else {
            (0..hits.len())
                .filter(|&i| hits[i].is_none())
                .map(|i| self.tier.host.take(keys[i]).expect("looked up above"))
                .collect()
        };
        let mut recalled = recalled.into_iter();
        let mut table = Vec::with_capacity(n_blocks);
        for (i, h) in hits.iter().enumerate() {
            match h {
                Some(b) => table.push(*b),
                None => {
                    let e = recalled.next().expect("one entry per host hit");
                    let b = self.take_free();
                    self.tier.log.push(Transfer { kind: TransferKind::Recall, block: Some(b), key: keys[i], hits: e.hits });
                    let blk = &mut self.blocks[b as usize];
                    blk.tokens = e.tokens;
                    blk.hits = e.hits + 1;
                    blk.key = Some(keys[i]);
                    blk.parent_key = e.parent_key;
                    self.cache.insert(keys[i], b);
                    self.watch.saw(keys[i]);
                    table.push(b);
                }
            }
        }
        for i in hits.len()..n_blocks {
            let b = self.take_free();
            self.blocks[b as usize].tokens.extend_from_slice(&tokens[i * bs..n.min((i + 1) * bs)]);
            table.push(b);
        }
        let n_hits = hits.len();
        self.hits = hits;
        let keys = match keys_in {
            KeysIn::Borrowed(k) => k.to_vec(),
            KeysIn::Owned(k) => std::mem::take(k),
        };
        let mut seq = Seq { table, keys, marked: n_hits, num_tokens: n, num_cached_tokens: n_hits * bs };
        let upto = (computed / bs).min(seq.keys.len());
        Self::mark_blocks(&mut self.cache, &mut self.blocks, &mut self.tier, &mut self.watch, &mut seq, upto);
        Ok(&self.seqs.entry(seq_id).or_insert(seq).table)
    }

    /// Registers the keys of `seq_id`'s full blocks inside its first `num_computed` tokens that
    /// were not offered to the cache yet (first wins, as ever). Idempotent; a smaller
    /// `num_computed` than before changes nothing; without prefix caching only checks.
    pub fn mark_computed(&mut self, seq_id: i64, num_computed: i64) -> CoreResult<()> {
        let seq = self.seqs.get_mut(&seq_id).ok_or_else(|| unknown(seq_id))?;
        let c = check_num_computed(Some(num_computed), seq.num_tokens)?;
        let upto = (c / self.block_size).min(seq.keys.len());
        Self::mark_blocks(&mut self.cache, &mut self.blocks, &mut self.tier, &mut self.watch, seq, upto);
        Ok(())
    }

    /// Adds one token to `seq_id`; returns the copy-on-write `(src, dst)` if one was made.
    pub fn append(&mut self, seq_id: i64, token: i64) -> CoreResult<Option<(u32, u32)>> {
        let token = check_token("token_id", token)?;
        Ok(self.try_append(seq_id, token)?)
    }

    /// `append` of a checked token.
    pub(super) fn try_append(&mut self, seq_id: i64, token: u32) -> Result<Option<(u32, u32)>, OpError> {
        let bs = self.block_size;
        let seq = self.seqs.get(&seq_id).ok_or_else(|| unknown(seq_id))?;
        let last = *seq.table.last().expect("a sequence holds at least one token");
        let last_full = seq.num_tokens.is_multiple_of(bs);
        let shared = self.blocks[last as usize].ref_count > 1;
        if (last_full || shared) && self.free.len() == 0 {
            return Err(OpError::OutOfBlocks { seq_id, need: 1, free: 0 });
        }
        let mut copy = None;
        let dst = if last_full {
            let b = self.take_free();
            self.seqs.get_mut(&seq_id).unwrap().table.push(b);
            b
        } else if shared {
            let b = self.take_free();
            let src_tokens = self.blocks[last as usize].tokens.clone();
            self.blocks[b as usize].tokens.extend_from_slice(&src_tokens);
            self.blocks[last as usize].ref_count -= 1;
            *self.seqs.get_mut(&seq_id).unwrap().table.last_mut().unwrap() = b;
            self.num_copies += 1;
            copy = Some((last, b));
            b
        } else {
            last
        };
        self.blocks[dst as usize].tokens.push(token);
        let seq = self.seqs.get_mut(&seq_id).unwrap();
        seq.num_tokens += 1;
        if self.prefix_caching && seq.num_tokens.is_multiple_of(bs) {
            let parent = seq.keys.last().copied().unwrap_or(ROOT_KEY);
            seq.keys.push(block_key(parent, &self.blocks[dst as usize].tokens));
            // the new token's predecessors are computed: offer every block up to this one
            let upto = seq.keys.len();
            Self::mark_blocks(&mut self.cache, &mut self.blocks, &mut self.tier, &mut self.watch, seq, upto);
        }
        Ok(copy)
    }

    /// `count` appends of the same `token`, as `count` calls of [`BlockAllocator::append`] would
    /// make them, but a run that stays inside the last block is one write (the simulator's
    /// decoders append their own synthetic token every step). Stops at the first append the
    /// pool cannot serve, which changes nothing; the appends before it stay done.
    pub fn append_same(&mut self, seq_id: i64, token: i64, count: usize) -> CoreResult<()> {
        let token = check_token("token_id", token)?;
        let bs = self.block_size;
        let mut left = count;
        while left > 0 {
            let seq = self.seqs.get(&seq_id).ok_or_else(|| unknown(seq_id))?;
            let last = *seq.table.last().expect("a sequence holds at least one token");
            let used = seq.num_tokens % bs;
            if used == 0 || self.blocks[last as usize].ref_count > 1 {
                self.try_append(seq_id, token)?; // a new block or a copy: the general path
                left -= 1;
                continue;
            }
            let k = left.min(bs - used);
            let blk = &mut self.blocks[last as usize];
            blk.tokens.resize(blk.tokens.len() + k, token);
            let seq = self.seqs.get_mut(&seq_id).unwrap();
            seq.num_tokens += k;
            left -= k;
            if self.prefix_caching && seq.num_tokens.is_multiple_of(bs) {
                let parent = seq.keys.last().copied().unwrap_or(ROOT_KEY);
                seq.keys.push(block_key(parent, &self.blocks[last as usize].tokens));
                let upto = seq.keys.len();
                Self::mark_blocks(&mut self.cache, &mut self.blocks, &mut self.tier, &mut self.watch, seq, upto);
            }
        }
        Ok(())
    }

    /// Makes `child_id` share every block of `parent_id`.
    pub fn fork(&mut self, parent_id: i64, child_id: i64) -> CoreResult<()> {
        let seq = self.seqs.get(&parent_id).ok_or_else(|| unknown(parent_id))?.clone();
        if self.seqs.contains_key(&child_id) {
            return Err(duplicate(child_id));
        }
        for &b in &seq.table {
            self.blocks[b as usize].ref_count += 1;
        }
        self.seqs.insert(child_id, seq);
        Ok(())
    }

    /// Drops `seq_id`'s references; its newly free blocks join the back of the free queue,
    /// last block first.
    pub fn free(&mut self, seq_id: i64) -> CoreResult<()> {
        self.free_keys(seq_id).map(|_| ())
    }

    /// [`BlockAllocator::free`], handing back the chain keys of the sequence's full blocks (a
    /// simulator keeps them for the requests whose prompts start with this one's tokens).
    pub fn free_keys(&mut self, seq_id: i64) -> CoreResult<Vec<u64>> {
        let seq = self.seqs.remove(&seq_id).ok_or_else(|| unknown(seq_id))?;
        for &b in seq.table.iter().rev() {
            let blk = &mut self.blocks[b as usize];
            blk.ref_count -= 1;
            if blk.ref_count == 0 {
                self.free.push_back(&mut self.blocks, b);
            }
        }
        Ok(seq.keys)
    }
}

#[cfg(test)]
mod tests;
