//! Exhaustive top-k by inner product over a row-major f32 matrix.

use crate::error::{SimcoreError, check_finite};
use crate::index::PARALLEL_MIN_BYTES;
use crate::kernels::Kernels;
use crate::topk::{Hit, TopK};

const BLOCK: usize = 256;

/// Scores every row of `rows` (row-major, `dim` columns) against `query`
/// and returns the best `k`, highest score first, ties to the lower row.
pub fn top_k_f32(
    rows: &[f32],
    dim: usize,
    query: &[f32],
    k: usize,
) -> Result<Vec<Hit>, SimcoreError> {
    if dim == 0 {
        return Err(SimcoreError::Invalid("dimension must be at least 1".into()));
    }
    if !rows.len().is_multiple_of(dim) {
        return Err(SimcoreError::Invalid(format!(
            "rows hold {} values, not a multiple of the dimension {dim}",
            rows.len()
        )));
    }
    if query.len() != dim {
        return Err(SimcoreError::DimensionMismatch {
            expected: dim,
            got: query.len(),
        });
    }
    check_finite(query, "query")?;
    let kernels = Kernels::get();
    let n = rows.len() / dim;
    let threads = if std::mem::size_of_val(rows) < PARALLEL_MIN_BYTES {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(n / BLOCK)
            .max(1)
    };
    if threads == 1 {
        return Ok(scan(kernels, rows, dim, query, k, 0).into_sorted());
    }
    // Large inputs: one contiguous share of the rows per core, then merge.
    use rayon::prelude::*;
    let per = n.div_ceil(threads);
    let parts: Vec<TopK> = (0..threads)
        .into_par_iter()
        .map(|t| {
            let lo = (t * per).min(n);
            let hi = (lo + per).min(n);
            scan(kernels, &rows[lo * dim..hi * dim], dim, query, k, lo)
        })
        .collect();
    let mut best = TopK::new(k);
    for part in parts {
        best.merge(part);
    }
    Ok(best.into_sorted())
}

/// Top-k of `rows` (whole rows of `dim`), numbering them from `first_row`.
fn scan(
    kernels: &Kernels,
    rows: &[f32],
    dim: usize,
    query: &[f32],
    k: usize,
    first_row: usize,
) -> TopK {
    let mut best = TopK::new(k);
    let mut buf = [0.0f32; BLOCK];
    for (b, block) in rows.chunks(BLOCK * dim).enumerate() {
        let n = block.len() / dim;
        (kernels.dots_f32)(query, block, dim, &mut buf[..n]);
        for (j, &score) in buf[..n].iter().enumerate() {
            best.push(score, first_row + b * BLOCK + j);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_best_rows() {
        let rows = [1.0, 0.0, 0.0, 1.0, 0.6, 0.8];
        let hits = top_k_f32(&rows, 2, &[0.0, 1.0], 2).unwrap();
        assert_eq!(hits.iter().map(|h| h.row).collect::<Vec<_>>(), vec![1, 2]);
        assert!((hits[1].score - 0.8).abs() < 1e-6);
    }

    #[test]
    fn a_parallel_scan_equals_a_single_one() {
        // 8 MiB of rows so the scan splits across threads
        let dim = 64;
        let n = (PARALLEL_MIN_BYTES / 4 / dim) + 3 * BLOCK + 7;
        let rows: Vec<f32> = (0..n * dim)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
            .collect();
        let query: Vec<f32> = (0..dim).map(|i| (i % 5) as f32).collect();
        let all = top_k_f32(&rows, dim, &query, 10).unwrap();
        let single = scan(Kernels::get(), &rows, dim, &query, 10, 0).into_sorted();
        assert_eq!(all, single);
    }

    #[test]
    fn rejects_wrong_dimension() {
        let err = top_k_f32(&[1.0, 2.0], 2, &[1.0], 1).unwrap_err();
        assert_eq!(
            err,
            SimcoreError::DimensionMismatch {
                expected: 2,
                got: 1
            }
        );
        assert_eq!(err.to_string(), "dimension mismatch: expected 2, got 1");
    }

    #[test]
    fn rejects_nan_query() {
        let err = top_k_f32(&[1.0, 2.0], 2, &[1.0, f32::NAN], 1).unwrap_err();
        assert!(matches!(err, SimcoreError::NonFinite { index: 1, .. }));
    }

    #[test]
    fn empty_matrix_gives_no_hits() {
        assert!(top_k_f32(&[], 4, &[0.0; 4], 3).unwrap().is_empty());
    }
}
