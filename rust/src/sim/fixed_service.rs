//! A CNN-era server (lecture §5.1, §5.4, demo 04 part 2): one request is one forward pass of a
//! fixed shape, and on a dedicated GPU it takes exactly `service_s` every time (Clockwork's
//! premise, §5.2). One request at a time, first come first served.
//!
//! With an SLO on the completion latency (`finish - arrival`), early rejection (§5.3) is exact:
//! the controller knows when the GPU will be free, so a request arriving at `now` would finish
//! at `max(free, now) + service_s`; it is admitted when that latency meets the SLO and rejected
//! at once otherwise. Every admitted request is then on time, and a rejected one could not have
//! been (no false rejections): predictability lets the system fail fast and little.

use super::check_arrivals;
use super::admission::check_slo;
use crate::cost::fmt_f64;
use crate::error::{CoreError, CoreResult};

#[derive(Debug, Clone, PartialEq)]
pub struct FixedOutput {
    pub start_s: Vec<f64>,
    pub finish_s: Vec<f64>,
    pub rejected: Vec<bool>,
    /// Sum of service times (time the GPU computed).
    pub busy_s: f64,
}

/// Serves `arrival_s` (sorted) FCFS, `service_s` each; with `slo_s`, rejects at arrival every
/// request that would finish later than `slo_s` after it arrived. Rejected requests have NaN
/// times.
pub fn run(arrival_s: &[f64], service_s: f64, slo_s: Option<f64>) -> CoreResult<FixedOutput> {
    check_arrivals(arrival_s)?;
    if !(service_s.is_finite() && service_s > 0.0) {
        return Err(CoreError::invalid(format!(
            "service_s must be a positive finite number, got {}",
            fmt_f64(service_s)
        )));
    }
    if let Some(slo) = slo_s {
        check_slo("slo_s", slo)?;
    }
    let n = arrival_s.len();
    let mut out = FixedOutput {
        start_s: vec![f64::NAN; n],
        finish_s: vec![f64::NAN; n],
        rejected: vec![false; n],
        busy_s: 0.0,
    };
    // No integer counter to wrap: the clock and busy time are f64 sums of finite,
    // positive service times, and a sum past f64's range would need more requests than memory.
    let mut free = 0.0f64;
    for (i, &now) in arrival_s.iter().enumerate() {
        let start = if free > now { free } else { now };
        let finish = start + service_s;
        if slo_s.is_some_and(|slo| finish - now > slo) {
            out.rejected[i] = true;
            continue;
        }
        out.start_s[i] = start;
        out.finish_s[i] = finish;
        out.busy_s += service_s;
        free = finish;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five requests at once, 10 ms each, SLO 30 ms: three fit (0.01 + 0.01 + 0.01 is exactly
    /// 0.03 in floating point), two are turned away; a sixth arriving later finds the GPU free.
    #[test]
    fn by_hand() {
        let a = [0.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        let o = run(&a, 0.01, Some(0.03)).unwrap();
        assert_eq!(o.rejected, vec![false, false, false, true, true, false]);
        assert_eq!(o.start_s[..2], [0.0, 0.01]);
        assert_eq!(o.finish_s[1], 0.02);
        assert_eq!(o.finish_s[2], 0.03);
        assert_eq!(o.finish_s[5], 1.01);
        let all = run(&a, 0.01, None).unwrap();
        assert!(all.rejected.iter().all(|&r| !r));
        assert_eq!(all.finish_s[4], 0.01 + 0.01 + 0.01 + 0.01 + 0.01);
        assert!((all.busy_s - 0.06).abs() < 1e-15);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let e = |a: &[f64], s, slo| run(a, s, slo).unwrap_err().to_string();
        assert_eq!(e(&[0.0], 0.0, None), "service_s must be a positive finite number, got 0.0");
        assert_eq!(e(&[0.0], f64::NAN, None), "service_s must be a positive finite number, got nan");
        assert_eq!(e(&[0.0], 0.01, Some(-0.1)), "slo_s must be a positive finite number, got -0.1");
        assert_eq!(e(&[1.0, 0.5], 0.01, None), "arrival_s must be sorted, got arrival_s[1]=0.5 after arrival_s[0]=1.0");
        assert!(run(&[], 0.01, Some(0.1)).unwrap().start_s.is_empty());
    }
}
