//! The router in front of several cards (course project §8.1, data parallelism): each request,
//! in arrival order, goes to one card, and stays there.
//!
//! * [`Router::RoundRobin`]: card `k mod n` for the `k`-th request. It needs no state, so
//!   every card's run is independent of the others.
//! * [`Router::LeastTokens`]: the card with the fewest *outstanding tokens* when the request
//!   arrives, ties to the lowest card number. A card's outstanding tokens are the `weight`s
//!   (prompt + output for a whole request) of the requests routed to it that have not finished
//!   by then: what a real router can count, since it sees every request leave.
//!
//! Prefix affinity (send a request where its prompt's prefix is cached) needs the simulator to
//! know tokens, not only lengths; once `continuous.rs` models prefix caching it is a third
//! variant here whose choice reads the cards' cached prefixes (the hook: [`route`] already
//! hands the choice the cards' state at the arrival time).
//!
//! # Exact, and what it costs
//!
//! Which requests of a card have finished (or been rejected) by time `t` depends only on the
//! requests routed to it so far, all of which arrived by `t`: later arrivals join steps that
//! start at their arrival or later. So [`route`] asks the card's simulator (the `finish`
//! callback: the same code that runs the card for real) for the finish times of its requests
//! so far, and asks again only when the card has been sent a request since. It need not
//! replay the card from its start: once every request routed before some request `r` has
//! finished by `r`'s arrival, the card is empty then (no KV, nothing queued), and a run from
//! `r` on gives the same times; so each simulation starts from the last such idle point. Round
//! robin never asks. Least-tokens runs a card again about once per request routed to it, over
//! its current busy period: cheap at moderate load, but as `n^2 / cards` when a card never
//! empties (an overloaded one). `make bench` shows both.

use crate::error::{CoreError, CoreResult};

/// How a router picks a card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Router {
    RoundRobin,
    LeastTokens,
}

impl Router {
    /// The Python names: `"round_robin"`, `"least_tokens"`.
    pub fn parse(name: &str) -> CoreResult<Router> {
        match name {
            "round_robin" => Ok(Router::RoundRobin),
            "least_tokens" => Ok(Router::LeastTokens),
            _ => Err(CoreError::invalid(format!(
                "router must be 'round_robin' or 'least_tokens', got {name:?}"
            ))),
        }
    }
}

/// Largest number of cards of one pool (a bound that keeps a bad argument from allocating).
pub const MAX_CARDS: i64 = 4096;

/// Checks a pool size `n` named `name`.
pub fn check_cards(name: &str, n: i64) -> CoreResult<usize> {
    if !(1..=MAX_CARDS).contains(&n) {
        return Err(CoreError::invalid(format!("{name} must be an integer in [1, {MAX_CARDS}], got {n}")));
    }
    Ok(n as usize)
}

/// What the router knows of one card.
#[derive(Default)]
struct CardView {
    /// positions routed to it, in routing order
    routed: Vec<usize>,
    /// `routed[base..]` is what the next simulation must replay: every request before it had
    /// finished when `routed[base]` arrived, so the card was empty then (an idle point)
    base: usize,
    /// how many of `routed` the last simulation covered
    simulated: usize,
    /// positions not known to have finished
    live: Vec<usize>,
    outstanding: i64,
}

/// Routes positions `0..at.len()` (times `at`, nondecreasing) onto `n_cards` cards; returns
/// the card of each. `finish(card, positions)` simulates that card serving `positions` (in
/// order, from an empty card) and returns their finish times (NaN: rejected, nothing
/// outstanding).
pub fn route<F>(at: &[f64], weight: &[i64], n_cards: usize, router: Router, mut finish: F) -> CoreResult<Vec<u32>>
where
    F: FnMut(usize, &[usize]) -> CoreResult<Vec<f64>>,
{
    let n = at.len();
    if router == Router::RoundRobin || n_cards == 1 {
        return Ok((0..n).map(|k| (k % n_cards) as u32).collect());
    }
    let mut cards: Vec<CardView> = (0..n_cards).map(|_| CardView::default()).collect();
    // finish time of each position from its card's last simulation (+inf: not simulated yet)
    let mut fin = vec![f64::INFINITY; n];
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        let t = at[k];
        for (c, card) in cards.iter_mut().enumerate() {
            // requests routed since the last simulation may change later finish times (and
            // may be rejected at once): simulate again, from the last idle point
            if card.simulated < card.routed.len() {
                let tail = &card.routed[card.base..];
                for (&j, f) in tail.iter().zip(finish(c, tail)?) {
                    fin[j] = f;
                }
                card.simulated = card.routed.len();
                // the last idle point: every finish before it is at most t, hence exact
                let mut latest = f64::NEG_INFINITY;
                let mut idle = card.base;
                for (m, &j) in tail.iter().enumerate() {
                    if m > 0 && latest <= at[j] {
                        idle = card.base + m;
                    }
                    if fin[j] > latest {
                        latest = fin[j]; // a NaN (rejected at arrival) never raises it
                    }
                }
                card.base = idle;
            }
            let CardView { live, outstanding, .. } = card;
            live.retain(|&j| {
                // finished by t, or rejected (NaN)
                let done = fin[j].is_nan() || fin[j] <= t;
                if done {
                    *outstanding -= weight[j];
                }
                !done
            });
        }
        let best = (0..n_cards).min_by_key(|&c| (cards[c].outstanding, c)).expect("n_cards >= 1");
        let card = &mut cards[best];
        card.routed.push(k);
        card.live.push(k);
        card.outstanding += weight[k];
        out.push(best as u32);
    }
    Ok(out)
}

/// The positions of each card, in order, from the card of each position.
pub fn by_card(card: &[u32], n_cards: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); n_cards];
    for (k, &c) in card.iter().enumerate() {
        out[c as usize].push(k);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_cycles() {
        let at = [0.0; 5];
        let got = route(&at, &[1; 5], 2, Router::RoundRobin, |_, _| unreachable!()).unwrap();
        assert_eq!(got, vec![0, 1, 0, 1, 0]);
    }

    /// Fixed service of 1 s per request: request 0 (weight 10) ends at 1.0, so at t = 1.0 card
    /// 0 is empty again and takes request 2, while card 1 still holds request 1.
    #[test]
    fn least_tokens_sees_finishes() {
        let at = [0.0, 0.5, 1.0, 1.0];
        let w = [10, 3, 5, 1];
        let sim = |_: usize, pos: &[usize]| Ok(pos.iter().map(|&k| at[k] + 1.0).collect());
        let got = route(&at, &w, 2, Router::LeastTokens, sim).unwrap();
        // k=0 -> card 0 (tie); k=1 -> card 1 (3 < 10); k=2 at 1.0: card 0 has 0 left -> 0;
        // k=3: card 0 has 5, card 1 has 3 -> 1
        assert_eq!(got, vec![0, 1, 0, 1]);
    }

    #[test]
    fn names_parse_and_bad_ones_are_named() {
        assert_eq!(Router::parse("least_tokens").unwrap(), Router::LeastTokens);
        assert!(Router::parse("random").unwrap_err().to_string().contains("\"random\""));
        assert!(check_cards("n_replicas", 0).unwrap_err().to_string().contains("n_replicas"));
    }
}
