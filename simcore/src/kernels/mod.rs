//! Dot-product kernels. Only the portable scalar kernel exists so far; SIMD
//! kernels with runtime dispatch plug in behind `dot_f32`.

mod scalar;

/// Inner product of two equally long f32 slices.
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    scalar::dot_f32(a, b)
}
