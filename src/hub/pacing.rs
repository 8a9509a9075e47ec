//! Paces each bucket from the Hub's `RateLimit` headers. It slows down before the quota runs out, and after a
//! 429 it sends nothing into the closed window.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;

/// The Hub's rate-limit buckets that a crawler uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bucket {
    /// `/api/…`.
    Api,
    /// `/…/resolve/…`.
    Resolvers,
}

/// What a `RateLimit` header said: requests left and seconds to the reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests left in the window.
    pub remaining: u64,
    /// Seconds until the window resets.
    pub reset_seconds: u64,
}

/// Parses `RateLimit: "api";r=12;t=55` (draft-ietf-httpapi-ratelimit-headers, as the Hub sends it).
pub fn parse_rate_limit(headers: &HeaderMap) -> Option<RateLimit> {
    parse_rate_limit_value(headers.get("ratelimit")?.to_str().ok()?)
}

/// Parses the value of a `RateLimit` header; numbers too large for `u64` saturate.
pub fn parse_rate_limit_value(value: &str) -> Option<RateLimit> {
    let mut remaining = None;
    let mut reset = None;
    for part in value.split(';').map(str::trim) {
        if let Some(r) = part.strip_prefix("r=") {
            remaining = parse_seconds(r);
        } else if let Some(t) = part.strip_prefix("t=") {
            reset = parse_seconds(t);
        }
    }
    Some(RateLimit { remaining: remaining?, reset_seconds: reset? })
}

/// Parses `Retry-After` in seconds. The Hub sends integers, so HTTP dates are not read. A number too large
/// for `u64` saturates rather than being ignored: the caller's cap then refuses a Hub that asks for forever.
pub fn parse_retry_after(headers: &HeaderMap) -> Option<u64> {
    parse_seconds(headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?)
}

/// Parses a non-negative integer of seconds, saturating at `u64::MAX`; anything else is `None`.
fn parse_seconds(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 64 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}

#[derive(Debug, Default)]
struct State {
    /// Requests we may still send before the reset, as last reported and counted down since.
    remaining: Option<u64>,
    /// When the current window ends.
    reset_at: Option<Instant>,
    /// A request is out to learn the bucket's state; the others wait for its answer.
    probing: bool,
    /// The server sends no `RateLimit` headers: nothing to pace by.
    unlimited: bool,
    /// Some answer carried `RateLimit`.
    seen_limits: bool,
    /// The seconds the Hub named for the closed window, as it named them (before any clamping).
    named_wait: Option<u64>,
}

/// One bucket's pacer.
#[derive(Debug, Default)]
pub struct Pacer {
    state: Mutex<State>,
}

/// Slack after a reset, so a request does not land in the old window because of clock skew.
const RESET_MARGIN: Duration = Duration::from_millis(50);

impl Pacer {
    /// Returns how long to wait before sending, and reserves a slot when no wait is needed. Call it until it
    /// returns zero.
    ///
    /// The bucket's state is unknown at the first request, or after a window reset with no quota known. Then
    /// one request goes out and the rest wait for its `RateLimit` answer. A crawl starting with many workers
    /// thus does not burst into a quota it has not seen.
    pub fn reserve(&self, now: Instant) -> Duration {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.unlimited {
            return Duration::ZERO;
        }
        if let (Some(0), Some(reset)) = (s.remaining, s.reset_at) {
            let open_at = crate::time::instant_after(reset, RESET_MARGIN);
            if now < open_at {
                return open_at.saturating_duration_since(now);
            }
            // A new window stays unknown until an answer from inside it says. Answers still in flight from the
            // old window can only lower the count, so this never sends more than the quota.
            s.remaining = None;
            s.reset_at = None;
        }
        match s.remaining {
            // Spent, and the reset not known yet: the answers in flight will say when it is.
            Some(0) => PROBE_WAIT,
            Some(r) => {
                s.remaining = Some(r.saturating_sub(1));
                Duration::ZERO
            }
            None if s.probing => PROBE_WAIT,
            None => {
                s.probing = true;
                Duration::ZERO
            }
        }
    }

    /// Learns the bucket's state from a response.
    pub fn observe(&self, headers: &HeaderMap, now: Instant) {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.probing = false;
        let Some(limit) = parse_rate_limit(headers) else {
            // Do not pace a server that never sent limits, and keep pacing one that did. An answer that says
            // nothing leaves an unknown window unknown, so the next request finds out.
            if !s.seen_limits {
                s.unlimited = true;
            } else if s.reset_at.is_none() {
                s.remaining = None;
            }
            return;
        };
        s.unlimited = false;
        s.seen_limits = true;
        s.named_wait = (limit.remaining == 0).then_some(limit.reset_seconds);
        let reset_at = crate::time::instant_after(now, Duration::from_secs(limit.reset_seconds));
        // Requests already in flight were counted down locally. Never trust a larger figure from an older
        // response.
        s.remaining = Some(match (s.remaining, s.reset_at) {
            (Some(mine), Some(old)) if crate::time::instant_after(old, Duration::from_secs(1)) >= reset_at => {
                mine.min(limit.remaining)
            }
            _ => limit.remaining,
        });
        s.reset_at = Some(reset_at);
    }

