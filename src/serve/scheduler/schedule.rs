//! Decides when the scheduled audit runs: at a fixed interval between starts, or by a cron expression in UTC.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use thiserror::Error;

/// A cron expression the schedule cannot use.
#[derive(Debug, Error)]
#[error("cron expression {expr:?}: {reason}")]
pub struct ScheduleError {
    /// The expression as given.
    pub expr: String,
    /// Why it was refused.
    pub reason: String,
}

/// When audits start.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// A fixed time from one audit's start to the next. The first audit starts at once.
    Every(Duration),
    /// The times a cron expression names, in UTC. The expression has 5 fields, or 6 with seconds first. The
    /// first audit waits for the first of those times.
    Cron {
        /// The expression as given.
        expr: String,
        /// The parsed expression.
        cron: Box<croner::Cron>,
    },
}

impl Schedule {
    /// Parses a cron expression (`0 3 * * *`, `*/30 * * * * *`, `@daily`) and checks that it ever fires.
    pub fn cron(expr: &str) -> Result<Schedule, ScheduleError> {
        let refuse = |reason: String| ScheduleError { expr: expr.to_owned(), reason };
        let cron: croner::Cron = expr.parse().map_err(|e: croner::errors::CronError| refuse(e.to_string()))?;
        cron.find_next_occurrence(&DateTime::<Utc>::UNIX_EPOCH, false)
            .map_err(|e| refuse(format!("never fires ({e})")))?;
        Ok(Schedule::Cron { expr: expr.trim().to_owned(), cron: Box::new(cron) })
    }

    /// Whether the service should audit as soon as it starts.
    pub fn audits_at_start(&self) -> bool {
        matches!(self, Schedule::Every(_))
    }

    /// When the next audit starts, given when the last one started and the time now. Cron times that
    /// passed while an audit ran are skipped, so audits never overlap or queue up.
    pub fn next(&self, last_started: SystemTime, now: SystemTime) -> SystemTime {
        match self {
            Schedule::Every(interval) => crate::time::system_after(last_started, *interval).max(now),
            Schedule::Cron { cron, .. } => {
                let from = to_chrono(now.max(last_started));
                match cron.find_next_occurrence(&from, false) {
                    Ok(at) => from_chrono(at),
                    // The expression fired once at parse time, so this is a pattern past its last year.
                    Err(_) => crate::time::system_after(UNIX_EPOCH, Duration::from_secs(u64::MAX / 4)),
                }
            }
        }
    }

    /// Describes the schedule as `serve` prints it.
    pub fn describe(&self) -> String {
        match self {
            Schedule::Every(d) => format!("every {} s", d.as_secs()),
            Schedule::Cron { expr, .. } => format!("at cron `{expr}` (UTC)"),
        }
    }
}

fn to_chrono(t: SystemTime) -> DateTime<Utc> {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    DateTime::from_timestamp(d.as_secs() as i64, d.subsec_nanos()).unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
}

fn from_chrono(t: DateTime<Utc>) -> SystemTime {
    let whole = Duration::from_secs(t.timestamp().max(0) as u64)
        .saturating_add(Duration::from_nanos(u64::from(t.timestamp_subsec_nanos())));
    crate::time::system_after(UNIX_EPOCH, whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    // 2026-11-29T10:34:56Z
    const T: u64 = 1_795_948_496;

    #[test]
    fn an_interval_counts_from_the_last_start_and_never_goes_back() {
        let every = Schedule::Every(Duration::from_secs(3600));
        assert_eq!(every.next(at(T), at(T + 10)), at(T + 3600));
        assert_eq!(every.next(at(T), at(T + 7200)), at(T + 7200), "a long audit is followed at once");
        assert!(every.audits_at_start());
    }

    #[test]
    fn cron_fires_at_its_next_time_in_utc() {
        let daily = Schedule::cron("0 3 * * *").unwrap();
        // The next 03:00 after 10:34:56 is the next day's.
        assert_eq!(crate::time::format_utc(secs(daily.next(at(T), at(T + 1)))), "2026-11-30T03:00:00Z");
        let half_minute = Schedule::cron("*/30 * * * * *").unwrap();
        assert_eq!(half_minute.next(at(T), at(T)), at(T + 4));
        assert!(!daily.audits_at_start());
    }

    #[test]
    fn times_missed_during_a_long_audit_are_skipped() {
        let hourly = Schedule::cron("@hourly").unwrap();
        // Started 10:34:56, finished 13:10:00: the next is 14:00, not the three hours that passed.
        let next = hourly.next(at(T), at(T - 2096 + 3 * 3600 + 600));
        assert_eq!(crate::time::format_utc(secs(next)), "2026-11-29T14:00:00Z");
    }

    #[test]
    fn bad_expressions_are_refused_with_the_expression() {
        for bad in ["", "61 * * * *", "* * *", "0 0 31 2 *"] {
            let e = Schedule::cron(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    fn secs(t: SystemTime) -> u64 {
        t.duration_since(UNIX_EPOCH).unwrap().as_secs()
    }
}
