//! The event loop's decoders kept by the exact-key pool (lecture §3.5 with §3.3's decoders as
//! aggregates): no call per decoder per block, the allocator's answers unchanged.
//!
//! # Why a decoder needs no call
//!
//! A decoding request asks two things of the allocator: a new block when its slots reach a
//! block boundary (the front of the free queue, evicting its key: which decoder takes which
//! block never matters, so a step's takes are one bulk of `n` pops, `n` the decoders' count
//! at that residue), and the registration of its key when it fills a block. A fill can only
//! change an answer through the fill's slot (its origin is the decoder itself), and that slot
//! changes between cached and not only where (a) another request registers it, (b) a lookup
//! walks it or (c) an eviction takes it. So a fill is written late, the decoder's slots up to
//! the current step in one [`KeyedPool::materialize`], right before any of these touch its
//! origin, and when it leaves (finish, preemption, the loop's rules step): written then, it
//! wins or loses its slot exactly as it would have at its own step, since nothing between
//! changed whether that slot was cached.
//!
//! # The one race within a step
//!
//! A step's fills come before anything else in it but the other decoders' takes, which run in
//! running order among them: a take that evicts exactly the slot a decoder fills in the same
//! step decides the fill (evicted first, the fill wins the slot; filled first, the fill loses
//! to the cached copy). Only then does the pool ask the loop for the running order (`before`).

use super::{internal, KeyedPool, Seq, NONE};
use crate::error::CoreResult;

impl KeyedPool {
    /// Decoder `r` of offset `offset` is kept: its slots written so far are `tokens`.
    pub(super) fn keep_decoder(&mut self, r: usize, offset: i64) {
        self.seqs[r].offset = offset;
        self.origins[r].lazy = true;
    }

    /// Decoder `r` is no longer kept, its slots written up to step `through`.
    pub(super) fn drop_decoder(&mut self, r: usize, through: i64) -> CoreResult<()> {
        if self.origins[r].lazy {
            self.materialize(r, through)?;
            self.origins[r].lazy = false;
        }
        Ok(())
    }

    /// Kept decoder `o`'s slots up to step `through`'s (its blocks opened, by the bulk takes
    /// already; its full ones offered to the cache, as its fills would have).
    pub(super) fn materialize(&mut self, o: usize, through: i64) -> CoreResult<()> {
        let bs = self.bs;
        let Seq { chain, tokens, offset, .. } = &mut self.seqs[o];
        let target = *offset + through + 1;
        if target <= *tokens {
            return Ok(());
        }
        chain.resize(((target + bs - 1) / bs) as usize, NONE);
        *tokens = target;
        if self.caching {
            self.offer(o, (target / bs) as usize)?;
        }
        Ok(())
    }

    /// The fills of the kept decoders among the segments being looked up, written (a lookup
    /// walks their slots).
    pub(super) fn settle_segments(&mut self) -> CoreResult<()> {
        for i in 0..self.segs.len() {
            let o = self.segs[i].0;
            if self.origins[o].lazy {
                self.materialize(o, self.now)?;
            }
        }
        Ok(())
    }

    /// Key index of slot `e` (its origin's range is live).
    fn key_of(&self, e: u32) -> usize {
        let g = self.origins[self.slots[e as usize].owner as usize];
        (e - g.base + g.first) as usize
    }

    /// Slot `e`, of a kept decoder's origin, is evicted after this step's takes (a prefix
    /// admission's): the decoder's fills up to now come first.
    pub(super) fn settle_evicted(&mut self, e: u32) -> CoreResult<()> {
        let o = self.slots[e as usize].owner as usize;
        if self.key_of(e) >= self.seqs[o].marked {
            self.materialize(o, self.now)?;
        }
        Ok(())
    }

    /// Step `step`'s takes of `n` kept decoders in one bulk (module docs; `before(o)`: how many
    /// of them run before decoder `o`).
    pub(super) fn bulk_take(&mut self, n: i64, step: i64, mut before: impl FnMut(usize) -> i64) -> CoreResult<()> {
        if n > self.free {
            return Err(internal("the decoders' takes found too few free blocks"));
        }
        self.evict(n, |pool, e, k| pool.settle_taken(e, step, k, &mut before))?;
        self.free -= n;
        self.now = step;
        Ok(())
    }

