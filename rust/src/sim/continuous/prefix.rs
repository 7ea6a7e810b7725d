//! Prefix caching's KV pool for continuous batching (lecture §3.5, the course project's
//! milestone 3): [`PrefixPool`], what the rules of `servelab.engine.scheduler` (numbered in its
//! module docstring, carried out by [`super::rules`]) ask of a pool with prefix caching on. The
//! per-step twin ([`super::per_step`]) and the event-driven `prefix_events.rs` drive it.
//!
//! # Which prompts share what
//!
//! The simulator knows lengths, not tokens. A request may name an earlier one, its *prefix
//! parent*, and how many leading tokens it shares with it (`prefix_len`): a chat request shares
//! the system prompt with the first request that used it; turn `i` of a conversation shares
//! the whole previous turn, prompt and output. The token at position `j` of request `r` is the
//! parent's token `j` if `j < prefix_len[r]`, else `r`'s own. Following parents up gives every
//! position an *origin*, the request whose own token it is; the synthetic token id is that
//! origin's index. Two requests then hold equal tokens on `[0, k)` exactly when their origins
//! agree there, and the allocator's hash chain sees the same sharing a real tokenizer would,
//! with no chance of an accidental match.
//!
//! # The same block semantics as the engine
//!
//! The KV pool makes every decision the engine's allocator makes (the real block allocator of
//! `blocks`, `prefix_alloc.rs`, with a host tier; else its equal by exact keys,
//! `prefix_pool.rs`, with no hashing and no token storage): hits only on registered blocks, registered when computed (`allocate(.., Some(0))` at admission,
//! `mark_computed` for each scheduled chunk, `append` for each decoded token), at most
//! `(n - 1) / block_size` hits so one token is left to compute, LRU eviction of free cached
//! blocks in the same order. A decoded token's slot is appended, as in the engine; its id is
//! the request's own (generated tokens are never inside the request's own `prefix_len`).
//!
//! # Cost
//!
//! On the per-step twin, every running request is visited in every step: `O(tokens)`, not the
//! event-driven loop's `O(events)`. A decoder touches the pool only twice a block (when it
//! takes the block and when it fills it: the only moments the pool or the cache can tell),
//! writing the slots in between in one call (the event-driven loop over the exact-key pool
//! not even that: `prefix_pool/lazy.rs`). `make bench` shows both loops. With prefix caching
//! off it makes the event-driven loop's batches and clock, bit for bit (the tests below check
//! it). With speculation, kept guesses take their slots one by one after the step, as the
//! engine appends them, so they can evict a cached block or fill one.
//!
//! # A host tier (§8 milestone 4b)
//!
//! [`PrefixOptions`]' `host` gives the allocator a host tier ([`HostTierOption`]): evicted prefix blocks
//! move to host memory and a prompt that finds them there gets them back by a copy instead of
//! a recomputation. The recalled tokens count as cached; their copy, `tokens x
//! kv_bytes_per_token / host_link_bandwidth` (`hw_model.kv_host_transfer_s`), is added to the
//! step that admits them, serially (the attention of that step reads them). The copy out on
//! eviction is not priced: it can run in the background as the block is written (as LMCache's
//! write-through does), where the copy back cannot.

use super::rules::{StepPool, TwinPool};
use super::{blocks_for, ContinuousParams};
use crate::sim::{Recorder, Workload};
use super::prefix_alloc::AllocatorKv;
use super::prefix_pool::{KeyedPool, PrefixKv};
use crate::error::{CoreError, CoreResult};

pub use super::prefixes::Prefixes;

/// The host tier of [`run`] ([`PrefixOptions`]): `host_blocks` blocks (0: none), dropping by `policy`
/// (`"lru"` or `"hits"`), and the seconds one token's KV takes over the host link.
#[derive(Debug, Clone, Copy)]
pub struct HostTierOption<'a> {
    pub host_blocks: i64,
    pub policy: &'a str,
    pub s_per_token: f64,
}

impl HostTierOption<'_> {
    pub const NONE: HostTierOption<'static> = HostTierOption { host_blocks: 0, policy: "lru", s_per_token: 0.0 };
}

