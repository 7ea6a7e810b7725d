//! The speculative decode step (§8, milestone 4a) as a part the event loop drives
//! ([`super::speculation`]): the decoding requests, and what one step does to them (their
//! guesses within the token budget and the spare blocks, one acceptance draw each, their
//! blocks, the ones that sample their last token) with the step's shape and the draft's price.
//! It does what [`super::per_step::speculate`] and [`super::per_step::TwinPool::keep_guesses`] do to the
//! decoding entries of a batch, bit for bit; the loop does the rest (rules 1-6 for everyone
//! else, the clock).
//!
//! # Why a step is cheap although it visits every decoder
//!
//! Without speculation a decoder gains one token a step, so the plain event-driven loop keeps
//! only aggregates. With it a decoder gains `1 + kept` tokens, `kept` drawn anew each step (a
//! hash of the seed, the request and its tokens left: [`Speculation::kept_guesses`]), so each
//! step visits each decoder once. Each visit is made cheap:
//!
//! * the decoders are columns (one array per field, padded to whole blocks of 8), so the visit
//!   is a loop that the compiler vectorizes: 8 decoders at a time, hash and all ([`fast_pass`],
//!   compiled for AVX-512, where 8 64-bit lanes are one register, and for AVX2, where they are
//!   two and a 64-bit multiply is made of 32-bit ones; fewer than 8 decoders, or a CPU with
//!   neither, one at a time: [`small_pass`], the same step);
//! * in nearly every step nothing is short: the guesses every decoder would make, `min(k, tokens
//!   left - 1)`, fit in the step's token budget and their blocks in the free ones. Then no
//!   decoder's guesses depend on another's, the order of the decoders does not matter, and the
//!   pass is that vectorized loop; a decoder that finishes is swapped out with the last one.
//!   When something is short (the budget or the blocks cut the guesses in running order) or the
//!   batch log is kept (it lists the entries in running order), the decoders are first put back
//!   in running order (each carries its admission ticket) and visited one by one in that order
//!   ([`SpecDecoders::ordered_step`]), as the per-step loop does;
//! * a decoder's blocks are tracked by the free slots in its last block (`room`), so a block
//!   boundary is a comparison, not a division;
//! * the draft's price needs, for each guess depth `j`, how many entries guess past `j` and
//!   their contexts: a count per guess length, summed from the top (priced in the per-step
//!   loop's order, so the clock's bits are the same);
//! * a decoder's `spec_steps` and `spec_accepted` are settled when it leaves the decoders
//!   (finished, or handed to the rules' step): it ran `now - joined` steps and gained
//!   `rem_joined - rem` tokens, one per step plus the kept guesses.

use super::per_step::{kept_of, uniform_of, SpecOutput, Speculation};
use super::{blocks_for, BatchLog, KvCounts, Req};
use crate::sim::{price_shape, StepShape};

#[cfg(test)]
thread_local! {
    /// Blocks of decoders the vectorized pass ran on this thread (the loop's tests check that
    /// their workloads reach it).
    pub(super) static BLOCKS_RUN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The vector instructions that the pass over blocks of decoders is compiled for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Vector {
    /// none that pay (no AVX2, or not x86-64): the decoders one at a time ([`small_pass`])
    None,
    /// AVX2: 4 lanes of 64 bits, the multiplies and conversions made of 32-bit pieces
    Avx2,
    /// AVX-512 (F and DQ): 8 lanes, 64-bit multiplies and conversions in one instruction each
    Avx512,
}

impl Vector {
    fn detect() -> Vector {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
                return Vector::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Vector::Avx2;
            }
        }
        Vector::None
    }
}

/// Decoders visited at once by the vectorized pass: 8 lanes of 64 bits, one AVX-512 register
/// (fewer decoders are visited one at a time).
const LANES: usize = 8;

