//! UTC timestamps as the store keeps them, on chrono's calendar. The form `YYYY-MM-DDTHH:MM:SSZ` sorts as
//! text on both backends. Also clock arithmetic that a duration from outside cannot make panic.

use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, NaiveDateTime, Utc};

/// How far ahead a clamped time may lie when `now + d` does not fit the platform's clock.
const FAR_AHEADS: [Duration; 3] =
    [Duration::from_secs(100 * 365 * 86_400), Duration::from_secs(365 * 86_400), Duration::from_secs(86_400)];

/// `now + d`. If the clock cannot hold it, the farthest of 100 years, a year or a day ahead that it can. So a
/// duration from outside, such as a `Retry-After` or a flag, never makes the arithmetic panic.
pub fn instant_after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).or_else(|| FAR_AHEADS.iter().find_map(|f| now.checked_add(*f))).unwrap_or(now)
}

/// `t + d` for wall-clock times, clamped as [`instant_after`] does.
pub fn system_after(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d).or_else(|| FAR_AHEADS.iter().find_map(|f| t.checked_add(*f))).unwrap_or(t)
}

/// The store's format: seconds, `Z`.
const STORED: &str = "%Y-%m-%dT%H:%M:%SZ";

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`. A time past chrono's range, year 262,143,
/// reads as the epoch.
pub fn format_utc(unix_seconds: u64) -> String {
    let t = i64::try_from(unix_seconds).ok().and_then(|s| DateTime::<Utc>::from_timestamp(s, 0)).unwrap_or_default();
    t.format(STORED).to_string()
}

/// Parses `YYYY-MM-DDTHH:MM:SSZ`, as [`format_utc`] writes it, into seconds since the Unix epoch. Returns
/// `None` for a date the calendar does not have (`2026-02-31`) or any other shape.
pub fn parse_utc(s: &str) -> Option<i64> {
    // chrono's `%Y` takes a sign and more digits; the stored form has exactly four.
    if s.len() != 20 {
        return None;
    }
    NaiveDateTime::parse_from_str(s, STORED).ok().map(|t| t.and_utc().timestamp())
}

/// Seconds since the Unix epoch at `t`, rounded up so a time to wait for is never early. 0 before the epoch.
pub fn unix_seconds_after(t: SystemTime) -> i64 {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_secs() + u64::from(d.subsec_nanos() > 0)).unwrap_or(i64::MAX)
}

/// The current time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn now_utc() -> String {
    Utc::now().format(STORED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamped_arithmetic_never_panics() {
        let now = Instant::now();
        assert!(instant_after(now, Duration::MAX) > now + Duration::from_secs(86_400));
        assert_eq!(instant_after(now, Duration::from_secs(5)), now + Duration::from_secs(5));
        let t = SystemTime::now();
        assert!(system_after(t, Duration::from_secs(u64::MAX)) > t);
    }

    #[test]
    fn parsing_inverts_formatting() {
        for t in [0u64, 951_782_400, 1_795_948_496, 4_102_444_799] {
            assert_eq!(super::parse_utc(&super::format_utc(t)), Some(t as i64));
        }
        assert_eq!(super::parse_utc("2026-13-01T00:00:00Z"), None);
        assert_eq!(super::parse_utc("2026-02-31T00:00:00Z"), None, "a day February does not have");
        assert_eq!(super::parse_utc("2026-02-28T24:00:00Z"), None);
        assert_eq!(super::parse_utc("+2026-02-28T00:00:00Z"), None);
        assert_eq!(super::format_utc(u64::MAX), "1970-01-01T00:00:00Z");
        assert_eq!(super::parse_utc("not a time"), None);
    }

    #[test]
    fn known_dates() {
        assert_eq!(super::format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::format_utc(1_795_948_496), "2026-11-29T10:34:56Z");
    }
}
