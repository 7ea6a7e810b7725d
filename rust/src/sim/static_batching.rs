//! Policy 2 of §4.5: static batching (request-level batching, as FasterTransformer was used).
//!
//! **When a batch starts.** Requests queue in arrival order. When the GPU is free, the next
//! batch starts as soon as `batch_size` requests wait, or as soon as the oldest waiting request
//! has waited `max_wait_s` (at `arrival + max_wait_s`), whichever comes first, and never before
//! the previous batch ends. It takes the oldest waiting requests, at most `batch_size`; a
//! request that arrives exactly at the start time is in it.
//!
//! **How it runs.** All members prefill together in one step (`(p_j, 0)` each; every member's
//! first token comes at its end), then decode together for `max(L_o) - 1` steps, so the batch
//! lasts until its longest request ends. A member finishes at the end of decode step
//! `L_o - 1` (at the end of the prefill when `L_o = 1`) but keeps its seat until the batch ends:
//! no one joins a running batch.
//!
//! * `ride_along = true` (the lecture's demo 03): finished members keep computing padding
//!   tokens and are charged for them, `(1, p + s - 1)` like the others;
//! * `ride_along = false` (exercise 5): a decode step `s` holds only the members with
//!   `L_o - 1 >= s` (the lecture's `works`); the others stop computing, their seats stay empty.
//!
//! **Cost per event.** A step never visits the batch's members: a decode step's totals follow
//! from the batch's prompt sum and the step number ([`StepShape::decode`]), and members leave
//! the working set in output-length order (sorted once per batch). A step costs O(1) plus the
//! members that finish in it, the cost per event that `continuous/event_driven.rs` reaches with its
//! aggregates; the sums are `i128`, so no total can wrap.

use super::{Recorder, SimOutput, StepShape, Workload};
use crate::cost::{fmt_f64, Pricer};
use crate::error::{CoreError, CoreResult};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StaticParams {
    pub batch_size: i64,
    pub max_wait_s: f64,
    pub ride_along: bool,
}

impl StaticParams {
    pub fn validate(&self) -> CoreResult<()> {
        if self.batch_size < 1 {
            return Err(CoreError::invalid(format!(
                "batch_size must be a positive integer, got {}",
                self.batch_size
            )));
        }
        if !(self.max_wait_s.is_finite() && self.max_wait_s >= 0.0) {
            return Err(CoreError::invalid(format!(
                "max_wait_s must be a finite number >= 0, got {}",
                fmt_f64(self.max_wait_s)
            )));
        }
        Ok(())
    }
}

/// Runs static batching over a validated workload.
pub fn run(pricer: &Pricer, w: &Workload<'_>, params: &StaticParams, trace: bool) -> CoreResult<SimOutput> {
    params.validate()?;
    let n = w.len();
    let b = usize::try_from(params.batch_size).unwrap_or(usize::MAX);
    let a = w.arrival_s;
    let mut rec = Recorder::new(pricer, n, trace);
    let mut free_at = 0.0f64;
    let mut order: Vec<usize> = Vec::with_capacity(b.min(n));
    let mut i = 0; // oldest request not yet served
    let mut batch_id = 0i64;
    while i < n {
        let deadline = a[i] + params.max_wait_s;
        // the arrival that makes the batch full; never, if fewer than b requests are left
        let full = if b <= n - i { a[i + b - 1] } else { f64::INFINITY };
        let trigger = if full < deadline { full } else { deadline };
        let start = if free_at > trigger { free_at } else { trigger };
        let mut end = i + 1; // a[i] <= deadline and a[i] <= full, so a[i] <= start
        while end < n && end - i < b && a[end] <= start {
            end += 1;
        }
        free_at = run_batch(&mut rec, w, i..end, start, params.ride_along, batch_id, &mut order);
        batch_id += 1;
        i = end;
    }
    Ok(rec.finish())
}

