//! Bindings of the paged KV block allocator (`blocks.rs`) and its `OutOfBlocks` error.
//!
//! Token ids are read with the same checks, in the same order, and with the same messages as
//! the course copy's pure-Python twin of the allocator: first a fast path for a list, tuple
//! or array of machine integers; when it fails, a slow path walks the items with
//! `operator.index` to name the first bad one exactly as the reference would.

use super::convert::{add_functions, dict_of, repr, slice, type_name, ToPy};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::blocks::{self, BlockAllocator, Stats};

dict_of!(Stats {
    num_blocks, block_size, num_free_blocks, num_cached_blocks, num_seqs, num_hits, num_lookups, num_evictions, num_copies,
    host_blocks, num_host_cached_blocks, num_host_hits, num_offloads, num_host_evictions,
});

// Named after its public home, `servelab.blocks` (which re-exports it), so tracebacks and
// pickles name the module users import. A RuntimeError, not a MemoryError: running out of KV
// blocks is an ordinary, recoverable scheduling event (the engine preempts or waits), and
// `except MemoryError` is for the interpreter's own heap.
pyo3::create_exception!(
    servelab.blocks,
    OutOfBlocks,
    PyRuntimeError,
    "The KV block pool cannot serve an allocate or append; the allocator is unchanged."
);

fn slow_token(py: Python<'_>, name: &str, item: &Bound<'_, PyAny>) -> PyResult<i64> {
    let index = py.import("operator")?.getattr("index")?;
    let v = index.call1((item,)).map_err(|_| PyTypeError::new_err(format!("{name} must be an integer, got {}", repr(item))))?;
    match v.extract::<i64>() {
        Ok(t) => Ok(t),
        Err(_) => Err(PyValueError::new_err(format!("{name} must be in [0, {}), got {}", blocks::TOKEN_LIMIT, v.str()?))),
    }
}

fn extract_tokens(obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    let is_text = obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>();
    if !is_text {
        if let Ok(v) = obj.extract::<Vec<i64>>() {
            return Ok(v);
        }
    }
    let not_a_sequence =
        || PyTypeError::new_err(format!("token_ids must be a sequence of integers, got {}", type_name(obj)));
    if is_text {
        return Err(not_a_sequence());
    }
    let iter = obj.try_iter().map_err(|_| not_a_sequence())?;
    let py = obj.py();
    let mut out = Vec::new();
    for (i, item) in iter.enumerate() {
        out.push(slow_token(py, &format!("token_ids[{i}]"), &item?)?);
    }
    Ok(out)
}

fn extract_token(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    obj.extract::<i64>().or_else(|_| slow_token(obj.py(), "token_id", obj))
}


type I64Array<'py> = Bound<'py, PyArray1<i64>>;

