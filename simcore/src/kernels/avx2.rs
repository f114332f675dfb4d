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

/// Population count of each u64 lane (nibble lookup, Muła et al.).
#[target_feature(enable = "avx2")]
fn popcnt_epi64(v: __m256i) -> __m256i {
    let lookup = _mm256_setr_epi8(
        0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3,
        3, 4,
    );
    let low = _mm256_set1_epi8(0x0f);
    let lo = _mm256_and_si256(v, low);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
    let bytes = _mm256_add_epi8(
        _mm256_shuffle_epi8(lookup, lo),
        _mm256_shuffle_epi8(lookup, hi),
    );
    _mm256_sad_epu8(bytes, _mm256_setzero_si256())
}

/// Hamming distances of blocks of 8 rows (layout: `scalar::hamming_blocks`).
///
/// # Safety
/// The CPU must support AVX2; `codes` must hold `out.len() / 8` blocks of
/// `q.len() × 8` u64 and `out.len()` must be a multiple of 8.
#[target_feature(enable = "avx2")]
pub unsafe fn hamming_blocks(q: &[u64], codes: &[u64], out: &mut [u32]) {
    let words = q.len();
    let p = codes.as_ptr();
    for (b, slots) in out.chunks_exact_mut(8).enumerate() {
        let (mut a, mut c) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for (w, &qw) in q.iter().enumerate() {
            let qv = _mm256_set1_epi64x(qw as i64);
            // SAFETY: block b's word w (8 u64) lies inside `codes` (caller's contract).
            let (x, y) = unsafe {
                let at = p.add((b * words + w) * 8);
                (
                    _mm256_loadu_si256(at as *const __m256i),
                    _mm256_loadu_si256(at.add(4) as *const __m256i),
                )
            };
            a = _mm256_add_epi64(a, popcnt_epi64(_mm256_xor_si256(x, qv)));
            c = _mm256_add_epi64(c, popcnt_epi64(_mm256_xor_si256(y, qv)));
        }
        let mut lanes = [0u64; 8];
        // SAFETY: `lanes` holds 8 u64, two stores of 4.
        unsafe {
            _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, a);
            _mm256_storeu_si256(lanes.as_mut_ptr().add(4) as *mut __m256i, c);
        }
        for (slot, lane) in slots.iter_mut().zip(lanes) {
            *slot = lane as u32;
        }
    }
}
