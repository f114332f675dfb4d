//! AVX-512 kernels (F + BW, and VNNI for int8). Callers must have checked
//! that the CPU and OS support the features (see `crate::cpu`).

use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: every load reads lanes below `n`, inside both slices; the tail
    // load is masked to the remaining lanes.
    unsafe {
        while i + 64 <= n {
            for (j, slot) in acc.iter_mut().enumerate() {
                let off = i + 16 * j;
                *slot = _mm512_fmadd_ps(
                    _mm512_loadu_ps(pa.add(off)),
                    _mm512_loadu_ps(pb.add(off)),
                    *slot,
                );
            }
            i += 64;
        }
        while i + 16 <= n {
            acc[0] = _mm512_fmadd_ps(
                _mm512_loadu_ps(pa.add(i)),
                _mm512_loadu_ps(pb.add(i)),
                acc[0],
            );
            i += 16;
        }
        if i < n {
            let mask: __mmask16 = ((1u32 << (n - i)) - 1) as __mmask16;
            let x = _mm512_maskz_loadu_ps(mask, pa.add(i));
            let y = _mm512_maskz_loadu_ps(mask, pb.add(i));
            acc[1] = _mm512_fmadd_ps(x, y, acc[1]);
        }
    }
    let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_reduce_add_ps(sum)
}

/// Scores `out.len()` consecutive rows (`stride` apart) against `q`.
/// (A four-rows-per-query-load variant measured 2x slower on 1M x 384 here:
/// the scan is bound by memory, and one row at a time streams best.)
///
/// # Safety
/// The CPU must support AVX-512F; `rows` must hold `out.len() * stride`
/// values and `q.len() <= stride`.
#[target_feature(enable = "avx512f")]
pub unsafe fn dots_f32(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    for (r, slot) in out.iter_mut().enumerate() {
        let row = &rows[r * stride..r * stride + q.len()];
        // SAFETY: same feature set as this function.
        *slot = unsafe { dot_f32(q, row) };
    }
}

/// Exact signed dot of `a` and `b` from the biased query `a_biased[i] = a[i] + 128`:
/// `vpdpbusd` multiplies unsigned by signed bytes, so the bias is removed with
/// `128 * sum(b)` (`b_sum`).
///
/// # Safety
/// The CPU must support AVX-512F, BW and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_i8_vnni(a_biased: &[u8], b: &[i8], b_sum: i32) -> i32 {
    debug_assert_eq!(a_biased.len(), b.len());
    let n = a_biased.len().min(b.len());
    let (pa, pb) = (a_biased.as_ptr(), b.as_ptr());
    let mut acc0 = _mm512_setzero_si512();
    let mut acc1 = _mm512_setzero_si512();
    let mut i = 0;
    // SAFETY: loads stay below `n`; the tail is masked.
    unsafe {
        while i + 128 <= n {
            let x0 = _mm512_loadu_si512(pa.add(i).cast());
            let y0 = _mm512_loadu_si512(pb.add(i).cast());
            let x1 = _mm512_loadu_si512(pa.add(i + 64).cast());
            let y1 = _mm512_loadu_si512(pb.add(i + 64).cast());
            acc0 = _mm512_dpbusd_epi32(acc0, x0, y0);
            acc1 = _mm512_dpbusd_epi32(acc1, x1, y1);
            i += 128;
        }
        while i < n {
            let left = n - i;
            let mask: __mmask64 = if left >= 64 {
                u64::MAX
            } else {
                (1u64 << left) - 1
            };
            let x = _mm512_maskz_loadu_epi8(mask, pa.add(i).cast());
            let y = _mm512_maskz_loadu_epi8(mask, pb.add(i).cast());
            acc0 = _mm512_dpbusd_epi32(acc0, x, y);
            i += 64;
        }
    }
    _mm512_reduce_add_epi32(_mm512_add_epi32(acc0, acc1)) - 128 * b_sum
}