/// Runs one batch (requests `members`) from `start`; returns when its last step ends.
fn run_batch(
    rec: &mut Recorder<'_>,
    w: &Workload<'_>,
    members: std::ops::Range<usize>,
    start: f64,
    ride_along: bool,
    batch_id: i64,
    order: &mut Vec<usize>,
) -> f64 {
    let (pl, ol) = (w.prompt_len, w.output_len);
    let m = members.len() as i64;
    let mut prefill = StepShape::default();
    for j in members.clone() {
        prefill.add_prefill(pl[j]);
    }
    let first = rec.step(start, prefill);

    // Members by output length, shortest first: they leave the working set in this order.
    order.clear();
    order.extend(members.clone());
    order.sort_by_key(|&j| ol[j]);
    let o = rec.out();
    for j in members.clone() {
        o.start_s[j] = start;
        o.first_token_s[j] = first;
        o.batch_id[j] = batch_id;
    }
    let mut done = 0; // order[..done] have finished
    while done < order.len() && ol[order[done]] == 1 {
        o.finish_s[order[done]] = first;
        done += 1;
    }

    let all_prompts: i128 = members.clone().map(|j| pl[j] as i128).sum();
    let mut working_prompts: i128 = order[done..].iter().map(|&j| pl[j] as i128).sum();
    let l_max = order.last().map_or(1, |&j| ol[j]); // a batch has at least one member
    let mut t = first;
    for s in 1..l_max {
        let n_work = (order.len() - done) as i64;
        let shape = if ride_along {
            StepShape::decode(m, all_prompts + (m as i128) * (s as i128 - 1), n_work)
        } else {
            StepShape::decode(n_work, working_prompts + (n_work as i128) * (s as i128 - 1), n_work)
        };
        t = rec.step(t, shape);
        let o = rec.out();
        while done < order.len() && ol[order[done]] - 1 == s {
            o.finish_s[order[done]] = t;
            working_prompts -= pl[order[done]] as i128;
            done += 1;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::test_util::{price, pricer, with_batch1};

    fn run_simple(a: &[f64], p: &[i64], l: &[i64], b: i64, wait: f64, ride: bool) -> SimOutput {
        let w = Workload::new(a, p, l).unwrap();
        run(&pricer(), &w, &StaticParams { batch_size: b, max_wait_s: wait, ride_along: ride }, true).unwrap()
    }

    /// Four requests, B = 2, wait 0.2 s, by hand.
    /// * r0 (t=0) and r1 (t=0.05) fill a batch at 0.05; outputs 3 and 1.
    /// * r2 arrives at 0.06 while the GPU is busy, r3 only at 5.0: when the first batch ends,
    ///   r2 has waited less than 0.2 s, so the second batch starts at 0.06 + 0.2 = 0.26 alone.
    /// * r3 starts alone at 5.0 + 0.2.
    ///
    /// Returns the run and `t1`, the end of the first batch's prefill.
    fn four_requests(ride: bool) -> (SimOutput, f64) {
        let o = run_simple(&[0.0, 0.05, 0.06, 5.0], &[100, 50, 10, 20], &[3, 1, 2, 1], 2, 0.2, ride);
        (o, 0.05 + price(&[(100, 0), (50, 0)]))
    }

    #[test]
    fn four_requests_by_hand_ride_along() {
        let (o, t1) = four_requests(true);
        assert_eq!(o.start_s[..2], [0.05, 0.05]);
        assert_eq!(o.first_token_s[..2], [t1, t1]);
        assert_eq!(o.finish_s[1], t1); // one token: done at the prefill
        // r1 rides along: both sequences decode in both steps
        let t2 = t1 + price(&[(1, 100), (1, 50)]);
        let t3 = t2 + price(&[(1, 101), (1, 51)]);
        assert_eq!(o.finish_s[0], t3);
        assert!(t3 < 0.26);
        assert_eq!(o.start_s[2], 0.06 + 0.2);
        assert_eq!(o.first_token_s[2], 0.26 + price(&[(10, 0)]));
        assert_eq!(o.finish_s[2], o.first_token_s[2] + price(&[(1, 10)]));
        assert_eq!(o.start_s[3], 5.0 + 0.2);
        assert_eq!(o.finish_s[3], 5.2 + price(&[(20, 0)]));
        assert_eq!(o.batch_id, vec![0, 0, 1, 2]);
        let tr = o.trace.unwrap();
        assert_eq!(tr.batch_size, vec![2, 2, 2, 1, 1, 1]);
        assert_eq!(tr.n_decode, vec![0, 1, 1, 0, 1, 0]);
        assert_eq!(tr.kv_tokens, vec![150, 152, 154, 10, 11, 20]);
    }

    #[test]
    fn four_requests_by_hand_no_ride_along() {
        let (o, t1) = four_requests(false);
        let t3 = t1 + price(&[(1, 100)]) + price(&[(1, 101)]);
        assert_eq!(o.finish_s[0], t3);
        assert_eq!(o.finish_s[1], t1);
        let tr = o.trace.unwrap();
        assert_eq!(tr.batch_size, vec![2, 1, 1, 1, 1, 1]);
    }

    /// A busy GPU: when batch 0 ends, three requests wait and B = 2 takes the two oldest at once.
    #[test]
    fn a_full_queue_starts_at_once_when_the_gpu_frees() {
        let a = [0.0, 0.0, 0.001, 0.002, 0.003];
        let p = [10; 5];
        let l = [400, 2, 2, 2, 2];
        let o = run_simple(&a, &p, &l, 2, 0.2, true);
        assert_eq!(o.batch_id, vec![0, 0, 1, 1, 2]);
        assert_eq!(o.start_s[2], o.finish_s[0]);
        assert_eq!(o.start_s[3], o.finish_s[0]);
        // r4 has waited well over 0.2 s by then: it starts as soon as batch 1 ends
        assert_eq!(o.start_s[4], o.finish_s[2]);
    }

    #[test]
    fn batch_size_one_is_batch1() {
        for ride in [true, false] {
            let one_seat = StaticParams { batch_size: 1, max_wait_s: 0.2, ride_along: ride };
            let (got, want) = with_batch1(|w| run(&pricer(), w, &one_seat, true).unwrap());
            assert_eq!(got, want);
        }
    }

    #[test]
    fn ride_along_costs_more_but_changes_no_first_token_of_the_first_batch() {
        let a = [0.0; 4];
        let p = [512; 4];
        let l = [1, 10, 100, 1000];
        let on = run_simple(&a, &p, &l, 4, 0.2, true);
        let off = run_simple(&a, &p, &l, 4, 0.2, false);
        assert_eq!(on.first_token_s, off.first_token_s);
        assert!(off.finish_s[3] < on.finish_s[3]);
        assert!(off.flops < on.flops);
        assert_eq!(on.n_steps, off.n_steps);
    }

    /// Fewer requests left than the batch size: the batch waits `max_wait_s` for more.
    #[test]
    fn a_lone_request_waits_for_the_timeout() {
        let o = run_simple(&[0.0], &[1], &[1], 2, 0.2, true);
        assert_eq!(o.start_s[0], 0.2);
        let o = run_simple(&[0.0, 1.0], &[1, 1], &[1, 1], 2, 0.2, false);
        assert_eq!(o.start_s, vec![0.2, 1.2]);
    }

    #[test]
    fn bad_params_are_errors() {
        let w = Workload::new(&[0.0], &[1], &[1]).unwrap();
        let go = |b, wait| run(&pricer(), &w, &StaticParams { batch_size: b, max_wait_s: wait, ride_along: true }, false);
        assert_eq!(go(0, 0.2).unwrap_err().to_string(), "batch_size must be a positive integer, got 0");
        assert_eq!(go(2, -0.5).unwrap_err().to_string(), "max_wait_s must be a finite number >= 0, got -0.5");
        assert_eq!(go(2, f64::NAN).unwrap_err().to_string(), "max_wait_s must be a finite number >= 0, got nan");
        assert!(go(i64::MAX, 0.0).is_ok());
    }

    #[test]
    fn empty_workload_is_empty_output() {
        let w = Workload::new(&[], &[], &[]).unwrap();
        let o = run(&pricer(), &w, &StaticParams { batch_size: 8, max_wait_s: 0.2, ride_along: true }, true).unwrap();
        assert_eq!(o.n_steps, 0);
        assert!(o.start_s.is_empty());
    }
}
