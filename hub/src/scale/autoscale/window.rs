//! The history window of a metric: mean and standard deviation over the last
//! `windowSeconds`, in bounded memory whatever the poll rate.
//!
//! Samples fall into [`BUCKETS`] time buckets of `window / BUCKETS` each; a bucket keeps
//! count, mean and sum of squared deviations (Welford), and buckets are merged with Chan's
//! formula, which stays exact where a running sum of squares would cancel. A bucket leaves
//! the window whole, so the window is exact to one bucket width (1/64 of its length).

use serde::{Deserialize, Serialize};

/// Buckets per window: the memory bound of one policy's history.
pub const BUCKETS: i64 = 64;

/// Count, mean and sum of squared deviations of some samples.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    /// Number of samples.
    pub n: u64,
    /// Their mean.
    pub mean: f64,
    /// Sum of squared deviations from the mean.
    pub m2: f64,
}

impl Moments {
    /// Adds one sample (Welford).
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        let delta = x - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (x - self.mean);
    }

    /// Both sets of samples together (Chan et al.).
    pub fn merge(self, other: Moments) -> Moments {
        if self.n == 0 {
            return other;
        }
        if other.n == 0 {
            return self;
        }
        let n = self.n + other.n;
        let delta = other.mean - self.mean;
        let (a, b, total) = (self.n as f64, other.n as f64, n as f64);
        Moments {
            n,
            mean: self.mean + delta * b / total,
            m2: self.m2 + other.m2 + delta * delta * a * b / total,
        }
    }

    /// Population standard deviation; 0 for fewer than two samples.
    pub fn stddev(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            (self.m2 / self.n as f64).max(0.0).sqrt()
        }
    }
}

/// One time bucket.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
struct Bucket {
    /// `floor(t / width)` of its samples.
    index: i64,
    #[serde(flatten)]
    moments: Moments,
}

/// The samples of the last window, bucketed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Window {
    buckets: Vec<Bucket>,
}

impl Window {
    /// Adds `value` seen at `now_ms` to a window of `window_ms`, dropping what fell out.
    pub fn push(&mut self, now_ms: i64, window_ms: i64, value: f64) {
        let index = now_ms.div_euclid(width(window_ms));
        match self.buckets.last_mut() {
            Some(last) if last.index == index => last.moments.push(value),
            _ => {
                let mut moments = Moments::default();
                moments.push(value);
                self.buckets.push(Bucket { index, moments });
            }
        }
        self.expire(now_ms, window_ms);
    }

    /// Drops buckets older than the window (also after `windowSeconds` shrank).
    pub fn expire(&mut self, now_ms: i64, window_ms: i64) {
        let oldest = now_ms.div_euclid(width(window_ms)) - BUCKETS + 1;
        self.buckets.retain(|b| b.index >= oldest);
        // A bucket index from a longer window (spec changed) or a clock step back: start
        // over rather than keep buckets that are not in order.
        if !self.buckets.windows(2).all(|w| w[0].index < w[1].index) {
            self.buckets.clear();
        }
    }

    /// The moments of every sample in the window.
    pub fn moments(&self) -> Moments {
        self.buckets
            .iter()
            .fold(Moments::default(), |acc, b| acc.merge(b.moments))
    }

    /// Number of buckets held (at most [`BUCKETS`]).
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True when the window holds no sample.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

fn width(window_ms: i64) -> i64 {
    (window_ms / BUCKETS).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference(samples: &[f64]) -> (f64, f64) {
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        (mean, if samples.len() < 2 { 0.0 } else { var.sqrt() })
    }

    proptest! {
        #[test]
        fn mean_and_stddev_match_a_direct_computation_over_the_window(
            values in prop::collection::vec(-1e6f64..1e6, 1..400),
            step_ms in 1i64..5_000,
            window_s in 1i64..3_600,
        ) {
            let window_ms = window_s * 1000;
            let mut w = Window::default();
            let mut kept = Vec::new();
            for (i, v) in values.iter().enumerate() {
                let t = i as i64 * step_ms;
                w.push(t, window_ms, *v);
                kept.push((t, *v));
            }
            let now = (values.len() as i64 - 1) * step_ms;
            let width = (window_ms / BUCKETS).max(1);
            let oldest = now.div_euclid(width) - BUCKETS + 1;
            let inside: Vec<f64> = kept
                .iter()
                .filter(|(t, _)| t.div_euclid(width) >= oldest)
                .map(|(_, v)| *v)
                .collect();
            let (mean, sd) = reference(&inside);
            let m = w.moments();
            prop_assert_eq!(m.n as usize, inside.len());
            prop_assert!((m.mean - mean).abs() <= 1e-6 * (1.0 + mean.abs()));
            prop_assert!((m.stddev() - sd).abs() <= 1e-6 * (1.0 + sd));
            prop_assert!(w.len() as i64 <= BUCKETS);
        }
    }

    #[test]
    fn large_values_with_small_spread_keep_their_spread() {
        let mut w = Window::default();
        for (i, v) in [1e9 + 1.0, 1e9 - 1.0, 1e9 + 1.0, 1e9 - 1.0]
            .iter()
            .enumerate()
        {
            w.push(i as i64 * 1000, 60_000, *v);
        }
        assert!((w.moments().stddev() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn a_window_that_shrank_drops_what_no_longer_fits() {
        let mut w = Window::default();
        for i in 0..100 {
            w.push(i * 1000, 100_000, 1.0);
        }
        w.push(100_000, 10_000, 2.0);
        assert!(w.moments().n <= 12, "{:?}", w.moments());
    }
}
