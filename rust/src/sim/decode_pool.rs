//! One card of a disaggregated decode pool (DistServe, Splitwise; course project §8,
//! milestone 4): it receives requests whose prompt KV was computed elsewhere and only decodes.
//!
//! A request arrives at `ready_s` (its prefill ended on a prefill card and its KV crossed the
//! link) holding `prompt` tokens of KV and its first output token. It then needs `output - 1`
//! decode steps; decode step `s` of it is `(1, prompt + s - 1)`, the context convention of
//! `sim/mod.rs`. The rules:
//!
//! 1. arrivals with `ready_s <= t` join the back of the queue;
//! 2. admission, strict FCFS, while fewer than `min(max_num_seqs, max_num_batched_tokens)`
//!    requests run and the pool has blocks for *all* its tokens, `prompt + output - 1` (the
//!    KV it brings plus every decode's): a decode card reserves, so it never preempts (a
//!    preempted request would have to be prefilled again, on a card built not to prefill);
//! 3. every running request decodes one token; the step is priced by the paper GPU;
//! 4. a request whose last token this step samples leaves and frees its blocks.
//!
//! When nothing runs, the clock jumps to the next arrival. A request that could never fit
//! (`ceil((prompt + output - 1) / block_size) > num_blocks`) is rejected at arrival; the
//! disaggregated simulator rejects those before their prefill, so it never sends one here.
//!
//! Costs per event, as `continuous/event_driven.rs` does: the running requests are kept as a count and a
//! sum of contexts (each grows by one per step), and their last steps in a min-heap.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::continuous::{ContinuousParams, KvCounts, REJECT_BLOCKS, REJECT_NONE};
use super::{Recorder, SimOutput, StepShape, Workload};
use crate::cost::Pricer;
use crate::error::{CoreError, CoreResult};

/// One decode card's run: `sim.start_s` is when each request was admitted, `finish_s` its last
/// token; `first_token_s` stays NaN (the prefill card made it).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeOutput {
    pub sim: SimOutput,
    pub reject_code: Vec<i8>,
    pub peak_kv_blocks: i64,
}

/// Runs one decode card. `ready_s` nondecreasing; `output >= 2` for every request (a request
/// of one output token is done when its prefill ends); lengths already checked.
pub fn run(
    pricer: &Pricer,
    ready_s: &[f64],
    prompt: &[i64],
    output: &[i64],
    params: &ContinuousParams,
) -> CoreResult<DecodeOutput> {
    let mut card = DecodeCard::new(pricer, params, ready_s.len())?;
    card.advance(&Workload { arrival_s: ready_s, prompt_len: prompt, output_len: output }, f64::INFINITY)?;
    Ok(card.finish())
}

/// A decode card, resumable as `event_driven::Card` is (the same argument: it stops at the top
/// of its loop, before the arrivals and admissions of a step that starts at `until` or later).
pub struct DecodeCard<'p> {
    params: ContinuousParams,
    rec: Recorder<'p>,
    reject_code: Vec<i8>,
    kv: KvCounts,
    waiting: VecDeque<usize>,
    /// (last step, request); a running request admitted before step s0 has context
    /// prompt + s - s0 in step s, so we keep c = prompt - s0 and sum it
    last: BinaryHeap<Reverse<(i64, usize)>>,
    live: i64,
    sum_c: i128,
    c_of: Vec<i64>,
    next: usize,
    step: i64,
    t: f64,
    peak: i64,
}

impl<'p> DecodeCard<'p> {
    pub fn new(pricer: &'p Pricer, params: &ContinuousParams, n: usize) -> CoreResult<Self> {
        params.validate()?;
        Ok(DecodeCard {
            params: *params,
            rec: Recorder::new(pricer, n, false),
            reject_code: vec![REJECT_NONE; n],
            kv: KvCounts::new(params.num_blocks, params.block_size),
            waiting: VecDeque::new(),
            last: BinaryHeap::new(),
            live: 0,
            sum_c: 0,
            c_of: vec![0; n],
            next: 0,
            step: 0,
            t: 0.0,
            peak: 0,
        })
    }

    /// From now on, list the requests that finish, for [`DecodeCard::drain_finished`].
    pub fn track_finished(&mut self) {
        self.rec.track_finished();
    }

    /// Calls `f(request, finish_s)` for each request finished since the last call.
    pub fn drain_finished(&mut self, f: impl FnMut(usize, f64)) {
        self.rec.drain_finished(f);
    }

    /// Whether a request of these lengths could never fit this card (rejected at arrival).
    pub fn rejects(&self, prompt: i64, output: i64) -> bool {
        let p = &self.params;
        (prompt + output - 1 + p.block_size - 1) / p.block_size > p.num_blocks
    }

