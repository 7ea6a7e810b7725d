//! The KV pool of prefix caching by exact keys (lecture §3.5): the block allocator of `blocks`
//! with prefix caching, reduced to what decides the simulator's answers, with no hashing, no
//! token storage and no hash map. It makes the allocator's decisions call for call (the same
//! successes, hits, lookups and evictions, in vLLM's per-block LRU order); the test
//! `keyed_pool_is_the_allocator` in `prefix_events.rs` holds the two equal.
//!
//! # Exact keys
//!
//! The simulator's tokens are synthetic ([`super::prefix`], "Which prompts share what"): the
//! token at a position is the index of its *origin*, the request whose own token it is, and
//! along a request the origins never decrease. So the tokens of a request up to the end of its
//! block `i` are those of the origin `o` of that block's last token, up to the same place: the
//! full block is named exactly by `(o, i)`, where the allocator hashes a chain of tokens. A
//! request `o`'s keys are the blocks whose last token is its own, `i` from `len[o] / bs` up to
//! `(prompt + output) / bs` (no request holds more of its tokens), so each origin owns a range
//! of consecutive *slots*, one per key, and a request's chain of keys is a handful of slot
//! ranges (its system prompt's, each earlier turn's, its own): the hit walk reads memory in
//! order.
//!
//! A slot holds what the allocator keeps of the cached block of its key: its reference count
//! (`pins`; [`NONE`] when the key is not cached) and its position in the free queue. A block
//! that holds no cached key (its prompt not computed yet, a last partial block, or a copy of a
//! key another block had cached first) is *anonymous*: only its count matters. Blocks
//! themselves have no ids: which physical block holds what never changes an answer.
//!
//! An origin's range is made when one of its keys is first cached, and given back for reuse
//! when its last cached key is evicted, so memory follows the cache, not the whole workload.
//!
//! # The free queue
//!
//! As in `blocks/free_queue.rs`: a ring of entries (a slot, or [`NONE`] for an anonymous block)
//! with lazy removal, each slot stamped with its position when pushed; a prefix hit on a free
//! cached block only makes its entry stale.
//!
//! # Less than a call per block
//!
//! Beside the allocator's calls, the pool keeps the event loop's decoders itself
//! (`prefix_pool/lazy.rs`: their block takes in bulk, their fills written late) and holds a
//! first segment that many chains share, a system prompt, as one range with a count of
//! holders (`prefix_pool/shared.rs`); a request's chain of keys comes from its listed runs of
//! origins ([`Lineage`], not a walk up the parents).

use std::collections::VecDeque;

mod lazy;
mod queue;
mod seqs;
mod shared;

use super::prefixes::{Lineage, Prefixes, Segment};
use crate::error::{CoreError, CoreResult};
use crate::sim::Workload;

/// Not cached (a slot's `pins`), an anonymous block (a chain or queue entry), no range (an
/// origin's base).
const NONE: u32 = u32::MAX;


/// What the prefix-caching loops ask of their KV pool (the allocator's calls, by request).
pub(super) trait PrefixKv {
    /// Rule 4: `r`'s `tokens` slots, reusing cached full blocks (at most `(tokens - 1) / bs`
    /// of them); `None` (nothing changed) if the pool is short, else the cached tokens.
    fn allocate(&mut self, r: usize, tokens: i64) -> CoreResult<Option<i64>>;
    /// `r`'s first `computed` tokens have their KV: their full blocks are offered to the cache.
    fn mark_computed(&mut self, r: usize, computed: i64) -> CoreResult<()>;
    /// One slot of `r`'s own token, opening a new block (a free one was checked for).
    fn append(&mut self, r: usize) -> CoreResult<()>;
    /// `count` slots of `r`'s own token, as `count` appends.
    fn append_same(&mut self, r: usize, count: usize) -> CoreResult<()>;
    /// `r` finished: its blocks are freed.
    fn release(&mut self, r: usize) -> CoreResult<()>;
    /// Rule 3: `r`'s blocks are freed.
    fn preempt(&mut self, r: usize) -> CoreResult<()>;
    fn num_free_blocks(&self) -> i64;
    fn num_blocks(&self) -> i64;
    /// Prompt blocks recalled from a host tier since the last call (none without one).
    fn take_recalled(&mut self) -> u64 {
        0
    }
    /// (prefix hits, lookups, evictions, host hits).
    fn counters(&self) -> (u64, u64, u64, u64);

