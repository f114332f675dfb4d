//! Dot-product kernels per instruction set, chosen once at run time.
//!
//! `Kernels::get()` returns the table for `cpu::level()`; `Kernels::for_level`
//! returns any level the machine supports (tests compare them all against the
//! scalar reference).

use std::sync::OnceLock;

use crate::cpu::{self, Level};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod scalar;

/// An int8 query in the two forms the kernels need.
#[derive(Clone, Debug)]
pub struct QueryI8 {
    pub values: Vec<i8>,
    /// `values[i] + 128` as unsigned bytes, for `vpdpbusd`.
    pub biased: Vec<u8>,
}

impl QueryI8 {
    pub fn new(values: Vec<i8>) -> Self {
        let biased = values.iter().map(|&v| (i16::from(v) + 128) as u8).collect();
        Self { values, biased }
    }
}

/// Scores a block of rows: `(query, rows, stride, out)`; row r starts at `r * stride`.
pub type DotsF32 = fn(&[f32], &[f32], usize, &mut [f32]);
/// The exact signed int8 dot of one row: `(query, row, row_sum)`.
pub type DotI8 = fn(&QueryI8, &[i8], i32) -> i32;
/// Exact int8 scores of a block of rows: `(query, rows, stride, row_sums, out)`.
pub type DotsI8 = fn(&QueryI8, &[i8], usize, &[i32], &mut [i32]);
/// Hamming distances of blocks of 8 rows of sign bits: `(query words, codes, out)`
/// (layout: `scalar::hamming_blocks`).
pub type HammingBlocks = fn(&[u64], &[u64], &mut [u32]);

pub struct Kernels {
    pub level: Level,
    pub dot_f32: fn(&[f32], &[f32]) -> f32,
    pub dots_f32: DotsF32,
    pub dot_i8: DotI8,
    pub dots_i8: DotsI8,
    /// Sum of a slice at memory speed (read-bandwidth baseline).
    pub sum_f32: fn(&[f32]) -> f32,
    pub hamming_blocks: HammingBlocks,
    /// Which popcount the Hamming kernel uses (`vpopcntdq`, `avx2`, `cnt`, `scalar`).
    pub popcount: &'static str,
}

fn check_block<T>(d: usize, rows: &[T], stride: usize, n: usize) {
    assert!(
        d <= stride && rows.len() >= n * stride,
        "block shape mismatch"
    );
}

fn check_codes(q: &[u64], codes: &[u64], out: &[u32]) {
    assert!(
        out.len().is_multiple_of(8) && codes.len() >= out.len() * q.len(),
        "code block shape mismatch"
    );
}

mod portable {
    use super::{QueryI8, check_block, scalar};

    pub fn dots_f32(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        check_block(q.len(), rows, stride, out.len());
        for (r, slot) in out.iter_mut().enumerate() {
            *slot = scalar::dot_f32(q, &rows[r * stride..r * stride + q.len()]);
        }
    }

    pub fn dot_i8(q: &QueryI8, row: &[i8], _sum: i32) -> i32 {
        scalar::dot_i8(&q.values, row)
    }

    pub fn hamming_blocks(q: &[u64], codes: &[u64], out: &mut [u32]) {
        super::check_codes(q, codes, out);
        scalar::hamming_blocks(q, codes, out);
    }

    pub fn sum_f32(values: &[f32]) -> f32 {
        let mut acc = [0.0f32; 8];
        let mut chunks = values.chunks_exact(8);
        for c in &mut chunks {
            for l in 0..8 {
                acc[l] += c[l];
            }
        }
        acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
    }

    pub fn dots_i8(q: &QueryI8, rows: &[i8], stride: usize, _sums: &[i32], out: &mut [i32]) {
        let d = q.values.len();
        check_block(d, rows, stride, out.len());
        for (r, slot) in out.iter_mut().enumerate() {
            *slot = scalar::dot_i8(&q.values, &rows[r * stride..r * stride + d]);
        }
    }
}

