//! The one error type of the core. `py.rs` maps each variant onto a Python exception, so that
//! bad input never crosses the boundary as a panic.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum CoreError {
    /// An argument is out of its domain. Becomes `ValueError`; the message names the argument
    /// and the value, e.g. `n_layers must be a positive integer, got 0`.
    InvalidArgument(String),
}

impl CoreError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        CoreError::InvalidArgument(msg.into())
    }

    /// The same error, its message prefixed with where the bad value sits (`batch[3].`).
    pub fn prefixed(self, prefix: &str) -> Self {
        match self {
            CoreError::InvalidArgument(msg) => CoreError::InvalidArgument(format!("{prefix}{msg}")),
        }
    }
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::InvalidArgument(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for CoreError {}

pub type CoreResult<T> = Result<T, CoreError>;