/// The decoding requests, one column per field; between steps all their tokens are computed.
/// The columns are padded to whole blocks of [`LANES`]: the decoders are the first `n` lanes,
/// the lanes past them idle (a fresh idle lane's values or a left decoder's, which a pass may
/// change, by at most `k + 1` a step, far from overflowing, but keeps out of every sum).
pub(super) struct SpecDecoders {
    /// how many decoders there are
    n: usize,
    /// tokens whose KV is in the pool, and the slots it holds
    c: Vec<i64>,
    /// output tokens left to sample (at least 1: a request leaves when it samples its last)
    rem: Vec<i64>,
    /// free slots in its last block: 0, and its next slot takes a new block
    room: Vec<i64>,
    /// guesses proposed since it joined the decoders (settled into `spec_proposed` when it leaves)
    proposed: Vec<i64>,
    /// its draws' key ([`Speculation::key`]) and acceptance
    key: Vec<u64>,
    acc: Vec<f64>,
    r: Vec<u32>,
    /// its place in the running order: later joiners have larger tickets
    ticket: Vec<u64>,
    next_ticket: u64,
    /// whether the columns are in running order (a finisher swapped out breaks it)
    ordered: bool,
    /// how many take a new block in the next step (`room == 0`)
    crossing: i64,
    /// the vector instructions the CPU has for the pass over blocks of decoders
    vector: Vector,
    /// per guess length `g` in `0..=k`: the step's entries that guessed `g`, their contexts' sum
    /// (below 2^57: fewer than 2^32 requests of fewer than 2^25 tokens)
    by_len: Vec<(i64, i64)>,
    /// the step's longest guess (`by_len` is zero past it)
    most: usize,
    /// per guess depth `j`: the entries guessing past `j`, their contexts' sum
    depth: Vec<(i64, i128)>,
    /// (request, slots held) of the decoders that sampled their last token in the step
    finished: Vec<(u32, i64)>,
    /// the fast pass's decoders that guessed fewer than `k` or finished: (index, guesses, context)
    odd: Vec<(usize, i64, i64)>,
}

impl SpecDecoders {
    /// No decoder yet, for guesses of at most `k`.
    pub(super) fn new(k: i64) -> SpecDecoders {
        let vector = Vector::detect();
        SpecDecoders {
            n: 0,
            c: Vec::new(),
            rem: Vec::new(),
            room: Vec::new(),
            proposed: Vec::new(),
            key: Vec::new(),
            acc: Vec::new(),
            r: Vec::new(),
            ticket: Vec::new(),
            next_ticket: 0,
            ordered: true,
            crossing: 0,
            vector,
            by_len: vec![(0, 0); k as usize + 1],
            most: 0,
            depth: vec![(0, 0); k as usize],
            finished: Vec::new(),
            odd: Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.n
    }

    /// How many decoders take a new block for the next step's token.
    pub(super) fn crossing(&self) -> i64 {
        self.crossing
    }

    /// (request, slots held) of the decoders that sampled their last token in the last step.
    pub(super) fn finished(&self) -> &[(u32, i64)] {
        &self.finished
    }

    /// Request `r`, all of whose tokens are computed (`s`; `out` output tokens), joins the
    /// decoders at the end of the running order, decoding from step `step` on (blocks of `bs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(&mut self, sp: &Speculation<'_>, so: &mut SpecOutput, bs: i64, r: usize, s: &Req, out: i64, step: i64) {
        let (c, rem) = (s.c, out - s.generated as i64);
        let room = blocks_for(c, bs) * bs - c;
        self.crossing += (room == 0) as i64;
        // settled when it leaves (`settle`): steps `now - step`, kept `rem - rem_now - steps`
        so.spec_steps[r] -= step;
        so.spec_accepted[r] += rem + step;
        if self.n == self.c.len() {
            // a block of idle lanes: one token left (so no guess), nothing held
            let lanes = self.n + LANES;
            self.c.resize(lanes, 0);
            self.rem.resize(lanes, 1);
            self.room.resize(lanes, 1);
            self.proposed.resize(lanes, 0);
            self.key.resize(lanes, 0);
            self.acc.resize(lanes, 0.0);
            self.r.resize(lanes, 0);
            self.ticket.resize(lanes, 0);
        }
        let i = self.n;
        (self.c[i], self.rem[i], self.room[i], self.proposed[i]) = (c, rem, room, 0);
        (self.key[i], self.acc[i], self.r[i], self.ticket[i]) = (sp.key(r), sp.acceptance[r], r as u32, self.next_ticket);
        self.n += 1;
        self.next_ticket += 1;
    }