// Safe wrappers: each is only reachable through a table that `for_level`
// hands out after checking the CPU supports the level.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{QueryI8, avx2, avx512, check_block, check_codes};

    pub fn hamming_blocks_avx2(q: &[u64], codes: &[u64], out: &mut [u32]) {
        check_codes(q, codes, out);
        // SAFETY: table built only when AVX2 is supported; shape checked above.
        unsafe { avx2::hamming_blocks(q, codes, out) }
    }
    pub fn hamming_blocks_vpopcntdq(q: &[u64], codes: &[u64], out: &mut [u32]) {
        check_codes(q, codes, out);
        // SAFETY: table built only when AVX-512F+VPOPCNTDQ are supported; shape checked above.
        unsafe { avx512::hamming_blocks(q, codes, out) }
    }

    pub fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: table built only when AVX2+FMA are supported.
        unsafe { avx2::dot_f32(a, b) }
    }
    pub fn dots_f32_avx2(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        check_block(q.len(), rows, stride, out.len());
        // SAFETY: AVX2+FMA supported (see table); block shape checked above.
        unsafe { avx2::dots_f32(q, rows, stride, out) }
    }
    pub fn dot_i8_avx2(q: &QueryI8, row: &[i8], _sum: i32) -> i32 {
        // SAFETY: table built only when AVX2 is supported.
        unsafe { avx2::dot_i8(&q.values, row) }
    }
    pub fn dots_i8_avx2(q: &QueryI8, rows: &[i8], stride: usize, _sums: &[i32], out: &mut [i32]) {
        check_block(q.values.len(), rows, stride, out.len());
        // SAFETY: AVX2 supported; block shape checked above.
        unsafe { avx2::dots_i8(&q.values, rows, stride, out) }
    }
    pub fn dot_f32_avx512(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: table built only when AVX-512F is supported.
        unsafe { avx512::dot_f32(a, b) }
    }
    pub fn dots_f32_avx512(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        check_block(q.len(), rows, stride, out.len());
        // SAFETY: AVX-512F supported; block shape checked above.
        unsafe { avx512::dots_f32(q, rows, stride, out) }
    }
    pub fn dot_i8_bw(q: &QueryI8, row: &[i8], _sum: i32) -> i32 {
        // SAFETY: table built only when AVX-512F+BW are supported.
        unsafe { avx512::dot_i8_bw(&q.values, row) }
    }
    pub fn dots_i8_bw(q: &QueryI8, rows: &[i8], stride: usize, _sums: &[i32], out: &mut [i32]) {
        check_block(q.values.len(), rows, stride, out.len());
        // SAFETY: AVX-512F+BW supported; block shape checked above.
        unsafe { avx512::dots_i8_bw(&q.values, rows, stride, out) }
    }
    pub fn sum_f32_avx512(values: &[f32]) -> f32 {
        // SAFETY: table built only when AVX-512F is supported.
        unsafe { avx512::sum_f32(values) }
    }
    pub fn dot_i8_vnni(q: &QueryI8, row: &[i8], sum: i32) -> i32 {
        // SAFETY: table built only when AVX-512F+BW+VNNI are supported.
        unsafe { avx512::dot_i8_vnni(&q.biased, row, sum) }
    }
    pub fn dots_i8_vnni(q: &QueryI8, rows: &[i8], stride: usize, sums: &[i32], out: &mut [i32]) {
        check_block(q.values.len(), rows, stride, out.len());
        assert!(sums.len() >= out.len(), "row sums missing");
        // SAFETY: VNNI supported; block shape checked above.
        unsafe { avx512::dots_i8_vnni(&q.biased, rows, stride, sums, out) }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::{QueryI8, check_block, check_codes, neon};

    pub fn dot_f32_neon(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: table built only when NEON is supported.
        unsafe { neon::dot_f32(a, b) }
    }
    pub fn dots_f32_neon(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        check_block(q.len(), rows, stride, out.len());
        // SAFETY: NEON supported (see table); block shape checked above.
        unsafe { neon::dots_f32(q, rows, stride, out) }
    }
    pub fn sum_f32_neon(values: &[f32]) -> f32 {
        // SAFETY: table built only when NEON is supported.
        unsafe { neon::sum_f32(values) }
    }
    pub fn dot_i8_neon(q: &QueryI8, row: &[i8], _sum: i32) -> i32 {
        // SAFETY: table built only when NEON is supported.
        unsafe { neon::dot_i8(&q.values, row) }
    }
    pub fn dots_i8_neon(q: &QueryI8, rows: &[i8], stride: usize, _sums: &[i32], out: &mut [i32]) {
        check_block(q.values.len(), rows, stride, out.len());
        // SAFETY: NEON supported; block shape checked above.
        unsafe { neon::dots_i8(&q.values, rows, stride, out) }
    }
    pub fn dot_i8_sdot(q: &QueryI8, row: &[i8], _sum: i32) -> i32 {
        // SAFETY: table built only when NEON and dotprod are supported.
        unsafe { neon::dot_i8_sdot(&q.values, row) }
    }
    pub fn dots_i8_sdot(q: &QueryI8, rows: &[i8], stride: usize, _sums: &[i32], out: &mut [i32]) {
        check_block(q.values.len(), rows, stride, out.len());
        // SAFETY: NEON and dotprod supported; block shape checked above.
        unsafe { neon::dots_i8_sdot(&q.values, rows, stride, out) }
    }
    pub fn hamming_blocks_neon(q: &[u64], codes: &[u64], out: &mut [u32]) {
        check_codes(q, codes, out);
        // SAFETY: table built only when NEON is supported; shape checked above.
        unsafe { neon::hamming_blocks(q, codes, out) }
    }
}