    /// Whether the pool keeps the event loop's decoders itself (`prefix_pool/lazy.rs`: their
    /// block takes in bulk, their fills written when someone could tell them apart); else the
    /// loop makes each decoder's block events one by one ([`PrefixKv::append`]).
    const LAZY: bool = false;
    /// Decoder `r`, of offset `offset` (`computed - step`), is kept by the pool from now on.
    fn start_decoding(&mut self, _r: usize, _offset: i64) {}
    /// Decoder `r` leaves the pool's keeping: its slots up to step `through`'s written.
    fn stop_decoding(&mut self, _r: usize, _through: i64) -> CoreResult<()> {
        Ok(())
    }
    /// Step `step`'s `n` decoders at a block boundary take their blocks, in running order;
    /// `before(o)`: how many of them run before decoder `o` (asked only where it matters).
    fn take_for_decoders(&mut self, _n: i64, _step: i64, _before: impl FnMut(usize) -> i64) -> CoreResult<()> {
        Err(internal("this pool keeps no decoders"))
    }
}

/// One key: the reference count of its cached block ([`NONE`]: not cached; 0: free, in the
/// queue at `qpos`), and its origin (set when it is cached).
#[derive(Debug, Clone, Copy)]
struct Slot {
    pins: u32,
    qpos: u32,
    owner: u32,
}

/// An origin's keys: its first slot (of key `first`, the block its own tokens begin in) or
/// [`NONE`], how many of them are cached (its range is given back at 0), its range's size
/// class (`1 << class` slots), and whether it is a decoder the pool keeps (`lazy.rs`): 16
/// bytes, read by every eviction.
#[derive(Debug, Clone, Copy)]
struct Origin {
    base: u32,
    cached: u32,
    first: u32,
    class: u16,
    lazy: bool,
}

/// A request's blocks while it holds some: its chain (a slot where it holds the cached block of
/// that key, else [`NONE`]), the leading full blocks offered to the cache, the slots written.
#[derive(Debug, Default)]
struct Seq {
    chain: Vec<u32>,
    /// its chain's segments (kept from its allocation: a walk up the parents reads far apart)
    segs: Vec<Segment>,
    marked: usize,
    tokens: i64,
    /// a decoder the pool keeps: `computed - step` (`lazy.rs`)
    offset: i64,
    /// its chain's first blocks held as a range (`shared.rs`; their entries [`NONE`])
    ranged: usize,
}

/// Request `r`'s [`Seq`] at `slab[at[r]]` while it holds blocks (`seqs.rs`).
struct Seqs {
    at: Vec<u32>,
    slab: Vec<Seq>,
    /// slab entries given back
    spare: Vec<u32>,
    /// what a request that holds no blocks has
    empty: Seq,
}

pub(super) struct KeyedPool {
    bs: i64,
    caching: bool,
    num_blocks: i64,
    free: i64,
    /// per request, the runs of origins of its tokens
    lineage: Lineage,
    slots: Vec<Slot>,
    /// per origin: its range of slots (one miss on memory for what an eviction reads)
    origins: Vec<Origin>,
    /// per origin: its first keys held as a range, as (how many keys, how many holders)
    /// (`shared.rs`)
    held: Vec<(u32, u32)>,
    /// given back ranges, by size class (`1 << c` slots)
    spare: Vec<Vec<u32>>,
    queue: VecDeque<u32>,
    /// the position of `queue[0]` (positions wrap: see `queue.rs`, `compact`)
    qbase: u32,
    seqs: Seqs,
    chains: Vec<Vec<u32>>,
    /// the segments of the request being allocated
    segs: Vec<Segment>,
    /// whose segments `segs` holds (a blocked queue head is tried again at every step)
    segs_of: usize,
    spare_segs: Vec<Vec<Segment>>,
    /// the entries a free joins to the queue
    freeing: Vec<u32>,
    hits: u64,
    lookups: u64,
    evictions: u64,
    /// registrations and hits on free blocks (what can make a failed allocation fit, beside
    /// a free), and the request whose allocation failed last with the state it failed in
    epoch: u64,
    blocked: Option<(usize, i64, i64, u64)>,
    /// the last step whose decoders took their slots (`lazy.rs`)
    now: i64,
}

