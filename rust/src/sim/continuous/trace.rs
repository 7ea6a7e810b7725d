//! The per-step record of the queues and the KV pool that `servelab trace` draws
//! (`python/servelab/trace/`): after each step, the waiting queue (front first), the running
//! requests (oldest admitted first), the KV blocks each running request holds and the tokens it
//! has sampled. With the batch log and the step trace it is everything the page shows; the
//! Python recorder (`servelab.trace.StepRecorder`, the one shared with the engine) reads it step
//! by step.
//!
//! Off unless asked: only the per-step twin records, with any mix of features
//! ([`super::per_step::run`]), through one hook at the end of its step ([`super::rules::StepHooks::end_step`], a no-op by default);
//! the event-driven loop, which never visits the waiting queue per step, is not touched (the two
//! are held bit for bit equal, so a recorded run is the event-driven run's too).

use std::collections::VecDeque;

/// The queues after each step, in compressed rows: step `s` holds `waiting[waiting_offsets[s]..
/// waiting_offsets[s + 1]]`, and `running` / `running_blocks` over `running_offsets` alike.
#[derive(Debug, Clone, PartialEq)]
pub struct StepQueues {
    pub waiting_offsets: Vec<i64>,
    pub waiting: Vec<i64>,
    pub running_offsets: Vec<i64>,
    pub running: Vec<i64>,
    /// KV blocks held by each running request, beside `running`.
    pub running_blocks: Vec<i64>,
    /// Output tokens each running request has sampled, beside `running` (with speculation a
    /// step can sample several).
    pub running_generated: Vec<i64>,
}

impl Default for StepQueues {
    fn default() -> Self {
        StepQueues {
            waiting_offsets: vec![0],
            waiting: Vec::new(),
            running_offsets: vec![0],
            running: Vec::new(),
            running_blocks: Vec::new(),
            running_generated: Vec::new(),
        }
    }
}

impl StepQueues {
    /// One step's row; `of(r)` is the blocks request `r` holds and the tokens it has sampled.
    pub(crate) fn record(&mut self, waiting: &VecDeque<usize>, running: &[usize], of: impl Fn(usize) -> (i64, i64)) {
        self.waiting.extend(waiting.iter().map(|&r| r as i64));
        self.waiting_offsets.push(self.waiting.len() as i64);
        for &r in running {
            let (blocks, generated) = of(r);
            self.running.push(r as i64);
            self.running_blocks.push(blocks);
            self.running_generated.push(generated);
        }
        self.running_offsets.push(self.running.len() as i64);
    }

    /// Steps recorded.
    pub fn len(&self) -> usize {
        self.waiting_offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::super::per_step::{run_per_step, run_recorded};
    use super::super::Inputs;
    use crate::sim::test_util::{self, pricer};
    use crate::sim::Workload;

    /// A pool too small for both decodes: the record's blocks add up to the pool's count at
    /// every step, a preempted request shows at the front of the queue, and recording changes
    /// nothing in the run.
    #[test]
    fn the_record_adds_up_and_changes_nothing() {
        let w = Workload::new(&[0.0, 0.0, 0.001], &[6, 6, 3], &[10, 10, 2]).unwrap();
        let prm = test_util::params(4, 64, 2, 9, false);
        let pr = pricer();
        let inp = Inputs::new(&pr, &w, &prm, true, true);
        let plain = run_per_step(&inp).unwrap();
        let (out, q) = run_recorded(&inp).unwrap();
        assert_eq!(format!("{out:?}"), format!("{plain:?}")); // NaN times: compare the bits as text
        let x = out.trace_extra.unwrap();
        assert_eq!(q.len(), x.kv_blocks.len());
        assert!(out.preemptions > 0);
        for s in 0..q.len() {
            let (lo, hi) = (q.running_offsets[s] as usize, q.running_offsets[s + 1] as usize);
            assert_eq!(q.running_blocks[lo..hi].iter().sum::<i64>(), x.kv_blocks[s], "step {s}");
            let waiting = &q.waiting[q.waiting_offsets[s] as usize..q.waiting_offsets[s + 1] as usize];
            assert!(waiting.iter().all(|r| !q.running[lo..hi].contains(r)), "step {s}");
            if x.n_preempted[s] > 0 {
                let before = &q.running[q.running_offsets[s - 1] as usize..lo];
                assert!(before.contains(&waiting[0]), "step {s}: the victim was running");
            }
        }
        // the last step leaves nobody running and nobody waiting
        assert_eq!(q.running_offsets[q.len() - 1], q.running.len() as i64);
        assert_eq!(q.waiting_offsets[q.len() - 1], q.waiting.len() as i64);
    }
}
