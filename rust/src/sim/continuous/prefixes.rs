//! Which prompts share what (lecture §3.5): a request's *prefix parent* and how many leading
//! tokens it shares with it, and the synthetic token ids that follow from them (the module
//! docs of `prefix.rs`, "Which prompts share what"). The vocabulary of both KV pools of
//! prefix caching (`prefix_pool.rs`, `prefix_alloc.rs`) and of the loops that drive them.
//!
//! # Runs of origins
//!
//! [`Lineage`]: each request's tokens as runs of origins, what the exact-key pool
//! (`prefix_pool.rs`) walks to name a prompt's blocks, read in one place instead of up the
//! parents. Walking up the parents costs a miss on memory a step (a conversation's turns lie far apart
//! in the workload), and was the pool's largest single cost at admission. The runs of a request
//! follow from its parent's alone: those of the parent that start before the shared length,
//! then its own from there. So one pass over the workload, parents first, lists them all, each
//! read from a parent just written. A chain of more than [`MOST_RUNS`] runs (a long thread of
//! turns, where the lists would grow with the square of its length) is not listed: its
//! requests walk up the parents as before.

use crate::error::{CoreError, CoreResult};
use crate::sim::Workload;

/// Which earlier request each request's prompt starts with, and for how many tokens.
#[derive(Debug, Clone, Copy)]
pub struct Prefixes<'a> {
    /// `-1`, or the index of an earlier request (`< i`).
    pub parent: &'a [i64],
    /// Tokens shared with the parent: `0` without one, else in `[0, prompt_len[i]]` and at most
    /// the parent's `prompt_len + output_len`.
    pub len: &'a [i64],
}

impl Prefixes<'_> {
    /// Checks the columns against the workload; the error names the first bad value.
    pub fn validate(&self, w: &Workload<'_>) -> CoreResult<()> {
        let n = w.len();
        if self.parent.len() != n || self.len.len() != n {
            return Err(CoreError::invalid(format!(
                "prefix_parent and prefix_len must have one entry per request ({n}), got {} and {}",
                self.parent.len(),
                self.len.len()
            )));
        }
        for i in 0..n {
            let (p, k) = (self.parent[i], self.len[i]);
            if !(-1..i as i64).contains(&p) {
                return Err(CoreError::invalid(format!(
                    "prefix_parent[{i}] must be -1 or an earlier request's index in [0, {i}), got {p}"
                )));
            }
            let most = if p < 0 { 0 } else { w.prompt_len[i].min(w.prompt_len[p as usize] + w.output_len[p as usize]) };
            if !(0..=most).contains(&k) {
                return Err(CoreError::invalid(format!(
                    "prefix_len[{i}] must be in [0, {most}] (no parent: 0; else at most its prompt \
                     and the parent's prompt + output), got {k}"
                )));
            }
        }
        Ok(())
    }

    /// The synthetic token ids of request `r`'s first `k` tokens into `out` (see the module
    /// docs): an iterative walk up the parents, so a long conversation needs no deep stack.
    pub(super) fn tokens(&self, r: usize, k: usize, chain: &mut Vec<(usize, usize)>, out: &mut Vec<u32>) {
        chain.clear();
        let (mut cur, mut lim) = (r, k);
        loop {
            chain.push((cur, lim));
            let p = self.parent[cur];
            lim = lim.min(self.len[cur] as usize);
            if p < 0 || lim == 0 {
                break;
            }
            cur = p as usize;
        }
        out.clear();
        for &(origin, end) in chain.iter().rev() {
            out.resize(end.max(out.len()), origin as u32); // <= u32::MAX: checked by `PrefixPool::new`
        }
    }
}

/// A run of blocks `[lo, hi)` of a request's chain whose last tokens have origin `o`.
pub(super) type Segment = (usize, i64, i64);

/// Runs listed per request at most (memory: 8 bytes a run); a few in the tests, so that the
/// loops' tests walk the parents too.
const MOST_RUNS: usize = if cfg!(test) { 4 } else { 32 };

/// Per request, the runs of origins of its tokens (module docs).
pub(super) struct Lineage {
    /// per request: its parent and the length of its shared prefix, side by side (one miss on
    /// memory a step up the parents, where the two columns of [`Prefixes`] took two)
    links: Vec<(i64, i64)>,
    /// runs as (origin, the position of its first token), root first
    runs: Vec<(u32, u32)>,
    /// per request: its runs in `runs` (none listed: a count of 0)
    span: Vec<(u32, u32)>,
}

