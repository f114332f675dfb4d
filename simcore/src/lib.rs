//! simcore: exact top-k inner-product search.
//!
//! The algorithms live in the modules below; this file only holds the Python
//! bindings (argument conversion, GIL release, error mapping).

pub mod error;
pub mod kernels;
pub mod search;
pub mod topk;

#[cfg(feature = "python")]
mod python {
    use numpy::{
        AllowTypeChange, IntoPyArray, PyArray1, PyArrayLike1, PyArrayLike2, PyUntypedArrayMethods,
    };
    use pyo3::create_exception;
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;

    use crate::error::SimcoreError;
    use crate::search::top_k_f32;

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
        }
    }

    type TopK<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f32>>);

    /// Exact top-k rows of `rows` (n × d) by inner product with `query` (d).
    /// Returns (row indices, scores), best first; ties go to the lower row.
    #[pyfunction]
    #[pyo3(signature = (rows, query, k))]
    fn top_k<'py>(
        py: Python<'py>,
        rows: PyArrayLike2<'py, f32, AllowTypeChange>,
        query: PyArrayLike1<'py, f32, AllowTypeChange>,
        k: usize,
    ) -> PyResult<TopK<'py>> {
        let dim = rows.shape()[1];
        if dim == 0 {
            return Err(SimcoreValueError::new_err(
                "rows must have at least one column",
            ));
        }
        // Owned copies: the scan runs without the GIL, so it must not read
        // memory that Python code could mutate meanwhile.
        let rows: Vec<f32> = rows.as_array().iter().copied().collect();
        let query: Vec<f32> = query.as_array().iter().copied().collect();
        let hits = py
            .detach(|| top_k_f32(&rows, dim, &query, k))
            .map_err(to_py)?;
        let ids: Vec<i64> = hits.iter().map(|h| h.row as i64).collect();
        let scores: Vec<f32> = hits.iter().map(|h| h.score).collect();
        Ok((ids.into_pyarray(py), scores.into_pyarray(py)))
    }

    #[pymodule]
    fn simcore(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        m.add_function(wrap_pyfunction!(top_k, m)?)?;
        m.add("SimcoreValueError", py.get_type::<SimcoreValueError>())?;
        m.add(
            "DimensionMismatchError",
            py.get_type::<DimensionMismatchError>(),
        )?;
        m.add("NonFiniteError", py.get_type::<NonFiniteError>())?;
        Ok(())
    }
}