    /// Slot `e` of kept decoder `o` is evicted by the `k`-th take of step `step`: `o`'s fills
    /// of earlier steps come first, and its fill of this step too where it runs before that
    /// take (module docs, "The one race within a step").
    #[cold]
    fn settle_taken(&mut self, e: u32, step: i64, k: i64, before: &mut impl FnMut(usize) -> i64) -> CoreResult<()> {
        let o = self.slots[e as usize].owner as usize;
        let j = self.key_of(e);
        if j < self.seqs[o].marked {
            return Ok(());
        }
        self.materialize(o, step - 1)?;
        let bs = self.bs;
        let filled = self.seqs[o].offset + step + 1; // its slots after this step's
        if filled % bs == 0 && (filled / bs - 1) as usize == j {
            // with blocks of one slot it takes a block too, its own take before its fill
            let m = before(o);
            let first = if bs == 1 { m < k } else { m <= k };
            if first {
                self.materialize(o, step)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::PrefixKv;
    use super::*;
    use crate::sim::continuous::prefixes::Prefixes;
    use crate::sim::test_util::rng;
    use crate::sim::Workload;

    /// A decoder of the test: request, offset `computed - step`, slots written one by one (the
    /// per-block pool's `pending`), its last step.
    struct Dec {
        r: usize,
        c: i64,
        written: i64,
        last: i64,
    }

    /// Requests `p`, `l` (prefixes `pf`) run on two pools of `blocks` blocks of `bs` slots: one
    /// keeping its decoders, one called block event by block event in running order (as the
    /// loop calls the real allocator), step by step, `admit(step)` admissions tried a step
    /// (each prompt computed at once). Every answer, free count and counter must agree.
    /// Returns how many evictions the kept decoders' takes raced with a fill of their step
    /// (the module docs).
    fn side_by_side(p: &[i64], l: &[i64], pf: &Prefixes<'_>, bs: i64, blocks: i64, mut admit: impl FnMut(i64) -> usize) -> u32 {
        let n = p.len();
        let a = vec![0.0; n];
        let w = Workload::new(&a, p, l).unwrap();
        let (mut kept, mut calls) = (KeyedPool::new(&w, pf, blocks, bs, true), KeyedPool::new(&w, pf, blocks, bs, true));
        let mut running: Vec<Dec> = Vec::new();
        let (mut next, mut raced) = (0, 0);
        for s in 0..400i64 {
            let takers = running.iter().filter(|d| (d.c + s) % bs == 0).count() as i64;
            if takers > kept.num_free_blocks() {
                break; // the loop would preempt: its rules step settles the decoders first
            }
            for d in running.iter_mut() {
                let held = d.c + s;
                if held % bs == 0 {
                    calls.append(d.r).unwrap();
                } else if (held + 1) % bs == 0 {
                    calls.append_same(d.r, (held + 1 - d.written) as usize).unwrap();
                } else {
                    continue;
                }
                d.written = held + 1;
            }
            let before = |o: usize| {
                raced += 1;
                let at = running.iter().position(|d| d.r == o).expect("a running decoder");
                running[..at].iter().filter(|d| (d.c + s) % bs == 0).count() as i64
            };
            kept.take_for_decoders(takers, s, before).unwrap();
            for _ in 0..admit(s) {
                let Some(r) = (next < n).then_some(next) else { break };
                let got = kept.allocate(r, p[r]).unwrap();
                assert_eq!(got, calls.allocate(r, p[r]).unwrap(), "step {s}: admitting {r}");
                if got.is_none() {
                    break;
                }
                next += 1;
                kept.mark_computed(r, p[r]).unwrap();
                calls.mark_computed(r, p[r]).unwrap();
                let c = p[r] - (s + 1); // it decodes from the next step
                kept.start_decoding(r, c);
                running.push(Dec { r, c, written: p[r], last: l[r] + p[r] - 2 - c });
            }
            // those whose last token this step sampled, in running order
            let mut i = 0;
            while i < running.len() {
                if running[i].last == s {
                    let r = running.remove(i).r;
                    kept.release(r).unwrap();
                    calls.release(r).unwrap();
                } else {
                    i += 1;
                }
            }
            assert_eq!((kept.num_free_blocks(), kept.counters()), (calls.num_free_blocks(), calls.counters()), "step {s}");
            if next == n && running.is_empty() {
                break;
            }
        }
        raced
    }

    /// The kept decoders against the per-block calls on random workloads: tight pools, blocks
    /// of 1 to 4 slots, and prompts that compute a running decoder's tokens before it does.
    #[test]
    fn kept_decoders_are_the_per_block_calls() {
        let mut rnd = rng(0xbe54_66cf_34e9_0c6c);
        let mut raced = 0;
        for case in 0..2000 {
            let n = 2 + rnd(40) as usize;
            let (mut p, l): (Vec<i64>, Vec<i64>) = ((0..n).map(|_| 1 + rnd(12) as i64).collect(), (0..n).map(|_| 1 + rnd(12) as i64).collect());
            let (mut parent, mut len) = (vec![-1i64; n], vec![0i64; n]);
            for i in 1..n {
                if rnd(5) != 0 {
                    let q = i - 1 - rnd(i.min(3) as u64) as usize;
                    parent[i] = q as i64;
                    if rnd(2) == 0 && p[q] + l[q] < 30 {
                        // all of its parent's tokens, output included: computed ahead of it
                        p[i] = p[q] + l[q] + rnd(3) as i64;
                    }
                    let most = p[i].min(p[q] + l[q]);
                    len[i] = if rnd(2) == 0 { most } else { rnd((most + 1) as u64) as i64 };
                }
            }
            let bs = 1 + rnd(4) as i64;
            let blocks = 3 + rnd(48 / bs as u64) as i64;
            let pf = Prefixes { parent: &parent, len: &len };
            let admit = |_| rnd(3) as usize;
            raced += std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| side_by_side(&p, &l, &pf, bs, blocks, admit)))
                .unwrap_or_else(|e| panic!("case {case} bs {bs} blocks {blocks} {p:?} {l:?} {parent:?} {len:?}: {e:?}"));
        }
        assert!(raced > 15, "the takes must race with fills: {raced}");
    }

    /// The race by hand, blocks of one slot: r1 computes all of r0's tokens while r0 decodes,
    /// and finishes at once; r0's keys 1 to 6 go to the free queue, last first, behind one
    /// anonymous block. r0's takes of steps 1, 2 and 3 pop the anonymous block, key 6 and
    /// key 5 (its fills lose: the keys are cached), and its take of step 4 evicts key 4, the
    /// block its own fill of that step names: the take comes first, and the fill wins it
    /// back. r2, after r0 finished, takes the whole pool: key 4 is evicted a second time.
    #[test]
    fn a_take_that_evicts_its_own_fill() {
        let (p, l, parent, len) = ([1, 7, 8], [6, 1, 1], [-1, 0, -1], [0, 7, 0]);
        let pf = Prefixes { parent: &parent, len: &len };
        let raced = side_by_side(&p, &l, &pf, 1, 8, |s| [2, 0, 0, 0, 0, 0, 1].get(s as usize).copied().unwrap_or(0));
        assert_eq!(raced, 1);
    }
}