    /// Returns the wait the Hub named for the window now closed, in seconds as it named them.
    pub fn named_wait(&self) -> Option<u64> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).named_wait
    }

    /// Forgets the bucket's window: the next request finds out its state afresh.
    pub fn forget(&self) {
        *self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = State::default();
    }

    /// Lets another request find out the state, after a request that taught nothing (a network failure).
    pub fn release(&self) {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).probing = false;
    }

    /// Records a 429: nothing more goes out until `wait` has passed.
    pub fn refused(&self, wait: Duration, now: Instant) {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.probing = false;
        s.unlimited = false;
        s.seen_limits = true;
        s.remaining = Some(0);
        s.named_wait = Some(wait.as_secs());
        s.reset_at = Some(crate::time::instant_after(now, wait));
    }
}

/// How often waiting requests look again while one finds out the bucket's state.
const PROBE_WAIT: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(rate: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_str(rate).unwrap());
        h
    }

    #[test]
    fn parses_the_hubs_header() {
        assert_eq!(
            parse_rate_limit(&headers("\"api\";r=12;t=55")),
            Some(RateLimit { remaining: 12, reset_seconds: 55 })
        );
        assert_eq!(parse_rate_limit(&headers("garbage")), None);
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(parse_retry_after(&h), Some(7));
    }

    #[test]
    fn waits_when_the_quota_is_spent_and_not_before() {
        let p = Pacer::default();
        let t0 = Instant::now();
        assert_eq!(p.reserve(t0), Duration::ZERO, "unknown quota: one request finds out");
        assert_eq!(p.reserve(t0), PROBE_WAIT, "the others wait for its answer");
        p.observe(&headers("\"api\";r=2;t=10"), t0);
        assert_eq!(p.reserve(t0), Duration::ZERO);
        assert_eq!(p.reserve(t0), Duration::ZERO);
        let wait = p.reserve(t0);
        assert!(wait > Duration::from_secs(9) && wait <= Duration::from_secs(11), "{wait:?}");
        let t1 = t0 + Duration::from_secs(11);
        assert_eq!(p.reserve(t1), Duration::ZERO, "a new window: one request finds out");
        assert_eq!(p.reserve(t1), PROBE_WAIT);
        p.observe(&headers("\"api\";r=0;t=0"), t1);
        assert_eq!(p.reserve(t1 + Duration::from_millis(60)), Duration::ZERO, "a stale answer only delays");
    }

    #[test]
    fn servers_without_limits_are_not_paced() {
        let p = Pacer::default();
        let t0 = Instant::now();
        assert_eq!(p.reserve(t0), Duration::ZERO);
        p.observe(&HeaderMap::new(), t0);
        for _ in 0..100 {
            assert_eq!(p.reserve(t0), Duration::ZERO);
        }
    }

    #[test]
    fn absurd_values_saturate_and_never_panic() {
        let huge = "\"api\";r=0;t=18446744073709551615999";
        assert_eq!(parse_rate_limit_value(huge), Some(RateLimit { remaining: 0, reset_seconds: u64::MAX }));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("18446744073709551615"));
        assert_eq!(parse_retry_after(&h), Some(u64::MAX));
        h.insert("retry-after", HeaderValue::from_static("-5"));
        assert_eq!(parse_retry_after(&h), None);
        let p = Pacer::default();
        let t0 = Instant::now();
        p.observe(&headers(huge), t0);
        assert!(p.reserve(t0) > Duration::from_secs(86_400), "a wait far ahead, for the caller to refuse");
        p.refused(Duration::MAX, t0);
        assert!(p.reserve(t0) > Duration::from_secs(86_400));
        p.forget();
        assert_eq!(p.reserve(t0), Duration::ZERO, "a later run asks the Hub afresh");
    }

    #[test]
    fn a_429_closes_the_window() {
        let p = Pacer::default();
        let t0 = Instant::now();
        p.refused(Duration::from_secs(3), t0);
        assert!(p.reserve(t0 + Duration::from_secs(1)) >= Duration::from_secs(2));
        assert_eq!(p.reserve(t0 + Duration::from_secs(4)), Duration::ZERO);
    }
}
