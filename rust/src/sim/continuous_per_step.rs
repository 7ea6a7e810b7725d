//! Today's continuous-batching loop, kept as the baseline of the event-driven one
//! ([`super::continuous::run`]): every step visits every running sequence (its slot check, its
//! share of the step's totals, its sampling). Bench- and test-only: `benchmarks/` times the
//! event-driven engine against it, and `tests/test_sim_events.py` checks the two agree bit for
//! bit. The rules are those of `continuous.rs`'s module docs.

use std::collections::VecDeque;

use super::continuous::{add_entry, arrive, BatchLog, ContinuousOutput, ContinuousParams, KvCounts, StepExtra, REJECT_NONE};
use super::{Recorder, StepShape, Workload};
use crate::cost::Pricer;
use crate::error::{CoreError, CoreResult};

/// The live state of one request (one per request: memory stays linear).
#[derive(Debug, Clone, Copy, Default)]
struct Live {
    /// prompt plus the tokens generated so far
    tokens: i64,
    /// tokens whose KV is in the pool
    computed: i64,
    /// token slots the pool holds for it (0 while waiting)
    held: i64,
    generated: i64,
}

/// Runs continuous batching over a validated workload, one sequence-step at a time.
pub fn run_per_step(
    pricer: &Pricer,
    w: &Workload<'_>,
    params: &ContinuousParams,
    trace: bool,
    batch_log: bool,
) -> CoreResult<ContinuousOutput> {
    params.validate()?;
    let n = w.len();
    let (a, pl, ol) = (w.arrival_s, w.prompt_len, w.output_len);
    let mut rec = Recorder::new(pricer, n, trace);
    let mut reject_code = vec![REJECT_NONE; n];
    let mut n_preemptions = vec![0i64; n];
    let mut extra = trace.then(StepExtra::default);
    let mut log = batch_log.then(|| BatchLog { offsets: vec![0], ..Default::default() });
    let mut live: Vec<Live> = pl.iter().map(|&p| Live { tokens: p, ..Default::default() }).collect();
    let mut kv = KvCounts::new(params.num_blocks, params.block_size);
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let mut running: Vec<usize> = Vec::new();
    // (request, new tokens, decoding?) in batch order
    let mut batch: Vec<(usize, i64, bool)> = Vec::new();
    let (mut preemptions, mut peak_blocks) = (0u64, 0i64);
    let mut next = 0; // first request not arrived yet
    let mut n_started = 0i64;
    let mut t = 0.0f64;
    loop {
        arrive(params, w, t, &mut next, &mut waiting, &mut reject_code, &mut rec); // rule 1
        if waiting.is_empty() && running.is_empty() {
            if next == n {
                break;
            }
            t = a[next]; // idle: jump to the next arrival
            continue;
        }

        // rules 2-3: running requests, oldest admitted first
        batch.clear();
        let mut budget = params.max_num_batched_tokens;
        let (mut n_preempted, mut n_admitted) = (0i64, 0i64);
        let mut i = 0;
        'running: while i < running.len() && budget > 0 {
            let r = running[i];
            let decoding = live[r].computed == live[r].held;
            let nt = if !decoding {
                (live[r].held - live[r].computed).min(budget) // a chunk of the prompt
            } else {
                while !kv.can_append(live[r].held) {
                    let victim = running.pop().expect("r itself is running");
                    kv.free(live[victim].held);
                    live[victim].computed = 0;
                    live[victim].held = 0;
                    n_preemptions[victim] += 1;
                    preemptions += 1;
                    waiting.push_front(victim);
                    n_preempted += 1;
                    if victim == r {
                        break 'running;
                    }
                }
                kv.append(live[r].held);
                live[r].held += 1;
                1
            };
            batch.push((r, nt, decoding));
            budget -= nt;
            i += 1;
        }

        // rule 4: admission, only in a step that preempted nobody. Without prefix caching the
        // guard never changes a batch: the front of the queue is then the last victim, the pool
        // had no free block before it was preempted, and the request it made room for took one
        // of the blocks it gave back, so it cannot fit anyway. Kept for the engine's rules
        // (with prefix caching a hit could make it fit); tests/test_sim_continuous.py shows it.
        if n_preempted == 0 {
            while budget > 0 && (running.len() as i64) < params.max_num_seqs {
                let Some(&r) = waiting.front() else { break };
                let tokens = live[r].tokens;
                if !params.chunked_prefill && tokens > budget {
                    break;
                }
                if !kv.allocate(tokens) {
                    break;
                }
                waiting.pop_front();
                running.push(r);
                live[r].held = tokens;
                live[r].computed = 0;
                let o = rec.out();
                if o.start_s[r].is_nan() {
                    // a recompute keeps its first start; `batch_id` is the rank of first admission
                    o.start_s[r] = t;
                    o.batch_id[r] = n_started;
                    n_started += 1;
                }
                let nt = if params.chunked_prefill { tokens.min(budget) } else { tokens };
                batch.push((r, nt, false));
                n_admitted += 1;
                budget -= nt;
            }
        }
        if batch.is_empty() {
            // rules 1-4 rule this out (see the engine's docstring); an error, never a hang
            return Err(CoreError::invalid(format!(
                "internal error: at t={t} work is left but nothing could be scheduled"
            )));
        }

        // rule 5: the step's shape and price
        let mut shape = StepShape::default();
        for &(r, nt, decoding) in &batch {
            add_entry(&mut shape, log.as_mut(), r, nt, live[r].computed, live[r].held, decoding);
        }
        if let Some(l) = log.as_mut() {
            l.offsets.push(l.request_id.len() as i64);
        }
        let end = rec.step(t, shape);

        // rule 6: sampling and leaving
        let mut finished = false;
        for &(r, nt, _) in &batch {
            let s = &mut live[r];
            s.computed += nt;
            if s.computed < s.held {
                continue; // a chunk that is not the prompt's last
            }
            s.generated += 1;
            s.tokens += 1;
            let o = rec.out();
            if o.first_token_s[r].is_nan() {
                o.first_token_s[r] = end;
            }
            if s.generated == ol[r] {
                o.finish_s[r] = end;
                kv.free(s.held);
                s.held = 0;
                finished = true;
            }
        }
        if finished {
            running.retain(|&r| live[r].generated < ol[r]);
        }
        peak_blocks = peak_blocks.max(kv.blocks_used());
        if let Some(x) = extra.as_mut() {
            x.kv_blocks.push(kv.blocks_used());
            x.n_preempted.push(n_preempted);
            x.n_admitted.push(n_admitted);
        }
        t = end;
    }
    Ok(ContinuousOutput {
        sim: rec.finish(),
        reject_code,
        n_preemptions,
        preemptions,
        trace_extra: extra,
        peak_kv_blocks: peak_blocks,
        batch_log: log,
    })
}
