//! NEON kernels for aarch64 (Advanced SIMD is part of every ARMv8-A core),
//! and SDOT for int8 where the core has the dot-product extension (ARMv8.2+:
//! Cortex-A55/A75 and later, so a Raspberry Pi 5 but not a Pi 4).
//! Callers must have checked the features (see `crate::cpu`).

use std::arch::aarch64::*;
use std::arch::asm;

/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    // SAFETY: every load reads 4 lanes below `n`, inside both slices.
    unsafe {
        while i + 16 <= n {
            for (j, slot) in acc.iter_mut().enumerate() {
                let off = i + 4 * j;
                *slot = vfmaq_f32(*slot, vld1q_f32(pa.add(off)), vld1q_f32(pb.add(off)));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = vfmaq_f32(acc[0], vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
            i += 4;
        }
    }
    let sum = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
    let mut total = vaddvq_f32(sum);
    for k in i..n {
        total += a[k] * b[k];
    }
    total
}

/// # Safety
/// The CPU must support NEON; `rows` must hold `out.len() * stride` values
/// and `q.len() <= stride`.
#[target_feature(enable = "neon")]
pub unsafe fn dots_f32(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    for (r, slot) in out.iter_mut().enumerate() {
        let row = &rows[r * stride..r * stride + q.len()];
        // SAFETY: same feature set as this function.
        *slot = unsafe { dot_f32(q, row) };
    }
}

/// Sum of a slice (the read-bandwidth baseline).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn sum_f32(values: &[f32]) -> f32 {
    let n = values.len();
    let p = values.as_ptr();
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    // SAFETY: every load reads 4 lanes below `n`.
    unsafe {
        while i + 16 <= n {
            for (j, slot) in acc.iter_mut().enumerate() {
                *slot = vaddq_f32(*slot, vld1q_f32(p.add(i + 4 * j)));
            }
            i += 16;
        }
    }
    let sum = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
    vaddvq_f32(sum) + values[i..].iter().sum::<f32>()
}

/// Exact signed int8 dot without SDOT: widening multiplies to i16 (`smull`),
/// pairwise-added into i32 lanes (`sadalp`). Each i16 product fits (|x·y| ≤
/// 2^14), and two of them per i32 lane per step cannot overflow.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [vdupq_n_s32(0); 2];
    let mut i = 0;
    // SAFETY: every load reads 16 bytes below `n`.
    unsafe {
        while i + 16 <= n {
            let x = vld1q_s8(pa.add(i));
            let y = vld1q_s8(pb.add(i));
            acc[0] = vpadalq_s16(acc[0], vmull_s8(vget_low_s8(x), vget_low_s8(y)));
            acc[1] = vpadalq_s16(acc[1], vmull_high_s8(x, y));
            i += 16;
        }
    }
    let mut total = vaddvq_s32(vaddq_s32(acc[0], acc[1]));
    for k in i..n {
        total += i32::from(a[k]) * i32::from(b[k]);
    }
    total
}

/// `acc += dot4(a, b)` per i32 lane: one SDOT (stable Rust has no intrinsic
/// for it yet, so it is written as the instruction).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction of the dotprod extension, which
    // this function's target features require.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Exact signed int8 dot with SDOT (four products summed per i32 lane).
///
/// # Safety
/// The CPU must support NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dot_i8_sdot(a: &[i8], b: &[i8]) -> i32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [vdupq_n_s32(0); 2];
    let mut i = 0;
    // SAFETY: every load reads 16 bytes below `n`.
    unsafe {
        while i + 32 <= n {
            acc[0] = sdot(acc[0], vld1q_s8(pa.add(i)), vld1q_s8(pb.add(i)));
            acc[1] = sdot(acc[1], vld1q_s8(pa.add(i + 16)), vld1q_s8(pb.add(i + 16)));
            i += 32;
        }
        while i + 16 <= n {
            acc[0] = sdot(acc[0], vld1q_s8(pa.add(i)), vld1q_s8(pb.add(i)));
            i += 16;
        }
    }
    let mut total = vaddvq_s32(vaddq_s32(acc[0], acc[1]));
    for k in i..n {
        total += i32::from(a[k]) * i32::from(b[k]);
    }
    total
}

/// # Safety
/// The CPU must support NEON; `rows` must hold `out.len() * stride` bytes and
/// `q.len() <= stride`.
#[target_feature(enable = "neon")]
pub unsafe fn dots_i8(q: &[i8], rows: &[i8], stride: usize, out: &mut [i32]) {
    let d = q.len();
    for (r, slot) in out.iter_mut().enumerate() {
        // SAFETY: same feature set as this function.
        *slot = unsafe { dot_i8(q, &rows[r * stride..r * stride + d]) };
    }
}

/// # Safety
/// The CPU must support NEON and dotprod; `rows` must hold `out.len() *
/// stride` bytes and `q.len() <= stride`.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dots_i8_sdot(q: &[i8], rows: &[i8], stride: usize, out: &mut [i32]) {
    let d = q.len();
    for (r, slot) in out.iter_mut().enumerate() {
        // SAFETY: same feature set as this function.
        *slot = unsafe { dot_i8_sdot(q, &rows[r * stride..r * stride + d]) };
    }
}

/// Hamming distances of blocks of 8 rows (layout: `scalar::hamming_blocks`):
/// XOR, per-byte popcount (`cnt`), then widening pairwise adds to u64 lanes.
///
/// # Safety
/// The CPU must support NEON; `codes` must hold `out.len() / 8` blocks of
/// `q.len() × 8` u64 and `out.len()` must be a multiple of 8.
#[target_feature(enable = "neon")]
pub unsafe fn hamming_blocks(q: &[u64], codes: &[u64], out: &mut [u32]) {
    let words = q.len();
    let p = codes.as_ptr();
    for (b, slots) in out.chunks_exact_mut(8).enumerate() {
        // four lanes pairs: rows (0,1), (2,3), (4,5), (6,7); u16 per byte-pair sums
        let mut acc = [vdupq_n_u16(0); 4];
        for (w, &qw) in q.iter().enumerate() {
            let qv = vdupq_n_u64(qw);
            // SAFETY: block b's word w (8 u64) lies inside `codes` (caller's contract).
            let at = unsafe { p.add((b * words + w) * 8) };
            for (j, slot) in acc.iter_mut().enumerate() {
                // SAFETY: two u64 at `at + 2j`, inside the block's word.
                let x = unsafe { vld1q_u64(at.add(2 * j)) };
                let bits = vcntq_u8(vreinterpretq_u8_u64(veorq_u64(x, qv)));
                // ≤ 16 per u16 lane per word: no overflow below 4,096 words
                *slot = vpadalq_u8(*slot, bits);
            }
        }
        for (j, pair) in acc.iter().enumerate() {
            let per_row = vpaddlq_u32(vpaddlq_u16(*pair));
            slots[2 * j] = vgetq_lane_u64::<0>(per_row) as u32;
            slots[2 * j + 1] = vgetq_lane_u64::<1>(per_row) as u32;
        }
    }
}