/// `f` of the integer arguments `args` (name, value), as i64. A TypeError or OverflowError (a
/// bad integer, or a bad token after a bool id) becomes the error of
/// `servelab._checks.reraise_named` over all of them: it names the first bad one, so the message
/// says which argument it is about (PyO3's says only "'str' object cannot be interpreted as an
/// integer"). Nothing runs on that path unless there is an error.
fn named<const N: usize, T>(args: [(&str, &Bound<'_, PyAny>); N], f: impl FnOnce([i64; N]) -> PyResult<T>) -> PyResult<T> {
    let run = || {
        let mut ints = [0; N];
        for (slot, (_, v)) in ints.iter_mut().zip(&args) {
            *slot = v.extract()?;
        }
        f(ints)
    };
    run().map_err(|e| {
        let py = args[0].1.py(); // every caller names at least one argument
        if !(e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<PyOverflowError>(py)) {
            return e;
        }
        let renamed = (|| {
            let d = pyo3::types::PyDict::new(py);
            for (name, value) in &args {
                d.set_item(name, value)?;
            }
            py.import("servelab._checks")?.getattr("reraise_named")?.call1((e.value(py), d))
        })();
        renamed.err().unwrap_or(e)
    })
}

/// The paged KV block allocator; `servelab.blocks.BlockAllocator` wraps it. A bad integer
/// argument gets a message naming it (`ints`); the sizes and counters are read with `stats()`.
#[pyclass(module = "servelab._core", name = "BlockAllocator")]
pub struct PyBlockAllocator {
    inner: BlockAllocator,
}

#[pymethods]
impl PyBlockAllocator {
    #[new]
    #[pyo3(signature = (num_blocks, block_size, prefix_caching = false, host_blocks = 0, host_policy = "lru"))]
    fn new(num_blocks: i64, block_size: i64, prefix_caching: bool, host_blocks: i64, host_policy: &str) -> PyResult<Self> {
        let inner = BlockAllocator::with_host_tier(num_blocks, block_size, prefix_caching, host_blocks, host_policy)?;
        Ok(PyBlockAllocator { inner })
    }

    // ---- the host tier (§8 milestone 4b) ----

    /// `(kind, block_id or None, key, hits)` for each offload, recall and drop since the last call.
    fn take_transfers(&mut self) -> Vec<(&'static str, Option<u32>, u64, u32)> {
        self.inner.take_transfers().into_iter().map(|t| (t.kind.name(), t.block, t.key, t.hits)).collect()
    }
    fn host_keys(&self) -> Vec<u64> {
        self.inner.host_keys()
    }

    #[pyo3(signature = (seq_id, token_ids, num_computed = None))]
    fn allocate(&mut self, seq_id: &Bound<'_, PyAny>, token_ids: &Bound<'_, PyAny>, num_computed: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<u32>> {
        let mut run = |seq_id, num_computed| Ok(self.inner.allocate(seq_id, &extract_tokens(token_ids)?, num_computed)?.to_vec());
        match num_computed {
            None => named([("seq_id", seq_id)], |[s]| run(s, None)),
            Some(c) => named([("seq_id", seq_id), ("num_computed", c)], |[s, c]| run(s, Some(c))),
        }
    }
    fn mark_computed(&mut self, seq_id: &Bound<'_, PyAny>, num_computed: &Bound<'_, PyAny>) -> PyResult<()> {
        named([("seq_id", seq_id), ("num_computed", num_computed)], |[s, c]| Ok(self.inner.mark_computed(s, c)?))
    }
    fn append(&mut self, seq_id: &Bound<'_, PyAny>, token_id: &Bound<'_, PyAny>) -> PyResult<Option<(u32, u32)>> {
        named([("seq_id", seq_id)], |[s]| Ok(self.inner.append(s, extract_token(token_id)?)?))
    }
    fn fork(&mut self, parent_id: &Bound<'_, PyAny>, child_id: &Bound<'_, PyAny>) -> PyResult<()> {
        named([("parent_id", parent_id), ("child_id", child_id)], |[p, c]| Ok(self.inner.fork(p, c)?))
    }
    fn free(&mut self, seq_id: &Bound<'_, PyAny>) -> PyResult<()> {
        named([("seq_id", seq_id)], |[s]| Ok(self.inner.free(s)?))
    }
    fn block_table(&self, seq_id: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
        named([("seq_id", seq_id)], |[s]| Ok(self.inner.block_table(s)?.to_vec()))
    }
    fn num_tokens(&self, seq_id: &Bound<'_, PyAny>) -> PyResult<usize> {
        named([("seq_id", seq_id)], |[s]| Ok(self.inner.num_tokens(s)?))
    }
    fn num_cached_tokens(&self, seq_id: &Bound<'_, PyAny>) -> PyResult<usize> {
        named([("seq_id", seq_id)], |[s]| Ok(self.inner.num_cached_tokens(s)?))
    }
    fn can_allocate(&self, n_tokens: &Bound<'_, PyAny>) -> PyResult<bool> {
        named([("n_tokens", n_tokens)], |[n]| Ok(self.inner.can_allocate(n)?))
    }
    fn can_append(&self, seq_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        named([("seq_id", seq_id)], |[s]| Ok(self.inner.can_append(s)?))
    }
    fn block_tokens(&self, block_id: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
        named([("block_id", block_id)], |[b]| Ok(self.inner.block_tokens(b)?.to_vec()))
    }
    fn key_of(&self, block_id: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        named([("block_id", block_id)], |[b]| Ok(self.inner.block_key_of(b)?))
    }

    fn __contains__(&self, seq_id: i64) -> bool {
        self.inner.contains(seq_id)
    }
    fn __len__(&self) -> usize {
        self.inner.num_seqs()
    }
    fn seq_ids(&self) -> Vec<i64> {
        self.inner.seq_ids()
    }
    fn block_tables<'py>(&self, py: Python<'py>) -> (I64Array<'py>, I64Array<'py>, I64Array<'py>) {
        let (ids, offsets, blocks) = self.inner.block_tables();
        (ids.into_pyarray(py), offsets.into_pyarray(py), blocks.into_pyarray(py))
    }
    fn ref_counts<'py>(&self, py: Python<'py>) -> I64Array<'py> {
        self.inner.ref_counts().into_pyarray(py)
    }
    fn free_queue<'py>(&self, py: Python<'py>) -> I64Array<'py> {
        self.inner.free_queue().into_pyarray(py)
    }

    /// Sizes and counters, a dict of `Stats`' fields; the two settings not in it, and the one
    /// count an engine reads every step, have getters of their own.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.stats().to_py(py)
    }
    #[getter]
    fn prefix_caching(&self) -> bool {
        self.inner.prefix_caching()
    }
    #[getter]
    fn host_policy(&self) -> &'static str {
        self.inner.host_policy().name()
    }
    #[getter]
    fn num_free_blocks(&self) -> usize {
        self.inner.num_free_blocks()
    }

    fn replay<'py>(
        &mut self,
        py: Python<'py>,
        op: PyReadonlyArray1<'py, i64>,
        seq: PyReadonlyArray1<'py, i64>,
        arg: PyReadonlyArray1<'py, i64>,
        tokens: PyReadonlyArray1<'py, i64>,
        offsets: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let (o, s, a) = (slice("op", &op)?, slice("seq", &seq)?, slice("arg", &arg)?);
        let (t, f) = (slice("tokens", &tokens)?, slice("offsets", &offsets)?);
        let inner = &mut self.inner;
        // A long trace runs for a while: let other Python threads go on meanwhile.
        let status = py.detach(|| inner.replay(o, s, a, t, f))?;
        Ok(status.into_pyarray(py))
    }

    /// One step's appends in one call (`blocks.rs`'s `append_many`): `(done, copy_src,
    /// copy_dst)`, the copies `-1` where an append made none.
    fn append_many<'py>(
        &mut self,
        py: Python<'py>,
        seq_ids: PyReadonlyArray1<'py, i64>,
        token_ids: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<(usize, I64Array<'py>, I64Array<'py>)> {
        let (s, t) = (slice("seq_ids", &seq_ids)?, slice("token_ids", &token_ids)?);
        let r = self.inner.append_many(s, t)?;
        Ok((r.done, r.copy_src.into_pyarray(py), r.copy_dst.into_pyarray(py)))
    }

    fn free_many(&mut self, seq_ids: PyReadonlyArray1<'_, i64>) -> PyResult<()> {
        Ok(self.inner.free_many(slice("seq_ids", &seq_ids)?)?)
    }

    fn check_invariants(&self) -> PyResult<()> {
        self.inner.check_invariants().map_err(PyRuntimeError::new_err)
    }

    fn __repr__(&self) -> String {
        let a = &self.inner;
        format!(
            "BlockAllocator(num_blocks={}, block_size={}, prefix_caching={}, free={}, seqs={})",
            a.num_blocks(),
            a.block_size(),
            if a.prefix_caching() { "True" } else { "False" },
            a.num_free_blocks(),
            a.num_seqs()
        )
    }
}

