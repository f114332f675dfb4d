//! simcore: exact top-k inner-product search.
//!
//! The algorithms live in the modules below; `python` only holds the
//! bindings (argument conversion, GIL release, error mapping).

pub mod binary;
pub mod cpu;
pub mod error;
pub mod file;
pub mod index;
pub mod kernels;
pub mod quant;
pub mod search;
pub mod topk;
pub mod upload;

#[cfg(feature = "python")]
mod python {
    use std::path::PathBuf;
    use std::sync::{Mutex, RwLock};

    use numpy::{
        AllowTypeChange, IntoPyArray, PyArray1, PyArray2, PyArrayLike1, PyArrayLike2,
        PyArrayMethods, PyUntypedArrayMethods,
    };
    use pyo3::create_exception;
    use pyo3::exceptions::{PyOSError, PyValueError};
    use pyo3::prelude::*;
    use pyo3::types::{PyBytes, PyFloat, PyInt, PyList};

    use crate::cpu;
    use crate::error::SimcoreError;
    use crate::index::{Index as CoreIndex, Mode};
    use crate::quant;
    use crate::search::top_k_f32;
    use crate::topk::Hit;

    create_exception!(
        simcore,
        SimcoreValueError,
        PyValueError,
        "Invalid input to simcore."
    );
    create_exception!(
        simcore,
        DimensionMismatchError,
        SimcoreValueError,
        "A vector has the wrong dimension."
    );
    create_exception!(
        simcore,
        NonFiniteError,
        SimcoreValueError,
        "An input holds NaN or infinity."
    );

    fn to_py(err: SimcoreError) -> PyErr {
        let msg = err.to_string();
        match err {
            SimcoreError::DimensionMismatch { .. } => DimensionMismatchError::new_err(msg),
            SimcoreError::NonFinite { .. } => NonFiniteError::new_err(msg),
            SimcoreError::Invalid(_) => SimcoreValueError::new_err(msg),
            SimcoreError::Io(_) => PyOSError::new_err(msg),
        }
    }