fn internal(msg: &str) -> CoreError {
    CoreError::invalid(format!("internal error: {msg}"))
}

impl KeyedPool {
    /// An empty pool of `num_blocks` blocks of `bs` slots for the requests of `w` (their
    /// prefixes checked by the caller).
    pub(super) fn new(w: &Workload<'_>, prefixes: &Prefixes<'_>, num_blocks: i64, bs: i64, caching: bool) -> Self {
        let n = w.len();
        KeyedPool {
            bs,
            caching,
            num_blocks,
            free: num_blocks,
            lineage: Lineage::new(w, prefixes, caching),
            slots: Vec::new(),
            origins: (0..n)
                .map(|o| {
                    // keys from the block its own tokens begin in, to the last block a child
                    // may share (`prompt + output` tokens)
                    let first = prefixes.len[o] / bs;
                    let size = ((w.prompt_len[o] + w.output_len[o]) / bs - first).max(1);
                    Origin { base: NONE, cached: 0, first: first as u32, class: (size as u64).next_power_of_two().trailing_zeros() as u16, lazy: false }
                })
                .collect(),
            held: vec![(0, 0); if caching { n } else { 0 }],
            spare: vec![Vec::new(); 33],
            queue: (0..num_blocks).map(|_| NONE).collect(),
            qbase: 0,
            seqs: Seqs::new(n),
            chains: Vec::new(),
            segs: Vec::new(),
            segs_of: usize::MAX,
            spare_segs: Vec::new(),
            freeing: Vec::new(),
            hits: 0,
            lookups: 0,
            evictions: 0,
            epoch: 0,
            blocked: None,
            now: 0,
        }
    }

    /// The first key of origin `o`: the block in which its own tokens begin.
    #[inline]
    fn first_key(&self, o: usize) -> i64 {
        self.origins[o].first as i64
    }

    /// Request `r`'s chain of keys as segments, from its first block on (module docs).
    fn segments(&mut self, r: usize) {
        if self.segs_of == r {
            return;
        }
        self.segs_of = r;
        self.lineage.segments(r, self.bs, &mut self.segs);
    }

    /// Origin `o`'s range of slots, made if it has none.
    fn range(&mut self, o: usize) -> CoreResult<u32> {
        let Origin { base, class, .. } = self.origins[o];
        if base != NONE {
            return Ok(base);
        }
        let b = match self.spare[class as usize].pop() {
            Some(b) => b,
            None => {
                let b = self.slots.len();
                if b + (1 << class) >= NONE as usize {
                    return Err(CoreError::invalid(format!(
                        "the run caches more than {NONE} prefix blocks at once (split the workload)"
                    )));
                }
                self.slots.resize(b + (1 << class), Slot { pins: NONE, qpos: 0, owner: 0 });
                b as u32
            }
        };
        // its slots' owners are written as their keys are cached (only a cached slot's is
        // read): a range is rounded up to a power of two, half of it often never cached
        self.origins[o].base = b;
        Ok(b)
    }