    /// Decoder `i` leaves the decoders before step `now`: its speculation counters settled.
    fn settle(&self, so: &mut SpecOutput, i: usize, now: i64) {
        let r = self.r[i] as usize;
        so.spec_proposed[r] += self.proposed[i];
        so.spec_steps[r] += now;
        so.spec_accepted[r] -= self.rem[i] + now;
    }

    /// Every decoder leaves, in running order, before step `now` (for the rules' step):
    /// `f(request, context, output tokens left)` for each, counters settled.
    pub(super) fn drain(&mut self, so: &mut SpecOutput, now: i64, mut f: impl FnMut(usize, i64, i64)) {
        self.put_in_order();
        for i in 0..self.len() {
            self.settle(so, i, now);
            f(self.r[i] as usize, self.c[i], self.rem[i]);
        }
        self.n = 0;
        self.crossing = 0;
    }

    /// Sorts the columns by ticket (the running order), after fast steps swapped finishers out.
    fn put_in_order(&mut self) {
        if self.ordered {
            return;
        }
        let mut by: Vec<u32> = (0..self.n as u32).collect();
        by.sort_unstable_by_key(|&i| self.ticket[i as usize]);
        fn permute<T: Copy>(col: &mut [T], by: &[u32]) {
            let sorted: Vec<T> = by.iter().map(|&i| col[i as usize]).collect();
            col[..sorted.len()].copy_from_slice(&sorted);
        }
        permute(&mut self.c, &by);
        permute(&mut self.rem, &by);
        permute(&mut self.room, &by);
        permute(&mut self.proposed, &by);
        permute(&mut self.key, &by);
        permute(&mut self.acc, &by);
        permute(&mut self.r, &by);
        permute(&mut self.ticket, &by);
        self.ordered = true;
    }