    type Scored<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f32>>);
    type IdsScores<'py> = (Vec<String>, Bound<'py, PyArray1<f32>>);
    /// Ids with their approximate and exact scores.
    type IdsTwoScores<'py> = (
        Vec<String>,
        Bound<'py, PyArray1<f32>>,
        Bound<'py, PyArray1<f32>>,
    );

    /// Owned copy of a 2-D float array plus its column count.
    /// The rows of a 2-D array in row-major order, borrowed when the array is
    /// C-contiguous. (`as_slice` also accepts Fortran order, whose memory is
    /// column-major: reading it as rows would transpose the matrix.)
    fn row_major<'a>(values: &'a PyArrayLike2<'_, f32, AllowTypeChange>) -> Option<&'a [f32]> {
        if values.is_c_contiguous() {
            values.as_slice().ok()
        } else {
            None
        }
    }

    fn matrix(values: &PyArrayLike2<'_, f32, AllowTypeChange>) -> (Vec<f32>, usize, usize) {
        let shape = values.shape();
        let owned = match row_major(values) {
            Some(slice) => slice.to_vec(),
            None => values.as_array().iter().copied().collect(),
        };
        (owned, shape[0], shape[1])
    }

    fn vector(values: &PyArrayLike1<'_, f32, AllowTypeChange>) -> Vec<f32> {
        match values.as_slice() {
            Ok(slice) => slice.to_vec(),
            Err(_) => values.as_array().iter().copied().collect(),
        }
    }

    /// Exact top-k rows of `rows` (n x d) by inner product with `query` (d).
    /// Returns (row indices, scores), best first; ties go to the lower row.
    #[pyfunction]
    #[pyo3(signature = (rows, query, k))]
    fn top_k<'py>(
        py: Python<'py>,
        rows: PyArrayLike2<'py, f32, AllowTypeChange>,
        query: PyArrayLike1<'py, f32, AllowTypeChange>,
        k: usize,
    ) -> PyResult<Scored<'py>> {
        let dim = rows.shape()[1];
        if dim == 0 {
            return Err(SimcoreValueError::new_err(
                "rows must have at least one column",
            ));
        }
        let query = vector(&query);
        // A C-contiguous float32 array is scanned in place: `rows` holds a
        // read-only borrow (and a reference) for the whole call, and the scan
        // touches no Python object, so the GIL is released for it. Any other
        // layout or dtype is converted once (numpy's own copy).
        let copied;
        let values: &[f32] = match row_major(&rows) {
            Some(slice) => slice,
            None => {
                copied = matrix(&rows).0;
                &copied
            }
        };
        let hits = py
            .detach(|| top_k_f32(values, dim, &query, k))
            .map_err(to_py)?;
        let ids: Vec<i64> = hits.iter().map(|h| h.row as i64).collect();
        let scores: Vec<f32> = hits.iter().map(|h| h.score).collect();
        Ok((ids.into_pyarray(py), scores.into_pyarray(py)))
    }

    /// max-scale int8 codes in [-127, 127] (Lucidworks `vectorQuantizationMethod`).
    #[pyfunction]
    fn quantize_max_scale<'py>(
        py: Python<'py>,
        x: PyArrayLike1<'py, f32, AllowTypeChange>,
    ) -> PyResult<Bound<'py, PyArray1<i8>>> {
        let x = vector(&x);
        crate::error::check_finite(&x, "vector").map_err(to_py)?;
        Ok(quant::max_scale(&x).0.into_pyarray(py))
    }

    /// min-max uint8 codes in [0, 255].
    #[pyfunction]
    fn quantize_min_max<'py>(
        py: Python<'py>,
        x: PyArrayLike1<'py, f32, AllowTypeChange>,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let x = vector(&x);
        crate::error::check_finite(&x, "vector").map_err(to_py)?;
        Ok(quant::min_max(&x).into_pyarray(py))
    }

    /// Keep the first `n` dimensions and L2-normalise them.
    #[pyfunction]
    fn reduce_dims<'py>(
        py: Python<'py>,
        x: PyArrayLike1<'py, f32, AllowTypeChange>,
        n: usize,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let x = vector(&x);
        crate::error::check_finite(&x, "vector").map_err(to_py)?;
        Ok(quant::reduce_dims(&x, n).map_err(to_py)?.into_pyarray(py))
    }

    /// Rows of numbers (lists of Python ints/floats, as parsed from JSON) as an
    /// (n, d) float32 array, strictly: booleans, strings and other types are
    /// rejected, rows must be equally long, values must fit in float32.
    /// `label` names a row in errors, "{}" standing for its index
    /// (e.g. "items[{}].vector").
    #[pyfunction]
    #[pyo3(signature = (rows, label = "rows[{}]"))]
    fn matrix_from_lists<'py>(
        py: Python<'py>,
        rows: &Bound<'py, PyList>,
        label: &str,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let name = |i: usize| label.replace("{}", &i.to_string());
        let n = rows.len();
        let mut dim = 0usize;
        let mut values: Vec<f32> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let row = row.cast::<PyList>().map_err(|_| {
                SimcoreValueError::new_err(format!("{} must be a list of numbers", name(i)))
            })?;
            if i == 0 {
                dim = row.len();
                values.reserve(n * dim);
            } else if row.len() != dim {
                return Err(DimensionMismatchError::new_err(format!(
                    "{} has {} dimensions, {} has {dim}",
                    name(i),
                    row.len(),
                    name(0)
                )));
            }
            for (j, item) in row.iter().enumerate() {
                let value = if let Ok(f) = item.cast_exact::<PyFloat>() {
                    f.value()
                } else if item.is_exact_instance_of::<PyInt>() {
                    item.extract::<f64>()?
                } else {
                    return Err(SimcoreValueError::new_err(format!(
                        "{}[{j}] must be a number, got {}",
                        name(i),
                        item.get_type().name()?
                    )));
                };
                let narrowed = value as f32;
                if !narrowed.is_finite() {
                    return Err(NonFiniteError::new_err(format!(
                        "{}[{j}] = {value:e} is outside the float32 range",
                        name(i)
                    )));
                }
                values.push(narrowed);
            }
        }
        let array = PyArray1::from_vec(py, values);
        array.reshape([n, dim])
    }

    /// A JSON upload body split in one pass, the GIL released: the items'
    /// vectors as one (n, d) float32 array, and the body without them.
    /// Returns (field, rest, vectors or None, problem or None), or None for a
    /// body it does not handle (see `upload::split_upload`).
    #[pyfunction]
    #[allow(clippy::type_complexity)]
    fn split_upload<'py>(
        py: Python<'py>,
        body: &[u8],
    ) -> PyResult<
        Option<(
            &'static str,
            Bound<'py, PyBytes>,
            Option<Bound<'py, PyArray2<f32>>>,
            Option<String>,
        )>,
    > {
        let Some(split) = py.detach(|| crate::upload::split_upload(body)) else {
            return Ok(None);
        };
        let rest = PyBytes::new(py, &split.rest);
        let (matrix, problem) = match split.vectors {
            Ok(None) => (None, None),
            Ok(Some(m)) => (
                Some(PyArray1::from_vec(py, m.values).reshape([m.rows, m.dim])?),
                None,
            ),
            Err(problem) => (None, Some(problem.message().to_string())),
        };
        Ok(Some((split.field, rest, matrix, problem)))
    }

    /// The SIMD level in use (capped by the SIMCORE_SIMD environment variable).
    #[pyfunction]
    fn simd_level() -> &'static str {
        cpu::level().name()
    }

    /// The popcount the binary (Hamming) scan uses: `vpopcntdq`, `avx2`, `cnt` (NEON) or `scalar`.
    #[pyfunction]
    fn popcount_kernel() -> &'static str {
        crate::kernels::Kernels::get().popcount
    }

    /// Every SIMD level this machine supports, slowest first.
    #[pyfunction]
    fn supported_simd_levels() -> Vec<&'static str> {
        cpu::supported().into_iter().map(cpu::Level::name).collect()
    }

    fn parse_mode(mode: &str, oversample: usize) -> PyResult<Mode> {
        match mode {
            "exact" => Ok(Mode::Exact),
            "int8" if oversample >= 1 => Ok(Mode::Int8 { oversample }),
            "binary" if oversample >= 1 => Ok(Mode::Binary { oversample }),
            "int8" | "binary" => Err(SimcoreValueError::new_err("oversample must be >= 1")),
            other => Err(SimcoreValueError::new_err(format!(
                "mode must be 'exact', 'int8' or 'binary', got {other:?}"
            ))),
        }
    }

    fn check_k(k: usize) -> PyResult<()> {
        if k == 0 || k > 100_000 {
            return Err(SimcoreValueError::new_err(format!(
                "k must be 1..=100000, got {k}"
            )));
        }
        Ok(())
    }

    /// A collection's vectors: string ids, upsert/delete, exact top-k search.
    /// Thread-safe: searches run in parallel (without the GIL), writes are
    /// exclusive. The lock is only ever taken without the GIL, so a thread
    /// holding it never waits for the GIL held by one waiting for it.
    #[pyclass(frozen, module = "flask_app.simcore")]
    struct Index {
        inner: RwLock<CoreIndex>,
        /// One compaction at a time: two would write the same new generation.
        compacting: Mutex<()>,
    }

    impl Index {
        fn read(&self) -> std::sync::RwLockReadGuard<'_, CoreIndex> {
            self.inner.read().unwrap_or_else(|e| e.into_inner())
        }

        fn write(&self) -> std::sync::RwLockWriteGuard<'_, CoreIndex> {
            self.inner.write().unwrap_or_else(|e| e.into_inner())
        }

        fn wrap(index: CoreIndex) -> Self {
            Index {
                inner: RwLock::new(index),
                compacting: Mutex::new(()),
            }
        }

        /// `f` with shared access, run without the GIL.
        fn reading<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&CoreIndex) -> R + Send) -> R {
            py.detach(|| f(&self.read()))
        }

        /// `f` with exclusive access, run without the GIL.
        fn writing<R: Send>(
            &self,
            py: Python<'_>,
            f: impl FnOnce(&mut CoreIndex) -> R + Send,
        ) -> R {
            py.detach(|| f(&mut self.write()))
        }

        /// A binary search builds the sign-bit codes first when they are missing.
        fn codes_for(&self, py: Python<'_>, mode: Mode) {
            if matches!(mode, Mode::Binary { .. }) && !self.reading(py, CoreIndex::has_binary) {
                self.writing(py, CoreIndex::build_binary);
            }
        }

        /// Row numbers of `ids` (unknown ids left out), ascending, once each.
        fn rows_of(index: &CoreIndex, ids: &[String]) -> Vec<u32> {
            let mut rows: Vec<u32> = ids.iter().filter_map(|id| index.row_of(id)).collect();
            rows.sort_unstable();
            rows.dedup();
            rows
        }

        fn owned_hits(index: &CoreIndex, hits: &[Hit]) -> (Vec<String>, Vec<f32>) {
            let ids = hits.iter().map(|h| index.id_of(h.row).to_owned()).collect();
            (ids, hits.iter().map(|h| h.score).collect())
        }
    }

    #[pymethods]
    impl Index {
        /// An empty in-memory index of dimension `dim`.
        #[new]
        fn new(dim: usize) -> PyResult<Self> {
            Ok(Self::wrap(CoreIndex::new(dim).map_err(to_py)?))
        }

        /// Create an empty persistent index in directory `path`.
        #[staticmethod]
        fn create(py: Python<'_>, path: PathBuf, dim: usize) -> PyResult<Self> {
            Ok(Self::wrap(
                py.detach(|| CoreIndex::create(&path, dim)).map_err(to_py)?,
            ))
        }

        /// Open the persistent index in directory `path`.
        #[staticmethod]
        fn open(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
            Ok(Self::wrap(
                py.detach(|| CoreIndex::open(&path)).map_err(to_py)?,
            ))
        }

        #[getter]
        fn dim(&self, py: Python<'_>) -> usize {
            self.reading(py, CoreIndex::dim)
        }

        /// Stored rows including deleted ones (what a scan reads).
        #[getter]
        fn rows(&self, py: Python<'_>) -> usize {
            self.reading(py, CoreIndex::rows)
        }

        #[getter]
        fn deleted_rows(&self, py: Python<'_>) -> usize {
            self.reading(py, CoreIndex::deleted_rows)
        }

        #[getter]
        fn path(&self, py: Python<'_>) -> Option<PathBuf> {
            self.reading(py, |index| index.path().map(PathBuf::from))
        }

        /// Threads one search may use (default: available cores).
        #[getter]
        fn threads(&self, py: Python<'_>) -> usize {
            self.reading(py, CoreIndex::threads)
        }

        #[setter]
        fn set_threads(&self, py: Python<'_>, threads: usize) {
            self.writing(py, |index| index.set_threads(threads));
        }

        fn __len__(&self, py: Python<'_>) -> usize {
            self.reading(py, CoreIndex::len)
        }

        fn __contains__(&self, py: Python<'_>, id: &str) -> bool {
            self.reading(py, |index| index.contains(id))
        }

        /// The stored vector of `id`, or None.
        fn get<'py>(&self, py: Python<'py>, id: &str) -> Option<Bound<'py, PyArray1<f32>>> {
            self.reading(py, |index| index.get(id))
                .map(|v| v.into_pyarray(py))
        }

        /// Insert or replace `vectors` (n x dim) under `ids` (n strings).
        /// Returns (inserted, replaced). The whole batch is validated first.
        /// `stage_upsert` then `publish`.
        fn upsert(
            &self,
            py: Python<'_>,
            ids: Vec<String>,
            vectors: PyArrayLike2<'_, f32, AllowTypeChange>,
        ) -> PyResult<(usize, usize)> {
            self.stage_upsert(py, ids, vectors)?;
            let stats = self.writing(py, CoreIndex::publish).ok_or_else(|| {
                SimcoreValueError::new_err("the staged upsert was published by another call")
            })?;
            Ok((stats.inserted, stats.replaced))
        }

        /// Validate, encode and (when persistent) durably append `vectors`
        /// under `ids` without making them visible: searches go on meanwhile
        /// and do not see them until `publish`. Until then another stage, a
        /// delete or a compaction is refused.
        fn stage_upsert(
            &self,
            py: Python<'_>,
            ids: Vec<String>,
            vectors: PyArrayLike2<'_, f32, AllowTypeChange>,
        ) -> PyResult<()> {
            let (values, n, d) = matrix(&vectors);
            if n != ids.len() {
                return Err(SimcoreValueError::new_err(format!(
                    "{} ids for {n} vectors",
                    ids.len()
                )));
            }
            let dim = self.reading(py, CoreIndex::dim);
            if n > 0 && d != dim {
                return Err(to_py(SimcoreError::DimensionMismatch {
                    expected: dim,
                    got: d,
                }));
            }
            self.reading(py, move |index| index.stage_upsert(ids, values))
                .map_err(to_py)
        }

        /// Make the staged upsert visible (brief exclusive access). Returns
        /// (inserted, replaced), or None when nothing is staged.
        fn publish(&self, py: Python<'_>) -> Option<(usize, usize)> {
            self.writing(py, CoreIndex::publish)
                .map(|stats| (stats.inserted, stats.replaced))
        }

        /// True while a staged upsert waits for `publish`.
        #[getter]
        fn has_staged(&self, py: Python<'_>) -> bool {
            self.reading(py, CoreIndex::has_staged)
        }

        /// Delete ids; returns, per id, whether it was present.
        fn delete(&self, py: Python<'_>, ids: Vec<String>) -> PyResult<Vec<bool>> {
            self.writing(py, |index| index.delete(&ids)).map_err(to_py)
        }

        /// Drop deleted rows from storage. Searches go on while the live rows
        /// are rewritten (read access); only the switch to them excludes them.
        /// Returns false, changing nothing, when a write came in between.
        fn compact(&self, py: Python<'_>) -> PyResult<bool> {
            py.detach(|| {
                let _one = self.compacting.lock().unwrap_or_else(|e| e.into_inner());
                let prepared = self.read().prepare_compaction()?;
                self.write().finish_compaction(prepared)
            })
            .map_err(to_py)
        }

        /// Build the sign-bit codes binary searches scan (in memory, derived
        /// from the f32 rows; kept up to date by later writes). A no-op when built.
        fn build_binary(&self, py: Python<'_>) {
            self.writing(py, CoreIndex::build_binary);
        }

        /// Bytes the sign-bit codes hold in memory (0 when not built).
        #[getter]
        fn binary_bytes(&self, py: Python<'_>) -> usize {
            self.reading(py, CoreIndex::binary_bytes)
        }

        /// Top-k ids and scores for `query`, best first (ties: earlier insert).
        /// mode "exact" scans f32; "int8" scans int8 codes and "binary" sign
        /// bits (Hamming distance), then rescore the best k x oversample
        /// exactly. `allow` restricts the search to those ids.
        #[pyo3(signature = (query, k, *, mode = "exact", oversample = 4, allow = None))]
        fn search<'py>(
            &self,
            py: Python<'py>,
            query: PyArrayLike1<'py, f32, AllowTypeChange>,
            k: usize,
            mode: &str,
            oversample: usize,
            allow: Option<Vec<String>>,
        ) -> PyResult<IdsScores<'py>> {
            check_k(k)?;
            let mode = parse_mode(mode, oversample)?;
            let query = vector(&query);
            self.codes_for(py, mode);
            let (ids, scores) = self
                .reading(py, |index| {
                    let rows = allow.map(|ids| Self::rows_of(index, &ids));
                    let hits = index.search(&query, k, mode, rows.as_deref())?;
                    Ok(Self::owned_hits(index, &hits))
                })
                .map_err(to_py)?;
            Ok((ids, scores.into_pyarray(py)))
        }

        /// The candidates `search` would rescore (int8, binary: the best
        /// k x oversample by the approximate score; exact: the top k), best
        /// first, with their approximate and exact scores: an index split in
        /// parts picks the same candidates and top k as one index from these.
        #[pyo3(signature = (query, k, *, mode = "exact", oversample = 4, allow = None))]
        fn rescorable<'py>(
            &self,
            py: Python<'py>,
            query: PyArrayLike1<'py, f32, AllowTypeChange>,
            k: usize,
            mode: &str,
            oversample: usize,
            allow: Option<Vec<String>>,
        ) -> PyResult<IdsTwoScores<'py>> {
            check_k(k)?;
            let mode = parse_mode(mode, oversample)?;
            let query = vector(&query);
            self.codes_for(py, mode);
            let (ids, approx, exact) = self
                .reading(py, |index| {
                    let rows = allow.map(|ids| Self::rows_of(index, &ids));
                    let found = index.rescorable(&query, k, mode, rows.as_deref())?;
                    let hits: Vec<Hit> = found.iter().map(|(hit, _)| *hit).collect();
                    let (ids, approx) = Self::owned_hits(index, &hits);
                    Ok((
                        ids,
                        approx,
                        found.iter().map(|(_, e)| *e).collect::<Vec<f32>>(),
                    ))
                })
                .map_err(to_py)?;
            Ok((ids, approx.into_pyarray(py), exact.into_pyarray(py)))
        }

        /// Top-k for each row of `queries` (nq x dim) in one pass over memory.
        #[pyo3(signature = (queries, k, *, mode = "exact", oversample = 4))]
        fn search_batch<'py>(
            &self,
            py: Python<'py>,
            queries: PyArrayLike2<'py, f32, AllowTypeChange>,
            k: usize,
            mode: &str,
            oversample: usize,
        ) -> PyResult<Vec<IdsScores<'py>>> {
            check_k(k)?;
            let mode = parse_mode(mode, oversample)?;
            let (values, _, d) = matrix(&queries);
            self.codes_for(py, mode);
            let results = self
                .reading(py, |index| {
                    if !values.is_empty() && d != index.dim() {
                        return Err(SimcoreError::DimensionMismatch {
                            expected: index.dim(),
                            got: d,
                        });
                    }
                    let found = index.search_batch(&values, k, mode)?;
                    Ok(found
                        .iter()
                        .map(|hits| Self::owned_hits(index, hits))
                        .collect::<Vec<_>>())
                })
                .map_err(to_py)?;
            Ok(results
                .into_iter()
                .map(|(ids, scores)| (ids, scores.into_pyarray(py)))
                .collect())
        }

        /// Sum every stored f32 value with `threads` threads (default: the
        /// search thread count): a SIMD memory-read baseline over the same bytes
        /// an exact scan reads.
        #[pyo3(signature = (threads = None))]
        fn read_baseline(&self, py: Python<'_>, threads: Option<usize>) -> f32 {
            self.reading(py, |index| {
                index.read_baseline(threads.unwrap_or(index.threads()))
            })
        }

        /// Bytes an exact (f32) and an int8 scan read.
        #[getter]
        fn scan_bytes(&self, py: Python<'_>) -> (usize, usize) {
            self.reading(py, CoreIndex::scan_bytes)
        }

        fn __repr__(&self, py: Python<'_>) -> String {
            self.reading(py, |index| {
                format!(
                    "Index(dim={}, len={}, rows={}, path={:?})",
                    index.dim(),
                    index.len(),
                    index.rows(),
                    index.path()
                )
            })
        }
    }

    #[pymodule]
    fn simcore(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        m.add_function(wrap_pyfunction!(top_k, m)?)?;
        m.add_function(wrap_pyfunction!(quantize_max_scale, m)?)?;
        m.add_function(wrap_pyfunction!(quantize_min_max, m)?)?;
        m.add_function(wrap_pyfunction!(reduce_dims, m)?)?;
        m.add_function(wrap_pyfunction!(simd_level, m)?)?;
        m.add_function(wrap_pyfunction!(popcount_kernel, m)?)?;
        m.add_function(wrap_pyfunction!(matrix_from_lists, m)?)?;
        m.add_function(wrap_pyfunction!(split_upload, m)?)?;
        m.add_function(wrap_pyfunction!(supported_simd_levels, m)?)?;
        m.add_class::<Index>()?;
        m.add("SimcoreValueError", py.get_type::<SimcoreValueError>())?;
        m.add(
            "DimensionMismatchError",
            py.get_type::<DimensionMismatchError>(),
        )?;
        m.add("NonFiniteError", py.get_type::<NonFiniteError>())?;
        Ok(())
    }
}
