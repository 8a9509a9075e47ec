//! Any bytes as `RateLimit` and `Retry-After` values: parsing saturates and never panics, and the pacer
//! fed them never overflows its clock arithmetic, whatever it is told.

#![no_main]

use std::time::{Duration, Instant};

use hubalign::hub::pacing::{Pacer, parse_rate_limit_value, parse_retry_after};
use libfuzzer_sys::fuzz_target;
use reqwest::header::{HeaderMap, HeaderValue};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (rate, retry) = text.split_once('\n').unwrap_or((text, text));
    let parsed = parse_rate_limit_value(rate);
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(rate) {
        headers.insert("ratelimit", v);
    }
    if let Ok(v) = HeaderValue::from_str(retry) {
        headers.insert("retry-after", v);
    }
    let retry_after = parse_retry_after(&headers);
    let pacer = Pacer::default();
    let now = Instant::now();
    pacer.observe(&headers, now);
    for step in [0u64, 1, 59, 3600, u64::MAX / 2] {
        let at = now.checked_add(Duration::from_secs(step)).unwrap_or(now);
        let _ = pacer.reserve(at);
    }
    if let Some(limit) = parsed {
        pacer.refused(Duration::from_secs(limit.reset_seconds), now);
        let _ = pacer.reserve(now);
    }
    if let Some(seconds) = retry_after {
        pacer.refused(Duration::from_secs(seconds), now);
        let _ = pacer.reserve(now);
    }
});
