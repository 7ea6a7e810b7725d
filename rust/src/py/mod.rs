//! Python bindings (the `python` feature): the only place that knows about PyO3.
//!
//! One file per core module (`py/cost.rs` binds `cost.rs`, ...), each with a `register`
//! function called below. Every `CoreError` becomes a Python exception here; nothing in the
//! core panics on user input.

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;

use crate::error::CoreError;

mod blocks;
mod cost;
mod events;
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

/// A 1-D numpy array's data as a slice; a non-contiguous array is a ValueError naming `name`
/// (the Python wrappers pass `np.ascontiguousarray`, so users rarely see it).
fn slice<'a, T: numpy::Element>(name: &str, a: &'a numpy::PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a contiguous 1-D array")))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    cost::register(m)?;
    events::register(m)?;
    sim::register(m)?;
    blocks::register(m)?;
    parallel::register(m)?;
    Ok(())
}
