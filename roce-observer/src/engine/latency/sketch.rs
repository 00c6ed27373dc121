//! Latency quantiles with bounded memory and bounded relative error.
//!
//! The first [`EXACT_SAMPLES`] samples are kept as they are, so small captures report exact
//! quantiles. Past that the samples go into logarithmic buckets (the DDSketch mapping): bucket
//! `i` holds values in `(γ^(i-1), γ^i]` with `γ = (1 + α) / (1 - α)` and `α = 1%`, and reports
//! `2γ^i / (γ + 1)`, which is within `α` of every value in the bucket. Nanosecond values from
//! 1 ns to 2^64 ns need at most 2,200 buckets, so a sketch never exceeds ~9 KB; latencies within
//! one decade take ~116 buckets. Sketches merge by adding bucket counts.
//!
//! Quantile `q` is the sample of rank `ceil(q * count)` (nearest rank, 1-based, at least 1);
//! min and max are always exact.
//!
//! Beside the sketch, every sample is also counted exactly in fixed classic buckets
//! ([`LATENCY_BUCKETS_NS`]), which Prometheus histograms need to aggregate across hosts.
//!
//! The kernel path adds samples by the bucket of the kernel's histogram (`LatencyHist`,
//! [`Sketch::merge_hist`]): each as one representative value of its bucket, within 1/9 of the
//! sample (docs/metrics.md, "Latency").

use roce_observer_common::latency::{HIST_BUCKETS, hist_bucket_range};

use crate::report::LATENCY_BUCKETS_NS;

/// Samples kept exactly before switching to buckets.
pub const EXACT_SAMPLES: usize = 64;
/// Relative accuracy of a bucket's representative value.
pub const ALPHA: f64 = 0.01;

#[derive(Clone, Debug, PartialEq)]
pub struct Sketch {
    count: u64,
    min: u64,
    max: u64,
    sum: u128,
    repr: Repr,
    /// Samples per classic bucket: `classic[i]` counts values in
    /// `(LATENCY_BUCKETS_NS[i-1], LATENCY_BUCKETS_NS[i]]`; larger values only in `count`.
    classic: [u64; LATENCY_BUCKETS_NS.len()],
}

#[derive(Clone, Debug, PartialEq)]
enum Repr {
    Exact(Vec<u64>),
    Buckets {
        /// Count of zero-valued samples.
        zero: u64,
        /// Index of `bins[0]`.
        offset: i32,
        bins: Vec<u32>,
    },
}

fn gamma_ln() -> f64 {
    ((1.0 + ALPHA) / (1.0 - ALPHA)).ln()
}

fn bucket_of(v: u64) -> i32 {
    ((v as f64).ln() / gamma_ln()).ceil() as i32
}

fn bucket_value(i: i32) -> f64 {
    let gamma = (1.0 + ALPHA) / (1.0 - ALPHA);
    2.0 * gamma.powi(i) / (gamma + 1.0)
}

impl Default for Sketch {
    fn default() -> Sketch {
        Sketch::new()
    }
}

impl Sketch {
    pub fn new() -> Sketch {
        Sketch {
            count: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
            repr: Repr::Exact(Vec::new()),
            classic: [0; LATENCY_BUCKETS_NS.len()],
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// Heap bytes held (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Exact(v) => v.capacity() * 8,
            Repr::Buckets { bins, .. } => bins.capacity() * 4,
        }
    }

    /// Exact counts per classic bucket (not cumulative; values above the last bound are
    /// `count()` minus their sum).
    pub fn classic_buckets(&self) -> [u64; LATENCY_BUCKETS_NS.len()] {
        self.classic
    }

    /// Sum of all samples, ns.
    pub fn sum(&self) -> u128 {
        self.sum
    }

