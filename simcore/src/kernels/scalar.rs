//! Portable reference kernels: the ground truth every SIMD kernel is tested against.

/// Inner product with eight independent accumulators so the compiler can
/// vectorise it without reassociating a single running sum.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let pairs = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (pairs[0] + pairs[2]) + (pairs[1] + pairs[3]) + tail
}

/// Exact signed int8 inner product.
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    debug_assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

/// Hamming distances of blocks of 8 rows of sign bits (see `crate::binary`):
/// `codes` holds `out.len() / 8` blocks of `words × 8` u64 (word w of the
/// block's 8 rows side by side), `q` the query's `words` u64.
pub fn hamming_blocks(q: &[u64], codes: &[u64], out: &mut [u32]) {
    let words = q.len();
    for (block, slots) in codes.chunks_exact(words * 8).zip(out.chunks_exact_mut(8)) {
        for (lane, slot) in slots.iter_mut().enumerate() {
            *slot = (0..words)
                .map(|w| (block[w * 8 + lane] ^ q[w]).count_ones())
                .sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_matches_f64_sum_on_awkward_lengths() {
        for n in [0usize, 1, 3, 7, 8, 9, 383, 384, 385, 1536] {
            let a: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) / 7.0).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 13 % 17) as f32 - 8.0) / 9.0).collect();
            let exact: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            let got = f64::from(dot_f32(&a, &b));
            assert!((got - exact).abs() <= 1e-4 * (1.0 + exact.abs()), "n={n}");
        }
    }

    #[test]
    fn i8_extremes() {
        assert_eq!(dot_i8(&[-128, 127, -1], &[-128, 127, 1]), 16384 + 16129 - 1);
    }
}
