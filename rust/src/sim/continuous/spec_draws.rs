//! The acceptance draws of speculative decoding (§8, milestone 4a), made ahead: a decoder's
//! next output indices judged 64 at a time into a bit window ([`Window`]), so that a step's
//! kept guesses are the run of ones at the window's start (a count, not a hash per guess, and
//! no branch per guess to mispredict). The draws are [`Speculation::bits`], a pure function of
//! (seed, request, output index): a window made early holds the very verdicts the per-step
//! loop draws when it gets there, so the two loops keep the same guesses.
//!
//! Making a window is most of a speculative run's cost (a long run judges about one index per
//! output token): [`fill`] runs the same integer code, 8 indices per instruction, on a CPU with
//! AVX-512 (the only `unsafe` of the crate, behind the run-time check that makes it sound).

use super::per_step::{threshold, Speculation};

/// Output indices a window holds.
pub(super) const WINDOW: i64 = 64;

/// The verdicts of a decoder's next output indices: bit `j` of `bits` says whether the guess
/// at output index `generated + j` is kept, for `j < len`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Window {
    bits: u64,
    len: i64,
}

impl Window {
    /// The kept guesses of `g >= 1` guesses of request `r`, which has generated `ol[r] - rem`
    /// tokens: the ones at the window's start, the window made anew (from the current index,
    /// for the indices a guess can reach: `g <= rem - 1`) when it holds fewer than `g`.
    #[inline(always)]
    pub(super) fn kept(&mut self, sp: &Speculation<'_>, ol: &[i64], r: usize, rem: i64, g: i64) -> i64 {
        if g > self.len {
            let generated = ol[r] - rem;
            if g > WINDOW {
                // more guesses than a window holds (k > 64): one draw at a time, as the per-step loop
                return (0..g).take_while(|&j| sp.kept(r, generated + j)).count() as i64;
            }
            self.len = (rem - 1).min(WINDOW);
            self.bits = fill(sp, r, generated, self.len);
        }
        ((!self.bits).trailing_zeros() as i64).min(g)
    }

    /// The window after the step sampled `s` tokens (after `g` kept guesses the bonus token's
    /// index was never judged: it leaves the window like the others).
    #[inline(always)]
    pub(super) fn advance(&mut self, s: i64) {
        if s >= self.len {
            *self = Window::default();
        } else {
            self.bits >>= s;
            self.len -= s;
        }
    }
}

/// The verdicts of request `r`'s output indices `first..first + len` (`len <= 64`), bit `j`
/// for index `first + j`.
#[inline(never)]
pub(super) fn fill(sp: &Speculation<'_>, r: usize, first: i64, len: i64) -> u64 {
    let thr = threshold(sp.acceptance[r]);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
        // SAFETY: the CPU has the features `fill_avx512` is compiled for (checked just above).
        return unsafe { fill_avx512(sp, r, first, thr) } & low_bits(len);
    }
    fill_body(sp, r, first, thr) & low_bits(len)
}

fn low_bits(len: i64) -> u64 {
    if len >= 64 {
        u64::MAX
    } else {
        (1u64 << len) - 1
    }
}

/// [`fill_body`] compiled for AVX-512 (64-bit multiplies in vector registers).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw")]
fn fill_avx512(sp: &Speculation<'_>, r: usize, first: i64, thr: u64) -> u64 {
    fill_body(sp, r, first, thr)
}

/// All 64 verdicts from `first` on (a fixed count, so the loop vectorizes).
#[inline(always)]
fn fill_body(sp: &Speculation<'_>, r: usize, first: i64, thr: u64) -> u64 {
    let mut window = 0u64;
    for j in 0..WINDOW {
        window |= ((sp.bits(r, first + j) < thr) as u64) << j;
    }
    window
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::test_util::{pricer, rng};

    /// A window holds the per-step loop's verdicts, index by index, on whichever path this CPU
    /// takes (and the portable one), for rates that hit both ends and the middle.
    #[test]
    fn windows_hold_the_per_step_verdicts() {
        let pr = pricer();
        let mut rnd = rng(0x510e_527f_ade6_82d1);
        let rates: Vec<f64> = vec![0.0, 1.0, 0.5, 0.8, f64::MIN_POSITIVE, 1.0 - f64::EPSILON, 0.3, 0.999];
        for seed in [0u64, 1, u64::MAX, 0x1234_5678_9abc_def0] {
            let sp = Speculation { k: 4, acceptance: &rates, seed, draft: &pr };
            for r in 0..rates.len() {
                for _ in 0..20 {
                    let first = rnd(10_000) as i64;
                    let len = 1 + rnd(64) as i64;
                    let want: u64 = (0..len).map(|j| (sp.kept(r, first + j) as u64) << j).sum();
                    assert_eq!(fill(&sp, r, first, len), want, "seed {seed} r {r} first {first} len {len}");
                    assert_eq!(fill_body(&sp, r, first, threshold(rates[r])) & low_bits(len), want);
                }
            }
        }
    }
}