    /// Offers `r`'s full blocks from its last offered one up to `upto` to the cache, in order:
    /// each becomes the cached block of its key unless another block is (first wins). Most
    /// are its own (a decoder's, a prompt's after its hits): no walk up the parents for those.
    fn offer(&mut self, r: usize, upto: usize) -> CoreResult<()> {
        let marked = self.seqs[r].marked;
        if upto <= marked {
            return Ok(());
        }
        let own = self.first_key(r) as usize;
        if marked < own.min(upto) {
            let segs = std::mem::take(&mut self.seqs[r].segs);
            for &(o, lo, hi) in &segs {
                if o == r {
                    break; // the last segment, its own
                }
                let (lo, hi) = ((lo as usize).max(marked), (hi.min(upto as i64)) as usize);
                if lo < hi {
                    self.register(r, o, lo, hi)?;
                }
            }
            self.seqs[r].segs = segs;
        }
        let lo = marked.max(own);
        if lo < upto {
            self.register(r, r, lo, upto)?;
        }
        self.seqs[r].marked = upto;
        Ok(())
    }

    /// [`KeyedPool::offer`] of `r`'s blocks `lo..hi`, all of origin `o`.
    #[inline]
    fn register(&mut self, r: usize, o: usize, lo: usize, hi: usize) -> CoreResult<()> {
        if o != r && self.origins[o].lazy {
            self.materialize(o, self.now)?; // its fills came first
        }
        // the keys' slots and the chain's entries side by side, as slices (no index checked
        // or computed per block: this loop runs for every block a request computes)
        let at = (self.range(o)? as i64 - self.first_key(o)) as usize + lo;
        let slots = &mut self.slots[at..at + (hi - lo)];
        let mut won = 0;
        for ((s, e), k) in slots.iter_mut().zip(&mut self.seqs[r].chain[lo..hi]).zip(at as u32..) {
            if s.pins == NONE {
                *s = Slot { pins: 1, qpos: s.qpos, owner: o as u32 };
                *e = k;
                won += 1;
            }
        }
        self.origins[o].cached += won;
        self.epoch += won as u64;
        Ok(())
    }

    /// Pins the cached blocks of the chain in `segs` from its first on, up to `limit` of them
    /// or the first key not cached, pushing their slots to `chain`: a prefix hit on each (a
    /// free one leaves the free queue). Returns how many, and how many of them are held as a
    /// range (`shared.rs`).
    #[inline(always)]
    fn pin(&mut self, limit: i64, chain: &mut Vec<u32>) -> (i64, usize) {
        let ranged = self.hold_first(limit).unwrap_or(0);
        chain.resize(ranged as usize, NONE);
        let mut h = ranged;
        'walk: for &(o, lo, hi) in &self.segs[(ranged > 0) as usize..] {
            let g = self.origins[o];
            if lo >= limit || g.base == NONE {
                break;
            }
            let off = g.base as i64 - g.first as i64;
            let cov = self.covered(o, lo);
            for i in lo..hi.min(limit) {
                let k = (off + i) as usize;
                let s = &mut self.slots[k];
                if s.pins == NONE {
                    break 'walk;
                }
                if s.pins == 0 && i >= cov {
                    self.free -= 1;
                    self.epoch += 1;
                }
                s.pins += 1;
                chain.push(k as u32);
                h += 1;
            }
        }
        (h, ranged as usize)
    }

}

