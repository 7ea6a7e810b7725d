//! Admission control by early rejection (lecture §5.3, §5.5): Clockwork's idea applied to an
//! LLM served at batch 1.
//!
//! When a request arrives, the controller predicts its time to first token and rejects it at
//! once if the prediction misses the SLO, instead of queueing it, computing it, and missing
//! anyway. It knows every prompt length (so every prefill time) and the step-cost model, but
//! not the output lengths: it uses *predicted* lengths, one per request, given by the caller
//! (the mean length, the true length for an oracle, or a noisy predictor: exercise 9). The
//! Python side turns an estimator into this array, so Rust and the pure-Python reference see
//! identical numbers.
//!
//! # The estimate
//!
//! The controller lays out the future it believes in, step by step, exactly as the simulator
//! would run it with the predicted lengths:
//!
//! * the request in service, started at `running_since_s`, runs one prefill and
//!   `predicted - 1` decode steps from its start; if that predicted end is already past (the
//!   request outlived its prediction) the GPU is taken to be free now;
//! * each waiting request follows, prefill then decodes, with its predicted length;
//! * the arriving request's first token comes one prefill after that.
//!
//! Times accumulate as `t = t + step` with the simulator's own step prices ([`price_shape`]),
//! so with the true lengths (the oracle) the estimate *is* the simulator's first-token time,
//! bit for bit: an oracle admits exactly the requests that will meet the SLO.
//! Admit when `first - arrival <= slo_ttft_s` (the same comparison as `metrics.meets_slo`).
//!
//! # Cost: a quick bound first, the exact layout only near the boundary
//!
//! Laying out the whole queue at every arrival would make a long overloaded run with a
//! generous SLO quadratic. So each admitted request's predicted duration `D_j` is summed once,
//! and the waiting queue's total comes from prefix sums of `D`; the predicted end of the
//! request in service is laid out once per request. That gives the estimate in O(1), up to
//! rounding: sums of `k` positive terms are off by at most `gamma_k = k u / (1 - k u)` of their
//! value (`u = 2^-53`), so with a margin of twice every such bound, an estimate clearly inside
//! or outside the SLO decides at once, and only an estimate within the margin of the boundary
//! is laid out exactly, step by step, stopping as soon as the clock passes
//! `arrival + slo_ttft_s`. The decisions are those of the exact rule, which the pure-Python
//! reference applies at every arrival.
//!
//! The margin grows with the queue's step count and the clock's magnitude: about 1e-9 s in demo
//! 04 (600 requests, a 2 s SLO), where a run takes about a millisecond. In a pathological run
//! (200,000 requests in overload with an SLO of 1e5 s, so a queue of 1.6e7 predicted steps)
//! it reaches milliseconds, about 0.4% of the arrivals need the exact layout, and the run takes
//! about a minute instead of days.
//!
//! # What would have happened
//!
//! For every request, admitted or not, [`EarlyReject::would_first_token_s`] records when its
//! first token would have come had it been admitted at its arrival: `max(now, free) + prefill`,
//! where `free` is the true end of the work accepted before it. At batch 1 FCFS, admitting a
//! request changes nothing for the requests ahead of it, so this equals re-simulating the run
//! with that one request admitted. A rejected request is a *false rejection* (§5.5: "被拒绝的
//! 请求里，其实它自己能按时完成的比例") when this time meets the SLO. For an admitted request it
//! is its actual first-token time.

use super::batch1::{Admission, Batch1View};
use super::{price_shape, StepShape, Workload, MAX_REQUEST_TOKENS};
use crate::cost::{fmt_f64, Pricer};
use crate::error::{CoreError, CoreResult};

/// Early rejection on a predicted TTFT (see the module docs).
pub struct EarlyReject<'a> {
    pricer: &'a Pricer,
    slo_ttft_s: f64,
    predicted_len: &'a [i64],
    /// The request in service and its predicted end (computed once per request).
    running_end: Option<(usize, f64)>,
    /// Admitted requests in order: `prefix_s[k]` = sum of the predicted durations of the first
    /// `k`, `prefix_steps[k]` their step count; `position[i]` = `k` of request `i`.
    prefix_s: Vec<f64>,
    prefix_steps: Vec<u64>,
    position: Vec<usize>,
    /// Per request: its first-token time had it been admitted (see the module docs).
    pub would_first_token_s: Vec<f64>,
}