/// What prefix caching did, beside [`ContinuousOutput`].
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixOutput {
    /// Per request: prompt tokens served from the cache, summed over its admissions (a
    /// recompute after preemption may hit again), as the engine's `num_cached_tokens`.
    pub cached_tokens: Vec<i64>,
    /// Per request: tokens it computed, summed over its steps (`num_computed_tokens`).
    pub computed_tokens: Vec<i64>,
    /// The allocator's counters: blocks reused, blocks that could have been, cached blocks
    /// given new content.
    pub prefix_hits: u64,
    pub prefix_lookups: u64,
    pub prefix_evictions: u64,
    /// Prompt blocks recalled from the host tier, and the seconds their copies added.
    pub host_hits: u64,
    pub host_transfer_s: f64,
}

impl PrefixOutput {
    /// Nothing cached or computed yet, for `n` requests.
    pub fn empty(n: usize) -> PrefixOutput {
        PrefixOutput {
            cached_tokens: vec![0; n],
            computed_tokens: vec![0; n],
            prefix_hits: 0,
            prefix_lookups: 0,
            prefix_evictions: 0,
            host_hits: 0,
            host_transfer_s: 0.0,
        }
    }
}

/// The live state of one request.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Live {
    /// tokens whose KV is in the pool (the event-driven loop keeps `computed - step` for a
    /// decoding request, as `event_driven.rs` does)
    pub(super) computed: i64,
    /// token slots the pool holds for it (0 while waiting)
    pub(super) held: i64,
    /// decoded slots not yet written into the allocator (see [`PrefixPool::append`]; the
    /// event-driven loop keeps the slots written instead, for a decoding request)
    pub(super) pending: i64,
    pub(super) generated: i64,
}

/// The prefix-caching loops' own options: which prompts share what, whether the allocator caches
/// prefixes (off: the same loop on a plain allocator), and its host tier (module docs, "A host
/// tier").
#[derive(Debug, Clone, Copy)]
pub struct PrefixOptions<'a> {
    pub prefixes: &'a Prefixes<'a>,
    pub prefix_caching: bool,
    pub host: &'a HostTierOption<'a>,
}

impl<'a> PrefixOptions<'a> {
    /// No host tier.
    pub fn new(prefixes: &'a Prefixes<'a>, prefix_caching: bool) -> Self {
        PrefixOptions { prefixes, prefix_caching, host: &HostTierOption::NONE }
    }
}

/// The requests and pool of both prefix-caching loops (this file's per-step one and
/// `prefix_events.rs`): one [`Live`] per request over a KV pool `K`: the exact-key pool of
/// `prefix_pool.rs`, or the real allocator (`prefix_alloc.rs`) where a host tier is asked for.
pub(super) struct PrefixPool<'a, K: PrefixKv> {
    pub(super) params: &'a ContinuousParams,
    pl: &'a [i64],
    ol: &'a [i64],
    /// the host tier (its copies back are priced)
    host: &'a HostTierOption<'a>,
    pub(super) live: Vec<Live>,
    pub(super) kv: K,
    pub(super) pre: PrefixOutput,
    /// per request, when it was last admitted (a count of admissions): the order of the
    /// rules' running list, which the event-driven loop keeps without the list
    pub(super) admitted: Vec<u64>,
    admissions: u64,
}

/// Checks a run's options (the errors name the value).
pub(super) fn validate(w: &Workload<'_>, params: &ContinuousParams, px: &PrefixOptions<'_>) -> CoreResult<()> {
    params.validate()?;
    let host = px.host;
    if !(host.s_per_token.is_finite() && host.s_per_token >= 0.0) {
        return Err(CoreError::invalid(format!(
            "host_s_per_token must be a finite number >= 0, got {}", host.s_per_token
        )));
    }
    px.prefixes.validate(w)?;
    if w.len() > u32::MAX as usize {
        // a request's index is its synthetic token id, and token ids are u32
        return Err(CoreError::invalid(format!(
            "arrival_s must hold at most {} requests with prefix caching, got {} (split the workload)",
            u32::MAX,
            w.len()
        )));
    }
    Ok(())
}

