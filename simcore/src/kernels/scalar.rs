//! Portable reference kernels: the ground truth every faster kernel is tested against.

/// Inner product with eight independent accumulators so the compiler can
/// vectorise it without reassociating a single running sum.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0.0f32;
    for i in chunks * 8..a.len() {
        tail += a[i] * b[i];
    }
    let pairs = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (pairs[0] + pairs[2]) + (pairs[1] + pairs[3]) + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_naive_sum_on_awkward_lengths() {
        for n in [0usize, 1, 3, 7, 8, 9, 383, 384, 385, 1536] {
            let a: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) / 7.0).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 13 % 17) as f32 - 8.0) / 9.0).collect();
            let naive: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            let got = f64::from(dot_f32(&a, &b));
            assert!(
                (got - naive).abs() <= 1e-4 * (1.0 + naive.abs()),
                "n={n} got={got} naive={naive}"
            );
        }
    }
}
