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

/// Parses `YYYY-MM-DDTHH:MM:SSZ` (what [`format_utc`] writes) into seconds since the Unix epoch.
pub fn parse_utc(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Howard Hinnant's days-from-civil, the inverse of the formatting above.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
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
    fn parsing_inverts_formatting() {
        for t in [0u64, 951_782_400, 1_795_948_496, 4_102_444_799] {
            assert_eq!(super::parse_utc(&super::format_utc(t)), Some(t as i64));
        }
        assert_eq!(super::parse_utc("2026-13-01T00:00:00Z"), None);
        assert_eq!(super::parse_utc("not a time"), None);
    }

    #[test]
    fn known_dates() {
        assert_eq!(super::format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::format_utc(1_795_948_496), "2026-11-29T10:34:56Z");
    }
}
