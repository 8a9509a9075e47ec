//! UTC timestamps without a calendar dependency.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How far ahead a clamped time may lie when `now + d` does not fit the platform's clock.
const FAR_AHEADS: [Duration; 3] =
    [Duration::from_secs(100 * 365 * 86_400), Duration::from_secs(365 * 86_400), Duration::from_secs(86_400)];

/// `now + d`, or the farthest of 100 years, a year or a day ahead that the clock can hold: a duration from
/// outside (a `Retry-After`, a flag) never makes the arithmetic panic.
pub fn instant_after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).or_else(|| FAR_AHEADS.iter().find_map(|f| now.checked_add(*f))).unwrap_or(now)
}

/// `t + d` for wall-clock times, clamped as [`instant_after`] does.
pub fn system_after(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d).or_else(|| FAR_AHEADS.iter().find_map(|f| t.checked_add(*f))).unwrap_or(t)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_utc(unix_seconds: u64) -> String {
    let days = (unix_seconds / 86_400) as i64;
    let secs = unix_seconds % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Formats seconds since the Unix epoch as the Hub does: `YYYY-MM-DDTHH:MM:SS.000Z`.
pub fn format_utc_millis(unix_seconds: u64) -> String {
    let s = format_utc(unix_seconds);
    format!("{}.000Z", s.trim_end_matches('Z'))
}

/// The current time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn now_utc() -> String {
    format_utc(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
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
    fn known_dates() {
        assert_eq!(super::format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::format_utc(1_795_948_496), "2026-11-29T10:34:56Z");
    }
}
