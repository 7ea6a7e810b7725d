//! Many operations in one call, for the bindings: a recorded trace ([`BlockAllocator::replay`]),
//! one decode step's appends, a batch of frees. Each is the one-at-a-time operations in order,
//! with the pool checked once per call rather than once per Python call.

use super::{check_token, check_tokens, BlockAllocator, OpError, TOKEN_LIMIT};
use crate::error::{CoreError, CoreResult};

/// Replay op codes (see [`BlockAllocator::replay`]).
pub const OP_ALLOCATE: i64 = 0;
pub const OP_APPEND: i64 = 1;
pub const OP_FORK: i64 = 2;
pub const OP_FREE: i64 = 3;
/// Replay statuses, one per op.
pub const STATUS_OK: i64 = 0;
pub const STATUS_COPIED: i64 = 1;
pub const STATUS_OUT_OF_BLOCKS: i64 = 2;

/// What [`BlockAllocator::append_many`] did: `done` appends succeeded, in order; the next one
/// (if `done` is short of the input) was refused for want of a block and changed nothing.
/// `copy_src[i]`/`copy_dst[i]` is append `i`'s copy-on-write, `-1`/`-1` when it made none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppendMany {
    pub done: usize,
    pub copy_src: Vec<i64>,
    pub copy_dst: Vec<i64>,
}

impl BlockAllocator {
    /// Runs a recorded trace of operations; returns one status per op: [`STATUS_OK`],
    /// [`STATUS_COPIED`] (an append that made a copy-on-write) or [`STATUS_OUT_OF_BLOCKS`]
    /// (the op changed nothing). `op[i]` is an `OP_*` code; `seq[i]` the sequence;
    /// `arg[i]` the prompt index for allocate (its tokens are `tokens[offsets[a]..offsets[a+1]]`),
    /// the token for append, the child id for fork, ignored for free. Any other error stops the
    /// replay and is returned with `op {i}: ` before its message; the ops before it stay done.
    pub fn replay(
        &mut self,
        op: &[i64],
        seq: &[i64],
        arg: &[i64],
        tokens: &[i64],
        offsets: &[i64],
    ) -> CoreResult<Vec<i64>> {
        if op.len() != seq.len() || op.len() != arg.len() {
            return Err(CoreError::invalid(format!(
                "op, seq and arg must have the same length, got {}, {} and {}",
                op.len(),
                seq.len(),
                arg.len()
            )));
        }
        let n_prompts = offsets.len().saturating_sub(1) as i64;
        // Tokens are checked once for the whole trace; with a bad one somewhere, each allocate
        // checks its own prompt as it comes (the error then names the op that met it).
        let checked: Option<Vec<u32>> = tokens
            .iter()
            .all(|t| (0..TOKEN_LIMIT).contains(t))
            .then(|| tokens.iter().map(|&t| t as u32).collect());
        let mut status = Vec::with_capacity(op.len());
        for i in 0..op.len() {
            let (s, a) = (seq[i], arg[i]);
            let r = match op[i] {
                OP_ALLOCATE => {
                    if !(0..n_prompts).contains(&a) {
                        Err(CoreError::invalid(format!(
                            "prompt index must be in [0, {n_prompts}), got {a}"
                        ))
                        .into())
                    } else {
                        let (lo, hi) = (offsets[a as usize], offsets[a as usize + 1]);
                        if !(0 <= lo && lo <= hi && hi <= tokens.len() as i64) {
                            Err(CoreError::invalid(format!(
                                "prompt {a} spans [{lo}, {hi}), outside tokens of length {}",
                                tokens.len()
                            ))
                            .into())
                        } else {
                            let (lo, hi) = (lo as usize, hi as usize);
                            match &checked {
                                Some(all) => self.try_allocate(s, &all[lo..hi], hi - lo).map(|_| STATUS_OK),
                                None => match check_tokens(&tokens[lo..hi]) {
                                    Ok(t) => self.try_allocate(s, &t, hi - lo).map(|_| STATUS_OK),
                                    Err(e) => Err(e.into()),
                                },
                            }
                        }
                    }
                }
                OP_APPEND => match check_token("token_id", a) {
                    Ok(t) => self.try_append(s, t).map(|c| if c.is_some() { STATUS_COPIED } else { STATUS_OK }),
                    Err(e) => Err(e.into()),
                },
                OP_FORK => self.fork(s, a).map(|_| STATUS_OK).map_err(OpError::from),
                OP_FREE => self.free(s).map(|_| STATUS_OK).map_err(OpError::from),
                code => Err(CoreError::invalid(format!(
                    "unknown op code {code} (0 allocate, 1 append, 2 fork, 3 free)"
                ))
                .into()),
            };
            match r {
                Ok(st) => status.push(st),
                Err(OpError::OutOfBlocks { .. }) => status.push(STATUS_OUT_OF_BLOCKS),
                Err(OpError::Other(e)) => return Err(e.prefixed(&format!("op {i}: "))),
            }
        }
        Ok(status)
    }

    /// One decode step's appends in one call: token `token_ids[i]` onto sequence `seq_ids[i]`,
    /// in order. Stops at the first append the pool cannot serve (it changes nothing; `done`
    /// says how many went through, so the caller can preempt and call again with the rest).
    /// A bad token or an unknown sequence is an error naming its index; the appends before it
    /// stay done, as in [`BlockAllocator::replay`].
    pub fn append_many(&mut self, seq_ids: &[i64], token_ids: &[i64]) -> CoreResult<AppendMany> {
        if seq_ids.len() != token_ids.len() {
            return Err(CoreError::invalid(format!(
                "seq_ids and token_ids must have the same length, got {} and {}",
                seq_ids.len(),
                token_ids.len()
            )));
        }
        let mut out = AppendMany {
            done: 0,
            copy_src: Vec::with_capacity(seq_ids.len()),
            copy_dst: Vec::with_capacity(seq_ids.len()),
        };
        for (i, (&s, &t)) in seq_ids.iter().zip(token_ids).enumerate() {
            let r = check_token("token_id", t).map_err(OpError::from).and_then(|t| self.try_append(s, t));
            match r {
                Ok(copy) => {
                    let (src, dst) = copy.map_or((-1, -1), |(a, b)| (a as i64, b as i64));
                    out.copy_src.push(src);
                    out.copy_dst.push(dst);
                    out.done += 1;
                }
                Err(OpError::OutOfBlocks { .. }) => break,
                Err(OpError::Other(e)) => return Err(e.prefixed(&format!("seq_ids[{i}]: "))),
            }
        }
        Ok(out)
    }

    /// Frees every sequence of `seq_ids`, in order (each as [`BlockAllocator::free`]). An
    /// unknown one is an error naming its index; the frees before it stay done.
    pub fn free_many(&mut self, seq_ids: &[i64]) -> CoreResult<()> {
        for (i, &s) in seq_ids.iter().enumerate() {
            self.free(s).map_err(|e| e.prefixed(&format!("seq_ids[{i}]: ")))?;
        }
        Ok(())
    }
}