/// Checks an SLO on TTFT: positive and finite.
pub fn check_slo(name: &str, slo_s: f64) -> CoreResult<()> {
    if !(slo_s.is_finite() && slo_s > 0.0) {
        return Err(CoreError::invalid(format!("{name} must be a positive finite number, got {}", fmt_f64(slo_s))));
    }
    Ok(())
}

impl<'a> EarlyReject<'a> {
    /// `predicted_len[i]` is the controller's guess of request `i`'s output length: one per
    /// request, each in `[1, MAX_REQUEST_TOKENS]`.
    pub fn new(pricer: &'a Pricer, w: &Workload<'_>, slo_ttft_s: f64, predicted_len: &'a [i64]) -> CoreResult<Self> {
        check_slo("slo_ttft_s", slo_ttft_s)?;
        if predicted_len.len() != w.len() {
            return Err(CoreError::invalid(format!(
                "predicted_len must have one entry per request ({}), got {}",
                w.len(),
                predicted_len.len()
            )));
        }
        if let Some((i, v)) = predicted_len.iter().enumerate().find(|(_, &v)| !(1..=MAX_REQUEST_TOKENS).contains(&v)) {
            return Err(CoreError::invalid(format!(
                "predicted_len[{i}] must be an integer in [1, {MAX_REQUEST_TOKENS}], got {v}"
            )));
        }
        Ok(EarlyReject {
            pricer,
            slo_ttft_s,
            predicted_len,
            running_end: None,
            prefix_s: vec![0.0],
            prefix_steps: vec![0],
            position: vec![usize::MAX; w.len()],
            would_first_token_s: vec![f64::NAN; w.len()],
        })
    }

    fn prefill_s(&self, p: i64) -> f64 {
        let mut shape = StepShape::default();
        shape.add_prefill(p);
        price_shape(self.pricer, &shape).time_s
    }

    /// Lays out request `j` (predicted length) from `t`, step by step; returns its predicted
    /// end, or `None` as soon as the clock passes `give_up` (the caller rejects then).
    fn lay_out(&self, w: &Workload<'_>, j: usize, mut t: f64, give_up: Option<(f64, f64)>) -> Option<f64> {
        let p = w.prompt_len[j];
        let late = |t: f64| give_up.is_some_and(|(a, slo)| t - a > slo);
        t += self.prefill_s(p);
        if late(t) {
            return None;
        }
        for s in 1..self.predicted_len[j] {
            t += price_shape(self.pricer, &StepShape::decode(1, (p + s - 1) as i128, 1)).time_s;
            if late(t) {
                return None;
            }
        }
        Some(t)
    }
}

/// A safe bound on the relative error of a sum of `k` positive floating-point terms
/// (`gamma_k`, doubled).
fn gamma(k: u64) -> f64 {
    let ku = k as f64 * f64::EPSILON / 2.0;
    if ku < 0.25 { 4.0 * ku } else { f64::INFINITY }
}