    /// The decoders' part of a step that leaves no one preempted (rule 2 has taken each one's
    /// slot for its token: [`Self::crossing`] blocks): each one's guesses within the token
    /// budget `budget` left by the prefill pieces and the pool's spare blocks (as
    /// [`super::per_step::speculate`] decides them), its verdicts, and what rule 6 does to it
    /// after the step (the kept guesses' slots taken from `kv`, `1 + kept` tokens sampled; one
    /// that samples its last token leaves for [`Self::finished`], settled before step `now`).
    /// Their entries go into the batch log `log` when it is kept. Returns the decoders' share
    /// of the step's shape and the draft's seconds (also added to `so`).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn step(
        &mut self,
        sp: &Speculation<'_>,
        bs: i64,
        budget: i64,
        kv: &mut KvCounts,
        now: i64,
        so: &mut SpecOutput,
        log: Option<&mut BatchLog>,
    ) -> (StepShape, f64) {
        self.finished.clear();
        let spare = kv.num_free_blocks();
        if log.is_none() && self.nothing_short(sp.k, bs, budget, spare) {
            self.fast_step(sp.k, bs, kv, now, so);
        } else {
            self.put_in_order();
            self.ordered_step(sp, bs, budget, kv, now, so, log);
        }
        self.shape(sp, so)
    }

    /// Whether every decoder gets the guesses it would get alone, `min(k, rem - 1)` (the
    /// vectorized pass's condition): `k <= bs` (its guesses take at most one block), their
    /// total within the budget, and their blocks within the spare ones.
    fn nothing_short(&self, k: i64, bs: i64, budget: i64, spare: i64) -> bool {
        let n = self.len() as i64;
        if k > bs {
            return false;
        }
        if n * k <= budget && n <= spare {
            return true; // at most k guesses and one block each
        }
        let (mut guesses, mut blocks) = (0i64, 0i64);
        for (&rem, &room) in self.rem[..self.n].iter().zip(&self.room[..self.n]) {
            let g = k.min(rem - 1);
            guesses += g;
            blocks += (g > after_token(room, bs)) as i64;
        }
        guesses <= budget && blocks <= spare
    }

    /// [`Self::step`] when nothing is short: the vectorized pass, then the few decoders that
    /// guessed fewer than `k` (into `by_len`) or finished (swapped out).
    #[inline]
    fn fast_step(&mut self, k: i64, bs: i64, kv: &mut KvCounts, now: i64, so: &mut SpecOutput) {
        self.odd.clear();
        let mut t = Totals::default();
        if self.vector != Vector::None && self.len() >= LANES {
            #[cfg(test)]
            BLOCKS_RUN.with(|b| b.set(b.get() + self.len() / LANES));
            #[cfg(target_arch = "x86_64")]
            {
                let (c, rem, room, proposed, odd) = (&mut self.c, &mut self.rem, &mut self.room, &mut self.proposed, &mut self.odd);
                // SAFETY: the CPU has the features each is compiled for (`new` checked).
                unsafe {
                    match self.vector {
                        Vector::Avx512 => fast_pass_avx512(c, rem, room, proposed, &self.key, &self.acc, self.n, k, bs, &mut t, odd),
                        _ => fast_pass_avx2(c, rem, room, proposed, &self.key, &self.acc, self.n, k, bs, &mut t, odd),
                    }
                };
            }
        } else {
            let n = self.n;
            let (c, rem, room, proposed) = (&mut self.c[..n], &mut self.rem[..n], &mut self.room[..n], &mut self.proposed[..n]);
            small_pass(c, rem, room, proposed, &self.key[..n], &self.acc[..n], k, bs, &mut t, &mut self.odd, 0);
        }
        let mut most = if t.full > 0 { k } else { 0 };
        let b = &mut self.by_len[k as usize];
        b.0 += t.full;
        b.1 += t.full_c;
        for &(_, g, c) in self.odd.iter().filter(|o| o.1 < k) {
            let b = &mut self.by_len[g as usize];
            b.0 += 1;
            b.1 += c;
            most = most.max(g);
        }
        self.most = most as usize;
        kv.take(t.taken);
        self.crossing = t.crossing;
        // the finishers, from the last: each swapped with the last decoder, which is not one
        for o in (0..self.odd.len()).rev() {
            let i = self.odd[o].0;
            if self.rem[i] != 0 {
                continue;
            }
            self.finished.push((self.r[i], self.c[i]));
            self.settle(so, i, now);
            self.crossing -= (self.room[i] == 0) as i64;
            let last = self.n - 1;
            self.ordered &= i == last;
            self.c[i] = self.c[last];
            self.rem[i] = self.rem[last];
            self.room[i] = self.room[last];
            self.proposed[i] = self.proposed[last];
            self.key[i] = self.key[last];
            self.acc[i] = self.acc[last];
            self.r[i] = self.r[last];
            self.ticket[i] = self.ticket[last];
            self.n = last;
        }
    }

    /// [`Self::step`] one decoder at a time in running order, as the per-step loop does (the
    /// budget and the spare blocks are handed out in that order, and the batch log lists the
    /// entries in it).
    #[allow(clippy::too_many_arguments)]
    fn ordered_step(
        &mut self,
        sp: &Speculation<'_>,
        bs: i64,
        mut budget: i64,
        kv: &mut KvCounts,
        now: i64,
        so: &mut SpecOutput,
        mut log: Option<&mut BatchLog>,
    ) {
        let k = sp.k;
        let mut spare = kv.num_free_blocks();
        let (mut taken, mut crossing, mut kept_at, mut most) = (0i64, 0i64, 0usize, 0i64);
        for i in 0..self.len() {
            let (c, rem, r) = (self.c[i], self.rem[i], self.r[i]);
            let room = after_token(self.room[i], bs);
            // speculation: guesses within the budget, the last token and the spare blocks (the
            // guesses up to `room` fit in its last block, each `bs` more take one)
            let g = k.min(budget).min(rem - 1).min(room + spare * bs);
            spare -= blocks_past(g - room, bs);
            budget -= g;
            let kept = sp.kept_guesses(r as usize, rem, g);
            let b = &mut self.by_len[g as usize];
            b.0 += 1;
            b.1 += c;
            most = most.max(g);
            if let Some(l) = log.as_mut() {
                l.request_id.push(r as i64);
                l.new_tokens.push(1 + g);
                l.context_len.push(c);
            }
            // rule 6: the kept guesses' slots and KV, then 1 + kept tokens sampled
            let nb = blocks_past(kept - room, bs);
            taken += nb;
            let room = room - kept + nb * bs;
            self.c[i] = c + 1 + kept;
            self.rem[i] = rem - 1 - kept;
            self.room[i] = room;
            self.proposed[i] += g;
            if self.rem[i] == 0 {
                self.finished.push((r, self.c[i]));
                self.settle(so, i, now);
            } else {
                crossing += (room == 0) as i64;
                self.c[kept_at] = self.c[i];
                self.rem[kept_at] = self.rem[i];
                self.room[kept_at] = room;
                self.proposed[kept_at] = self.proposed[i];
                self.key[kept_at] = self.key[i];
                self.acc[kept_at] = self.acc[i];
                self.r[kept_at] = r;
                self.ticket[kept_at] = self.ticket[i];
                kept_at += 1;
            }
        }
        self.most = most as usize;
        self.n = kept_at;
        kv.take(taken);
        self.crossing = crossing;
    }

    /// From `by_len` (cleared after): the decoders' share of the step's shape, each entry `1 +
    /// g` tokens on `c` (rule 5: `n * c + n * (n + 1) / 2` keys), and the draft's `g` steps as
    /// [`super::per_step::speculate`] prices them: depth `j` is one batched decode step of the
    /// draft over the entries with `g > j`, at their contexts plus `j`, the depths priced and
    /// added in order. Returns (the shape, the draft's seconds).
    #[inline]
    fn shape(&mut self, sp: &Speculation<'_>, so: &mut SpecOutput) -> (StepShape, f64) {
        let by_len = &mut self.by_len[..=self.most];
        let mut shape = StepShape::default();
        let mut most = 0;
        for (g, &(count, sum)) in by_len.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let (n, g128) = (count as i128, g as i128);
            shape.seqs += count;
            shape.tokens += count * (1 + g as i64);
            shape.keys += (1 + g128) * sum as i128 + n * (1 + g128) * (2 + g128) / 2;
            shape.ctx_tokens += sum as i128;
            most = g;
        }
        shape.n_decode = shape.seqs;
        if most == 0 {
            by_len[0] = (0, 0);
            return (shape, 0.0);
        }
        let depth = &mut self.depth[..most]; // k entries, allocated once
        let (mut count, mut sum) = (0i64, 0i128);
        for g in (1..=most).rev() {
            count += by_len[g].0;
            sum += by_len[g].1 as i128;
            depth[g - 1] = (count, sum); // the entries with g' >= g, i.e. g' > g - 1
        }
        by_len[..=most].iter_mut().for_each(|b| *b = (0, 0));
        let mut total = 0.0;
        for (j, &(count, sum)) in depth.iter().enumerate() {
            total += price_shape(sp.draft, &StepShape::decode(count, sum + (j as i128) * (count as i128), count)).time_s;
        }
        so.draft_busy_s += total;
        (shape, total)
    }
}

