//! Bindings of the paper GPU (`cost.rs`).
//!
//! Specs cross the boundary as any Python object with the right attributes (the frozen
//! dataclasses of `servelab.hw_model`), read by attribute name straight into the core structs;
//! costs come back as dicts keyed by the core's field names.

use super::convert::{add_functions, dict_of, repr, slice, type_name, ToPy};
use numpy::{Element, PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};

use crate::cost::{self, Efficiency, GpuSpec, ModelSpec, StepCost, StepCosts};
use crate::error::CoreResult;

// The three specs are read by attribute name with our own checks, so that a bad field gives a
// message naming the field, its value and what it must be (the derived extraction said "failed
// to extract field PyModelSpec.d_model").

/// Python's `bool` or numpy's `bool_` (both spell their type `bool`): not numbers here.
fn is_bool(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyBool>() || type_name(obj) == "bool"
}

/// Reads the fields of one spec argument (`arg` = "model", "gpu" or "efficiency").
struct Fields<'a, 'py> {
    obj: &'a Bound<'py, PyAny>,
    arg: &'static str,
    kind: &'static str,
    prefix: &'static str,
}

impl<'py> Fields<'_, 'py> {
    fn get(&self, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.obj.getattr(name).map_err(|_| {
            PyTypeError::new_err(format!(
                "{} must be a servelab.hw_model.{} (or an object with its fields), got {} {} without the field {name}",
                self.arg,
                self.kind,
                type_name(self.obj),
                repr(self.obj)
            ))
        })
    }

    /// The TypeError naming field `name` (after the prefix), what it must be and its value.
    fn wrong(&self, name: &str, what: &str, v: &Bound<'py, PyAny>) -> PyErr {
        PyTypeError::new_err(format!("{}{name} must be {what}, got {}", self.prefix, repr(v)))
    }

    /// A model dimension: an integer (numpy's too, never a bool); one past i64 gets the range
    /// message of `cost.rs`.
    fn dim(&self, name: &str) -> PyResult<i64> {
        let v = self.get(name)?;
        if is_bool(&v) {
            return Err(self.wrong(name, "an integer", &v));
        }
        v.extract::<i64>().map_err(|e| match e.is_instance_of::<PyOverflowError>(v.py()) {
            true => {
                let shown = v.str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into());
                PyValueError::new_err(format!("{name} must be a positive integer at most {}, got {shown}", cost::MAX_DIM))
            }
            false => self.wrong(name, "an integer", &v),
        })
    }

    /// A real number (int or float, numpy's too, never a bool); its range is `cost.rs`'s check.
    fn real(&self, name: &str) -> PyResult<f64> {
        let v = self.get(name)?;
        // complex numbers have __float__ in numpy (dropping the imaginary part): not reals here
        if is_bool(&v) || v.is_instance_of::<PyString>() || type_name(&v).starts_with("complex") {
            return Err(self.wrong(name, "a real number", &v));
        }
        v.extract::<f64>().map_err(|e| match e.is_instance_of::<PyOverflowError>(v.py()) {
            true => PyValueError::new_err(format!("{}{name} must be a finite number, got {}", self.prefix, repr(&v))),
            false => self.wrong(name, "a real number", &v),
        })
    }

    fn flag(&self, name: &str) -> PyResult<bool> {
        let v = self.get(name)?;
        if !is_bool(&v) {
            return Err(self.wrong(name, "True or False", &v));
        }
        v.is_truthy()
    }
}

/// `FromPyObject` for a spec of `cost.rs`: the core struct itself is read, field by field in
/// the order listed (the first bad one is named), each with its reader of [`Fields`].
macro_rules! read_fields {
    ($ty:ident as $arg:literal, $prefix:literal { $($field:ident: $read:ident),* $(,)? }) => {
        impl<'a, 'py> FromPyObject<'a, 'py> for $ty {
            type Error = PyErr;

            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
                let f = Fields { obj: &obj, arg: $arg, kind: stringify!($ty), prefix: $prefix };
                Ok($ty { $($field: f.$read(stringify!($field))?),* })
            }
        }
    };
}

