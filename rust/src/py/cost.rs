//! Bindings of the paper GPU (`cost.rs`).
//!
//! Specs cross the boundary as any Python object with the right attributes (the frozen
//! dataclasses of `servelab.hw_model`), read by attribute name. Every `CoreError` becomes a
//! Python exception here; nothing in the core panics on user input.

use super::slice;
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};

use crate::cost::{self, Columns, Efficiency, GpuSpec, ModelSpec, StepCost, StepCosts};

// The three specs are read by attribute name with our own checks, so that a bad field gives a
// message naming the field, its value and what it must be (the derived extraction said "failed
// to extract field PyModelSpec.d_model", issue 13).

/// The type's name of `obj`, for messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into())
}

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

    /// A model dimension: an integer (numpy's too, never a bool); one past i64 gets the range
    /// message of `cost.rs`.
    fn dim(&self, name: &str) -> PyResult<i64> {
        let v = self.get(name)?;
        if is_bool(&v) {
            return Err(PyTypeError::new_err(format!("{name} must be an integer, got {}", repr(&v))));
        }
        v.extract::<i64>().map_err(|e| {
            if e.is_instance_of::<PyOverflowError>(v.py()) {
                let shown = v.str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into());
                PyValueError::new_err(format!(
                    "{name} must be a positive integer at most {}, got {shown}",
                    cost::MAX_DIM
                ))
            } else {
                PyTypeError::new_err(format!("{name} must be an integer, got {}", repr(&v)))
            }
        })
    }

    /// A real number (int or float, numpy's too, never a bool); its range is `cost.rs`'s check.
    fn real(&self, name: &str) -> PyResult<f64> {
        let v = self.get(name)?;
        let p = self.prefix;
        // complex numbers have __float__ in numpy (dropping the imaginary part): not reals here
        if is_bool(&v) || v.is_instance_of::<PyString>() || type_name(&v).starts_with("complex") {
            return Err(PyTypeError::new_err(format!("{p}{name} must be a real number, got {}", repr(&v))));
        }
        v.extract::<f64>().map_err(|e| {
            if e.is_instance_of::<PyOverflowError>(v.py()) {
                PyValueError::new_err(format!("{p}{name} must be a finite number, got {}", repr(&v)))
            } else {
                PyTypeError::new_err(format!("{p}{name} must be a real number, got {}", repr(&v)))
            }
        })
    }

    fn flag(&self, name: &str) -> PyResult<bool> {
        let v = self.get(name)?;
        if !is_bool(&v) {
            return Err(PyTypeError::new_err(format!("{name} must be True or False, got {}", repr(&v))));
        }
        v.is_truthy()
    }
}

pub(super) struct PyModelSpec(ModelSpec);

impl<'a, 'py> FromPyObject<'a, 'py> for PyModelSpec {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let f = Fields { obj: &obj, arg: "model", kind: "ModelSpec", prefix: "" };
        Ok(PyModelSpec(ModelSpec {
            n_layers: f.dim("n_layers")?,
            d_model: f.dim("d_model")?,
            n_heads: f.dim("n_heads")?,
            n_kv_heads: f.dim("n_kv_heads")?,
            d_head: f.dim("d_head")?,
            d_ff: f.dim("d_ff")?,
            vocab_size: f.dim("vocab_size")?,
            tie_embeddings: f.flag("tie_embeddings")?,
            bytes_per_param: f.real("bytes_per_param")?,
        }))
    }
}

impl From<PyModelSpec> for ModelSpec {
    fn from(m: PyModelSpec) -> ModelSpec {
        m.0
    }
}

pub(super) struct PyGpuSpec(GpuSpec);

impl<'a, 'py> FromPyObject<'a, 'py> for PyGpuSpec {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let f = Fields { obj: &obj, arg: "gpu", kind: "GpuSpec", prefix: "" };
        Ok(PyGpuSpec(GpuSpec {
            peak_flops: f.real("peak_flops")?,
            hbm_bandwidth: f.real("hbm_bandwidth")?,
            memory_bytes: f.real("memory_bytes")?,
        }))
    }
}

impl From<PyGpuSpec> for GpuSpec {
    fn from(g: PyGpuSpec) -> GpuSpec {
        g.0
    }
}

pub(super) struct PyEfficiency(Efficiency);

impl<'a, 'py> FromPyObject<'a, 'py> for PyEfficiency {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let f = Fields { obj: &obj, arg: "efficiency", kind: "Efficiency", prefix: "efficiency." };
        Ok(PyEfficiency(Efficiency {
            compute: f.real("compute")?,
            bandwidth: f.real("bandwidth")?,
            overhead_s: f.real("overhead_s")?,
        }))
    }
}

impl From<PyEfficiency> for Efficiency {
    fn from(e: PyEfficiency) -> Efficiency {
        e.0
    }
}

type StepTuple = (f64, f64, f64, f64, f64, f64, f64, bool, f64, f64, i64, i64);