impl Lineage {
    /// The runs of every request of `w` (prefixes checked by the caller); `list`: whether to
    /// list them (a pool that never looks a prefix up only needs the parents).
    pub(super) fn new(w: &Workload<'_>, prefixes: &Prefixes<'_>, list: bool) -> Self {
        let n = w.len();
        let links: Vec<(i64, i64)> = prefixes.parent.iter().zip(prefixes.len).map(|(&p, &l)| (p, l)).collect();
        // positions are listed as u32: a workload with longer requests walks the parents
        let fits = (0..n).all(|r| w.prompt_len[r] + w.output_len[r] <= u32::MAX as i64);
        let (mut runs, mut span) = (Vec::<(u32, u32)>::new(), Vec::<(u32, u32)>::new());
        if list && fits {
            span.reserve(n);
            for (r, &(p, l)) in links.iter().enumerate() {
                let start = runs.len();
                let listed = p < 0 || span[p as usize] != (0, 0);
                if !listed || start + MOST_RUNS >= u32::MAX as usize {
                    span.push((0, 0));
                    continue;
                }
                if p >= 0 && l > 0 {
                    let (s, k) = span[p as usize];
                    for i in s as usize..(s + k) as usize {
                        let run = runs[i];
                        if run.1 as i64 >= l {
                            break;
                        }
                        runs.push(run);
                    }
                }
                runs.push((r as u32, l as u32));
                let k = runs.len() - start;
                if k > MOST_RUNS {
                    runs.truncate(start);
                    span.push((0, 0));
                } else {
                    span.push((start as u32, k as u32));
                }
            }
        }
        Lineage { links, runs, span }
    }

    /// Request `r`'s chain of keys in blocks of `bs` as segments into `out`, root first: each
    /// origin's own tokens run from its shared length to where its child's shared part ends.
    pub(super) fn segments(&self, r: usize, bs: i64, out: &mut Vec<Segment>) {
        out.clear();
        match self.span.get(r) {
            Some(&(s, k)) if k > 0 => {
                let runs = &self.runs[s as usize..(s + k) as usize];
                for (i, &(o, lo)) in runs.iter().enumerate() {
                    let end = runs.get(i + 1).map_or(i64::MAX, |&(_, hi)| hi as i64 / bs);
                    if (lo as i64) / bs < end {
                        out.push((o as usize, lo as i64 / bs, end));
                    }
                }
            }
            _ => self.walk(r, bs, out),
        }
    }

    /// [`Lineage::segments`] by walking up the parents (a request whose runs are not listed).
    fn walk(&self, r: usize, bs: i64, out: &mut Vec<Segment>) {
        let (mut cur, mut hi) = (r, i64::MAX);
        loop {
            let (p, lo) = self.links[cur];
            if lo < hi {
                let end = if hi == i64::MAX { i64::MAX } else { hi / bs };
                if lo / bs < end {
                    out.push((cur, lo / bs, end));
                }
                hi = lo;
            }
            if p < 0 || hi == 0 {
                break;
            }
            cur = p as usize;
        }
        out.reverse();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::test_util::rng;

    /// The listed runs give the walk's segments, for every request of random forests of
    /// parents (chains of turns among them, longer than the runs listed), in blocks of 1 to 6.
    #[test]
    fn listed_runs_are_the_walk() {
        let mut rnd = rng(0x4528_21e6_38d0_1377);
        let (mut listed, mut walked) = (0, 0);
        for _ in 0..300 {
            let n = 1 + rnd(60) as usize;
            let (a, p, l): (Vec<f64>, Vec<i64>, Vec<i64>) = (vec![0.0; n], (0..n).map(|_| 1 + rnd(50) as i64).collect(), (0..n).map(|_| 1 + rnd(20) as i64).collect());
            let (mut parent, mut len) = (vec![-1i64; n], vec![0i64; n]);
            for i in 1..n {
                if rnd(5) != 0 {
                    let q = if rnd(3) != 0 { i - 1 } else { rnd(i as u64) as usize };
                    parent[i] = q as i64;
                    let most = p[i].min(p[q] + l[q]);
                    len[i] = if rnd(2) == 0 { most } else { rnd((most + 1) as u64) as i64 };
                }
            }
            let w = Workload::new(&a, &p, &l).unwrap();
            let lineage = Lineage::new(&w, &Prefixes { parent: &parent, len: &len }, true);
            let bs = 1 + rnd(6) as i64;
            let (mut got, mut want) = (Vec::new(), Vec::new());
            for r in 0..n {
                lineage.segments(r, bs, &mut got);
                want.clear();
                lineage.walk(r, bs, &mut want);
                assert_eq!(got, want, "request {r} of {parent:?} {len:?}");
                if lineage.span[r].1 > 0 { listed += 1 } else { walked += 1 }
            }
        }
        assert!(listed > 1000 && walked > 300, "both ways: {listed} {walked}");
    }
}