/// The fast pass's sums over the decoders.
#[derive(Debug, Default, PartialEq)]
struct Totals {
    /// blocks the kept guesses take
    taken: i64,
    /// decoders whose next token takes a new block (finishers included)
    crossing: i64,
    /// entries that guessed `k`, their contexts' sum
    full: i64,
    full_c: i64,
}

/// The free slots in a decoder's last block once rule 2 has taken its slot for this step's token
/// (a new block when `room` was 0).
#[inline(always)]
fn after_token(room: i64, bs: i64) -> i64 {
    if room == 0 {
        bs - 1
    } else {
        room - 1
    }
}

/// [`fast_pass`] compiled for AVX-512 (64-bit multiplies and conversions in vector registers,
/// a block of decoders in one register per column).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw")]
#[allow(clippy::too_many_arguments)]
fn fast_pass_avx512(
    c: &mut [i64],
    rem: &mut [i64],
    room: &mut [i64],
    proposed: &mut [i64],
    key: &[u64],
    acc: &[f64],
    n: usize,
    k: i64,
    bs: i64,
    t: &mut Totals,
    odd: &mut Vec<(usize, i64, i64)>,
) {
    fast_pass(c, rem, room, proposed, key, acc, n, k, bs, t, odd)
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // (run by the tests everywhere)
/// [`fast_pass`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
fn fast_pass_avx2(
    c: &mut [i64],
    rem: &mut [i64],
    room: &mut [i64],
    proposed: &mut [i64],
    key: &[u64],
    acc: &[f64],
    n: usize,
    k: i64,
    bs: i64,
    t: &mut Totals,
    odd: &mut Vec<(usize, i64, i64)>,
) {
    fast_pass(c, rem, room, proposed, key, acc, n, k, bs, t, odd)
}

/// The decoders' step when nothing is short (`k <= bs`) for the first `n` lanes of columns
/// padded to whole blocks, [`LANES`] decoders at a time ([`lanes`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fast_pass(
    c: &mut [i64],
    rem: &mut [i64],
    room: &mut [i64],
    proposed: &mut [i64],
    key: &[u64],
    acc: &[f64],
    n: usize,
    k: i64,
    bs: i64,
    t: &mut Totals,
    odd: &mut Vec<(usize, i64, i64)>,
) {
    let mut sums = LaneSums::default();
    for start in (0..n).step_by(LANES) {
        let end = start + LANES;
        let block = Block {
            c: (&mut c[start..end]).try_into().expect("a block"),
            rem: (&mut rem[start..end]).try_into().expect("a block"),
            room: (&mut room[start..end]).try_into().expect("a block"),
            proposed: (&mut proposed[start..end]).try_into().expect("a block"),
            key: (&key[start..end]).try_into().expect("a block"),
            acc: (&acc[start..end]).try_into().expect("a block"),
        };
        if end <= n {
            lanes(block, LANES, k, bs, &mut sums, odd, start);
        } else {
            lanes(block, n - start, k, bs, &mut sums, odd, start); // the last block, padded
        }
    }
    t.taken += sums.taken.iter().sum::<i64>();
    t.crossing += sums.crossing.iter().sum::<i64>();
    t.full += sums.full.iter().sum::<i64>();
    t.full_c += sums.full_c.iter().sum::<i64>();
}

