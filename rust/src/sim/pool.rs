//! A pool of cards behind a router (course project §8.1): each card is a resumable one-card
//! simulator (`event_driven::Card`, or `decode_pool::DecodeCard` in a disaggregated decode pool)
//! fed the requests routed to it, one at a time, as the router reaches their arrival times.
//!
//! Data parallelism is one pool; disaggregation is two (prefill, then decode), so both build
//! their pools with [`serve`].

use super::continuous::event_driven;
use super::continuous::REJECT_NONE;
use super::decode_pool::DecodeCard;
use super::router::{route, Card, Router};
use super::Workload;
use crate::error::CoreResult;

/// A one-card simulator that can stop at any time and be handed more requests.
pub(crate) trait Resumable {
    /// Runs every step that starts before `until` over `w`, which extends what earlier calls saw
    /// with requests arriving no earlier than their `until`.
    fn advance(&mut self, w: &Workload<'_>, until: f64) -> CoreResult<()>;
    /// From now on, list the requests that finish, for `drain_finished`.
    fn track_finished(&mut self);
    /// Calls `f(request, finish_s)` for each request finished since the last call.
    fn drain_finished(&mut self, f: impl FnMut(usize, f64));
    /// Whether the card rejects a request of these lengths at its arrival (it never holds a
    /// token then).
    fn rejects(&self, prompt: i64, output: i64) -> bool;
}

impl Resumable for event_driven::Card<'_> {
    fn advance(&mut self, w: &Workload<'_>, until: f64) -> CoreResult<()> {
        event_driven::Card::advance(self, w, until)
    }
    fn track_finished(&mut self) {
        event_driven::Card::track_finished(self)
    }
    fn drain_finished(&mut self, f: impl FnMut(usize, f64)) {
        event_driven::Card::drain_finished(self, f)
    }
    fn rejects(&self, prompt: i64, output: i64) -> bool {
        self.params().unservable(prompt, output) != REJECT_NONE
    }
}

impl Resumable for DecodeCard<'_> {
    fn advance(&mut self, w: &Workload<'_>, until: f64) -> CoreResult<()> {
        DecodeCard::advance(self, w, until)
    }
    fn track_finished(&mut self) {
        DecodeCard::track_finished(self)
    }
    fn drain_finished(&mut self, f: impl FnMut(usize, f64)) {
        DecodeCard::drain_finished(self, f)
    }
    fn rejects(&self, prompt: i64, output: i64) -> bool {
        DecodeCard::rejects(self, prompt, output)
    }
}

/// The requests a pool serves, by request index: `order[k]` is the request at routing
/// position `k`, and `arrival[order[k]]` (when it reaches the pool) is nondecreasing in `k`.
#[derive(Clone, Copy)]
pub(crate) struct PoolRequests<'w> {
    pub order: &'w [usize],
    pub arrival: &'w [f64],
    pub prompt: &'w [i64],
    pub output: &'w [i64],
    /// the cards see every request with one output token (a prefill pool); the router still
    /// weighs it by its whole output
    pub one_token: bool,
}

/// One card of a pool and the requests routed to it, as that card's own workload.
pub(crate) struct PoolCard<'w, S> {
    pub sim: S,
    reqs: PoolRequests<'w>,
    /// the requests routed here, in arrival order (the card's request `m` is `idx[m]`)
    pub idx: Vec<usize>,
    arrival: Vec<f64>,
    prompt: Vec<i64>,
    output: Vec<i64>,
}

impl<S: Resumable> Card for PoolCard<'_, S> {
    fn push(&mut self, pos: usize) -> CoreResult<bool> {
        let r = &self.reqs;
        let i = r.order[pos];
        let out = if r.one_token { 1 } else { r.output[i] };
        self.idx.push(i);
        self.arrival.push(r.arrival[i]);
        self.prompt.push(r.prompt[i]);
        self.output.push(out);
        Ok(!self.sim.rejects(r.prompt[i], out))
    }

    fn advance(&mut self, t: f64) -> CoreResult<()> {
        // columns of a checked workload, in arrival order: nothing to check again
        let w = Workload { arrival_s: &self.arrival, prompt_len: &self.prompt, output_len: &self.output };
        self.sim.advance(&w, t)
    }

    fn drain_finished(&mut self, f: &mut dyn FnMut(usize, f64)) {
        self.sim.drain_finished(f);
    }
}

/// Routes `reqs` onto `n_cards` cards made by `new_card` with `router` (each request weighs
/// its prompt plus its whole output) and runs every card to the end.
pub(crate) fn serve<'w, S: Resumable>(
    n_cards: usize,
    mut new_card: impl FnMut() -> CoreResult<S>,
    reqs: PoolRequests<'w>,
    router: Router,
) -> CoreResult<Vec<PoolCard<'w, S>>> {
    let at: Vec<f64> = reqs.order.iter().map(|&i| reqs.arrival[i]).collect();
    let weight: Vec<i64> = reqs.order.iter().map(|&i| reqs.prompt[i] + reqs.output[i]).collect();
    let mut cards = Vec::with_capacity(n_cards);
    for _ in 0..n_cards {
        let mut sim = new_card()?;
        if router == Router::LeastTokens {
            sim.track_finished(); // only this router reads them
        }
        cards.push(PoolCard { sim, reqs, idx: Vec::new(), arrival: Vec::new(), prompt: Vec::new(), output: Vec::new() });
    }
    route(&at, &weight, &mut cards, router)?;
    Ok(cards)
}
