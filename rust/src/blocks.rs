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
//!   `allocate` takes all its new blocks first (evicting as it goes), then registers the keys of
//!   its new full blocks; `append` registers a block's key when its last slot is written.
//! * **Failure changes nothing.** `allocate`/`append` check the pool before touching it and
//!   return [`CoreError::OutOfBlocks`]; an unknown or duplicate `seq_id` is [`CoreError::Key`].
//!
//! The hash ([`block_key`]) is SplitMix64's finaliser folded over the parent key and the
//! tokens: deterministic across runs, machines and languages (the reference computes the same
//! integers), unlike Python's `hash()` of a tuple.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::{CoreError, CoreResult};

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

impl BlockAllocator {
    pub fn new(num_blocks: i64, block_size: i64, prefix_caching: bool) -> CoreResult<Self> {
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
        let n = num_blocks as u32;
        let blocks = (0..n)
            .map(|i| Block {
                ref_count: 0,
                key: None,
                parent_key: ROOT_KEY,
                tokens: Vec::new(),
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
        }
        blk.tokens.clear();
        blk.ref_count = 1;
        b
    }

    /// Makes `b` the cached block of `key` unless another block already is (first wins).
    fn register(&mut self, b: u32, key: u64, parent: u64) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.cache.entry(key) {
            e.insert(b);
            let blk = &mut self.blocks[b as usize];
            blk.key = Some(key);
            blk.parent_key = parent;
        }
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
    /// and returns its block table.
    pub fn allocate(&mut self, seq_id: i64, tokens: &[i64]) -> CoreResult<&[u32]> {
        let tokens = check_tokens(tokens)?;
        if self.seqs.contains_key(&seq_id) {
            return Err(duplicate(seq_id));
        }
        let bs = self.block_size;
        let n = tokens.len();
        let n_blocks = n.div_ceil(bs);
        let keys = if self.prefix_caching { self.chain_keys(&tokens) } else { Vec::new() };
        // Longest verified cached prefix, leaving at least one token to compute.
        let max_hits = if self.prefix_caching { (n - 1) / bs } else { 0 };
        let mut hits: Vec<u32> = Vec::new();
        let mut hits_free = 0;
        for i in 0..max_hits {
            let parent = if i == 0 { ROOT_KEY } else { keys[i - 1] };
            match self.cache.get(&keys[i]) {
                Some(&b) => {
                    let blk = &self.blocks[b as usize];
                    if blk.parent_key != parent || blk.tokens[..] != tokens[i * bs..(i + 1) * bs] {
                        break;
                    }
                    hits.push(b);
                    hits_free += (blk.ref_count == 0) as usize;
                }
                None => break,
            }
        }
        let need = n_blocks - hits.len();
        let free = self.num_free - hits_free;
        if need > free {
            return Err(out_of_blocks(seq_id, need, free));
        }
        // Commit: nothing below can fail.
        self.num_lookups += max_hits as u64;
        self.num_hits += hits.len() as u64;
        for &b in &hits {
            if self.blocks[b as usize].ref_count == 0 {
                self.unlink(b);
            }
            self.blocks[b as usize].ref_count += 1;
        }
        let mut table = hits.clone();
        for i in hits.len()..n_blocks {
            let b = self.take_free();
            self.blocks[b as usize].tokens.extend_from_slice(&tokens[i * bs..n.min((i + 1) * bs)]);
            table.push(b);
        }
        for i in hits.len()..keys.len() {
            let parent = if i == 0 { ROOT_KEY } else { keys[i - 1] };
            self.register(table[i], keys[i], parent);
        }
        let seq = Seq { table, keys, num_tokens: n, num_cached_tokens: hits.len() * bs };
        Ok(&self.seqs.entry(seq_id).or_insert(seq).table)
    }

    /// Adds one token to `seq_id`; returns the copy-on-write `(src, dst)` if one was made.
    pub fn append(&mut self, seq_id: i64, token: i64) -> CoreResult<Option<(u32, u32)>> {
        let token = check_token("token_id", token)?;
        let bs = self.block_size;
        let seq = self.seqs.get(&seq_id).ok_or_else(|| unknown(seq_id))?;
        let last = *seq.table.last().expect("a sequence holds at least one token");
        let last_full = seq.num_tokens.is_multiple_of(bs);
        let shared = self.blocks[last as usize].ref_count > 1;
        if (last_full || shared) && self.num_free == 0 {
            return Err(out_of_blocks(seq_id, 1, 0));
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
            let key = block_key(parent, &self.blocks[dst as usize].tokens);
            seq.keys.push(key);
            self.register(dst, key, parent);
        }
        Ok(copy)
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
        let mut status = Vec::with_capacity(op.len());
        for i in 0..op.len() {
            let (s, a) = (seq[i], arg[i]);
            let r = match op[i] {
                OP_ALLOCATE => {
                    if !(0..n_prompts).contains(&a) {
                        Err(CoreError::invalid(format!(
                            "prompt index must be in [0, {n_prompts}), got {a}"
                        )))
                    } else {
                        let (lo, hi) = (offsets[a as usize], offsets[a as usize + 1]);
                        if !(0 <= lo && lo <= hi && hi <= tokens.len() as i64) {
                            Err(CoreError::invalid(format!(
                                "prompt {a} spans [{lo}, {hi}), outside tokens of length {}",
                                tokens.len()
                            )))
                        } else {
                            self.allocate(s, &tokens[lo as usize..hi as usize]).map(|_| STATUS_OK)
                        }
                    }
                }
                OP_APPEND => self.append(s, a).map(|c| if c.is_some() { STATUS_COPIED } else { STATUS_OK }),
                OP_FORK => self.fork(s, a).map(|_| STATUS_OK),
                OP_FREE => self.free(s).map(|_| STATUS_OK),
                code => Err(CoreError::invalid(format!(
                    "unknown op code {code} (0 allocate, 1 append, 2 fork, 3 free)"
                ))),
            };
            match r {
                Ok(st) => status.push(st),
                Err(CoreError::OutOfBlocks(_)) => status.push(STATUS_OUT_OF_BLOCKS),
                Err(e) => return Err(e.prefixed(&format!("op {i}: "))),
            }
        }
        Ok(status)
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
        for (&k, &b) in &self.cache {
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
        assert_eq!(a.allocate(7, &toks(&[1, 2, 3])).unwrap(), &[0, 1]);
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
        a.allocate(1, &toks(&[1, 2, 3, 4, 5])).unwrap();
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
        a.allocate(1, &toks(&[1, 2, 3, 4, 5])).unwrap();
        a.free(1).unwrap();
        assert_eq!(a.free_queue(), vec![3, 4, 5, 6, 7, 2, 1, 0]);
        assert_eq!(a.allocate(2, &toks(&[1, 2, 3, 4, 9])).unwrap(), &[0, 1, 3]);
        assert_eq!(a.num_cached_tokens(2).unwrap(), 4);
        // Exactly the cached chain: the last block is recomputed.
        assert_eq!(a.allocate(3, &toks(&[1, 2, 3, 4])).unwrap(), &[0, 4]);
        assert_eq!(a.num_cached_tokens(3).unwrap(), 2);
        // Lookups: 2 + 2 + 1 (at most (n - 1) / block_size per prompt); hits: 0 + 2 + 1.
        assert_eq!((a.num_hits(), a.num_lookups()), (3, 5));
        a.check_invariants().unwrap();
    }

    #[test]
    fn out_of_blocks_changes_nothing() {
        let mut a = BlockAllocator::new(3, 2, true).unwrap();
        a.allocate(1, &toks(&[1, 2, 3])).unwrap();
        let before = (a.stats(), a.free_queue(), a.ref_counts());
        assert_eq!(a.allocate(2, &toks(&[1, 2, 3, 4, 5])), Err(out_of_blocks(2, 2, 1)).map(|_: ()| &[][..]));
        assert_eq!(before, (a.stats(), a.free_queue(), a.ref_counts()));
        a.append(1, 4).unwrap();
        a.allocate(3, &toks(&[1, 2, 3, 4, 5])).unwrap();
        assert_eq!(a.append(3, 6), Ok(None)); // block 2 has a free slot
        let before = (a.stats(), a.free_queue(), a.ref_counts());
        assert_eq!(a.append(3, 7), Err(out_of_blocks(3, 1, 0)));
        assert_eq!(before, (a.stats(), a.free_queue(), a.ref_counts()));
        a.check_invariants().unwrap();
    }

    /// A small deterministic soak: random ops, invariants after each.
    #[test]
    fn random_ops_keep_invariants() {
        let mut state = 0x1234_5678_u64;
        let mut rnd = move |n: u64| {
            state = mix(state.wrapping_add(GOLDEN));
            state % n
        };
        for trial in 0..40 {
            let mut a = BlockAllocator::new(1 + rnd(12) as i64, 1 + rnd(4) as i64, trial % 2 == 0).unwrap();
            let mut next_id = 0i64;
            for _ in 0..300 {
                let ids = a.seq_ids();
                match rnd(5) {
                    0 | 1 => {
                        let len = 1 + rnd(9) as usize;
                        let t: Vec<i64> = (0..len).map(|_| rnd(2) as i64).collect();
                        let _ = a.allocate(next_id, &t);
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
}