/// [`Totals`] per lane, summed over the blocks (a vector addition per block, the lanes added
/// up once at the end).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // (run by the tests everywhere)
#[derive(Default)]
struct LaneSums {
    taken: [i64; LANES],
    crossing: [i64; LANES],
    full: [i64; LANES],
    full_c: [i64; LANES],
}

/// A block of [`LANES`] decoders' columns.
struct Block<'a> {
    c: &'a mut [i64; LANES],
    rem: &'a mut [i64; LANES],
    room: &'a mut [i64; LANES],
    proposed: &'a mut [i64; LANES],
    key: &'a [u64; LANES],
    acc: &'a [f64; LANES],
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // (run by the tests everywhere)
/// The step of a block of decoders (the block starts at decoder `start`; lanes from `live` on
/// are idle padding):
/// each guesses `g = min(k, rem - 1)`, keeps `kept` of them ([`Speculation::kept_guesses`]'s
/// count: the powers of `a` above its draw, here counted power by power for the whole block,
/// which is the same count since the powers never grow), and gains `1 + kept` tokens, a new
/// block when they overflow its last one (`kept <= k <= bs`). Its sums go into `t`; the
/// decoders that guessed fewer than `k` or finished into `odd` (index, guesses, context before
/// the step). Every loop is over the block's lanes, so each is one vector operation.
#[inline(always)]
fn lanes(b: Block<'_>, live: usize, k: i64, bs: i64, t: &mut LaneSums, odd: &mut Vec<(usize, i64, i64)>, start: usize) {
    let mut guesses = [0i64; LANES];
    let mut u = [0.0f64; LANES];
    for i in 0..LANES {
        guesses[i] = k.min(b.rem[i] - 1);
        u[i] = uniform_of(b.key[i], b.rem[i]);
    }
    // the powers above u among the first k, then at most g of them: the count of the first g
    let mut power = *b.acc;
    let mut kept = [0i64; LANES];
    for j in 0..k {
        let mut any = false;
        for i in 0..LANES {
            let hit = u[i] < power[i];
            kept[i] += hit as i64;
            power[i] *= b.acc[i];
            any |= hit;
        }
        // every lane's count has stopped (the powers only fall): checked every 16 powers, for a
        // long draft; a check after each would be a branch that goes either way at random at
        // low acceptance, which costs more than the powers left
        if j % 16 == 15 && !any {
            break;
        }
    }
    for i in 0..LANES {
        kept[i] = kept[i].min(guesses[i]);
    }
    let mut c0 = [0i64; LANES];
    let mut odd_lanes = false;
    for i in 0..LANES {
        let room1 = after_token(b.room[i], bs);
        let kp = kept[i];
        c0[i] = b.c[i];
        // the kept guesses' slots: past the last block's room they take one
        let nb = (kp > room1) as i64;
        let room2 = room1 - kp + nb * bs;
        b.room[i] = room2;
        b.c[i] += 1 + kp;
        b.rem[i] -= 1 + kp;
        b.proposed[i] += guesses[i];
        let on = i < live;
        t.taken[i] += (on as i64) * nb;
        t.crossing[i] += ((room2 == 0) & on) as i64;
        let is_full = (guesses[i] == k) & on;
        t.full[i] += is_full as i64;
        t.full_c[i] += if is_full { c0[i] } else { 0 };
        odd_lanes |= ((guesses[i] < k) | (b.rem[i] == 0)) & on;
    }
    if odd_lanes {
        for i in (0..live).filter(|&i| guesses[i] < k || b.rem[i] == 0) {
            odd.push((start + i, guesses[i], c0[i]));
        }
    }
}