impl EarlyReject<'_> {
    /// The exact rule (see the module docs), from the GPU's predicted free time `t`.
    fn decide_exactly(&self, w: &Workload<'_>, i: usize, mut t: f64, waiting: &[usize], prefill: f64) -> bool {
        let a = w.arrival_s[i];
        if t - a > self.slo_ttft_s {
            return false;
        }
        for &j in waiting {
            match self.lay_out(w, j, t, Some((a, self.slo_ttft_s))) {
                Some(end) => t = end,
                None => return false,
            }
        }
        (t + prefill) - a <= self.slo_ttft_s
    }

    /// `Some(decision)` when the O(1) estimate is clearly inside or outside the SLO.
    fn decide_quickly(&self, a: f64, t: f64, waiting: &[usize], prefill: f64) -> Option<bool> {
        let (Some(&first), Some(&last)) = (waiting.first(), waiting.last()) else {
            return Some((t + prefill) - a <= self.slo_ttft_s); // nothing to lay out: exact already
        };
        let (h, e) = (self.position[first], self.position[last] + 1);
        let (p_h, p_e) = (*self.prefix_s.get(h)?, *self.prefix_s.get(e)?);
        let steps = self.prefix_steps.get(e)?.saturating_sub(*self.prefix_steps.get(h)?);
        let wait = p_e - p_h;
        let estimate = (t + wait) + prefill;
        // the exact layout is a sum of `steps + 2` terms; the estimate's durations are sums of up
        // to `steps` terms, its prefix sums of `e` terms; the last few operations cost `u` each
        let size = t + wait + prefill + a + self.slo_ttft_s;
        let margin = 2.0 * (gamma(steps + 2) * (t + wait + prefill) + gamma(steps) * wait + 2.0 * gamma(e as u64) * p_e)
            + gamma(8) * size;
        if !margin.is_finite() {
            return None;
        }
        if (estimate - a) + margin <= self.slo_ttft_s {
            Some(true)
        } else if (estimate - a) - margin > self.slo_ttft_s {
            Some(false)
        } else {
            None
        }
    }

    /// Records an admitted request's predicted duration (laid out from 0) for the prefix sums.
    fn record_admitted(&mut self, w: &Workload<'_>, i: usize) {
        let d = self.lay_out(w, i, 0.0, None).unwrap_or(f64::INFINITY);
        let k = self.prefix_s.len() - 1;
        let (p, n) = (self.prefix_s[k], self.prefix_steps[k]);
        self.prefix_s.push(p + d);
        self.prefix_steps.push(n.saturating_add(self.predicted_len[i].max(1) as u64));
        self.position[i] = k;
    }
}

