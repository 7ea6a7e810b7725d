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
//!   within one sequence, tail blocks go before head blocks (vLLM v1's `FreeKVCacheBlockQueue`).
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
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::{CoreError, CoreResult};

mod host_tier;
pub use host_tier::HostPolicy;
use host_tier::HostTier;

/// Largest pool, in blocks (16 Mi: far beyond any GPU's KV pool at 16 tokens a block).
pub const MAX_NUM_BLOCKS: i64 = 1 << 24;
/// Largest block, in tokens.
pub const MAX_BLOCK_SIZE: i64 = 1 << 16;
/// Token ids are integers in `[0, TOKEN_LIMIT)` (they are stored as `u32`).
pub const TOKEN_LIMIT: i64 = 1 << 32;
/// The parent key of a sequence's first block.
pub const ROOT_KEY: u64 = 0;

const KEY_SEED: u64 = 0x7365_7276_656c_6162; // "servelab"
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
const NIL: u32 = u32::MAX;

/// Replay op codes (see [`BlockAllocator::replay`]).
pub const OP_ALLOCATE: i64 = 0;
pub const OP_APPEND: i64 = 1;
pub const OP_FORK: i64 = 2;
pub const OP_FREE: i64 = 3;
/// Replay statuses, one per op.
pub const STATUS_OK: i64 = 0;
pub const STATUS_COPIED: i64 = 1;
pub const STATUS_OUT_OF_BLOCKS: i64 = 2;

/// SplitMix64's output function: a bijection of u64 with full avalanche.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn step(h: u64, x: u64) -> u64 {
    mix((h ^ x).wrapping_add(GOLDEN))
}

/// The cache key of a full block: a hash of its parent's key and its own tokens.
pub fn block_key(parent: u64, tokens: &[u32]) -> u64 {
    tokens.iter().fold(step(KEY_SEED, parent), |h, &t| step(h, t as u64))
}

