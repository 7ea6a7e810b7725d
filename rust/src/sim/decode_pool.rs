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
//! Costs per event, as `continuous.rs` does: the running requests are kept as a count and a
//! sum of contexts (each grows by one per step), and their last steps in a min-heap.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::continuous::{ContinuousParams, KvCounts, REJECT_BLOCKS, REJECT_NONE};
use super::{Recorder, SimOutput, StepShape};
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
    params.validate()?;
    let n = ready_s.len();
    let mut rec = Recorder::new(pricer, n, false);
    let mut reject_code = vec![REJECT_NONE; n];
    let mut kv = KvCounts::new(params.num_blocks, params.block_size);
    let seats = params.max_num_seqs.min(params.max_num_batched_tokens);
    let need = |r: usize| prompt[r] + output[r] - 1;
    let mut waiting: VecDeque<usize> = VecDeque::new();
    // (last step, request); a running request admitted before step s0 has context
    // prompt + s - s0 in step s, so we keep c = prompt - s0 and sum it
    let mut last: BinaryHeap<Reverse<(i64, usize)>> = BinaryHeap::new();
    let (mut live, mut sum_c) = (0i64, 0i128);
    let mut c_of = vec![0i64; n];
    let (mut next, mut step, mut t, mut peak) = (0usize, 0i64, 0.0f64, 0i64);
    let mut n_started = 0i64;
    loop {
        while next < n && ready_s[next] <= t {
            if output[next] < 2 {
                return Err(CoreError::invalid(format!(
                    "output_len[{next}] must be >= 2 on a decode card, got {}",
                    output[next]
                )));
            }
            if (need(next) + params.block_size - 1) / params.block_size > params.num_blocks {
                reject_code[next] = REJECT_BLOCKS;
                rec.out().rejected[next] = true;
            } else {
                waiting.push_back(next);
            }
            next += 1;
        }
        while live < seats {
            let Some(&r) = waiting.front() else { break };
            if !kv.allocate(need(r)) {
                break;
            }
            waiting.pop_front();
            live += 1;
            c_of[r] = prompt[r] - step;
            sum_c += c_of[r] as i128;
            last.push(Reverse((step + output[r] - 2, r)));
            let o = rec.out();
            o.start_s[r] = t;
            o.batch_id[r] = n_started;
            n_started += 1;
        }
        if live == 0 {
            if next == n {
                break;
            }
            // nothing runs, so the pool is empty and the queue too (anything fits an empty pool)
            t = ready_s[next];
            continue;
        }
        peak = peak.max(kv.blocks_used());
        let end = rec.step(t, StepShape::decode(live, sum_c + live as i128 * step as i128, live));
        while let Some(&Reverse((l, r))) = last.peek() {
            if l > step {
                break;
            }
            last.pop();
            live -= 1;
            sum_c -= c_of[r] as i128;
            kv.free(need(r));
            rec.out().finish_s[r] = end;
        }
        step += 1;
        t = end;
    }
    Ok(DecodeOutput { sim: rec.finish(), reject_code, peak_kv_blocks: peak })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::test_util::{price, pricer};

    fn params(seqs: i64, blocks: i64) -> ContinuousParams {
        ContinuousParams {
            max_num_seqs: seqs,
            max_num_batched_tokens: 1 << 20,
            block_size: 4,
            num_blocks: blocks,
            chunked_prefill: false,
        }
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
}
