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
//! * [`Router::PrefixAffinity`] (prefix caching only, `data_parallel::run_prefix`): a request
//!   that shares a prefix with an earlier one (its prefix parent, §3.5) goes to that request's
//!   card, where the prefix's blocks are; one without a parent goes round robin over the
//!   parentless requests. Like round robin it decides from the request list alone
//!   ([`static_cards`]), so each card's run is independent of the others.
//!
//! # Exact, and at the cost of one run per card
//!
//! Which requests of a card have finished by time `t` depends only on the requests routed to
//! it so far, all of which arrived by `t`: a step that ends by `t` started before `t`, and a
//! step only serves requests that arrived by its start. So the cards are resumable
//! ([`Card`], over `event_driven::Card`): before choosing a card for a request arriving at `t`,
//! [`route`] runs each card forward over the steps that start before `t` and collects the
//! requests those steps finished. No card is ever run twice: least-tokens costs one run of
//! each card plus `O(cards)` per request, as round robin does (`make bench` shows both). The
//! test `incremental_cards_route_as_full_replays` (`data_parallel.rs`) checks the choices
//! against the plain definition, every card replayed from its start before every choice.

use crate::error::{CoreError, CoreResult};

/// How a router picks a card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Router {
    RoundRobin,
    LeastTokens,
    PrefixAffinity,
}

impl Router {
    /// The Python names: `"round_robin"`, `"least_tokens"`, `"prefix_affinity"`.
    pub fn parse(name: &str) -> CoreResult<Router> {
        match name {
            "round_robin" => Ok(Router::RoundRobin),
            "least_tokens" => Ok(Router::LeastTokens),
            "prefix_affinity" => Ok(Router::PrefixAffinity),
            _ => Err(CoreError::invalid(format!(
                "router must be 'round_robin', 'least_tokens' or 'prefix_affinity', got {name:?}"
            ))),
        }
    }
}