read_fields!(ModelSpec as "model", "" {
    n_layers: dim, d_model: dim, n_heads: dim, n_kv_heads: dim, d_head: dim, d_ff: dim, vocab_size: dim,
    tie_embeddings: flag, bytes_per_param: real,
});
read_fields!(GpuSpec as "gpu", "" { peak_flops: real, hbm_bandwidth: real, memory_bytes: real });
read_fields!(Efficiency as "efficiency", "efficiency." { compute: real, bandwidth: real, overhead_s: real });

/// One card's hardware, the first argument of the step-cost functions and of every simulator.
pub(super) type Hardware = (ModelSpec, GpuSpec, Efficiency);

dict_of!(StepCost {
    time_s, flops, bytes_moved, weight_bytes, kv_bytes, compute_s, memory_s, compute_bound, mfu, intensity,
    n_tokens, n_seqs,
});
dict_of!(StepCosts {
    time_s, flops, bytes_moved, weight_bytes, kv_bytes, compute_s, memory_s, compute_bound, mfu, intensity,
});

/// `validate_model(model)` and its two twins: `validate()` of the spec (None or a ValueError).
macro_rules! validators {
    ($($f:ident($arg:ident: $ty:ty)),*) => {$(
        #[pyfunction]
        fn $f($arg: $ty) -> CoreResult<()> {
            $arg.validate()
        }
    )*};
}
validators!(validate_model(model: ModelSpec), validate_gpu(gpu: GpuSpec), validate_efficiency(efficiency: Efficiency));

/// `param_count(model)` and the other sizes of a checked model (`ModelSpec`'s methods).
macro_rules! model_sizes {
    ($($f:ident -> $ty:ty),*) => {$(
        #[pyfunction]
        fn $f(model: ModelSpec) -> CoreResult<$ty> {
            model.validate()?;
            Ok(model.$f())
        }
    )*};
}
model_sizes!(param_count -> i128, weight_bytes -> f64, kv_bytes_per_token -> f64);

#[pyfunction]
fn kv_capacity_tokens(model: ModelSpec, gpu: GpuSpec, mem_util: f64) -> CoreResult<i64> {
    cost::kv_capacity_tokens(&model, &gpu, mem_util)
}

#[pyfunction]
fn max_batch(model: ModelSpec, gpu: GpuSpec, context_len: i64, mem_util: f64) -> CoreResult<i64> {
    cost::max_batch(&model, &gpu, context_len, mem_util)
}

/// Step costs without the GIL. With `batch_size` None, one step over a batch given as two int64
/// columns, a sequence each (millions of sequences cross as two arrays, not a list of pairs):
/// the dict of `StepCost`'s fields. Else uniform steps, step `s` being `batch_size[s]` sequences
/// of `new_tokens[s]` new tokens on `context_len[s]` cached ones: the dict of `StepCosts`' columns.
#[pyfunction]
#[pyo3(signature = (hw, new_tokens, context_len, batch_size=None))]
fn step_cost_columns<'py>(
    py: Python<'py>,
    hw: Hardware,
    new_tokens: PyReadonlyArray1<'py, i64>,
    context_len: PyReadonlyArray1<'py, i64>,
    batch_size: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<Bound<'py, PyAny>> {
    let ((model, gpu, efficiency), n, c) = (hw, slice("new_tokens", &new_tokens)?, slice("context_len", &context_len)?);
    match batch_size {
        None => py.detach(|| cost::step_cost_columns(&model, &gpu, &efficiency, n, c))?.to_py(py),
        Some(b) => {
            let b = slice("batch_size", &b)?;
            py.detach(|| cost::step_cost_uniform_many(&model, &gpu, &efficiency, b, n, c))?.to_py(py)
        }
    }
}