/// Hashes a u64 through [`mix`]: cache keys are mixed already (so mixing again is cheap
/// insurance), and sequence ids are often small consecutive integers, which SipHash would
/// handle well but slowly and an identity hash badly (hashbrown reads the top bits).
#[derive(Default)]
struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(v);
    }
    fn write_i64(&mut self, v: i64) {
        self.0 = mix(v as u64);
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;

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
    // Free queue links (valid while ref_count == 0).
    prev: u32,
    next: u32,
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

/// What moved between the tiers (see [`BlockAllocator::take_transfers`]).
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
struct Tier {
    host: HostTier,
    log: Vec<Transfer>,
    num_host_hits: u64,
    num_offloads: u64,
    num_host_evictions: u64,
}

impl Tier {
    /// A key is being registered on the GPU: a host copy of it is now redundant.
    fn supersede(&mut self, key: u64) {
        if let Some(e) = if self.host.is_empty() { None } else { self.host.take(key) } {
            self.log.push(Transfer { kind: TransferKind::Drop, block: None, key, hits: e.hits });
        }
    }
}

#[derive(Debug, Clone)]
pub struct BlockAllocator {
    block_size: usize,
    prefix_caching: bool,
    blocks: Vec<Block>,
    head: u32,
    tail: u32,
    num_free: usize,
    cache: Map<u64, u32>,
    seqs: Map<i64, Seq>,
    num_hits: u64,
    num_lookups: u64,
    num_evictions: u64,
    num_copies: u64,
    tier: Tier,
}

fn check_token(name: &str, t: i64) -> CoreResult<u32> {
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
enum OpError {
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

/// What [`BlockAllocator::append_many`] did: `done` appends succeeded, in order; the next one
/// (if `done` is short of the input) was refused for want of a block and changed nothing.
/// `copy_src[i]`/`copy_dst[i]` is append `i`'s copy-on-write, `-1`/`-1` when it made none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppendMany {
    pub done: usize,
    pub copy_src: Vec<i64>,
    pub copy_dst: Vec<i64>,
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
        let blocks = (0..n)
            .map(|i| Block {
                ref_count: 0,
                key: None,
                parent_key: ROOT_KEY,
                tokens: Vec::new(),
                hits: 0,
                prev: if i == 0 { NIL } else { i - 1 },
                next: if i + 1 == n { NIL } else { i + 1 },
            })
            .collect();
        Ok(BlockAllocator {
            block_size: block_size as usize,
            prefix_caching,
            blocks,
            head: 0,
            tail: n - 1,
            num_free: n as usize,
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
        })
    }

    // ---- free queue ------------------------------------------------------------------------

    fn unlink(&mut self, b: u32) {
        let (prev, next) = (self.blocks[b as usize].prev, self.blocks[b as usize].next);
        if prev == NIL { self.head = next } else { self.blocks[prev as usize].next = next }
        if next == NIL { self.tail = prev } else { self.blocks[next as usize].prev = prev }
        self.num_free -= 1;
    }

    fn push_back(&mut self, b: u32) {
        let blk = &mut self.blocks[b as usize];
        blk.prev = self.tail;
        blk.next = NIL;
        if self.tail == NIL { self.head = b } else { self.blocks[self.tail as usize].next = b }
        self.tail = b;
        self.num_free += 1;
    }

    /// Takes the least recently freed block for new content, evicting its cached key.
    /// The caller has checked that a block is free.
    fn take_free(&mut self) -> u32 {
        let b = self.head;
        debug_assert!(b != NIL);
        self.unlink(b);
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
    fn mark_blocks(cache: &mut Map<u64, u32>, blocks: &mut [Block], tier: &mut Tier, seq: &mut Seq, upto: usize) {
        for i in seq.marked..upto {
            let key = seq.keys[i];
            if let std::collections::hash_map::Entry::Vacant(e) = cache.entry(key) {
                let b = seq.table[i];
                e.insert(b);
                tier.supersede(key);
                let blk = &mut blocks[b as usize];
                blk.key = Some(key);
                blk.parent_key = if i == 0 { ROOT_KEY } else { seq.keys[i - 1] };
            }
        }
        seq.marked = seq.marked.max(upto);
    }

    fn chain_keys(&self, tokens: &[u32]) -> Vec<u64> {
        let mut keys = Vec::with_capacity(tokens.len() / self.block_size);
        let mut parent = ROOT_KEY;
        for chunk in tokens.chunks_exact(self.block_size) {
            parent = block_key(parent, chunk);
            keys.push(parent);
        }
        keys
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
    fn try_allocate(&mut self, seq_id: i64, tokens: &[u32], computed: usize) -> Result<&[u32], OpError> {
        if tokens.is_empty() {
            return Err(CoreError::invalid("token_ids must not be empty").into());
        }
        if self.seqs.contains_key(&seq_id) {
            return Err(duplicate(seq_id).into());
        }
        let bs = self.block_size;
        let n = tokens.len();
        let n_blocks = n.div_ceil(bs);
        let keys = if self.prefix_caching { self.chain_keys(tokens) } else { Vec::new() };
        // Longest verified cached prefix, leaving at least one token to compute.
        let max_hits = if self.prefix_caching { (n - 1) / bs } else { 0 };
        // A hit is `Some(b)` (GPU block b) or `None` (a key found on the host tier).
        let mut hits: Vec<Option<u32>> = Vec::new();
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
        let free = self.num_free - hits_free;
        if need > free {
            return Err(OpError::OutOfBlocks { seq_id, need, free });
        }
        // Commit: nothing below can fail.
        self.num_lookups += max_hits as u64;
        self.num_hits += (hits.len() - n_host) as u64;
        self.tier.num_host_hits += n_host as u64;
        for &b in hits.iter().flatten() {
            let blk = &mut self.blocks[b as usize];
            if blk.ref_count == 0 {
                self.unlink(b);
            }
            let blk = &mut self.blocks[b as usize];
            blk.ref_count += 1;
            blk.hits += 1;
        }
        // Out of the host tier before any eviction below could push it out.
        let recalled: Vec<_> = (0..hits.len())
            .filter(|&i| hits[i].is_none())
            .map(|i| self.tier.host.take(keys[i]).expect("looked up above"))
            .collect();
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
                    table.push(b);
                }
            }
        }
        for i in hits.len()..n_blocks {
            let b = self.take_free();
            self.blocks[b as usize].tokens.extend_from_slice(&tokens[i * bs..n.min((i + 1) * bs)]);
            table.push(b);
        }
        let mut seq = Seq { table, keys, marked: hits.len(), num_tokens: n, num_cached_tokens: hits.len() * bs };
        let upto = (computed / bs).min(seq.keys.len());
        Self::mark_blocks(&mut self.cache, &mut self.blocks, &mut self.tier, &mut seq, upto);
        Ok(&self.seqs.entry(seq_id).or_insert(seq).table)
    }

    /// Registers the keys of `seq_id`'s full blocks inside its first `num_computed` tokens that
    /// were not offered to the cache yet (first wins, as ever). Idempotent; a smaller
    /// `num_computed` than before changes nothing; without prefix caching only checks.
    pub fn mark_computed(&mut self, seq_id: i64, num_computed: i64) -> CoreResult<()> {
        let seq = self.seqs.get_mut(&seq_id).ok_or_else(|| unknown(seq_id))?;
        let c = check_num_computed(Some(num_computed), seq.num_tokens)?;
        let upto = (c / self.block_size).min(seq.keys.len());
        Self::mark_blocks(&mut self.cache, &mut self.blocks, &mut self.tier, seq, upto);
        Ok(())
    }

    /// Adds one token to `seq_id`; returns the copy-on-write `(src, dst)` if one was made.
    pub fn append(&mut self, seq_id: i64, token: i64) -> CoreResult<Option<(u32, u32)>> {
        let token = check_token("token_id", token)?;
        Ok(self.try_append(seq_id, token)?)
    }

    /// `append` of a checked token.
    fn try_append(&mut self, seq_id: i64, token: u32) -> Result<Option<(u32, u32)>, OpError> {
        let bs = self.block_size;
        let seq = self.seqs.get(&seq_id).ok_or_else(|| unknown(seq_id))?;
        let last = *seq.table.last().expect("a sequence holds at least one token");
        let last_full = seq.num_tokens.is_multiple_of(bs);
        let shared = self.blocks[last as usize].ref_count > 1;
        if (last_full || shared) && self.num_free == 0 {
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
            Self::mark_blocks(&mut self.cache, &mut self.blocks, &mut self.tier, seq, upto);
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
                Self::mark_blocks(&mut self.cache, &mut self.blocks, &mut self.tier, seq, upto);
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
        let seq = self.seqs.remove(&seq_id).ok_or_else(|| unknown(seq_id))?;
        for &b in seq.table.iter().rev() {
            let blk = &mut self.blocks[b as usize];
            blk.ref_count -= 1;
            if blk.ref_count == 0 {
                self.push_back(b);
            }
        }
        Ok(())
    }

    // ---- queries ---------------------------------------------------------------------------

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
        Ok((n_tokens as u64).div_ceil(self.block_size as u64) <= self.num_free as u64)
    }

    /// Whether `append` to `seq_id` succeeds now.
    pub fn can_append(&self, seq_id: i64) -> CoreResult<bool> {
        let seq = self.seq(seq_id)?;
        let last = *seq.table.last().unwrap();
        let needs_block = seq.num_tokens.is_multiple_of(self.block_size) || self.blocks[last as usize].ref_count > 1;
        Ok(!needs_block || self.num_free > 0)
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
        let mut out = Vec::with_capacity(self.num_free);
        let mut b = self.head;
        while b != NIL {
            out.push(b as i64);
            b = self.blocks[b as usize].next;
        }
        out
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
        self.num_free
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
            num_free_blocks: self.num_free,
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

    // ---- bulk ------------------------------------------------------------------------------

    /// Runs a recorded trace of operations; returns one status per op: [`STATUS_OK`],
    /// [`STATUS_COPIED`] (an append that made a copy-on-write) or [`STATUS_OUT_OF_BLOCKS`]
    /// (the op changed nothing). `op[i]` is an `OP_*` code; `seq[i]` the sequence;
    /// `arg[i]` the prompt index for allocate (its tokens are `tokens[offsets[a]..offsets[a+1]]`),
    /// the token for append, the child id for fork, ignored for free. Any other error stops the
    /// replay and is returned with `op {i}: ` before its message; the ops before it stay done.
    pub fn replay(
        &mut self,
        op: &[i64],
        seq: &[i64],
        arg: &[i64],
        tokens: &[i64],
        offsets: &[i64],
    ) -> CoreResult<Vec<i64>> {
        if op.len() != seq.len() || op.len() != arg.len() {
            return Err(CoreError::invalid(format!(
                "op, seq and arg must have the same length, got {}, {} and {}",
                op.len(),
                seq.len(),
                arg.len()
            )));
        }
        let n_prompts = offsets.len().saturating_sub(1) as i64;
        // Tokens are checked once for the whole trace; with a bad one somewhere, each allocate
        // checks its own prompt as it comes (the error then names the op that met it).
        let checked: Option<Vec<u32>> = tokens
            .iter()
            .all(|t| (0..TOKEN_LIMIT).contains(t))
            .then(|| tokens.iter().map(|&t| t as u32).collect());
        let mut status = Vec::with_capacity(op.len());
        for i in 0..op.len() {
            let (s, a) = (seq[i], arg[i]);
            let r = match op[i] {
                OP_ALLOCATE => {
                    if !(0..n_prompts).contains(&a) {
                        Err(CoreError::invalid(format!(
                            "prompt index must be in [0, {n_prompts}), got {a}"
                        ))
                        .into())
                    } else {
                        let (lo, hi) = (offsets[a as usize], offsets[a as usize + 1]);
                        if !(0 <= lo && lo <= hi && hi <= tokens.len() as i64) {
                            Err(CoreError::invalid(format!(
                                "prompt {a} spans [{lo}, {hi}), outside tokens of length {}",
                                tokens.len()
                            ))
                            .into())
                        } else {
                            let (lo, hi) = (lo as usize, hi as usize);
                            match &checked {
                                Some(all) => self.try_allocate(s, &all[lo..hi], hi - lo).map(|_| STATUS_OK),
                                None => match check_tokens(&tokens[lo..hi]) {
                                    Ok(t) => self.try_allocate(s, &t, hi - lo).map(|_| STATUS_OK),
                                    Err(e) => Err(e.into()),
                                },
                            }
                        }
                    }
                }
                OP_APPEND => match check_token("token_id", a) {
                    Ok(t) => self.try_append(s, t).map(|c| if c.is_some() { STATUS_COPIED } else { STATUS_OK }),
                    Err(e) => Err(e.into()),
                },
                OP_FORK => self.fork(s, a).map(|_| STATUS_OK).map_err(OpError::from),
                OP_FREE => self.free(s).map(|_| STATUS_OK).map_err(OpError::from),
                code => Err(CoreError::invalid(format!(
                    "unknown op code {code} (0 allocate, 1 append, 2 fork, 3 free)"
                ))
                .into()),
            };
            match r {
                Ok(st) => status.push(st),
                Err(OpError::OutOfBlocks { .. }) => status.push(STATUS_OUT_OF_BLOCKS),
                Err(OpError::Other(e)) => return Err(e.prefixed(&format!("op {i}: "))),
            }
        }
        Ok(status)
    }

    /// One decode step's appends in one call: token `token_ids[i]` onto sequence `seq_ids[i]`,
    /// in order. Stops at the first append the pool cannot serve (it changes nothing; `done`
    /// says how many went through, so the caller can preempt and call again with the rest).
    /// A bad token or an unknown sequence is an error naming its index; the appends before it
    /// stay done, as in [`BlockAllocator::replay`].
    pub fn append_many(&mut self, seq_ids: &[i64], token_ids: &[i64]) -> CoreResult<AppendMany> {
        if seq_ids.len() != token_ids.len() {
            return Err(CoreError::invalid(format!(
                "seq_ids and token_ids must have the same length, got {} and {}",
                seq_ids.len(),
                token_ids.len()
            )));
        }
        let mut out = AppendMany {
            done: 0,
            copy_src: Vec::with_capacity(seq_ids.len()),
            copy_dst: Vec::with_capacity(seq_ids.len()),
        };
        for (i, (&s, &t)) in seq_ids.iter().zip(token_ids).enumerate() {
            let r = check_token("token_id", t).map_err(OpError::from).and_then(|t| self.try_append(s, t));
            match r {
                Ok(copy) => {
                    let (src, dst) = copy.map_or((-1, -1), |(a, b)| (a as i64, b as i64));
                    out.copy_src.push(src);
                    out.copy_dst.push(dst);
                    out.done += 1;
                }
                Err(OpError::OutOfBlocks { .. }) => break,
                Err(OpError::Other(e)) => return Err(e.prefixed(&format!("seq_ids[{i}]: "))),
            }
        }
        Ok(out)
    }

    /// Frees every sequence of `seq_ids`, in order (each as [`BlockAllocator::free`]). An
    /// unknown one is an error naming its index; the frees before it stay done.
    pub fn free_many(&mut self, seq_ids: &[i64]) -> CoreResult<()> {
        for (i, &s) in seq_ids.iter().enumerate() {
            self.free(s).map_err(|e| e.prefixed(&format!("seq_ids[{i}]: ")))?;
        }
        Ok(())
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
        if queue.len() != self.num_free || n_zero != self.num_free {
            return Err(format!("free queue {} / num_free {} / unreferenced {}", queue.len(), self.num_free, n_zero));
        }
        if queue.iter().any(|&b| refs[b as usize] != 0) {
            return Err("a referenced block is in the free queue".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(v: &[i64]) -> Vec<i64> {
        v.to_vec()
    }

    /// A seeded generator for the random tests: `rnd(n)` is a number in `0..n`.
    fn rng(mut state: u64) -> impl FnMut(u64) -> u64 {
        move |n| {
            state = mix(state.wrapping_add(GOLDEN));
            state % n
        }
    }

    #[test]
    fn key_is_pinned() {
        // The reference computes the same integers (tests/test_blocks_cases.py pins them too).
        assert_eq!(block_key(ROOT_KEY, &[]), step(KEY_SEED, 0));
        assert_ne!(block_key(ROOT_KEY, &[1, 2]), block_key(ROOT_KEY, &[2, 1]));
        assert_ne!(block_key(1, &[1, 2]), block_key(2, &[1, 2]));
    }

    #[test]
    fn allocate_append_free() {
        let mut a = BlockAllocator::new(4, 2, false).unwrap();
        assert_eq!(a.allocate(7, &toks(&[1, 2, 3]), None).unwrap(), &[0, 1]);
        assert_eq!(a.num_free_blocks(), 2);
        assert_eq!(a.append(7, 4).unwrap(), None);
        assert_eq!(a.append(7, 5).unwrap(), None);
        assert_eq!(a.block_table(7).unwrap(), &[0, 1, 2]);
        a.free(7).unwrap();
        // Tail first: 3 was never used, then 2, 1, 0.
        assert_eq!(a.free_queue(), vec![3, 2, 1, 0]);
        assert!(matches!(a.free(7), Err(CoreError::Key(_))));
        a.check_invariants().unwrap();
    }

    #[test]
    fn fork_copy_on_write() {
        let mut a = BlockAllocator::new(4, 4, false).unwrap();
        a.allocate(1, &toks(&[1, 2, 3, 4, 5]), None).unwrap();
        a.fork(1, 2).unwrap();
        assert_eq!(a.ref_counts(), vec![2, 2, 0, 0]);
        assert_eq!(a.append(2, 9).unwrap(), Some((1, 2)));
        assert_eq!(a.block_table(2).unwrap(), &[0, 2]);
        assert_eq!(a.block_tokens(1).unwrap(), &[5]);
        assert_eq!(a.block_tokens(2).unwrap(), &[5, 9]);
        // The parent is now the only owner of block 1: no copy.
        assert_eq!(a.append(1, 6).unwrap(), None);
        assert_eq!(a.num_copies(), 1);
        a.check_invariants().unwrap();
    }

    #[test]
    fn prefix_hits_leave_one_token() {
        let mut a = BlockAllocator::new(8, 2, true).unwrap();
        a.allocate(1, &toks(&[1, 2, 3, 4, 5]), None).unwrap();
        a.free(1).unwrap();
        assert_eq!(a.free_queue(), vec![3, 4, 5, 6, 7, 2, 1, 0]);
        assert_eq!(a.allocate(2, &toks(&[1, 2, 3, 4, 9]), None).unwrap(), &[0, 1, 3]);
        assert_eq!(a.num_cached_tokens(2).unwrap(), 4);
        // Exactly the cached chain: the last block is recomputed.
        assert_eq!(a.allocate(3, &toks(&[1, 2, 3, 4]), None).unwrap(), &[0, 4]);
        assert_eq!(a.num_cached_tokens(3).unwrap(), 2);
        // Lookups: 2 + 2 + 1 (at most (n - 1) / block_size per prompt); hits: 0 + 2 + 1.
        assert_eq!((a.num_hits(), a.num_lookups()), (3, 5));
        a.check_invariants().unwrap();
    }

    /// Keys are findable only once computed: `allocate(.., Some(c))` registers the full blocks
    /// inside the first `c` tokens, `mark_computed` the rest, `append` everything before it.
    #[test]
    fn keys_registered_when_computed() {
        let mut a = BlockAllocator::new(16, 2, true).unwrap();
        a.allocate(1, &toks(&[1, 2, 3, 4, 5, 6, 7]), Some(3)).unwrap(); // blocks 0-3, block 0 computed
        assert_eq!((a.num_cached_blocks(), a.block_key_of(0).unwrap().is_some()), (1, true));
        // a reader finds block 0 only: block 1 ([3, 4]) has no KV yet
        assert_eq!(a.allocate(2, &toks(&[1, 2, 3, 4, 9]), Some(0)).unwrap(), &[0, 4, 5]);
        a.mark_computed(1, 6).unwrap(); // blocks 1 and 2
        a.mark_computed(1, 6).unwrap(); // idempotent
        a.mark_computed(1, 2).unwrap(); // going back changes nothing
        assert_eq!(a.num_cached_blocks(), 3);
        // seq 2 computes [3, 4] too, but seq 1's copy is the cached one (first wins)
        a.mark_computed(2, 5).unwrap();
        assert_eq!((a.block_key_of(4).unwrap(), a.num_cached_blocks()), (None, 3));
        assert_eq!(a.allocate(3, &toks(&[1, 2, 3, 4, 5, 6, 0]), Some(0)).unwrap(), &[0, 1, 2, 6]);
        // an append that fills a block offers every earlier block too
        a.allocate(4, &toks(&[8, 8, 8, 8, 8]), Some(0)).unwrap();
        a.append(4, 8).unwrap();
        assert_eq!(a.num_cached_blocks(), 6);
        let e = a.mark_computed(4, 7).unwrap_err();
        assert_eq!(e, CoreError::invalid("num_computed must be an integer in [0, 6], got 7"));
        assert!(matches!(a.mark_computed(9, 0), Err(CoreError::Key(_))));
        let e = a.allocate(5, &[1], Some(-1)).unwrap_err();
        assert_eq!(e, CoreError::invalid("num_computed must be an integer in [0, 1], got -1"));
        a.check_invariants().unwrap();
        // without prefix caching it only checks
        let mut b = BlockAllocator::new(4, 2, false).unwrap();
        b.allocate(1, &[1, 2, 3], Some(0)).unwrap();
        b.mark_computed(1, 3).unwrap();
        assert_eq!(b.num_cached_blocks(), 0);
    }

    /// §8 milestone 4b: an evicted cached block moves to the host tier; a prompt that misses
    /// the GPU but hits the host gets it back in a fresh block, reported as a recall.
    #[test]
    fn host_tier_offloads_and_recalls() {
        let mut a = BlockAllocator::with_host_tier(3, 2, true, 2, "lru").unwrap();
        a.allocate(1, &[1, 2, 3, 4, 5], None).unwrap(); // blocks 0, 1 keyed; 2 partial
        a.free(1).unwrap(); // queue: 2, 1, 0
        let (k0, k1) = (a.block_key_of(0).unwrap().unwrap(), a.block_key_of(1).unwrap().unwrap());
        a.allocate(2, &[9, 9, 9, 9, 9], None).unwrap(); // takes 2, 1, 0: evicts k1 then k0
        let t = a.take_transfers();
        let kinds: Vec<_> = t.iter().map(|x| (x.kind, x.block, x.key)).collect();
        assert!(t.iter().all(|x| x.hits == 0)); // never reused on the GPU
        assert_eq!(kinds, vec![(TransferKind::Offload, Some(1), k1), (TransferKind::Offload, Some(0), k0)]);
        assert_eq!((a.num_host_cached_blocks(), a.host_keys()), (2, vec![k1, k0]));
        a.free(2).unwrap(); // queue: 0, 1, 2 (tail first); 0 and 1 keyed by seq 2's blocks
        // [1, 2, 3, 4] misses the GPU and hits the host twice: two fresh blocks, no compute
        assert_eq!(a.allocate(3, &[1, 2, 3, 4, 7], Some(0)).unwrap(), &[0, 1, 2]);
        assert_eq!((a.num_cached_tokens(3).unwrap(), a.num_host_hits(), a.num_hits()), (4, 2, 0));
        let t: Vec<_> = a.take_transfers().iter().map(|x| (x.kind, x.block, x.key)).collect();
        // taking block 0 offloads seq 2's first block, which drops the oldest host entry (k1)
        // only after k0 and k1 left the host for the GPU: nothing is dropped
        assert_eq!(t.iter().filter(|x| x.0 == TransferKind::Recall).map(|x| (x.1, x.2)).collect::<Vec<_>>(),
                   vec![(Some(0), k0), (Some(1), k1)]);
        assert_eq!(a.block_key_of(0).unwrap(), Some(k0));
        assert_eq!(a.stats().num_offloads, 4);
        a.check_invariants().unwrap();
        // the hits policy drops the least hit entry, LRU the oldest
        let e = BlockAllocator::with_host_tier(3, 2, false, 1, "lru").unwrap_err();
        assert!(e.to_string().contains("needs prefix_caching=True"), "{e}");
        let e = BlockAllocator::with_host_tier(3, 2, true, 1, "lfu").unwrap_err();
        assert_eq!(e.to_string(), "host_policy must be 'lru' or 'hits', got \"lfu\"");
        assert!(BlockAllocator::with_host_tier(3, 2, true, -1, "lru").is_err());
    }

    /// With `hits`, a hot prefix survives a stream of one-off prompts on a full host tier.
    #[test]
    fn hits_policy_keeps_the_hot_prefix() {
        let run = |policy: &str| {
            let mut a = BlockAllocator::with_host_tier(2, 2, true, 2, policy).unwrap();
            let hot = [7, 7, 1];
            for r in 0..3 {
                a.allocate(100 + r, &hot, None).unwrap(); // hit twice on the GPU
                a.free(100 + r).unwrap();
            }
            for i in 0..4 {
                a.allocate(i, &[i, i, i], None).unwrap(); // one-off prompts evict
                a.free(i).unwrap();
            }
            a.allocate(50, &hot, None).unwrap();
            a.num_host_hits()
        };
        assert_eq!((run("lru"), run("hits")), (0, 1));
    }

    #[test]
    fn out_of_blocks_changes_nothing() {
        let mut a = BlockAllocator::new(3, 2, true).unwrap();
        a.allocate(1, &toks(&[1, 2, 3]), None).unwrap();
        let before = (a.stats(), a.free_queue(), a.ref_counts());
        assert_eq!(a.allocate(2, &toks(&[1, 2, 3, 4, 5]), None), Err(out_of_blocks(2, 2, 1)).map(|_: ()| &[][..]));
        assert_eq!(before, (a.stats(), a.free_queue(), a.ref_counts()));
        a.append(1, 4).unwrap();
        a.allocate(3, &toks(&[1, 2, 3, 4, 5]), None).unwrap();
        assert_eq!(a.append(3, 6), Ok(None)); // block 2 has a free slot
        let before = (a.stats(), a.free_queue(), a.ref_counts());
        assert_eq!(a.append(3, 7), Err(out_of_blocks(3, 1, 0)));
        assert_eq!(before, (a.stats(), a.free_queue(), a.ref_counts()));
        a.check_invariants().unwrap();
    }

    /// A small deterministic soak: random ops, invariants after each.
    #[test]
    fn random_ops_keep_invariants() {
        let mut rnd = rng(0x1234_5678_u64);
        for trial in 0..40 {
            let (nb, bs) = (1 + rnd(12) as i64, 1 + rnd(4) as i64);
            let mut a = match trial % 4 {
                0 => BlockAllocator::with_host_tier(nb, bs, true, 1 + rnd(6) as i64, ["lru", "hits"][trial / 4 % 2]).unwrap(),
                t => BlockAllocator::new(nb, bs, t % 2 == 0).unwrap(),
            };
            let mut next_id = 0i64;
            for _ in 0..300 {
                let ids = a.seq_ids();
                match rnd(6) {
                    0 | 1 => {
                        let len = 1 + rnd(9) as usize;
                        let t: Vec<i64> = (0..len).map(|_| rnd(2) as i64).collect();
                        let computed = [None, Some(0), Some(rnd(len as u64 + 1) as i64)][rnd(3) as usize];
                        let _ = a.allocate(next_id, &t, computed);
                        next_id += 1;
                    }
                    2 if !ids.is_empty() => {
                        let _ = a.append(ids[rnd(ids.len() as u64) as usize], rnd(2) as i64);
                    }
                    3 if !ids.is_empty() => {
                        a.fork(ids[rnd(ids.len() as u64) as usize], next_id).unwrap();
                        next_id += 1;
                    }
                    4 if !ids.is_empty() => a.free(ids[rnd(ids.len() as u64) as usize]).unwrap(),
                    5 if !ids.is_empty() => {
                        let s = ids[rnd(ids.len() as u64) as usize];
                        let n = a.num_tokens(s).unwrap() as u64;
                        a.mark_computed(s, rnd(n + 1) as i64).unwrap();
                    }
                    _ => {}
                }
                a.check_invariants().unwrap();
            }
            for id in a.seq_ids() {
                a.free(id).unwrap();
            }
            assert_eq!(a.num_free_blocks(), a.num_blocks());
            a.check_invariants().unwrap();
        }
    }

    /// `append_same(s, t, k)` is `k` appends of `t`: the same tables, queue, keys and counters.
    #[test]
    fn append_same_is_repeated_appends() {
        let mut rnd = rng(0x5eed_u64);
        for trial in 0..200 {
            let (nb, bs) = (2 + rnd(12) as i64, 1 + rnd(5) as i64);
            let mut bulk = BlockAllocator::new(nb, bs, trial % 3 != 0).unwrap();
            let t: Vec<i64> = (0..1 + rnd(7)).map(|_| rnd(2) as i64).collect();
            if bulk.allocate(1, &t, Some(rnd(t.len() as u64 + 1) as i64)).is_err() {
                continue;
            }
            if rnd(2) == 0 {
                bulk.fork(1, 2).unwrap(); // a shared last block: the first append copies it
            }
            let mut one = bulk.clone();
            let (tok, k) = (rnd(3) as i64, rnd(3 * bs as u64 + 2) as usize);
            let got = bulk.append_same(1, tok, k).map_err(|e| e.to_string());
            let mut want = Ok(());
            for _ in 0..k {
                if let Err(e) = one.append(1, tok) {
                    want = Err(e.to_string());
                    break;
                }
            }
            assert_eq!(got.is_ok(), want.is_ok(), "trial {trial}");
            assert_eq!((bulk.block_tables(), bulk.free_queue(), bulk.stats()), (one.block_tables(), one.free_queue(), one.stats()));
            assert_eq!(bulk.num_tokens(1).unwrap(), one.num_tokens(1).unwrap());
            for b in 0..nb {
                assert_eq!(bulk.block_key_of(b).unwrap(), one.block_key_of(b).unwrap(), "trial {trial}");
                assert_eq!(bulk.block_tokens(b).unwrap(), one.block_tokens(b).unwrap(), "trial {trial}");
            }
            bulk.check_invariants().unwrap();
        }
    }

    /// `append_many` does what one `append` per sequence does, in order, and stops at the
    /// first refusal with nothing changed by it; `free_many` as one `free` each.
    #[test]
    fn append_many_is_appends_in_order() {
        let mut rnd = rng(0x9abc_def0_u64);
        for trial in 0..60 {
            let (nb, bs) = (1 + rnd(16) as i64, 1 + rnd(4) as i64);
            let mut bulk = BlockAllocator::new(nb, bs, trial % 2 == 0).unwrap();
            let mut one = bulk.clone();
            for id in 0..6i64 {
                let t: Vec<i64> = (0..1 + rnd(5)).map(|_| rnd(2) as i64).collect();
                let ok = bulk.allocate(id, &t, None).is_ok();
                assert_eq!(one.allocate(id, &t, None).is_ok(), ok);
                if ok && rnd(3) == 0 {
                    bulk.fork(id, 100 + id).unwrap();
                    one.fork(id, 100 + id).unwrap();
                }
            }
            for _ in 0..8 {
                let ids = bulk.seq_ids();
                let toks: Vec<i64> = ids.iter().map(|_| rnd(3) as i64).collect();
                let got = bulk.append_many(&ids, &toks).unwrap();
                let mut want = AppendMany::default();
                for (&s, &t) in ids.iter().zip(&toks) {
                    match one.append(s, t) {
                        Ok(c) => {
                            want.done += 1;
                            want.copy_src.push(c.map_or(-1, |c| c.0 as i64));
                            want.copy_dst.push(c.map_or(-1, |c| c.1 as i64));
                        }
                        Err(CoreError::OutOfBlocks(_)) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                assert_eq!(got, want, "trial {trial}");
                assert_eq!(bulk.block_tables(), one.block_tables());
                assert_eq!(bulk.free_queue(), one.free_queue());
                bulk.check_invariants().unwrap();
                if got.done < ids.len() {
                    // preempt the newest, as an engine would
                    let victim = *ids.last().unwrap();
                    bulk.free_many(&[victim]).unwrap();
                    one.free(victim).unwrap();
                }
            }
        }
        let mut a = BlockAllocator::new(4, 2, false).unwrap();
        a.allocate(1, &[5], None).unwrap();
        let e = a.append_many(&[1, 2], &[0, 0]).unwrap_err();
        assert_eq!(e, CoreError::key("seq_ids[1]: seq_id 2 is not allocated"));
        assert_eq!(a.num_tokens(1).unwrap(), 2); // the append before it stays done
        let e = a.append_many(&[1], &[-1]).unwrap_err();
        assert_eq!(e.to_string(), format!("seq_ids[0]: token_id must be in [0, {TOKEN_LIMIT}), got -1"));
        assert!(a.append_many(&[1], &[]).unwrap_err().to_string().contains("same length"));
        let e = a.free_many(&[1, 1]).unwrap_err();
        assert_eq!(e, CoreError::key("seq_ids[1]: seq_id 1 is not allocated"));
        assert_eq!(a.num_seqs(), 0);
    }

    /// `replay` with every token valid (checked once) and with a bad one (checked per op) ends
    /// in the same state and statuses up to the bad prompt, whose op is named.
    #[test]
    fn replay_checks_tokens_once_and_names_the_op() {
        let toks = [1, 2, 3, 4, 1, 2, 9];
        let offsets = [0, 4, 7];
        let op = [OP_ALLOCATE, OP_ALLOCATE, OP_APPEND, OP_ALLOCATE, OP_FREE];
        let seq = [1, 2, 1, 3, 1];
        let arg = [0, 1, 7, 1, 0];
        let mut a = BlockAllocator::new(3, 2, true).unwrap();
        let st = a.replay(&op, &seq, &arg, &toks, &offsets).unwrap();
        // prompt 1 shares its first block with prompt 0: the pool is full after two allocates
        assert_eq!(st, vec![STATUS_OK, STATUS_OK, STATUS_OUT_OF_BLOCKS, STATUS_OUT_OF_BLOCKS, STATUS_OK]);
        let mut bad = toks;
        bad[5] = -4; // in prompt 1 only
        let mut b = BlockAllocator::new(3, 2, true).unwrap();
        let e = b.replay(&op, &seq, &arg, &bad, &offsets).unwrap_err();
        assert_eq!(e.to_string(), format!("op 1: token_ids[1] must be in [0, {TOKEN_LIMIT}), got -4"));
        assert_eq!(b.seq_ids(), vec![1]);
        let e = BlockAllocator::new(3, 2, true).unwrap().replay(&[0], &[1], &[0], &[], &[0, 0]).unwrap_err();
        assert_eq!(e.to_string(), "op 0: token_ids must not be empty");
    }
}
