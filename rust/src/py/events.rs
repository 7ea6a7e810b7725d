//! Bindings of the event queue (`events.rs`): payloads are arbitrary Python objects.

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;

use crate::events::EventQueue;

/// A time-ordered event queue; events at equal times pop in insertion order.
#[pyclass(name = "EventQueue", module = "servelab._core")]
pub struct PyEventQueue {
    inner: EventQueue<Py<PyAny>>,
}

#[pymethods]
impl PyEventQueue {
    #[new]
    fn new() -> Self {
        PyEventQueue { inner: EventQueue::new() }
    }

    /// Schedules `payload` at `time_s` (finite, >= 0; ValueError otherwise).
    fn push(&mut self, time_s: f64, payload: Py<PyAny>) -> PyResult<()> {
        Ok(self.inner.push(time_s, payload)?)
    }

    /// Removes and returns the earliest `(time_s, payload)`; IndexError when empty.
    fn pop(&mut self) -> PyResult<(f64, Py<PyAny>)> {
        self.inner.pop().ok_or_else(|| PyIndexError::new_err("pop from an empty EventQueue"))
    }

    /// The `(time_s, payload)` that `pop` would return, left in place; IndexError when empty.
    fn peek(&self, py: Python<'_>) -> PyResult<(f64, Py<PyAny>)> {
        self.inner
            .peek()
            .map(|(t, p)| (t, p.clone_ref(py)))
            .ok_or_else(|| PyIndexError::new_err("peek at an empty EventQueue"))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        match self.inner.peek() {
            Some((t, _)) => format!("EventQueue(len={}, next_time_s={t:?})", self.inner.len()),
            None => "EventQueue(len=0)".to_string(),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEventQueue>()?;
    Ok(())
}
