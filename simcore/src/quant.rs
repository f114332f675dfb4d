//! Scalar quantization and dimension reduction, per vector.
//!
//! Formulas (shared/spec/lucidworks-rag.md §8), for a vector `x` of length d,
//! rounding half away from zero, clamping after rounding:
//! - reduction to n dims: `x' = x[0..n]`, then L2-normalise `x'`;
//! - max-scale: `m = max |x'_i|`, `q_i = round(127 · x'_i / m)` (all zeros if m = 0);
//! - min-max: `q_i = round(255 · (x'_i − lo) / (hi − lo))` (all zeros if hi = lo).

use crate::error::SimcoreError;

/// max-scale int8 codes in [-127, 127] and the scale `m / 127` that maps them back.
pub fn max_scale(x: &[f32]) -> (Vec<i8>, f32) {
    let m = x.iter().fold(0.0f32, |acc, v| acc.max(v.abs()));
    if m == 0.0 || !m.is_finite() {
        return (vec![0; x.len()], 0.0);
    }
    let codes = x
        .iter()
        .map(|v| (127.0 * v / m).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (codes, m / 127.0)
}

/// `r.round()` (half away from zero) for |r| ≤ 127, without the libm call
/// `round` compiles to on baseline x86-64, so the loops over a row vectorise:
/// `r - trunc(r)` is exact at these magnitudes.
#[inline(always)]
fn round_small(r: f32) -> i32 {
    let t = r as i32;
    let frac = r - t as f32;
    t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5)
}

/// max |x_i|, in 16 independent lanes so that it vectorises (one running
/// maximum is a chain of dependent scalar instructions).
fn max_abs(x: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [0.0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (m, v) in lanes.iter_mut().zip(chunk) {
            *m = m.max(v.abs());
        }
    }
    let rest = chunks
        .remainder()
        .iter()
        .fold(0.0f32, |m, v| m.max(v.abs()));
    lanes.iter().fold(rest, |m, &v| m.max(v))
}

/// max-scale into a preallocated slice; returns the scale and the codes' sum.
pub fn max_scale_into(x: &[f32], out: &mut [i8]) -> (f32, i32) {
    let m = max_abs(x);
    if m == 0.0 || !m.is_finite() {
        out[..x.len()].fill(0);
        return (0.0, 0);
    }
    let inv = 127.0 / m;
    let mut sum = 0i32;
    for (o, v) in out.iter_mut().zip(x) {
        let q = round_small(v * inv).clamp(-127, 127);
        sum += q;
        *o = q as i8;
    }
    (m / 127.0, sum)
}

/// min-max uint8 codes in [0, 255].
pub fn min_max(x: &[f32]) -> Vec<u8> {
    let lo = x.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if x.is_empty() || hi <= lo || !(hi - lo).is_finite() {
        return vec![0; x.len()];
    }
    let range = hi - lo;
    x.iter()
        .map(|v| (255.0 * (v - lo) / range).round().clamp(0.0, 255.0) as u8)
        .collect()
}

/// Keep the first `n` dimensions and L2-normalise them.
pub fn reduce_dims(x: &[f32], n: usize) -> Result<Vec<f32>, SimcoreError> {
    if n == 0 || n > x.len() {
        return Err(SimcoreError::Invalid(format!(
            "reduced dimension must be between 1 and {}, got {n}",
            x.len()
        )));
    }
    let head = &x[..n];
    let norm = head
        .iter()
        .map(|v| f64::from(*v) * f64::from(*v))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 {
        return Ok(head.to_vec());
    }
    Ok(head.iter().map(|v| (f64::from(*v) / norm) as f32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: [f32; 6] = [0.12, -0.48, 0.33, 0.91, -0.07, 0.26];

    #[test]
    fn spec_worked_example_max_scale() {
        assert_eq!(max_scale(&X).0, vec![17, -67, 46, 127, -10, 36]);
    }

    #[test]
    fn spec_worked_example_min_max() {
        assert_eq!(min_max(&X), vec![110, 0, 149, 255, 75, 136]);
    }

    #[test]
    fn spec_worked_example_reduced() {
        let reduced = reduce_dims(&X, 4).unwrap();
        assert_eq!(max_scale(&reduced).0, vec![17, -67, 46, 127]);
        let norm: f32 = reduced.iter().map(|v| v * v).sum();
        assert!((norm - 1.0).abs() < 1e-6);
    }

    #[test]
    fn zero_and_constant_vectors() {
        assert_eq!(max_scale(&[0.0, 0.0]), (vec![0, 0], 0.0));
        assert_eq!(min_max(&[0.5, 0.5, 0.5]), vec![0, 0, 0]);
    }

    #[test]
    fn reduce_rejects_out_of_range() {
        assert!(reduce_dims(&X, 0).is_err());
        assert!(reduce_dims(&X, 7).is_err());
    }

    #[test]
    fn max_scale_round_trip_error_is_bounded() {
        let x: Vec<f32> = (0..384)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect();
        let (codes, scale) = max_scale(&x);
        let mut buf = vec![0i8; x.len()];
        let sum: i32 = codes.iter().map(|&c| i32::from(c)).sum();
        assert_eq!(max_scale_into(&x, &mut buf), (scale, sum));
        assert_eq!(buf, codes);
        for (v, c) in x.iter().zip(&codes) {
            assert!((v - f32::from(*c) * scale).abs() <= scale * 0.5 + 1e-6);
        }
    }

    #[test]
    fn small_rounding_matches_round_half_away_from_zero() {
        let mut r = -127.0f32;
        while r <= 127.0 {
            for x in [r, r.next_up(), r.next_down()] {
                if x.abs() <= 127.0 {
                    assert_eq!(round_small(x), x.round() as i32, "{x}");
                }
            }
            r += 0.25;
        }
        for x in [
            0.5f32,
            -0.5,
            0.49999997,
            -0.49999997,
            126.5,
            -126.5,
            1e-30,
            -0.0,
        ] {
            assert_eq!(round_small(x), x.round() as i32, "{x}");
        }
    }
}
