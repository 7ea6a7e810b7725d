//! How values cross to Python: [`ToPy`] (a column becomes a numpy array, a struct of columns a
//! dict, through [`dict_of!`]), numpy slices in, and the helpers every binding file shares.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::IntoPyObjectExt;

/// A 1-D numpy array's data as a slice; a non-contiguous array is a ValueError naming `name`
/// (the Python wrappers pass `np.ascontiguousarray`, so users rarely see it).
pub(super) fn slice<'a, T: numpy::Element>(name: &str, a: &'a numpy::PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a contiguous 1-D array")))
}

/// What Python gets for a core value: a column (`Vec`) becomes a numpy array (moved, not
/// copied), a number stays a number, `None` stays `None`, a struct of columns becomes a dict
/// (see [`dict_of!`]).
pub(crate) trait ToPy {
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

impl<T: numpy::Element> ToPy for Vec<T> {
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(numpy::IntoPyArray::into_pyarray(self, py).into_any())
    }
}

impl<T: ToPy> ToPy for Option<T> {
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.map_or_else(|| Ok(py.None().into_bound(py)), |v| v.to_py(py))
    }
}

macro_rules! scalars_to_py {
    ($($t:ty),*) => {$(
        impl ToPy for $t {
            fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.into_bound_py_any(py)
            }
        }
    )*};
}
scalars_to_py!(bool, f64, i64, u64, usize);

/// A result and the extra columns some runs add: one dict, the extra keys after the result's.
impl<A: ToPy, B: ToPy> ToPy for (A, Option<B>) {
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = to_dict(py, self.0)?;
        if let Some(extra) = self.1 {
            merge(&d, extra)?;
        }
        Ok(d.into_any())
    }
}

/// `ToPy` for a struct of the core: the dict of the fields listed, keyed by their names; with
/// `..base` first, the fields of `base` (itself a `ToPy` dict) come first, flattened in.
macro_rules! dict_of {
    ($ty:path { $(..$base:ident,)? $($field:ident),* $(,)? }) => {
        impl $crate::py::convert::ToPy for $ty {
            fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let d = pyo3::types::PyDict::new(py);
                $( $crate::py::convert::merge(&d, self.$base)?; )?
                $( d.set_item(pyo3::intern!(py, stringify!($field)), $crate::py::convert::ToPy::to_py(self.$field, py)?)?; )*
                Ok(d.into_any())
            }
        }
    };
}
pub(crate) use dict_of;

/// The dict that [`ToPy`] made of `value`.
pub(super) fn to_dict<'py>(py: Python<'py>, value: impl ToPy) -> PyResult<Bound<'py, PyDict>> {
    Ok(value.to_py(py)?.cast_into::<PyDict>()?)
}

/// Adds the items of `value`'s dict to `d`.
pub(crate) fn merge(d: &Bound<'_, PyDict>, value: impl ToPy) -> PyResult<()> {
    d.update(to_dict(d.py(), value)?.as_mapping())
}

/// The type's name of `obj`, and its `repr`, for messages.
pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

pub(super) fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into())
}

/// Adds the `#[pyfunction]`s listed to module `$m`.
macro_rules! add_functions {
    ($m:expr, $($f:ident),* $(,)?) => {{
        $( $m.add_function(wrap_pyfunction!($f, $m)?)?; )*
    }};
}
pub(crate) use add_functions;
