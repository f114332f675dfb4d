//! AVX2 + FMA kernels. Callers must have checked CPU and OS support.

use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum_ps(v: __m256) -> f32 {
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps(v, 1);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0b01));
    _mm_cvtss_f32(s)
}

#[inline]
#[target_feature(enable = "avx2")]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: every load reads 8 lanes below `n`.
    unsafe {
        while i + 32 <= n {
            for (j, slot) in acc.iter_mut().enumerate() {
                let off = i + 8 * j;
                *slot = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(off)),
                    _mm256_loadu_ps(pb.add(off)),
                    *slot,
                );
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i)),
                _mm256_loadu_ps(pb.add(i)),
                acc[0],
            );
            i += 8;
        }
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut total = hsum_ps(sum);
    for k in i..n {
        total += a[k] * b[k];
    }
    total
}

/// # Safety
/// The CPU must support AVX2 and FMA; `rows` must hold `out.len() * stride`
/// values and `q.len() <= stride`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dots_f32(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    for (r, slot) in out.iter_mut().enumerate() {
        let row = &rows[r * stride..r * stride + q.len()];
        // SAFETY: same feature set as this function.
        *slot = unsafe { dot_f32(q, row) };
    }
}

/// Exact signed int8 dot: widen to i16, multiply-add pairs to i32.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = _mm256_setzero_si256();
    let mut i = 0;
    // SAFETY: every load reads 16 bytes below `n`.
    unsafe {
        while i + 16 <= n {
            let x = _mm256_cvtepi8_epi16(_mm_loadu_si128(pa.add(i).cast()));
            let y = _mm256_cvtepi8_epi16(_mm_loadu_si128(pb.add(i).cast()));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x, y));
            i += 16;
        }
    }
    let mut total = hsum_epi32(acc);
    for k in i..n {
        total += i32::from(a[k]) * i32::from(b[k]);
    }
    total
}

/// # Safety
/// The CPU must support AVX2; `rows` must hold `out.len() * stride` bytes and
/// `q.len() <= stride`.
#[target_feature(enable = "avx2")]
pub unsafe fn dots_i8(q: &[i8], rows: &[i8], stride: usize, out: &mut [i32]) {
    let d = q.len();
    for (r, slot) in out.iter_mut().enumerate() {
        // SAFETY: same feature set as this function.
        *slot = unsafe { dot_i8(q, &rows[r * stride..r * stride + d]) };
    }
}
