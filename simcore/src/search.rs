//! Exhaustive top-k by inner product over a row-major f32 matrix.

use crate::error::{SimcoreError, check_finite};
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
    let mut best = TopK::new(k);
    let mut buf = [0.0f32; BLOCK];
    for (b, block) in rows.chunks(BLOCK * dim).enumerate() {
        let n = block.len() / dim;
        (kernels.dots_f32)(query, block, dim, &mut buf[..n]);
        for (j, &score) in buf[..n].iter().enumerate() {
            best.push(score, b * BLOCK + j);
        }
    }
    Ok(best.into_sorted())
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