    /// Runs every step that starts before `until` over `w` (`arrival_s`: when each request's
    /// KV is ready), a workload of which every earlier call saw a prefix.
    pub fn advance(&mut self, w: &Workload<'_>, until: f64) -> CoreResult<()> {
        let (ready_s, prompt, output) = (w.arrival_s, w.prompt_len, w.output_len);
        let n = w.len();
        if n > self.c_of.len() {
            self.rec.grow(n);
            self.reject_code.resize(n, REJECT_NONE);
            self.c_of.resize(n, 0);
        }
        let params = self.params;
        let seats = params.max_num_seqs.min(params.max_num_batched_tokens);
        let need = |r: usize| prompt[r] + output[r] - 1;
        let s = self;
        loop {
            while s.next < n && ready_s[s.next] <= s.t {
                let r = s.next;
                if output[r] < 2 {
                    return Err(CoreError::invalid(format!(
                        "output_len[{r}] must be >= 2 on a decode card, got {}",
                        output[r]
                    )));
                }
                if s.rejects(prompt[r], output[r]) {
                    s.reject_code[r] = REJECT_BLOCKS;
                    s.rec.out().rejected[r] = true;
                } else {
                    s.waiting.push_back(r);
                }
                s.next += 1;
            }
            if s.live == 0 && s.waiting.is_empty() {
                if s.next == n {
                    return Ok(()); // done, unless more requests come
                }
                s.t = ready_s[s.next];
                continue;
            }
            if s.t >= until {
                return Ok(());
            }
            // admission; with nothing running the first one always fits (an empty pool holds
            // any request that was not rejected), so a step follows
            while s.live < seats {
                let Some(&r) = s.waiting.front() else { break };
                if !s.kv.allocate(need(r)) {
                    break;
                }
                s.waiting.pop_front();
                s.live += 1;
                s.c_of[r] = prompt[r] - s.step;
                s.sum_c += s.c_of[r] as i128;
                s.last.push(Reverse((s.step + output[r] - 2, r)));
                s.rec.start(r, s.t);
            }
            s.peak = s.peak.max(s.kv.blocks_used());
            let shape = StepShape::decode(s.live, s.sum_c + s.live as i128 * s.step as i128, s.live);
            let end = s.rec.step(s.t, shape);
            while let Some(&Reverse((l, r))) = s.last.peek() {
                if l > s.step {
                    break;
                }
                s.last.pop();
                s.live -= 1;
                s.sum_c -= s.c_of[r] as i128;
                s.kv.free(need(r));
                s.rec.set_finish(r, end);
            }
            s.step += 1;
            s.t = end;
        }
    }

    pub fn finish(self) -> DecodeOutput {
        DecodeOutput { sim: self.rec.finish(), reject_code: self.reject_code, peak_kv_blocks: self.peak }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::test_util::{self, price, pricer, random_requests, rng};

    fn params(seqs: i64, blocks: i64) -> ContinuousParams {
        test_util::params(seqs, 1 << 20, 4, blocks, false)
    }

    /// Two requests by hand: r1 (prompt 8, 2 decodes) arrives while r0 (prompt 5, 3 decodes)
    /// runs and joins it at the next step.
    #[test]
    fn decodes_by_hand() {
        let t1 = price(&[(1, 5)]);
        let o = run(&pricer(), &[0.0, t1 * 0.5], &[5, 8], &[4, 3], &params(8, 64)).unwrap();
        let t2 = t1 + price(&[(1, 6), (1, 8)]);
        let t3 = t2 + price(&[(1, 7), (1, 9)]);
        assert_eq!(o.sim.start_s, vec![0.0, t1]);
        assert_eq!(o.sim.finish_s, vec![t3, t3]);
        assert_eq!(o.sim.n_steps, 3);
    }

    /// One seat: the second request waits for the first to leave.
    #[test]
    fn seats_and_blocks_queue_requests() {
        let o = run(&pricer(), &[0.0, 0.0], &[4, 4], &[2, 2], &params(1, 64)).unwrap();
        assert_eq!(o.sim.start_s[1], o.sim.finish_s[0]);
        // blocks: each needs ceil(5 / 4) = 2 of 3: the second waits too
        let o2 = run(&pricer(), &[0.0, 0.0], &[4, 4], &[2, 2], &params(8, 3)).unwrap();
        assert_eq!(o2.sim.start_s, o.sim.start_s);
        // too big for the pool: rejected, never a hang
        let o3 = run(&pricer(), &[0.0], &[40], &[2], &params(8, 3)).unwrap();
        assert_eq!(o3.reject_code, vec![REJECT_BLOCKS]);
    }
    /// Handed its requests one at a time (advanced to each arrival first), a card gives the
    /// uninterrupted run bit for bit, and lists each request once as it finishes.
    #[test]
    fn stopping_anywhere_changes_nothing() {
        let mut rnd = rng(0xbb67_ae85_84ca_a73b);
        for case in 0..200 {
            let (ready, p, l) = random_requests(&mut rnd, 30, (3, 0.004), 40, (2, 30));
            let n = ready.len();
            let prm = params(1 + rnd(6) as i64, 4 + rnd(40) as i64);
            let want = run(&pricer(), &ready, &p, &l, &prm).unwrap();
            let pr = pricer();
            let mut card = DecodeCard::new(&pr, &prm, 0).unwrap();
            card.track_finished();
            let mut listed = vec![0; n];
            for k in 0..=n {
                let until = if k < n { ready[k] } else { f64::INFINITY };
                let w = Workload { arrival_s: &ready[..k], prompt_len: &p[..k], output_len: &l[..k] };
                card.advance(&w, until).unwrap();
                card.drain_finished(|r, f| {
                    assert_eq!(f.to_bits(), want.sim.finish_s[r].to_bits(), "case {case}");
                    listed[r] += 1;
                });
            }
            let served = want.reject_code.iter().map(|&c| (c == REJECT_NONE) as i32).collect::<Vec<_>>();
            assert_eq!(listed, served, "case {case}");
            assert_eq!(format!("{:?}", card.finish()), format!("{want:?}"), "case {case}");
        }
    }
}
