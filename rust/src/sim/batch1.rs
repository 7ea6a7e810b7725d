//! Policy 1 of §4.5: one request at a time, first come first served.
//!
//! A request starts when it has arrived and the previous one has finished. Its prefill is one
//! step `(p, 0)` and produces the first token; then `L_o - 1` decode steps `(1, p + s - 1)`
//! produce the rest; it finishes at the end of its last step (at the end of the prefill when
//! `L_o = 1`).
//!
//! Admission control (§5.3) plugs in through [`Admission`]: the policy sees each request at its
//! arrival, with the accepted requests still in the system, and may turn it away. [`AcceptAll`]
//! is the default.

use super::{Recorder, SimOutput, StepShape, Workload};
use crate::cost::Pricer;

/// What an admission policy sees when a request arrives.
pub struct Batch1View<'a> {
    pub workload: &'a Workload<'a>,
    /// The arriving request.
    pub request: usize,
    /// Its arrival time: the decision is taken then.
    pub now_s: f64,
    /// Accepted requests still in the system at `now_s`, in service order. The first is in
    /// service when `running_since_s` is set; the others wait.
    pub ahead: &'a [usize],
    /// When the request in service started, if one is in service.
    pub running_since_s: Option<f64>,
    /// When the GPU will have finished every accepted request (the true value, which a
    /// realistic policy must not use; admission control reads it only to report what would
    /// have happened to a rejected request, never to decide).
    pub free_at_s: f64,
}