fn to_tuple(c: StepCost) -> StepTuple {
    (
        c.time_s,
        c.flops,
        c.bytes_moved,
        c.weight_bytes,
        c.kv_bytes,
        c.compute_s,
        c.memory_s,
        c.compute_bound,
        c.mfu,
        c.intensity,
        c.n_tokens,
        c.n_seqs,
    )
}

/// The dict of the columns `cols` (all of them, unless `step_cost_many` got `columns`).
fn to_dict<'py>(py: Python<'py>, c: StepCosts, cols: Columns) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let put = |name: &str, a: Bound<'py, PyAny>| if cols.has(name) { d.set_item(name, a) } else { Ok(()) };
    put("time_s", c.time_s.into_pyarray(py).into_any())?;
    put("flops", c.flops.into_pyarray(py).into_any())?;
    put("bytes_moved", c.bytes_moved.into_pyarray(py).into_any())?;
    put("weight_bytes", c.weight_bytes.into_pyarray(py).into_any())?;
    put("kv_bytes", c.kv_bytes.into_pyarray(py).into_any())?;
    put("compute_s", c.compute_s.into_pyarray(py).into_any())?;
    put("memory_s", c.memory_s.into_pyarray(py).into_any())?;
    put("compute_bound", c.compute_bound.into_pyarray(py).into_any())?;
    put("mfu", c.mfu.into_pyarray(py).into_any())?;
    put("intensity", c.intensity.into_pyarray(py).into_any())?;
    Ok(d)
}


#[pyfunction]
fn validate_model(model: PyModelSpec) -> PyResult<()> {
    Ok(ModelSpec::from(model).validate()?)
}

#[pyfunction]
fn validate_gpu(gpu: PyGpuSpec) -> PyResult<()> {
    Ok(GpuSpec::from(gpu).validate()?)
}

#[pyfunction]
fn validate_efficiency(efficiency: PyEfficiency) -> PyResult<()> {
    Ok(Efficiency::from(efficiency).validate()?)
}

#[pyfunction]
fn param_count(model: PyModelSpec) -> PyResult<i128> {
    let m = ModelSpec::from(model);
    m.validate()?;
    Ok(m.param_count())
}

#[pyfunction]
fn weight_bytes(model: PyModelSpec) -> PyResult<f64> {
    let m = ModelSpec::from(model);
    m.validate()?;
    Ok(m.weight_bytes())
}

#[pyfunction]
fn kv_bytes_per_token(model: PyModelSpec) -> PyResult<f64> {
    let m = ModelSpec::from(model);
    m.validate()?;
    Ok(m.kv_bytes_per_token())
}

#[pyfunction]
fn kv_capacity_tokens(model: PyModelSpec, gpu: PyGpuSpec, mem_util: f64) -> PyResult<i64> {
    Ok(cost::kv_capacity_tokens(&model.into(), &gpu.into(), mem_util)?)
}

#[pyfunction]
fn max_batch(model: PyModelSpec, gpu: PyGpuSpec, context_len: i64, mem_util: f64) -> PyResult<i64> {
    Ok(cost::max_batch(&model.into(), &gpu.into(), context_len, mem_util)?)
}

#[pyfunction]
fn step_cost(model: PyModelSpec, gpu: PyGpuSpec, efficiency: PyEfficiency, batch: Vec<(i64, i64)>) -> PyResult<StepTuple> {
    let c = cost::step_cost(&model.into(), &gpu.into(), &efficiency.into(), &batch)?;
    Ok(to_tuple(c))
}

/// [`step_cost`] of one batch given as two int64 columns (a batch of millions of sequences
/// crosses as two arrays, not a list of pairs); the same checks and messages.
#[pyfunction]
fn step_cost_columns<'py>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    new_tokens: PyReadonlyArray1<'py, i64>,
    context_len: PyReadonlyArray1<'py, i64>,
) -> PyResult<StepTuple> {
    let (m, g, e) = (model.into(), gpu.into(), efficiency.into());
    let (n, c) = (slice("new_tokens", &new_tokens)?, slice("context_len", &context_len)?);
    let cost = py.detach(|| cost::step_cost_columns(&m, &g, &e, n, c))?;
    Ok(to_tuple(cost))
}

/// `columns` (names of `Columns::NAMES`): fill and return only those.
#[pyfunction]
#[pyo3(signature = (model, gpu, efficiency, new_tokens, context_len, offsets, columns=None))]
#[allow(clippy::too_many_arguments)]
fn step_cost_many<'py>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    new_tokens: PyReadonlyArray1<'py, i64>,
    context_len: PyReadonlyArray1<'py, i64>,
    offsets: PyReadonlyArray1<'py, i64>,
    columns: Option<Vec<String>>,
) -> PyResult<Bound<'py, PyDict>> {
    let (m, g, e) = (model.into(), gpu.into(), efficiency.into());
    let (n, c, o) = (slice("new_tokens", &new_tokens)?, slice("context_len", &context_len)?, slice("offsets", &offsets)?);
    let cols = columns.map_or(Ok(Columns::ALL), |names| Columns::from_names(&names))?;
    // A sweep of a million steps takes milliseconds to seconds: let other Python threads run.
    let costs = py.detach(|| cost::step_cost_many_columns(&m, &g, &e, n, c, o, cols))?;
    to_dict(py, costs, cols)
}

