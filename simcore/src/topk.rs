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
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    /// Score a hit must beat to enter (None while fewer than k are held).
    #[inline]
    pub fn floor(&self) -> Option<f32> {
        if self.heap.len() < self.k {
            None
        } else {
            self.heap.peek().map(|h| h.score)
        }
    }

    #[inline]
    pub fn push(&mut self, hit: Hit) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(hit);
        } else if let Some(worst) = self.heap.peek() {
            if hit < *worst {
                self.heap.pop();
                self.heap.push(hit);
            }
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
            t.push(Hit { score, row });
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
    fn k_larger_than_n_returns_all() {
        assert_eq!(run(&[0.2, 0.3], 10), vec![(1, 0.3), (0, 0.2)]);
    }

    #[test]
    fn k_zero_is_empty() {
        assert!(run(&[1.0], 0).is_empty());
    }
}