    pub fn insert(&mut self, v: u64) {
        if let Some(i) = LATENCY_BUCKETS_NS.iter().position(|&b| v <= b) {
            self.classic[i] += 1;
        }
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += u128::from(v);
        match &mut self.repr {
            Repr::Exact(samples) => {
                if samples.len() < EXACT_SAMPLES {
                    samples.push(v);
                    return;
                }
                self.spill_to_buckets();
                self.bucket_add(v, 1);
            }
            Repr::Buckets { .. } => self.bucket_add(v, 1),
        }
    }

    /// Samples counted by bucket of a kernel histogram (`LatencyHist`): `grown[i]` more in
    /// bucket `i`, whose samples sum to `sum_ns`, with `min` and `max` the exact extremes of
    /// every sample the histogram holds. Each is added as the representative of its bucket's
    /// range narrowed to `[min, max]`: `2 lo hi / (lo + hi)`, within `(hi - lo) / (hi + lo)`
    /// (1/9 for a bucket between 100 ns and 1 s) of every value in the range, so nearest-rank
    /// quantiles are within that of the true ones, and within the sketch's 1% of that. Count,
    /// sum, min and max stay exact, and so do the classic buckets: each of their bounds is a
    /// bound of the histogram's, so a bucket's samples and its representative share one.
    pub fn merge_hist(&mut self, grown: &[u32; HIST_BUCKETS], sum_ns: u64, min: u64, max: u64) {
        let mut count = 0;
        for (i, &n) in grown.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let (lo, hi) = hist_bucket_range(i);
            let (lo, hi) = (lo.max(min), hi.min(max).max(min));
            let v = if lo + hi == 0 {
                0
            } else {
                (2 * u128::from(lo) * u128::from(hi) / (u128::from(lo) + u128::from(hi))) as u64
            };
            self.add_copies(v, n);
            count += u64::from(n);
        }
        if count == 0 {
            return;
        }
        self.count += count;
        self.sum += u128::from(sum_ns);
        self.min = self.min.min(min);
        self.max = self.max.max(max);
    }

    /// `n` samples of value `v` in the classic buckets and the representation (count, sum and
    /// extremes are the caller's).
    fn add_copies(&mut self, v: u64, n: u32) {
        if let Some(i) = LATENCY_BUCKETS_NS.iter().position(|&b| v <= b) {
            self.classic[i] += u64::from(n);
        }
        if let Repr::Exact(samples) = &mut self.repr {
            if samples.len() + n as usize <= EXACT_SAMPLES {
                samples.extend(std::iter::repeat_n(v, n as usize));
                return;
            }
            self.spill_to_buckets();
        }
        self.bucket_add(v, n);
    }

    /// Leave the exact representation: its samples move into log buckets (no-op if there).
    fn spill_to_buckets(&mut self) {
        if let Repr::Exact(samples) = &mut self.repr {
            let old = std::mem::take(samples);
            self.repr = Repr::Buckets {
                zero: 0,
                offset: 0,
                bins: Vec::new(),
            };
            for s in old {
                self.bucket_add(s, 1);
            }
        }
    }

    fn bucket_add(&mut self, v: u64, n: u32) {
        if v == 0 {
            if let Repr::Buckets { zero, .. } = &mut self.repr {
                *zero += u64::from(n);
            }
            return;
        }
        self.bucket_add_index(bucket_of(v), n);
    }

    /// Add every sample of `other` to `self`.
    pub fn merge(&mut self, other: &Sketch) {
        if other.count == 0 {
            return;
        }
        match &other.repr {
            Repr::Exact(samples) => {
                for &s in samples {
                    self.insert(s);
                }
            }
            Repr::Buckets { zero, offset, bins } => {
                // Switch to buckets, then add other's buckets by representative value.
                self.spill_to_buckets();
                if let Repr::Buckets { zero: z, .. } = &mut self.repr {
                    *z += zero;
                }
                for (k, &n) in bins.iter().enumerate() {
                    if n > 0 {
                        let i = *offset + k as i32;
                        self.bucket_add_index(i, n);
                    }
                }
                for (mine, theirs) in self.classic.iter_mut().zip(other.classic) {
                    *mine += theirs;
                }
                self.count += other.count;
                self.min = self.min.min(other.min);
                self.max = self.max.max(other.max);
                self.sum += other.sum;
            }
        }
    }

    fn bucket_add_index(&mut self, i: i32, n: u32) {
        let Repr::Buckets { offset, bins, .. } = &mut self.repr else {
            return;
        };
        if bins.is_empty() {
            *offset = i;
            bins.push(0);
        } else if i < *offset {
            let grow = (*offset - i) as usize;
            bins.splice(0..0, std::iter::repeat_n(0, grow));
            *offset = i;
        } else if (i - *offset) as usize >= bins.len() {
            bins.resize((i - *offset) as usize + 1, 0);
        }
        let slot = &mut bins[(i - *offset) as usize];
        *slot = slot.saturating_add(n);
    }

    /// The `q` quantile (0 ..= 1), nearest rank; `None` without samples.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        if rank == self.count {
            return Some(self.max);
        }
        if rank == 1 {
            return Some(self.min);
        }
        match &self.repr {
            Repr::Exact(samples) => {
                let mut sorted = samples.clone();
                sorted.sort_unstable();
                sorted.get(rank as usize - 1).copied()
            }
            Repr::Buckets { zero, offset, bins } => {
                if rank <= *zero {
                    return Some(0);
                }
                let mut seen = *zero;
                for (k, &n) in bins.iter().enumerate() {
                    seen += u64::from(n);
                    if seen >= rank {
                        let v = bucket_value(*offset + k as i32).round() as u64;
                        return Some(v.clamp(self.min, self.max));
                    }
                }
                Some(self.max)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_for_small_counts() {
        let mut s = Sketch::new();
        for v in [5_000u64, 1_000, 3_000, 2_000, 4_000] {
            s.insert(v);
        }
        assert_eq!(s.count(), 5);
        assert_eq!(s.min(), Some(1_000));
        assert_eq!(s.max(), Some(5_000));
        assert_eq!(s.quantile(0.5), Some(3_000));
        assert_eq!(s.quantile(0.9), Some(5_000));
        assert_eq!(s.quantile(0.2), Some(1_000));
        assert_eq!(s.quantile(0.21), Some(2_000));
        assert_eq!(Sketch::new().quantile(0.5), None);
    }

    fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    #[test]
    fn relative_error_within_two_percent() {
        let mut s = Sketch::new();
        let mut all = Vec::new();
        // Deterministic spread over four decades.
        let mut x: u64 = 12345;
        for _ in 0..100_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = 1_000 + (x >> 33) % 10_000_000;
            s.insert(v);
            all.push(v);
        }
        all.sort_unstable();
        for q in [0.01, 0.1, 0.5, 0.9, 0.99, 0.999] {
            let got = s.quantile(q).expect("samples") as f64;
            let want = exact_quantile(&all, q) as f64;
            assert!(
                (got - want).abs() / want <= 0.02,
                "q={q} got={got} want={want}"
            );
        }
        assert!(s.heap_bytes() < 16 * 1024);
    }

    #[test]
    fn merge_matches_single_sketch() {
        let mut a = Sketch::new();
        let mut b = Sketch::new();
        let mut both = Sketch::new();
        for v in 1..=1000u64 {
            let v = v * 997;
            if v % 2 == 0 {
                a.insert(v)
            } else {
                b.insert(v)
            }
            both.insert(v);
        }
        let mut m = a.clone();
        m.merge(&b);
        assert_eq!(m.count(), 1000);
        assert_eq!(m.min(), both.min());
        assert_eq!(m.max(), both.max());
        for q in [0.5, 0.9, 0.99] {
            assert_eq!(m.quantile(q), both.quantile(q));
        }
        let mut small = Sketch::new();
        small.insert(7);
        small.merge(&a);
        assert_eq!(small.count(), 501);
        assert_eq!(small.min(), Some(7));
    }

    #[test]
    fn classic_buckets_are_exact_and_merge() {
        let values = [
            0,
            1_000,
            1_001,
            2_000,
            99_999_999,
            100_000_000,
            100_000_001,
            5_000,
        ];
        let mut a = Sketch::new();
        let mut b = Sketch::new();
        for _ in 0..20 {
            for &v in &values {
                a.insert(v);
                b.insert(v);
            }
        }
        // 0 and 1000 <= 1 us; 1001, 2000 in (1 us, 2 us]; 5000 in (2 us, 5 us].
        let c = a.classic_buckets();
        assert_eq!((c[0], c[1], c[2]), (40, 40, 20));
        assert_eq!(c[LATENCY_BUCKETS_NS.len() - 1], 40);
        assert_eq!(
            c.iter().sum::<u64>(),
            a.count() - 20,
            "one value above 100 ms"
        );
        a.merge(&b);
        assert_eq!(a.classic_buckets()[0], 80);
        assert_eq!(a.classic_buckets().iter().sum::<u64>(), a.count() - 40);
    }

    /// Samples through a kernel histogram: count, sum, extremes and classic buckets exact,
    /// every quantile within 1/9 + 1% of the exact one, merges adding up.
    #[test]
    fn histogram_merges_keep_the_stated_error() {
        use roce_observer_common::latency::LatencyHist;
        let mut hist = LatencyHist::zeroed();
        let mut exact = Sketch::new();
        let mut all = Vec::new();
        let mut via = Sketch::new();
        let mut read = LatencyHist::zeroed();
        let mut x: u64 = 99;
        for round in 0..20 {
            for _ in 0..5_000 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // 50 ns .. 2 s, log-spread, and every classic bound itself now and then.
                let v = match x % 7 {
                    0 => LATENCY_BUCKETS_NS[(x >> 8) as usize % LATENCY_BUCKETS_NS.len()],
                    _ => (50.0 * (17.0f64 * ((x >> 11) as f64 / (1u64 << 53) as f64)).exp()) as u64,
                };
                hist.add(v, u64::MAX, 0);
                exact.insert(v);
                all.push(v);
            }
            // A read per round: what grew since the last one.
            let grown = hist.growth(&read);
            let sum = hist.sum_ns - read.sum_ns;
            via.merge_hist(&grown, sum, !hist.min_inv, hist.max_ns);
            read = hist;
            assert_eq!(via.count(), 5_000 * (round + 1));
        }
        all.sort_unstable();
        assert_eq!((via.count(), via.sum()), (exact.count(), exact.sum()));
        assert_eq!((via.min(), via.max()), (exact.min(), exact.max()));
        assert_eq!(via.classic_buckets(), exact.classic_buckets());
        for q in [0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999] {
            let got = via.quantile(q).expect("samples") as f64;
            let want = exact_quantile(&all, q) as f64;
            // Inside 100 ns .. 1 s: 1/9, then the sketch's 1%.
            let bound = if (100.0..=1e9).contains(&want) {
                (1.0 + 1.0 / 9.0) * 1.01 - 1.0
            } else {
                1.0
            };
            assert!(
                (got - want).abs() / want <= bound,
                "q={q} got={got} want={want}"
            );
        }
        // Few samples stay exact representatives: one sample, its value's bucket narrowed to
        // [min, max] = the sample itself.
        let mut one = LatencyHist::zeroed();
        one.add(3_333, u64::MAX, 0);
        let mut s = Sketch::new();
        s.merge_hist(&one.growth(&LatencyHist::zeroed()), 3_333, 3_333, 3_333);
        assert_eq!((s.quantile(0.5), s.count()), (Some(3_333), 1));
    }

    #[test]
    fn zero_values() {
        let mut s = Sketch::new();
        for _ in 0..100 {
            s.insert(0);
        }
        s.insert(10);
        assert_eq!(s.quantile(0.5), Some(0));
        assert_eq!(s.max(), Some(10));
    }
}