/// The card of each request for the routers that decide from the request list alone: round
/// robin (`k mod cards`) and prefix affinity (`parent[k]`'s card, or round robin over the
/// requests without a parent). `parent[k]` is `-1` or an earlier request (checked by the caller).
pub fn static_cards(parent: &[i64], cards: usize, router: Router) -> CoreResult<Vec<u32>> {
    let mut out: Vec<u32> = Vec::with_capacity(parent.len());
    let mut next_free = 0usize; // the round-robin turn of the parentless requests
    for (k, &p) in parent.iter().enumerate() {
        let c = match router {
            Router::RoundRobin => k % cards,
            Router::PrefixAffinity if p >= 0 => out[p as usize] as usize,
            Router::PrefixAffinity => {
                next_free += 1;
                (next_free - 1) % cards
            }
            Router::LeastTokens => {
                return Err(CoreError::invalid(
                    "router 'least_tokens' is not available with prefix caching (use 'round_robin' \
                     or 'prefix_affinity')",
                ))
            }
        };
        out.push(c as u32);
    }
    Ok(out)
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

/// A card as the router drives it: handed requests one at a time in arrival order, and run
/// forward in time in between.
pub(crate) trait Card {
    /// Hands it the request at routing position `pos`; false if it rejects the request at
    /// once (one that could never run holds no tokens).
    fn push(&mut self, pos: usize) -> CoreResult<bool>;
    /// Runs every step that starts before `t` (`f64::INFINITY`: to the end).
    fn advance(&mut self, t: f64) -> CoreResult<()>;
    /// Calls `f(k, finish_s)` for each request finished since the last call, `k` its rank
    /// among the requests pushed to this card.
    fn drain_finished(&mut self, f: &mut dyn FnMut(usize, f64));
}

/// What the router knows of one card.
#[derive(Default)]
struct CardView {
    /// positions routed to it, in routing order
    routed: Vec<usize>,
    /// (position, finish time) of finished requests not yet known to be done by the clock (at
    /// most those of the one step that ends after it)
    ending: Vec<(usize, f64)>,
    /// tokens of the routed requests not finished by the clock
    outstanding: i64,
}

/// Routes positions `0..at.len()` (times `at`, nondecreasing, each holding `weight` tokens)
/// onto `cards`, then runs every card to the end; returns the card of each position.
pub(crate) fn route<C: Card>(at: &[f64], weight: &[i64], cards: &mut [C], router: Router) -> CoreResult<Vec<u32>> {
    let n_cards = cards.len();
    let mut out = Vec::with_capacity(at.len());
    let mut views: Vec<CardView> = (0..n_cards).map(|_| CardView::default()).collect();
    for (k, &t) in at.iter().enumerate() {
        let best = match router {
            _ if n_cards == 1 => 0,
            Router::RoundRobin => k % n_cards,
            Router::PrefixAffinity => {
                return Err(CoreError::invalid("router 'prefix_affinity' needs prefix caching (prefix_caching=True)"))
            }
            Router::LeastTokens => {
                for (card, view) in cards.iter_mut().zip(views.iter_mut()) {
                    card.advance(t)?;
                    let CardView { routed, ending, outstanding } = view;
                    card.drain_finished(&mut |m, f| ending.push((routed[m], f)));
                    ending.retain(|&(j, f)| {
                        let done = f <= t;
                        if done {
                            *outstanding -= weight[j];
                        }
                        !done
                    });
                }
                (0..n_cards).min_by_key(|&c| (views[c].outstanding, c)).expect("n_cards >= 1")
            }
        };
        let view = &mut views[best];
        if cards[best].push(k)? {
            view.outstanding += weight[k];
        }
        view.routed.push(k);
        out.push(best as u32);
    }
    for card in cards.iter_mut() {
        card.advance(f64::INFINITY)?;
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

    /// A card that serves each request in exactly one second, whatever else it holds.
    #[derive(Default)]
    struct OneSecond<'a> {
        at: &'a [f64],
        pushed: Vec<usize>,
        reported: usize,
        clock: f64,
    }

    impl Card for OneSecond<'_> {
        fn push(&mut self, pos: usize) -> CoreResult<bool> {
            self.pushed.push(pos);
            Ok(true)
        }
        fn advance(&mut self, t: f64) -> CoreResult<()> {
            self.clock = t;
            Ok(())
        }
        fn drain_finished(&mut self, f: &mut dyn FnMut(usize, f64)) {
            while self.reported < self.pushed.len() && self.at[self.pushed[self.reported]] + 1.0 <= self.clock {
                f(self.reported, self.at[self.pushed[self.reported]] + 1.0);
                self.reported += 1;
            }
        }
    }

    fn cards(at: &[f64], n: usize) -> Vec<OneSecond<'_>> {
        (0..n).map(|_| OneSecond { at, ..Default::default() }).collect()
    }

    #[test]
    fn round_robin_cycles() {
        let at = [0.0; 5];
        let got = route(&at, &[1; 5], &mut cards(&at, 2), Router::RoundRobin).unwrap();
        assert_eq!(got, vec![0, 1, 0, 1, 0]);
    }

    /// Request 0 (weight 10) ends at 1.0, so at t = 1.0 card 0 is empty again and takes
    /// request 2, while card 1 still holds request 1.
    #[test]
    fn least_tokens_sees_finishes() {
        let at = [0.0, 0.5, 1.0, 1.0];
        let got = route(&at, &[10, 3, 5, 1], &mut cards(&at, 2), Router::LeastTokens).unwrap();
        // k=0 -> card 0 (tie); k=1 -> card 1 (3 < 10); k=2 at 1.0: card 0 has 0 left -> 0;
        // k=3: card 0 has 5, card 1 has 3 -> 1
        assert_eq!(got, vec![0, 1, 0, 1]);
    }

    /// Children follow their parent's card; parentless requests take turns.
    #[test]
    fn prefix_affinity_follows_the_parent() {
        let parent = [-1, -1, 0, 2, -1, 1];
        assert_eq!(static_cards(&parent, 2, Router::PrefixAffinity).unwrap(), vec![0, 1, 0, 0, 0, 1]);
        assert_eq!(static_cards(&parent, 2, Router::RoundRobin).unwrap(), vec![0, 1, 0, 1, 0, 1]);
        assert!(static_cards(&parent, 2, Router::LeastTokens).is_err());
    }

    #[test]
    fn names_parse_and_bad_ones_are_named() {
        assert_eq!(Router::parse("least_tokens").unwrap(), Router::LeastTokens);
        assert!(Router::parse("random").unwrap_err().to_string().contains("\"random\""));
        assert_eq!(Router::parse("prefix_affinity").unwrap(), Router::PrefixAffinity);
        assert!(check_cards("n_replicas", 0).unwrap_err().to_string().contains("n_replicas"));
    }
}
