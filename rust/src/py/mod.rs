//! Python bindings (the `python` feature): the only place that knows about PyO3.
//!
//! One file per core module (`py/cost.rs` binds `cost.rs`, ...), each with a `register`
//! function called below. The core types cross as they are: specs are read straight into
//! `cost.rs`'s structs (`py/cost.rs`), results leave as dicts through `convert.rs`'s `ToPy`. Every
//! `CoreError` becomes a Python exception here; nothing in the core panics on user input.

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;

use crate::error::CoreError;

mod blocks;
mod convert;
mod cost;
mod parallel;
mod sim;

impl From<CoreError> for PyErr {
    fn from(e: CoreError) -> PyErr {
        match e {
            CoreError::InvalidArgument(msg) => PyValueError::new_err(msg),
            CoreError::Key(msg) => PyKeyError::new_err(msg),
            CoreError::OutOfBlocks(msg) => blocks::OutOfBlocks::new_err(msg),
        }
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    cost::register(m)?;
    sim::register(m)?;
    blocks::register(m)?;
    parallel::register(m)?;
    Ok(())
}
