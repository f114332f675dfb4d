//! Sign-bit codes (1 bit per dimension) for a Hamming pre-scan: 48 bytes for
//! a 384-d vector instead of 384 (int8) or 1,536 (f32).
//!
//! Layout: rows in blocks of 8; a block holds word w (64 dimensions) of its 8
//! rows side by side, so one 512-bit register scores 8 rows per word and no
//! horizontal sum is needed. The last block is padded with rows of zeros.

use crate::kernels::Kernels;

/// Rows per block.
pub const LANES: usize = 8;

/// The sign bits of `v` (bit set when the value is > 0), `words` u64.
pub fn sign_words(v: &[f32], words: usize) -> Vec<u64> {
    let mut out = vec![0u64; words];
    for (w, chunk) in v.chunks(64).enumerate() {
        out[w] = word_of(chunk);
    }
    out
}

/// The sign bits of up to 64 values as one word.
#[inline]
fn word_of(values: &[f32]) -> u64 {
    values
        .iter()
        .enumerate()
        .fold(0, |word, (i, &x)| word | (u64::from(x > 0.0) << i))
}

pub struct BitCodes {
    words: usize,
    rows: usize,
    codes: Vec<u64>,
}

impl BitCodes {
    pub fn new(dim: usize) -> Self {
        Self {
            words: dim.div_ceil(64),
            rows: 0,
            codes: Vec::new(),
        }
    }

    pub fn words(&self) -> usize {
        self.words
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes held (the padded last block included).
    pub fn bytes(&self) -> usize {
        self.codes.len() * 8
    }

    /// Append one row's vector (its first `dim` values are used).
    pub fn push(&mut self, v: &[f32]) {
        let (block, lane) = (self.rows / LANES, self.rows % LANES);
        if lane == 0 {
            self.codes.resize((block + 1) * self.words * LANES, 0);
        }
        let base = block * self.words * LANES;
        for (w, chunk) in v.chunks(64).enumerate() {
            self.codes[base + w * LANES + lane] = word_of(chunk); // no allocation per row
        }
        self.rows += 1;
    }

    /// Hamming distance of row `r` to the query's words.
    pub fn distance(&self, q: &[u64], r: usize) -> u32 {
        let base = (r / LANES) * self.words * LANES + r % LANES;
        (0..self.words)
            .map(|w| (self.codes[base + w * LANES] ^ q[w]).count_ones())
            .sum()
    }

    /// Distances of rows `lo..lo + out.len()` where `lo` is a multiple of
    /// `LANES` and `out.len()` a multiple of `LANES` (rows past the end read
    /// the padding).
    pub fn distances(&self, kernels: &Kernels, q: &[u64], lo: usize, out: &mut [u32]) {
        debug_assert!(lo.is_multiple_of(LANES) && out.len().is_multiple_of(LANES));
        let from = (lo / LANES) * self.words * LANES;
        let to = from + out.len() * self.words;
        (kernels.hamming_blocks)(q, &self.codes[from..to], out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_count_differing_signs() {
        let dim = 130;
        let mut codes = BitCodes::new(dim);
        let rows: Vec<Vec<f32>> = (0..11)
            .map(|r| {
                (0..dim)
                    .map(|i| if (i * 7 + r * 3) % 5 < 2 { 1.0 } else { -0.5 })
                    .collect()
            })
            .collect();
        for row in &rows {
            codes.push(row);
        }
        assert_eq!(codes.rows(), 11);
        assert_eq!(codes.bytes(), 2 * LANES * 3 * 8);
        let q: Vec<f32> = (0..dim)
            .map(|i| if i % 3 == 0 { 2.0 } else { -1.0 })
            .collect();
        let qw = sign_words(&q, codes.words());
        let mut out = vec![0u32; 16];
        codes.distances(Kernels::get(), &qw, 0, &mut out);
        for (r, row) in rows.iter().enumerate() {
            let want = row
                .iter()
                .zip(&q)
                .filter(|(a, b)| (**a > 0.0) != (**b > 0.0))
                .count() as u32;
            assert_eq!(codes.distance(&qw, r), want);
            assert_eq!(out[r], want);
        }
    }
}