/// The Hamming kernel for AVX-512 levels: VPOPCNTDQ is a separate extension
/// (Ice Lake and later), so without it the AVX2 kernel does the counting.
#[cfg(target_arch = "x86_64")]
fn avx512_hamming() -> (HammingBlocks, &'static str) {
    if is_x86_feature_detected!("avx512vpopcntdq") {
        (x86::hamming_blocks_vpopcntdq, "vpopcntdq")
    } else {
        (x86::hamming_blocks_avx2, "avx2")
    }
}

fn build(level: Level) -> Kernels {
    #[cfg(target_arch = "aarch64")]
    {
        let int8: Option<(DotI8, DotsI8)> = match level {
            Level::Neon => Some((arm::dot_i8_neon, arm::dots_i8_neon)),
            Level::NeonDot => Some((arm::dot_i8_sdot, arm::dots_i8_sdot)),
            _ => None,
        };
        if let Some((dot_i8, dots_i8)) = int8 {
            return Kernels {
                level,
                dot_f32: arm::dot_f32_neon,
                dots_f32: arm::dots_f32_neon,
                dot_i8,
                dots_i8,
                sum_f32: arm::sum_f32_neon,
                hamming_blocks: arm::hamming_blocks_neon,
                popcount: "cnt",
            };
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        match level {
            Level::Scalar | Level::Neon | Level::NeonDot => {}
            Level::Avx2 => {
                return Kernels {
                    level,
                    dot_f32: x86::dot_f32_avx2,
                    dots_f32: x86::dots_f32_avx2,
                    dot_i8: x86::dot_i8_avx2,
                    dots_i8: x86::dots_i8_avx2,
                    sum_f32: portable::sum_f32,
                    hamming_blocks: x86::hamming_blocks_avx2,
                    popcount: "avx2",
                };
            }
            Level::Avx512 => {
                let (hamming_blocks, popcount) = avx512_hamming();
                return Kernels {
                    level,
                    dot_f32: x86::dot_f32_avx512,
                    dots_f32: x86::dots_f32_avx512,
                    dot_i8: x86::dot_i8_bw,
                    dots_i8: x86::dots_i8_bw,
                    sum_f32: x86::sum_f32_avx512,
                    hamming_blocks,
                    popcount,
                };
            }
            Level::Avx512Vnni => {
                let (hamming_blocks, popcount) = avx512_hamming();
                return Kernels {
                    level,
                    dot_f32: x86::dot_f32_avx512,
                    dots_f32: x86::dots_f32_avx512,
                    dot_i8: x86::dot_i8_vnni,
                    dots_i8: x86::dots_i8_vnni,
                    sum_f32: x86::sum_f32_avx512,
                    hamming_blocks,
                    popcount,
                };
            }
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = level; // only the scalar table exists here
    Kernels {
        level: Level::Scalar,
        dot_f32: scalar::dot_f32,
        dots_f32: portable::dots_f32,
        dot_i8: portable::dot_i8,
        dots_i8: portable::dots_i8,
        sum_f32: portable::sum_f32,
        hamming_blocks: portable::hamming_blocks,
        popcount: "scalar",
    }
}

impl Kernels {
    /// The table for the process's SIMD level.
    pub fn get() -> &'static Kernels {
        static TABLE: OnceLock<Kernels> = OnceLock::new();
        TABLE.get_or_init(|| build(cpu::level()))
    }

    /// The table for `level`, or None when this machine cannot run it.
    pub fn for_level(level: Level) -> Option<Kernels> {
        cpu::supported().contains(&level).then(|| build(level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: [usize; 9] = [1, 3, 15, 17, 63, 383, 384, 385, 1536];

    /// Small deterministic generator (no dev-dependency needed).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn bytes(n: usize, seed: u64) -> Vec<i8> {
        values(n, seed)
            .iter()
            .map(|v| (v * 127.9).clamp(-128.0, 127.0) as i8)
            .collect()
    }

    fn levels() -> Vec<Kernels> {
        cpu::supported()
            .into_iter()
            .filter_map(Kernels::for_level)
            .collect()
    }

    #[test]
    fn f32_kernels_match_scalar_with_unaligned_tails() {
        for k in levels() {
            for d in DIMS {
                for offset in [0usize, 1, 3] {
                    let a = values(d + offset, 1);
                    let b = values(d + offset, 2);
                    let (a, b) = (&a[offset..], &b[offset..]);
                    let want = scalar::dot_f32(a, b);
                    let got = (k.dot_f32)(a, b);
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{:?} d={d}",
                        k.level
                    );
                }
            }
        }
    }

    #[test]
    fn i8_kernels_are_exact_including_extremes() {
        for k in levels() {
            for d in DIMS {
                for offset in [0usize, 1] {
                    let mut a = bytes(d + offset, 3);
                    let mut b = bytes(d + offset, 4);
                    a[offset] = -128;
                    b[offset] = -128;
                    let (a, b) = (&a[offset..], &b[offset..]);
                    let q = QueryI8::new(a.to_vec());
                    let sum: i32 = b.iter().map(|&v| i32::from(v)).sum();
                    assert_eq!(
                        (k.dot_i8)(&q, b, sum),
                        scalar::dot_i8(a, b),
                        "{:?} d={d}",
                        k.level
                    );
                }
            }
        }
    }

    #[test]
    fn block_kernels_match_per_row_kernels() {
        let (d, stride, n) = (385usize, 400usize, 7usize);
        let q = values(d, 5);
        let rows = values(n * stride, 6);
        let qi = QueryI8::new(bytes(d, 7));
        let rows_i8 = bytes(n * stride, 8);
        let sums: Vec<i32> = (0..n)
            .map(|r| {
                rows_i8[r * stride..r * stride + d]
                    .iter()
                    .map(|&v| i32::from(v))
                    .sum()
            })
            .collect();
        for k in levels() {
            let mut out = vec![0.0f32; n];
            (k.dots_f32)(&q, &rows, stride, &mut out);
            let mut out_i8 = vec![0i32; n];
            (k.dots_i8)(&qi, &rows_i8, stride, &sums, &mut out_i8);
            for r in 0..n {
                let want = scalar::dot_f32(&q, &rows[r * stride..r * stride + d]);
                assert!((out[r] - want).abs() <= 1e-4 * (1.0 + want.abs()));
                assert_eq!(
                    out_i8[r],
                    scalar::dot_i8(&qi.values, &rows_i8[r * stride..r * stride + d])
                );
            }
        }
    }

    #[test]
    fn hamming_kernels_match_scalar() {
        for words in [1usize, 5, 6, 13] {
            let blocks = 5;
            let mut s = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = || {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s
            };
            let q: Vec<u64> = (0..words).map(|_| next()).collect();
            let mut codes: Vec<u64> = (0..blocks * words * 8).map(|_| next()).collect();
            codes[0] = !q[0]; // a word differing in all 64 bits
            let mut want = vec![0u32; blocks * 8];
            scalar::hamming_blocks(&q, &codes, &mut want);
            assert!(want[0] >= 64);
            for k in levels() {
                let mut got = vec![0u32; blocks * 8];
                (k.hamming_blocks)(&q, &codes, &mut got);
                assert_eq!(got, want, "{:?} ({}) words={words}", k.level, k.popcount);
            }
        }
    }
}