impl PrefixKv for KeyedPool {
    fn allocate(&mut self, r: usize, tokens: i64) -> CoreResult<Option<i64>> {
        if self.caching {
            self.segments(r);
            self.settle_segments()?; // the fills of the decoders it could hit, before its check
        }
        if let Some((b, t, free, epoch)) = self.blocked {
            // nothing happened that could make the same allocation fit (the same answer)
            if b == r && t == tokens && self.free <= free && self.epoch == epoch {
                return Ok(None);
            }
        }
        let bs = self.bs;
        let n_blocks = (tokens + bs - 1) / bs;
        let max_hits = if self.caching { (tokens - 1) / bs } else { 0 };
        let mut chain = self.chains.pop().unwrap_or_default();
        let (h, ranged) = if n_blocks <= self.free {
            // it fits whatever it hits (each hit takes at most the one block it saves): one
            // walk that pins as it goes
            self.pin(max_hits, &mut chain)
        } else {
            let (mut h, mut hits_free) = (0i64, 0i64);
            if max_hits > 0 {
                'walk: for &(o, lo, hi) in &self.segs {
                    let g = self.origins[o];
                    if lo >= max_hits || g.base == NONE {
                        break;
                    }
                    let off = g.base as i64 - g.first as i64;
                    let cov = self.covered(o, lo); // held as a range: pinned
                    for i in lo..hi.min(max_hits) {
                        let pins = self.slots[(off + i) as usize].pins;
                        if pins == NONE {
                            break 'walk;
                        }
                        h += 1;
                        hits_free += (pins == 0 && i >= cov) as i64;
                    }
                }
            }
            if n_blocks - h > self.free - hits_free {
                self.blocked = Some((r, tokens, self.free, self.epoch));
                self.chains.push(chain);
                return Ok(None);
            }
            self.pin(h, &mut chain)
        };
        let need = n_blocks - h;
        self.blocked = None;
        self.lookups += max_hits as u64;
        self.hits += h as u64;
        self.take(need)?;
        self.free -= need;
        chain.resize(n_blocks as usize, NONE);
        let mut segs = self.spare_segs.pop().unwrap_or_default();
        segs.extend_from_slice(&self.segs);
        self.seqs.open(r, Seq { chain, segs, marked: h as usize, tokens, offset: 0, ranged });
        Ok(Some(h * bs))
    }

    fn mark_computed(&mut self, r: usize, computed: i64) -> CoreResult<()> {
        if self.caching {
            let upto = (computed.min(self.seqs[r].tokens) / self.bs) as usize;
            self.offer(r, upto)?;
        }
        Ok(())
    }

    fn append(&mut self, r: usize) -> CoreResult<()> {
        if self.free == 0 || self.seqs[r].tokens % self.bs != 0 {
            return Err(internal("an append opening a block found none free"));
        }
        self.take(1)?;
        self.free -= 1;
        let s = &mut self.seqs[r];
        s.chain.push(NONE);
        s.tokens += 1;
        if self.caching && s.tokens % self.bs == 0 {
            let upto = (s.tokens / self.bs) as usize;
            self.offer(r, upto)?;
        }
        Ok(())
    }

    fn append_same(&mut self, r: usize, count: usize) -> CoreResult<()> {
        let mut left = count as i64;
        while left > 0 {
            let used = self.seqs[r].tokens % self.bs;
            if used == 0 {
                self.append(r)?;
                left -= 1;
                continue;
            }
            let k = left.min(self.bs - used);
            let s = &mut self.seqs[r];
            s.tokens += k;
            left -= k;
            if self.caching && s.tokens % self.bs == 0 {
                let upto = (s.tokens / self.bs) as usize;
                self.offer(r, upto)?;
            }
        }
        Ok(())
    }

    fn release(&mut self, r: usize) -> CoreResult<()> {
        self.stop_decoding(r, self.now)?;
        self.free_seq(r);
        Ok(())
    }

    fn preempt(&mut self, r: usize) -> CoreResult<()> {
        self.stop_decoding(r, self.now)?;
        self.free_seq(r);
        Ok(())
    }

    #[inline]
    fn num_free_blocks(&self) -> i64 {
        self.free
    }

    fn num_blocks(&self) -> i64 {
        self.num_blocks
    }

    fn counters(&self) -> (u64, u64, u64, u64) {
        (self.hits, self.lookups, self.evictions, 0)
    }

    const LAZY: bool = true;

    fn start_decoding(&mut self, r: usize, offset: i64) {
        self.keep_decoder(r, offset);
    }

    fn stop_decoding(&mut self, r: usize, through: i64) -> CoreResult<()> {
        self.drop_decoder(r, through)
    }

    fn take_for_decoders(&mut self, n: i64, step: i64, before: impl FnMut(usize) -> i64) -> CoreResult<()> {
        self.bulk_take(n, step, before)
    }
}