/// The run's KV pool, exact keys or the allocator (see [`PrefixPool`]), handed to `go`.
pub(super) fn with_kv<'a, T>(
    w: &Workload<'_>,
    params: &'a ContinuousParams,
    px: &PrefixOptions<'a>,
    allocator: bool,
    go: impl FnOnce(Pools<'a>) -> CoreResult<T>,
) -> CoreResult<T> {
    validate(w, params, px)?;
    let PrefixOptions { prefixes, prefix_caching, host } = *px;
    if allocator || host.host_blocks > 0 {
        go(Pools::Allocator(AllocatorKv::new(prefixes, params.num_blocks, params.block_size, prefix_caching, host.host_blocks, host.policy)?))
    } else {
        go(Pools::Keyed(KeyedPool::new(w, prefixes, params.num_blocks, params.block_size, prefix_caching)))
    }
}

/// One of the two KV pools (each loop is compiled for both).
#[allow(clippy::large_enum_variant)] // one a run, moved once into its loop
pub(super) enum Pools<'a> {
    Keyed(KeyedPool),
    Allocator(AllocatorKv<'a>),
}

impl<'a, K: PrefixKv> PrefixPool<'a, K> {
    /// An empty pool over `kv` (the options checked by [`validate`]).
    pub(super) fn new(w: &Workload<'a>, params: &'a ContinuousParams, host: &'a HostTierOption<'a>, kv: K) -> Self {
        let n = w.len();
        PrefixPool {
            params,
            pl: w.prompt_len,
            ol: w.output_len,
            host,
            live: vec![Live::default(); n],
            kv,
            pre: PrefixOutput::empty(n),
            admitted: vec![0; n],
            admissions: 0,
        }
    }

    /// What prefix caching did, the pool's counters included.
    pub(super) fn finish(self) -> PrefixOutput {
        let mut pre = self.pre;
        (pre.prefix_hits, pre.prefix_lookups, pre.prefix_evictions, pre.host_hits) = self.kv.counters();
        pre
    }

    /// The step in which decoder `r` samples its last token, while the event loop keeps its
    /// offset `computed - step` in `computed`: `out + p - 2 - offset`.
    pub(super) fn last_step(&self, r: usize) -> i64 {
        self.ol[r] + self.pl[r] - 2 - self.live[r].computed
    }

    /// Request `r` finished: its blocks are freed.
    pub(super) fn release(&mut self, r: usize) -> CoreResult<()> {
        self.kv.release(r)
    }

    /// A block holds `block_size` slots; the last block of a sequence here is never shared (no
    /// fork; a hit is never the last block), so an append needs a block exactly when `held` is
    /// a multiple of the block size.
    fn needs_block(&self, held: i64) -> bool {
        held % self.params.block_size == 0
    }
}

impl<K: PrefixKv> StepPool for PrefixPool<'_, K> {
    #[inline]
    fn counts(&self, r: usize) -> (i64, i64) {
        (self.live[r].computed, self.live[r].held)
    }

    #[inline]
    fn schedule_chunk(&mut self, r: usize, nt: i64) -> CoreResult<()> {
        self.kv.mark_computed(r, self.live[r].computed + nt)
    }

    #[inline]
    fn must_preempt(&self, r: usize) -> bool {
        self.needs_block(self.live[r].held) && self.kv.num_free_blocks() == 0
    }

    /// Lazy appends: a decoder's slot needs the pool only when it takes a new block (the
    /// pool changes) or fills one (its key is registered); in between, the slots wait in
    /// `pending` and are written in one call at the fill. The slot of its last sampled token
    /// holds an own token (id `r`).
    #[inline]
    fn append(&mut self, r: usize) -> CoreResult<()> {
        let (takes, fills) = (self.needs_block(self.live[r].held), self.needs_block(self.live[r].held + 1));
        let s = &mut self.live[r];
        if takes {
            self.kv.append(r)?; // nothing pending: flushed at the fill
        } else {
            s.pending += 1;
            if fills {
                self.kv.append_same(r, s.pending as usize)?;
                s.pending = 0;
            }
        }
        s.held += 1;
        Ok(())
    }

    #[inline]
    fn preempt(&mut self, r: usize) -> CoreResult<()> {
        self.kv.preempt(r)?; // its pending slots go with it
        let s = &mut self.live[r];
        (s.computed, s.held, s.pending) = (0, 0, 0);
        Ok(())
    }

    #[inline]
    fn tokens(&self, r: usize) -> i64 {
        self.pl[r] + self.live[r].generated
    }

    /// Rule 4's allocation.
    #[inline]
    fn allocate(&mut self, r: usize, tokens: i64) -> CoreResult<Option<i64>> {
        let Some(cached) = self.kv.allocate(r, tokens)? else { return Ok(None) };
        self.admitted[r] = self.admissions;
        self.admissions += 1;
        self.pre.cached_tokens[r] += cached;
        self.live[r].held = tokens;
        self.live[r].computed = cached;
        Ok(Some(cached))
    }

    #[inline]
    fn blocks_used(&self) -> i64 {
        self.kv.num_blocks() - self.kv.num_free_blocks()
    }
}