/// Exact signed int8 dot without VNNI: widen to i16, multiply-add pairs to i32.
///
/// # Safety
/// The CPU must support AVX-512F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dot_i8_bw(a: &[i8], b: &[i8]) -> i32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = _mm512_setzero_si512();
    let mut i = 0;
    // SAFETY: loads stay below `n`; the tail is masked.
    unsafe {
        while i < n {
            let left = n - i;
            let mask: __mmask32 = if left >= 32 {
                u32::MAX
            } else {
                (1u32 << left) - 1
            };
            let x = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, pa.add(i).cast()));
            let y = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, pb.add(i).cast()));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x, y));
            i += 32;
        }
    }
    _mm512_reduce_add_epi32(acc)
}

/// Exact signed int8 dots of `out.len()` rows (`stride` apart) against a query
/// given both signed (`q`) and biased (`q_biased`); `sums[r]` is row r's sum.
///
/// # Safety
/// The CPU must support AVX-512F, BW and VNNI; `rows` must hold
/// `out.len() * stride` bytes, `sums` `out.len()` values, `q.len() <= stride`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dots_i8_vnni(
    q_biased: &[u8],
    rows: &[i8],
    stride: usize,
    sums: &[i32],
    out: &mut [i32],
) {
    let d = q_biased.len();
    for (r, slot) in out.iter_mut().enumerate() {
        // SAFETY: same feature set as this function.
        *slot = unsafe { dot_i8_vnni(q_biased, &rows[r * stride..r * stride + d], sums[r]) };
    }
}

/// # Safety
/// The CPU must support AVX-512F and BW; sizes as for `dots_i8_vnni`.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dots_i8_bw(q: &[i8], rows: &[i8], stride: usize, out: &mut [i32]) {
    let d = q.len();
    for (r, slot) in out.iter_mut().enumerate() {
        // SAFETY: same feature set as this function.
        *slot = unsafe { dot_i8_bw(q, &rows[r * stride..r * stride + d]) };
    }
}

/// Sum of all values: one add per 16 loaded floats, so it runs at the speed
/// memory delivers them (the read-bandwidth baseline for benchmarks).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn sum_f32(values: &[f32]) -> f32 {
    let n = values.len();
    let p = values.as_ptr();
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: loads stay below `n`.
    unsafe {
        while i + 64 <= n {
            for (j, slot) in acc.iter_mut().enumerate() {
                *slot = _mm512_add_ps(*slot, _mm512_loadu_ps(p.add(i + 16 * j)));
            }
            i += 64;
        }
    }
    let total = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_reduce_add_ps(total) + values[i..].iter().sum::<f32>()
}

/// Hamming distances of blocks of 8 rows (layout: `scalar::hamming_blocks`):
/// one 512-bit register holds word w of all 8 rows, so no horizontal sums.
///
/// # Safety
/// The CPU must support AVX-512F and VPOPCNTDQ; `codes` must hold
/// `out.len() / 8` blocks of `q.len() × 8` u64 and `out.len()` must be a
/// multiple of 8.
#[target_feature(enable = "avx512f,avx512vpopcntdq")]
pub unsafe fn hamming_blocks(q: &[u64], codes: &[u64], out: &mut [u32]) {
    let words = q.len();
    let p = codes.as_ptr();
    for (b, slots) in out.chunks_exact_mut(8).enumerate() {
        let mut acc = _mm512_setzero_si512();
        for (w, &qw) in q.iter().enumerate() {
            // SAFETY: block b's word w (8 u64) lies inside `codes` (caller's contract).
            let x = unsafe { _mm512_loadu_si512(p.add((b * words + w) * 8) as *const __m512i) };
            let diff = _mm512_xor_si512(x, _mm512_set1_epi64(qw as i64));
            acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(diff));
        }
        // SAFETY: `slots` holds 8 u32 (one 256-bit store).
        unsafe {
            _mm256_storeu_si256(
                slots.as_mut_ptr() as *mut __m256i,
                _mm512_cvtepi64_epi32(acc),
            )
        };
    }
}