/// [`fast_pass`] for a few decoders (the first is decoder `start`), or on a CPU without vector
/// instructions that pay: the same step, one decoder at a time. (A function of its own: inlined
/// into the loop, its many columns' pointers spill to the stack.)
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn small_pass(
    c: &mut [i64],
    rem: &mut [i64],
    room: &mut [i64],
    proposed: &mut [i64],
    key: &[u64],
    acc: &[f64],
    k: i64,
    bs: i64,
    t: &mut Totals,
    odd: &mut Vec<(usize, i64, i64)>,
    start: usize,
) {
    let n = c.len();
    let (c, rem, room, proposed, key, acc) = (&mut c[..n], &mut rem[..n], &mut room[..n], &mut proposed[..n], &key[..n], &acc[..n]);
    for i in 0..n {
        let g = k.min(rem[i] - 1);
        let kp = if g > 0 { kept_of(acc[i], uniform_of(key[i], rem[i]), g) } else { 0 };
        let room1 = after_token(room[i], bs);
        let c0 = c[i];
        let nb = (kp > room1) as i64;
        let room2 = room1 - kp + nb * bs;
        room[i] = room2;
        c[i] = c0 + 1 + kp;
        rem[i] -= 1 + kp;
        proposed[i] += g;
        t.taken += nb;
        t.crossing += (room2 == 0) as i64;
        if g == k {
            t.full += 1;
            t.full_c += c0;
        }
        if g < k || rem[i] == 0 {
            odd.push((start + i, g, c0));
        }
    }
}