/// The cache key of a full block: the hash chain step over its parent's key and its tokens.
#[pyfunction]
fn block_key(parent_key: u64, token_ids: &Bound<'_, PyAny>) -> PyResult<u64> {
    let in_range = |(i, t): (usize, i64)| {
        u32::try_from(t).ok().filter(|_| t < blocks::TOKEN_LIMIT).ok_or_else(|| {
            PyValueError::new_err(format!("token_ids[{i}] must be in [0, {}), got {t}", blocks::TOKEN_LIMIT))
        })
    };
    let tokens = extract_tokens(token_ids)?.into_iter().enumerate().map(in_range).collect::<PyResult<Vec<u32>>>()?;
    Ok(blocks::block_key(parent_key, &tokens))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("OutOfBlocks", py.get_type::<OutOfBlocks>())?;
    m.add("MAX_NUM_BLOCKS", blocks::MAX_NUM_BLOCKS)?;
    m.add("MAX_BLOCK_SIZE", blocks::MAX_BLOCK_SIZE)?;
    m.add("TOKEN_LIMIT", blocks::TOKEN_LIMIT)?;
    m.add("ROOT_KEY", blocks::ROOT_KEY)?;
    m.add_class::<PyBlockAllocator>()?;
    add_functions!(m, block_key);
    Ok(())
}
