//! A time-ordered event queue: the heart of a discrete-event simulator (lecture §4.5: the clock
//! jumps from one event to the next and skips the waiting in between).
//!
//! Events pop in order of time; events at the same time pop in the order they were pushed
//! (FIFO), so a simulation never depends on how a heap happens to break ties. Times are seconds,
//! finite and `>= 0`, and never earlier than the last popped event's time (the clock of a
//! discrete-event simulation only moves forward: an event scheduled in the past is a bug in the
//! caller); anything else is refused with an error that names the value.
//!
//! The queue is generic over its payload and knows nothing of Python; `py/events.rs` stores
//! Python objects in it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::cost::fmt_f64;
use crate::error::{CoreError, CoreResult};

struct Entry<T> {
    time_s: f64,
    seq: u64,
    payload: T,
}

impl<T> Entry<T> {
    fn key(&self) -> (f64, u64) {
        (self.time_s, self.seq)
    }
}

// BinaryHeap is a max-heap: "greater" means "pops first", i.e. earlier time, then lower seq.
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        let (t, s) = self.key();
        let (ot, os) = other.key();
        ot.total_cmp(&t).then_with(|| os.cmp(&s))
    }
}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Entry<T> {}

/// Events of payload `T`, popped earliest first, ties in insertion order.
pub struct EventQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
    /// Time of the last popped event (0 before the first pop): the clock.
    now_s: f64,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Checks an event time: finite and `>= 0` (the error names the value).
pub fn check_time(time_s: f64) -> CoreResult<()> {
    if time_s.is_finite() && time_s >= 0.0 {
        Ok(())
    } else {
        Err(CoreError::invalid(format!(
            "time_s must be a finite number >= 0, got {}",
            fmt_f64(time_s)
        )))
    }
}

impl<T> EventQueue<T> {
    pub fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), next_seq: 0, now_s: 0.0 }
    }

    pub fn with_capacity(n: usize) -> Self {
        EventQueue { heap: BinaryHeap::with_capacity(n), next_seq: 0, now_s: 0.0 }
    }

    /// Schedules `payload` at `time_s`. Refuses NaN, infinite and negative times, and times
    /// earlier than the last popped event's.
    pub fn push(&mut self, time_s: f64, payload: T) -> CoreResult<()> {
        check_time(time_s)?;
        if time_s < self.now_s {
            return Err(CoreError::invalid(format!(
                "time_s must not be earlier than the last popped event's time {}, got {}",
                fmt_f64(self.now_s),
                fmt_f64(time_s)
            )));
        }
        // -0.0 and 0.0 are the same instant; store +0.0 so that total_cmp agrees.
        let time_s = if time_s == 0.0 { 0.0 } else { time_s };
        self.heap.push(Entry { time_s, seq: self.next_seq, payload });
        self.next_seq += 1;
        Ok(())
    }

    /// The earliest event (first pushed among equals), removed; `None` when empty.
    pub fn pop(&mut self) -> Option<(f64, T)> {
        let e = self.heap.pop()?;
        self.now_s = e.time_s;
        Some((e.time_s, e.payload))
    }

    /// Time of the last popped event (0 before the first pop): no push may be earlier.
    pub fn now_s(&self) -> f64 {
        self.now_s
    }

    /// The event `pop` would return, left in place.
    pub fn peek(&self) -> Option<(f64, &T)> {
        self.heap.peek().map(|e| (e.time_s, &e.payload))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order() {
        let mut q = EventQueue::new();
        for (t, p) in [(3.0, "c"), (1.0, "a"), (2.0, "b")] {
            q.push(t, p).unwrap();
        }
        assert_eq!(q.len(), 3);
        assert_eq!(q.peek(), Some((1.0, &"a")));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(1.0, "a"), (2.0, "b"), (3.0, "c")]);
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
        assert_eq!(q.peek(), None);
    }

    #[test]
    fn ties_pop_in_insertion_order() {
        let mut q = EventQueue::new();
        for i in 0..100 {
            q.push(if i % 2 == 0 { 1.0 } else { 0.5 }, i).unwrap();
        }
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, p)| p).collect();
        let want: Vec<_> = (0..100).filter(|i| i % 2 == 1).chain((0..100).filter(|i| i % 2 == 0)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn negative_zero_is_zero() {
        let mut q = EventQueue::new();
        q.push(0.0, 1).unwrap();
        q.push(-0.0, 2).unwrap();
        assert_eq!(q.pop().unwrap().1, 1);
        assert_eq!(q.pop().unwrap().1, 2);
    }

    #[test]
    fn the_clock_never_runs_backwards() {
        let mut q = EventQueue::new();
        q.push(5.0, "a").unwrap();
        q.push(7.0, "b").unwrap();
        assert_eq!(q.pop(), Some((5.0, "a")));
        assert_eq!(q.now_s(), 5.0);
        let e = q.push(1.0, "past").unwrap_err();
        assert_eq!(e.to_string(), "time_s must not be earlier than the last popped event's time 5.0, got 1.0");
        assert_eq!(q.len(), 1);
        q.push(5.0, "now").unwrap(); // the current time is allowed
        assert_eq!(q.pop(), Some((5.0, "now")));
    }

    #[test]
    fn bad_times_are_errors_naming_the_value() {
        let mut q = EventQueue::new();
        for (t, shown) in [(f64::NAN, "nan"), (-1.5, "-1.5"), (f64::INFINITY, "inf")] {
            let e = q.push(t, ()).unwrap_err();
            assert_eq!(e.to_string(), format!("time_s must be a finite number >= 0, got {shown}"));
        }
        assert!(q.is_empty());
    }
}