/// Decides at arrival whether a request is served (`true`) or rejected at once (`false`).
pub trait Admission {
    fn admit(&mut self, view: &Batch1View<'_>) -> bool;
}

/// Serves everything (no admission control).
pub struct AcceptAll;

impl Admission for AcceptAll {
    fn admit(&mut self, _view: &Batch1View<'_>) -> bool {
        true
    }
}

/// Runs batch-1 FCFS over a validated workload.
pub fn run(pricer: &Pricer, w: &Workload<'_>, admission: &mut dyn Admission, trace: bool) -> SimOutput {
    let n = w.len();
    let mut rec = Recorder::new(pricer, n, trace);
    let mut free_at = 0.0f64; // when the GPU finishes the work accepted so far
    let mut accepted: Vec<usize> = Vec::with_capacity(n);
    let mut head = 0; // accepted[head..] are still in the system
    // Counters cannot wrap: the served requests (`batch_id`) are <= n (a usize held in
    // memory), and a step's context `p + s - 1` < 2^25 since both are <= MAX_REQUEST_TOKENS.
    for i in 0..n {
        let now = w.arrival_s[i];
        while head < accepted.len() && rec.out().finish_s[accepted[head]] <= now {
            head += 1;
        }
        let running_since_s = accepted.get(head).map(|&j| rec.out().start_s[j]).filter(|&s| s <= now);
        let view = Batch1View {
            workload: w,
            request: i,
            now_s: now,
            ahead: &accepted[head..],
            running_since_s,
            free_at_s: free_at,
        };
        if !admission.admit(&view) {
            rec.out().rejected[i] = true;
            continue;
        }
        accepted.push(i);

        let (p, l) = (w.prompt_len[i], w.output_len[i]);
        let start = if free_at > now { free_at } else { now };
        let mut prefill = StepShape::default();
        prefill.add_prefill(p);
        let mut t = rec.step(start, prefill);
        let first = t;
        for s in 1..l {
            t = rec.step(t, StepShape::decode(1, (p + s - 1) as i128, 1));
        }
        rec.start(i, start); // batch_id: its rank among the served requests
        let o = rec.out();
        o.first_token_s[i] = first;
        o.finish_s[i] = t;
        free_at = t;
    }
    rec.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::test_util::{price, pricer};

    fn run_simple(a: &[f64], p: &[i64], l: &[i64]) -> SimOutput {
        let w = Workload::new(a, p, l).unwrap();
        run(&pricer(), &w, &mut AcceptAll, true)
    }

    /// Three requests by hand: the second queues behind the first, the third finds the GPU idle.
    #[test]
    fn three_requests_by_hand() {
        let o = run_simple(&[0.0, 0.001, 10.0], &[100, 10, 2048], &[3, 1, 2]);
        // request 0: prefill (100, 0), decodes (1, 100), (1, 101)
        let t0 = 0.0 + price(&[(100, 0)]);
        let t0_end = t0 + price(&[(1, 100)]) + price(&[(1, 101)]);
        assert_eq!((o.start_s[0], o.first_token_s[0]), (0.0, t0));
        assert_eq!(o.finish_s[0], t0 + price(&[(1, 100)]) + price(&[(1, 101)]));
        // request 1 waits for request 0; one token: finish = first token
        assert_eq!(o.start_s[1], t0_end);
        assert_eq!(o.first_token_s[1], t0_end + price(&[(10, 0)]));
        assert_eq!(o.finish_s[1], o.first_token_s[1]);
        // request 2 arrives to an idle GPU
        assert_eq!(o.start_s[2], 10.0);
        assert_eq!(o.first_token_s[2], 10.0 + price(&[(2048, 0)]));
        assert_eq!(o.finish_s[2], o.first_token_s[2] + price(&[(1, 2048)]));
        assert_eq!(o.n_steps, 3 + 1 + 2);
        assert_eq!(o.batch_id, vec![0, 1, 2]);
        let tr = o.trace.unwrap();
        assert_eq!(tr.tokens, vec![100, 1, 1, 10, 2048, 1]);
        assert_eq!(tr.kv_tokens, vec![100, 101, 102, 10, 2048, 2049]);
        assert_eq!(tr.n_prefill, vec![1, 0, 0, 1, 1, 0]);
        assert_eq!(tr.n_decode, vec![0, 1, 1, 0, 0, 1]);
        let busy: f64 = tr.step_s.iter().sum();
        assert!((o.busy_s - busy).abs() < 1e-15);
        assert_eq!(o.peak_kv_tokens, 2049);
    }

    #[test]
    fn the_lecture_decode_step_is_6_13_ms() {
        // a prompt of 512 then one decode at context 512: 6.13 ms (SPEC.md §2)
        let o = run_simple(&[0.0], &[512], &[2]);
        let d = o.finish_s[0] - o.first_token_s[0];
        assert_eq!((d * 1e5).round() / 100.0, 6.13);
    }

    struct RejectOdd {
        seen: Vec<(usize, Vec<usize>, Option<f64>)>,
    }

    impl Admission for RejectOdd {
        fn admit(&mut self, v: &Batch1View<'_>) -> bool {
            self.seen.push((v.request, v.ahead.to_vec(), v.running_since_s));
            v.request % 2 == 0
        }
    }

    #[test]
    fn admission_hook_sees_the_queue_and_can_reject() {
        let a = [0.0, 0.0, 0.0, 0.0, 100.0];
        let p = [10, 10, 10, 10, 10];
        let l = [50, 50, 50, 50, 50];
        let w = Workload::new(&a, &p, &l).unwrap();
        let mut adm = RejectOdd { seen: vec![] };
        let o = run(&pricer(), &w, &mut adm, false);
        assert_eq!(o.rejected, vec![false, true, false, true, false]);
        assert!(o.finish_s[1].is_nan() && o.start_s[3].is_nan());
        assert_eq!(o.batch_id, vec![0, -1, 1, -1, 2]);
        // at t=0 request 0 is in service (started at 0), request 2 sees it ahead;
        // at t=100 everything is done
        assert_eq!(adm.seen[2], (2, vec![0], Some(0.0)));
        assert_eq!(adm.seen[3], (3, vec![0, 2], Some(0.0)));
        assert_eq!(adm.seen[4], (4, vec![], None));
        assert_eq!(o.start_s[2], o.finish_s[0]);
    }
}