/// `out[name]` as a writable 1-D array of `n_steps` elements of `T`.
fn writable<'py, T: Element>(name: &str, value: &Bound<'py, PyAny>, n: usize) -> PyResult<PyReadwriteArray1<'py, T>> {
    let dtype = if name == "compute_bound" { "bool" } else { "float64" };
    let bad = || {
        let what = format!("a writable 1-D {dtype} numpy array of {n} elements (one per step)");
        PyValueError::new_err(format!("out['{name}'] must be {what}"))
    };
    let w = value.cast::<PyArray1<T>>().map_err(|_| bad())?.try_readwrite().map_err(|_| bad())?;
    if w.as_slice().ok().map(|s| s.len()) != Some(n) {
        return Err(bad());
    }
    Ok(w)
}

/// Many steps' costs (`cost::step_cost_many_each`) into the caller's arrays: `out` maps column
/// names (`StepCosts::NAMES`) to writable 1-D arrays of one element per step (float64; bool for
/// `compute_bound`). Only those columns are computed, and reusing the same arrays over many calls
/// costs no fresh memory page; `hw_model.step_cost_many` passes fresh ones otherwise.
#[pyfunction]
fn step_cost_many_into<'py>(
    py: Python<'py>,
    hw: Hardware,
    new_tokens: PyReadonlyArray1<'py, i64>,
    context_len: PyReadonlyArray1<'py, i64>,
    offsets: PyReadonlyArray1<'py, i64>,
    out: &Bound<'py, PyDict>,
) -> PyResult<()> {
    let (model, gpu, efficiency) = hw;
    let (n, c, o) = (slice("new_tokens", &new_tokens)?, slice("context_len", &context_len)?, slice("offsets", &offsets)?);
    let n_steps = o.len().saturating_sub(1);
    if out.is_empty() {
        return Err(PyValueError::new_err("out must name at least one column, got an empty dict"));
    }
    let mut floats: Vec<(usize, PyReadwriteArray1<'py, f64>)> = Vec::new();
    let mut bools: Option<PyReadwriteArray1<'py, bool>> = None;
    for (key, value) in out.iter() {
        let name: String = key.extract().map_err(|_| PyValueError::new_err(format!("out keys must be column names, got {}", repr(&key))))?;
        let Some(k) = StepCosts::NAMES.iter().position(|&x| x == name) else {
            return Err(PyValueError::new_err(format!("out['{name}']: the key must be one of {}", StepCosts::NAMES.join(", "))));
        };
        if name == "compute_bound" {
            bools = Some(writable(&name, &value, n_steps)?);
        } else {
            floats.push((k, writable(&name, &value, n_steps)?));
        }
    }
    let mut float_cols: Vec<(usize, &mut [f64])> =
        floats.iter_mut().map(|(k, w)| (*k, w.as_slice_mut().expect("checked contiguous above"))).collect();
    let mut bool_col: Option<&mut [bool]> = bools.as_mut().map(|w| w.as_slice_mut().expect("checked contiguous above"));
    py.detach(|| {
        cost::step_cost_many_each(&model, &gpu, &efficiency, n, c, o, |s, cost| {
            for (k, col) in float_cols.iter_mut() {
                col[s] = match *k {
                    0 => cost.time_s,
                    1 => cost.flops,
                    2 => cost.bytes_moved,
                    3 => cost.weight_bytes,
                    4 => cost.kv_bytes,
                    5 => cost.compute_s,
                    6 => cost.memory_s,
                    8 => cost.mfu,
                    _ => cost.intensity,
                };
            }
            if let Some(b) = bool_col.as_mut() {
                b[s] = cost.compute_bound;
            }
        })
    })?;
    Ok(())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_DIM", cost::MAX_DIM)?;
    m.add("MAX_TOKENS", cost::MAX_TOKENS)?;
    m.add("MAX_STEP_TOKENS", cost::MAX_STEP_TOKENS)?;
    add_functions!(m, validate_model, validate_gpu, validate_efficiency, param_count, weight_bytes, kv_bytes_per_token,
        kv_capacity_tokens, max_batch, step_cost_columns, step_cost_many_into);
    Ok(())
}