impl<K: PrefixKv> TwinPool for PrefixPool<'_, K> {
    #[inline]
    fn generated(&self, r: usize) -> i64 {
        self.live[r].generated
    }

    #[inline]
    fn free_blocks(&self) -> i64 {
        self.kv.num_free_blocks()
    }

    #[inline]
    fn block_size(&self) -> i64 {
        self.params.block_size
    }

    /// The kept guesses' slots are appended one by one, as the engine does after its verify
    /// forward (each may take a block, evicting a cached one, or fill one, registering its key).
    fn keep_guesses(&mut self, r: usize, (g, kept): (i64, i64)) -> CoreResult<()> {
        for _ in 0..kept {
            self.append(r)?;
        }
        self.live[r].computed -= g - kept;
        Ok(())
    }

    #[inline]
    fn end_entry(&mut self, rec: &mut Recorder<'_>, r: usize, nt: i64, sampled: i64, output: i64, end: f64) -> CoreResult<bool> {
        let s = &mut self.live[r];
        s.computed += nt;
        self.pre.computed_tokens[r] += nt; // with speculation, its guesses too (the engine counts them)
        if s.computed < s.held {
            return Ok(false); // a chunk that is not the prompt's last
        }
        s.generated += sampled;
        let last = s.generated == output;
        rec.sampled(r, end, last);
        if last {
            s.held = 0;
            s.pending = 0;
            self.release(r)?;
        }
        Ok(last)
    }

    #[inline]
    fn is_done(&self, r: usize) -> bool {
        self.live[r].generated >= self.ol[r]
    }

    /// The copies back from the host tier of the blocks this step's admissions recalled
    /// (module docs, "A host tier").
    fn copies_s(&mut self) -> f64 {
        if self.host.host_blocks == 0 {
            return 0.0;
        }
        let recalled = self.kv.take_recalled();
        let copies_s = (recalled * self.params.block_size as u64) as f64 * self.host.s_per_token;
        self.pre.host_transfer_s += copies_s;
        copies_s
    }

    fn blocks_of(&self, r: usize) -> i64 {
        blocks_for(self.live[r].held, self.params.block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::continuous::per_step::{self, Features};
    use crate::sim::continuous::{event_driven, ContinuousOutput, Inputs};

    /// The per-step twin with prefix caching on.
    fn run(inp: &Inputs<'_>, px: &PrefixOptions<'_>) -> CoreResult<(ContinuousOutput, PrefixOutput)> {
        let o = per_step::run(inp, &Features { prefix: Some(px), ..Features::default() })?;
        Ok((o.out, o.prefix.expect("prefix caching was on")))
    }
    use crate::sim::test_util::{params, price, pricer, random_requests, rng, steps};

    #[test]
    fn synthetic_tokens_follow_the_parents() {
        // r0 own; r1 shares 3 of r0's; r2 shares 5 of r1's (3 of them r0's)
        let (parent, len) = ([-1, 0, 1], [0, 3, 5]);
        let pf = Prefixes { parent: &parent, len: &len };
        let (mut chain, mut out) = (Vec::new(), Vec::new());
        pf.tokens(2, 7, &mut chain, &mut out);
        assert_eq!(out, vec![0, 0, 0, 1, 1, 2, 2]);
        pf.tokens(2, 2, &mut chain, &mut out);
        assert_eq!(out, vec![0, 0]);
        pf.tokens(0, 4, &mut chain, &mut out);
        assert_eq!(out, vec![0; 4]);
    }

    /// A shared system prompt, by hand: r1 arrives when r0's prompt is computed and skips its
    /// two full blocks; r2 shares only one.
    #[test]
    fn a_shared_system_prompt_is_computed_once() {
        let t1 = price(&[(10, 0)]);
        let a = [0.0, t1, t1];
        let w = Workload::new(&a, &[10, 12, 6], &[3, 2, 2]).unwrap();
        let (parent, len) = ([-1, 0, 0], [0, 9, 5]);
        let pf = Prefixes { parent: &parent, len: &len };
        let (o, p) = run(&Inputs::new(&pricer(), &w, &params(8, 64, 4, 32, false), true, true), &PrefixOptions::new(&pf, true)).unwrap();
        assert_eq!(
            steps(&o),
            vec![vec![(0, 10, 0)], vec![(0, 1, 10), (1, 4, 8), (2, 2, 4)], vec![(0, 1, 11), (1, 1, 12), (2, 1, 6)]]
        );
        assert_eq!(p.cached_tokens, vec![0, 8, 4]);
        assert_eq!(p.computed_tokens, vec![12, 5, 3]);
        assert_eq!((p.prefix_hits, p.prefix_lookups), (3, 2 + 2 + 1));
    }

    /// With prefix caching off, or on without shared prefixes and without preemption (a
    /// preempted request hits its own computed blocks when it comes back), the loop makes the
    /// event-driven simulator's batches and clock, bit for bit.
    #[test]
    fn no_sharing_is_the_event_driven_run() {
        let mut rnd = rng(0x0123_4567_89ab_cdef);
        for case in 0..120 {
            let (a, p, l) = random_requests(&mut rnd, 30, (4, 0.003), 50, (1, 30));
            let n = a.len();
            let prm = params(1 + rnd(8) as i64, 1 + rnd(80) as i64, 1 + rnd(8) as i64, 1 + rnd(40) as i64, rnd(2) == 0);
            let w = Workload::new(&a, &p, &l).unwrap();
            let want = event_driven::run(&Inputs::new(&pricer(), &w, &prm, true, true));
            // sharing declared but prefix caching off: the same as no sharing
            let parent: Vec<i64> = (0..n as i64).map(|i| i - 1).collect();
            let len: Vec<i64> = (0..n).map(|i| if i == 0 { 0 } else { p[i].min(p[i - 1] + l[i - 1]) }).collect();
            let shared = Prefixes { parent: &parent, len: &len };
            let none = Prefixes { parent: &vec![-1; n], len: &vec![0; n] };
            for (pf, caching) in [(none, true), (shared, false)] {
                if caching && want.as_ref().is_ok_and(|o| o.preemptions > 0) {
                    continue;
                }
                let got = run(&Inputs::new(&pricer(), &w, &prm, true, true), &PrefixOptions::new(&pf, caching));
                match (&want, got) {
                    (Ok(want), Ok((got, extra))) => {
                        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got.sim.finish_s), bits(&want.sim.finish_s), "case {case}");
                        assert_eq!(bits(&got.sim.first_token_s), bits(&want.sim.first_token_s), "case {case}");
                        assert_eq!(got.batch_log, want.batch_log, "case {case} {prm:?}");
                        assert_eq!(got.trace_extra, want.trace_extra, "case {case}");
                        assert_eq!(got.n_preemptions, want.n_preemptions, "case {case}");
                        assert_eq!(extra.prefix_hits, 0);
                    }
                    (Err(e1), Err(e2)) => assert_eq!(e1, &e2),
                    (want, got) => panic!("case {case}: {want:?} vs {got:?}"),
                }
            }
        }
    }

    #[test]
    fn bad_prefixes_name_the_value() {
        let w = Workload::new(&[0.0, 0.0], &[4, 4], &[2, 2]).unwrap();
        let prm = params(8, 64, 4, 32, false);
        for (parent, len, msg) in [
            (vec![-1, 1], vec![0, 2], "prefix_parent[1] must be -1 or an earlier request's index in [0, 1), got 1"),
            (vec![-1, -1], vec![0, 2], "prefix_len[1] must be in [0, 0]"),
            (vec![-1, 0], vec![0, 5], "prefix_len[1] must be in [0, 4]"),
            (vec![-1], vec![0], "prefix_parent and prefix_len must have one entry per request (2), got 1 and 1"),
        ] {
            let pf = Prefixes { parent: &parent, len: &len };
            let e = run(&Inputs::new(&pricer(), &w, &prm, false, false), &PrefixOptions::new(&pf, true)).unwrap_err().to_string();
            assert!(e.starts_with(msg), "{e}");
        }
    }
}
