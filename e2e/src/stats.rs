//! Small statistics for the benchmarks' figures.

use std::time::Duration;

/// The `p`-th quantile (0.0–1.0) of `sorted` (ascending, not empty), by nearest rank.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let ms: Vec<Duration> = (1..=101).map(Duration::from_millis).collect();
        assert_eq!(pct(&ms, 0.0), Duration::from_millis(1));
        assert_eq!(pct(&ms, 0.5), Duration::from_millis(51));
        assert_eq!(pct(&ms, 0.99), Duration::from_millis(100));
        assert_eq!(pct(&ms, 1.0), Duration::from_millis(101));
    }
}
