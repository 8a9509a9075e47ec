//! Formats times as the Hub writes them: `YYYY-MM-DDTHH:MM:SS.000Z`, UTC.

use chrono::{DateTime, SecondsFormat, Utc};

/// Formats seconds since the Unix epoch in the Hub's format. Out-of-range times read as the epoch.
pub fn hub_time(unix_seconds: u64) -> String {
    let t = i64::try_from(unix_seconds).ok().and_then(|s| DateTime::<Utc>::from_timestamp(s, 0)).unwrap_or_default();
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The current time in the Hub's format.
pub fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn hub_time_has_milliseconds_and_z() {
        assert_eq!(super::hub_time(1_700_000_000), "2023-11-14T22:13:20.000Z");
        assert_eq!(super::hub_time(u64::MAX), "1970-01-01T00:00:00.000Z");
    }
}
