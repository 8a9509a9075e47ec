//! Which failures are worth another try, and how long to wait: jittered exponential backoff with a cap.

use std::time::Duration;

use reqwest::StatusCode;

/// Retry settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Delay before the second attempt; doubled each time.
    pub base_delay: Duration,
    /// No single wait is longer than this.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 8 attempts, with 250 ms doubling to at most 10 s: at most about 26 s of waiting per request.
    fn default() -> Self {
        RetryPolicy { max_attempts: 8, base_delay: Duration::from_millis(250), max_delay: Duration::from_secs(10) }
    }
}

impl RetryPolicy {
    /// Returns the wait before attempt `attempt + 1` (`attempt` ≥ 1), with "full jitter" (AWS's name). The
    /// wait is uniform in `[0, d]`, where `d` doubles from the base up to the cap. Workers that failed together
    /// thus spread over the whole window instead of meeting again at its middle.
    pub fn delay(&self, attempt: u32, jitter_unit: f64) -> Duration {
        let doubled = self.base_delay.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        doubled.min(self.max_delay).mul_f64(jitter_unit.clamp(0.0, 1.0))
    }
}

/// Statuses that a later attempt may not see: timeouts, rate limits (handled by pacing) and server errors.
pub fn is_transient_status(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
}

/// Network-level failures worth retrying: connects, timeouts, bodies cut short.
pub fn is_transient_error(e: &reqwest::Error) -> bool {
    e.is_connect() || e.is_timeout() || e.is_body() || e.is_request() || e.is_decode()
}

/// A uniform draw in `[0, 1)` for [`RetryPolicy::delay`], from a per-thread generator seeded by the OS. It
/// uses `fastrand`, which `tempfile` already brings. Workers started in the same instant still draw apart.
pub fn jitter_unit() -> f64 {
    fastrand::f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_statuses() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(is_transient_status(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [200, 206, 400, 401, 403, 404, 409, 412, 416] {
            assert!(!is_transient_status(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }

    #[test]
    fn delays_double_within_bounds_and_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, 1.0), Duration::from_millis(250));
        assert_eq!(p.delay(1, 0.0), Duration::ZERO);
        assert_eq!(p.delay(2, 0.25), Duration::from_millis(125));
        assert_eq!(p.delay(3, 1.0), Duration::from_secs(1));
        assert_eq!(p.delay(30, 1.0), Duration::from_secs(10));
        let total: Duration = (1..p.max_attempts).map(|a| p.delay(a, 1.0)).sum();
        assert!(total < Duration::from_secs(40), "worst case {total:?}");
        // Full jitter spreads over the whole window: a thousand draws reach both its lower and upper quarter.
        let draws: Vec<f64> = (0..1000).map(|_| jitter_unit()).collect();
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
        assert!(draws.iter().any(|&u| u < 0.25) && draws.iter().any(|&u| u > 0.75));
    }
}
