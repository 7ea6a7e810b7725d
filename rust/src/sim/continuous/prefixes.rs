//! Which prompts share what (lecture §3.5): a request's *prefix parent* and how many leading
//! tokens it shares with it, and the synthetic token ids that follow from them (the module
//! docs of `prefix.rs`, "Which prompts share what"). The vocabulary of both KV pools of
//! prefix caching (`prefix_pool.rs`, `prefix_alloc.rs`) and of the loops that drive them.

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