/// Blocks that `over` slots past the end of a sequence's last block take: `ceil(over / bs)`,
/// 0 for `over <= 0`; without a division or an unpredictable branch when it is at most one
/// block (guesses of at most `bs`).
#[inline(always)]
fn blocks_past(over: i64, bs: i64) -> i64 {
    if over <= bs {
        (over > 0) as i64
    } else {
        (over + bs - 1) / bs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::test_util::rng;

    /// A pass's columns (context, tokens left, room, proposed), sums and odd decoders.
    type Pass = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, Totals, Vec<(usize, i64, i64)>);

    /// The pass over blocks of decoders (compiled for AVX2 and AVX-512 where the CPU has them,
    /// and for neither) is the pass one decoder at a time, decoder for decoder: columns, sums,
    /// and the decoders that guessed fewer than `k` or finished; on random columns with
    /// `k <= bs` (up to 64: long drafts, whose count stops early), decoders near their end or
    /// not, acceptance 0, 1 or between.
    #[test]
    fn blocks_agree_with_one_at_a_time() {
        let mut rnd = rng(0x51f1_5eed_0bad_cafe);
        let mut odd_seen = 0;
        for case in 0..3000 {
            let n = rnd(40) as usize;
            let bs = 1 + rnd(if case % 4 == 0 { 64 } else { 16 }) as i64; // long drafts: k up to 64
            let k = rnd(bs as u64 + 1) as i64;
            let near = rnd(2) == 0;
            let c: Vec<i64> = (0..n).map(|_| rnd(5000) as i64).collect();
            let rem: Vec<i64> = (0..n).map(|_| 1 + rnd(if near { 6 } else { 300 }) as i64).collect();
            let room: Vec<i64> = (0..n).map(|_| rnd(bs as u64) as i64).collect();
            let proposed: Vec<i64> = (0..n).map(|_| rnd(100) as i64).collect();
            let key: Vec<u64> = (0..n).map(|_| rnd(u64::MAX)).collect();
            let acc: Vec<f64> = (0..n).map(|_| [0.0, 1.0, 0.8, rnd(1001) as f64 / 1000.0][rnd(4) as usize]).collect();
            let mut want = (c.clone(), rem.clone(), room.clone(), proposed.clone(), Totals::default(), Vec::new());
            small_pass(&mut want.0, &mut want.1, &mut want.2, &mut want.3, &key, &acc, k, bs, &mut want.4, &mut want.5, 0);
            odd_seen += want.5.len();
            // padded to whole blocks with lanes of any values (they must stay out of the sums)
            let lanes = n.div_ceil(LANES) * LANES;
            let mut pad = |col: &[i64]| -> Vec<i64> { col.iter().copied().chain((n..lanes).map(|_| rnd(50) as i64)).collect() };
            let (key, acc) = ([key.clone(), vec![7; lanes - n]].concat(), [acc.clone(), vec![0.5; lanes - n]].concat());
            let start = (pad(&c), pad(&rem), pad(&room), pad(&proposed));
            let mut got = (start.0.clone(), start.1.clone(), start.2.clone(), start.3.clone(), Totals::default(), Vec::new());
            fast_pass(&mut got.0, &mut got.1, &mut got.2, &mut got.3, &key, &acc, n, k, bs, &mut got.4, &mut got.5);
            let live = |g: &mut Pass| {
                [&mut g.0, &mut g.1, &mut g.2, &mut g.3].into_iter().for_each(|col| col.truncate(n));
            };
            live(&mut got);
            assert_eq!(got, want, "case {case}");
            #[cfg(target_arch = "x86_64")]
            for (level, name) in [(Vector::Avx2, "AVX2"), (Vector::Avx512, "AVX-512")] {
                if (Vector::detect() as u8) < (level as u8) {
                    continue; // the CPU lacks it
                }
                let mut got = (start.0.clone(), start.1.clone(), start.2.clone(), start.3.clone(), Totals::default(), Vec::new());
                let (c, rem, room, proposed, t, odd) = (&mut got.0, &mut got.1, &mut got.2, &mut got.3, &mut got.4, &mut got.5);
                // SAFETY: the CPU has the features each is compiled for (checked above).
                unsafe {
                    match level {
                        Vector::Avx512 => fast_pass_avx512(c, rem, room, proposed, &key, &acc, n, k, bs, t, odd),
                        _ => fast_pass_avx2(c, rem, room, proposed, &key, &acc, n, k, bs, t, odd),
                    }
                };
                live(&mut got);
                assert_eq!(got, want, "case {case}, {name}");
            }
        }
        assert!(odd_seen > 10_000, "{odd_seen}");
    }
}
