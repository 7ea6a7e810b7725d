//! The one error type of the core. `py/mod.rs` maps each variant onto a Python exception, so
//! that bad input never crosses the boundary as a panic.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum CoreError {
    /// An argument is out of its domain. Becomes `ValueError`; the message names the argument
    /// and the value, e.g. `n_layers must be a positive integer, got 0`.
    InvalidArgument(String),
    /// A key (a `seq_id`) that is unknown, or already in use. Becomes `KeyError`.
    Key(String),
    /// The block pool cannot serve the request, and nothing was changed. Becomes
    /// `servelab.blocks.OutOfBlocks` (a `RuntimeError`).
    OutOfBlocks(String),
}

impl CoreError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        CoreError::InvalidArgument(msg.into())
    }

    pub fn key(msg: impl Into<String>) -> Self {
        CoreError::Key(msg.into())
    }

    /// The same error, its message prefixed (e.g. with the index of a failing op).
    pub fn prefixed(self, prefix: &str) -> Self {
        match self {
            CoreError::InvalidArgument(m) => CoreError::InvalidArgument(format!("{prefix}{m}")),
            CoreError::Key(m) => CoreError::Key(format!("{prefix}{m}")),
            CoreError::OutOfBlocks(m) => CoreError::OutOfBlocks(format!("{prefix}{m}")),
        }
    }
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::InvalidArgument(msg) | CoreError::Key(msg) | CoreError::OutOfBlocks(msg) => {
                f.write_str(msg)
            }
        }
    }
}

impl std::error::Error for CoreError {}

pub type CoreResult<T> = Result<T, CoreError>;