#[pyfunction]
fn step_cost_uniform_many<'py>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    batch_size: PyReadonlyArray1<'py, i64>,
    new_tokens: PyReadonlyArray1<'py, i64>,
    context_len: PyReadonlyArray1<'py, i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let (m, g, e) = (model.into(), gpu.into(), efficiency.into());
    let (b, n, c) = (slice("batch_size", &batch_size)?, slice("new_tokens", &new_tokens)?, slice("context_len", &context_len)?);
    let costs = py.detach(|| cost::step_cost_uniform_many(&m, &g, &e, b, n, c))?;
    to_dict(py, costs, Columns::ALL)
}

/// `step_cost_many` into the caller's arrays: `out` maps column names (`Columns::NAMES`) to
/// writable 1-D arrays of one element per step (float64; bool for `compute_bound`). Reusing the
/// same arrays over many calls costs no fresh memory page.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn step_cost_many_into<'py>(
    py: Python<'py>,
    model: PyModelSpec,
    gpu: PyGpuSpec,
    efficiency: PyEfficiency,
    new_tokens: PyReadonlyArray1<'py, i64>,
    context_len: PyReadonlyArray1<'py, i64>,
    offsets: PyReadonlyArray1<'py, i64>,
    out: &Bound<'py, PyDict>,
) -> PyResult<()> {
    let (m, g, e) = (model.into(), gpu.into(), efficiency.into());
    let (n, c, o) = (slice("new_tokens", &new_tokens)?, slice("context_len", &context_len)?, slice("offsets", &offsets)?);
    let n_steps = o.len().saturating_sub(1);
    if out.is_empty() {
        return Err(PyValueError::new_err("out must name at least one column, got an empty dict"));
    }
    let mut floats: Vec<(usize, PyReadwriteArray1<'py, f64>)> = Vec::new();
    let mut bools: Option<PyReadwriteArray1<'py, bool>> = None;
    for (key, value) in out.iter() {
        let name: String = key.extract().map_err(|_| PyValueError::new_err(format!("out keys must be column names, got {}", key.repr().map(|r| r.to_string()).unwrap_or_default())))?;
        let Some(k) = Columns::NAMES.iter().position(|&x| x == name) else {
            return Err(PyValueError::new_err(format!("out['{name}']: the key must be one of {}", Columns::NAMES.join(", "))));
        };
        let bad = |what: &str| {
            PyValueError::new_err(format!("out['{name}'] must be a writable 1-D {what} numpy array of {n_steps} elements (one per step)"))
        };
        let dtype = if name == "compute_bound" { "bool" } else { "float64" };
        if name == "compute_bound" {
            let a = value.cast::<PyArray1<bool>>().map_err(|_| bad(dtype))?;
            let w = a.try_readwrite().map_err(|_| bad(dtype))?;
            if w.as_slice().ok().map(|s| s.len()) != Some(n_steps) {
                return Err(bad(dtype));
            }
            bools = Some(w);
        } else {
            let a = value.cast::<PyArray1<f64>>().map_err(|_| bad(dtype))?;
            let w = a.try_readwrite().map_err(|_| bad(dtype))?;
            if w.as_slice().ok().map(|s| s.len()) != Some(n_steps) {
                return Err(bad(dtype));
            }
            floats.push((k, w));
        }
    }
    let mut float_cols: Vec<(usize, &mut [f64])> = Vec::with_capacity(floats.len());
    for (k, w) in floats.iter_mut() {
        float_cols.push((*k, w.as_slice_mut().expect("checked contiguous above")));
    }
    let mut bool_col: Option<&mut [bool]> = bools.as_mut().map(|w| w.as_slice_mut().expect("checked contiguous above"));
    py.detach(|| {
        cost::step_cost_many_each(&m, &g, &e, n, c, o, |s, cost| {
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
    m.add_function(wrap_pyfunction!(validate_model, m)?)?;
    m.add_function(wrap_pyfunction!(validate_gpu, m)?)?;
    m.add_function(wrap_pyfunction!(validate_efficiency, m)?)?;
    m.add_function(wrap_pyfunction!(param_count, m)?)?;
    m.add_function(wrap_pyfunction!(weight_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(kv_bytes_per_token, m)?)?;
    m.add_function(wrap_pyfunction!(kv_capacity_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(max_batch, m)?)?;
    m.add_function(wrap_pyfunction!(step_cost, m)?)?;
    m.add_function(wrap_pyfunction!(step_cost_columns, m)?)?;
    m.add_function(wrap_pyfunction!(step_cost_many, m)?)?;
    m.add_function(wrap_pyfunction!(step_cost_many_into, m)?)?;
    m.add_function(wrap_pyfunction!(step_cost_uniform_many, m)?)?;
    Ok(())
}