impl Admission for EarlyReject<'_> {
    fn admit(&mut self, v: &Batch1View<'_>) -> bool {
        let w = v.workload;
        let (i, now) = (v.request, v.now_s);
        let a = w.arrival_s[i];
        let prefill = self.prefill_s(w.prompt_len[i]);
        let true_start = if v.free_at_s > now { v.free_at_s } else { now };
        self.would_first_token_s[i] = true_start + prefill;

        let mut t = now;
        let mut waiting = v.ahead;
        if let (Some(since), Some((&j, rest))) = (v.running_since_s, v.ahead.split_first()) {
            let end = match self.running_end {
                Some((k, end)) if k == j => end,
                _ => {
                    // the whole predicted run of the request in service, no early stop: it is cached
                    let end = self.lay_out(w, j, since, None).unwrap_or(f64::INFINITY);
                    self.running_end = Some((j, end));
                    end
                }
            };
            if end > t {
                t = end; // else it outlived its prediction: the GPU is taken to be free now
            }
            waiting = rest;
        }
        let admit = match self.decide_quickly(a, t, waiting, prefill) {
            Some(d) => d,
            None => self.decide_exactly(w, i, t, waiting, prefill),
        };
        if admit {
            self.record_admitted(w, i);
        }
        admit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::batch1::{self, AcceptAll};
    use crate::sim::test_util::{price, pricer};

    fn run(a: &[f64], p: &[i64], l: &[i64], slo: f64, pred: &[i64]) -> (crate::sim::SimOutput, Vec<f64>) {
        let pr = pricer();
        let w = Workload::new(a, p, l).unwrap();
        let mut adm = EarlyReject::new(&pr, &w, slo, pred).unwrap();
        let o = batch1::run(&pr, &w, &mut adm, false);
        (o, adm.would_first_token_s)
    }

    /// Three requests at t = 0 with 100-token outputs (about 0.62 s each). SLO 1 s: the first
    /// two fit (TTFT 0.01 s and 0.63 s), the third would start at about 1.25 s: rejected.
    #[test]
    fn oracle_by_hand() {
        let a = [0.0, 0.0, 0.0];
        let p = [10, 10, 10];
        let l = [100, 100, 100];
        let (o, would) = run(&a, &p, &l, 1.0, &l);
        assert_eq!(o.rejected, vec![false, false, true]);
        assert_eq!(would[0], o.first_token_s[0]);
        assert_eq!(would[1], o.first_token_s[1]);
        assert_eq!(would[2], o.finish_s[1] + price(&[(10, 0)]));
        assert!(would[2] > 1.0);
    }

    /// The mean estimate (here 10 tokens for everyone) admits a request that then waits behind
    /// a long one: accepted but late.
    #[test]
    fn an_underestimate_admits_a_late_request() {
        let a = [0.0, 0.1];
        let p = [10, 10];
        let l = [1000, 5];
        let (o, _) = run(&a, &p, &l, 1.0, &[10, 10]);
        assert_eq!(o.rejected, vec![false, false]);
        assert!(o.first_token_s[1] - a[1] > 1.0);
        // the oracle rejects it, and it was right to
        let (o, would) = run(&a, &p, &l, 1.0, &l);
        assert_eq!(o.rejected, vec![false, true]);
        assert!(would[1] - a[1] > 1.0);
    }

    /// An overestimate of the request in service rejects a request that would have made it:
    /// a false rejection.
    #[test]
    fn an_overestimate_rejects_a_request_that_would_have_made_it() {
        let a = [0.0, 0.01]; // request 0 takes about 31 ms
        let p = [10, 10];
        let l = [5, 5];
        let (o, would) = run(&a, &p, &l, 1.0, &[1000, 5]);
        assert_eq!(o.rejected, vec![false, true]);
        assert!(would[1] - a[1] <= 1.0);
    }

    /// The request in service outlived its prediction: the GPU is taken to be free now.
    #[test]
    fn an_outlived_prediction_means_free_now() {
        let a = [0.0, 2.0];
        let (o, _) = run(&a, &[10, 10], &[1000, 5], 0.05, &[2, 5]);
        assert_eq!(o.rejected, vec![false, false]);
    }

    /// An SLO equal to the TTFT to the last bit admits (`<=`); one ulp less rejects. Both
    /// decisions fall inside the quick bound's margin and are settled by the exact layout.
    #[test]
    fn the_boundary_is_decided_exactly() {
        let a = [0.0, 0.001, 0.002];
        let p = [10, 20, 30];
        let l = [40, 50, 60];
        let (full, _) = run(&a, &p, &l, 100.0, &l);
        let ttft = full.first_token_s[2] - a[2];
        let (o, _) = run(&a, &p, &l, ttft, &l);
        assert_eq!(o.rejected, vec![false, false, false]);
        let below = f64::from_bits(ttft.to_bits() - 1);
        let (o, would) = run(&a, &p, &l, below, &l);
        assert_eq!(o.rejected, vec![false, false, true]);
        assert_eq!(would[2] - a[2], ttft);
    }

    #[test]
    fn a_generous_slo_admits_everything() {
        let a = [0.0, 0.0, 0.5, 0.7];
        let p = [100, 3, 2000, 1];
        let l = [30, 1, 7, 300];
        let (o, would) = run(&a, &p, &l, 1e6, &[1, 1, 1, 1]);
        let w = Workload::new(&a, &p, &l).unwrap();
        let want = batch1::run(&pricer(), &w, &mut AcceptAll, false);
        assert_eq!(o, want);
        assert_eq!(would, want.first_token_s);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let pr = pricer();
        let w = Workload::new(&[0.0, 1.0], &[1, 1], &[1, 1]).unwrap();
        let e = |slo, pred: &[i64]| EarlyReject::new(&pr, &w, slo, pred).err().unwrap().to_string();
        assert_eq!(e(0.0, &[1, 1]), "slo_ttft_s must be a positive finite number, got 0.0");
        assert_eq!(e(-1.0, &[1, 1]), "slo_ttft_s must be a positive finite number, got -1.0");
        assert_eq!(e(f64::NAN, &[1, 1]), "slo_ttft_s must be a positive finite number, got nan");
        assert_eq!(e(f64::INFINITY, &[1, 1]), "slo_ttft_s must be a positive finite number, got inf");
        assert_eq!(e(1.0, &[1]), "predicted_len must have one entry per request (2), got 1");
        assert!(e(1.0, &[1, 0]).starts_with("predicted_len[1] must be an integer in [1, "));
    }
}
