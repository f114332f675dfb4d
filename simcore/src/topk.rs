//! Bounded top-k selection: keeps the k best (score, row) pairs seen so far
//! without ever materialising a score per row.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A scored row. Ordered so that the *worst* hit is the heap's maximum:
/// lower score is worse, and among equal scores the larger row index is worse.
/// That makes ties resolve deterministically towards the earlier row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub score: f32,
    pub row: usize,
}

impl Eq for Hit {}

impl Ord for Hit {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then_with(|| self.row.cmp(&other.row))
    }
}

impl PartialOrd for Hit {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Collects the best `k` hits of a stream.
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Hit>,
    /// Score of the worst kept hit once k are held; anything below is rejected
    /// with one comparison.
    floor: f32,
}

/// Most slots reserved up front: a huge `k` (or `k × oversample`) grows the
/// heap as hits arrive instead of allocating for hits that never come.
const MAX_RESERVE: usize = 4096;

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k.min(MAX_RESERVE) + 1),
            floor: f32::NEG_INFINITY,
        }
    }

    #[inline]
    pub fn push(&mut self, score: f32, row: usize) {
        // NaN would otherwise rank first (total_cmp puts it above +inf).
        if score.is_nan() || score < self.floor || self.k == 0 {
            return;
        }
        let hit = Hit { score, row };
        if self.heap.len() < self.k {
            self.heap.push(hit);
        } else if let Some(mut worst) = self.heap.peek_mut()
            && hit < *worst
        {
            *worst = hit; // sifts down when `worst` drops
        } else {
            return;
        }
        if self.heap.len() == self.k {
            self.floor = self.heap.peek().map_or(f32::NEG_INFINITY, |h| h.score);
        }
    }

    /// The score a new hit must beat once `k` are held (-inf until then).
    #[inline]
    pub fn floor(&self) -> f32 {
        self.floor
    }

    /// Merge another collector's hits into this one.
    pub fn merge(&mut self, other: TopK) {
        for hit in other.heap {
            self.push(hit.score, hit.row);
        }
    }

    /// Hits best first (highest score, then lowest row).
    pub fn into_sorted(self) -> Vec<Hit> {
        self.heap.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(scores: &[f32], k: usize) -> Vec<(usize, f32)> {
        let mut t = TopK::new(k);
        for (row, &score) in scores.iter().enumerate() {
            t.push(score, row);
        }
        t.into_sorted()
            .into_iter()
            .map(|h| (h.row, h.score))
            .collect()
    }

    #[test]
    fn best_first() {
        assert_eq!(run(&[0.1, 0.9, 0.5, 0.7], 2), vec![(1, 0.9), (3, 0.7)]);
    }

    #[test]
    fn ties_prefer_earlier_rows() {
        assert_eq!(
            run(&[0.5, 0.5, 0.5, 0.5], 3),
            vec![(0, 0.5), (1, 0.5), (2, 0.5)]
        );
    }

    #[test]
    fn ties_at_the_floor_keep_the_earlier_row() {
        assert_eq!(run(&[0.9, 0.5, 0.5], 2), vec![(0, 0.9), (1, 0.5)]);
        // rows arriving out of order (as after a merge) still resolve to the lowest row
        let mut t = TopK::new(1);
        t.push(0.5, 7);
        t.push(0.5, 3);
        assert_eq!(t.into_sorted()[0].row, 3);
    }

    #[test]
    fn k_larger_than_n_returns_all() {
        assert_eq!(run(&[0.2, 0.3], 10), vec![(1, 0.3), (0, 0.2)]);
    }

    #[test]
    fn nan_scores_never_rank() {
        assert_eq!(
            run(&[f32::NAN, 0.2, f32::NAN, 0.1], 3),
            vec![(1, 0.2), (3, 0.1)]
        );
    }

    #[test]
    fn huge_k_reserves_little() {
        let mut t = TopK::new(usize::MAX / 2);
        t.push(1.0, 0);
        assert!(t.heap.capacity() <= MAX_RESERVE + 1);
        assert_eq!(t.into_sorted().len(), 1);
    }

    #[test]
    fn k_zero_is_empty() {
        assert!(run(&[1.0], 0).is_empty());
    }

    #[test]
    fn merge_equals_single_pass() {
        let scores: Vec<f32> = (0..100).map(|i| ((i * 37) % 23) as f32).collect();
        let mut a = TopK::new(5);
        let mut b = TopK::new(5);
        for (row, &s) in scores.iter().enumerate() {
            if row < 50 {
                a.push(s, row)
            } else {
                b.push(s, row)
            }
        }
        a.merge(b);
        let merged: Vec<_> = a.into_sorted().into_iter().map(|h| h.row).collect();
        let single: Vec<_> = run(&scores, 5).into_iter().map(|(r, _)| r).collect();
        assert_eq!(merged, single);
    }
}
