//! Raises alarms when the service's work keeps failing while every task still runs. The alarms are: jobs held
//! for the operator, the newest jobs all failed, the newest audit failed. `/healthz` answers `degraded` with
//! them, with a 200, since a restart mends none of them. The overview shows each as a banner, and `/metrics`
//! counts them.

use serde::Serialize;

use crate::job::JobState;
use crate::store::queries::RunRow;
use crate::store::{Store, StoreError};
use crate::untrusted::escape_control;

/// The newest ended jobs looked at.
const RECENT_JOBS: i64 = 5;
/// Failures in a row, among them, that make an alarm. Fewer means a bad repo, not a broken service.
const FAILING_IN_A_ROW: usize = 3;
/// The longest reason quoted in an alarm.
const REASON_CHARS: usize = 200;

/// One alarm, said for the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Alarm {
    /// `held`, `jobs_failing` or `audit_failed`.
    pub(super) kind: &'static str,
    /// What is wrong and where to look, escaped.
    pub(super) message: String,
}

/// The newest runs read for the alarms (a running one and the one before it).
const NEWEST_RUNS: i64 = 2;

/// The alarms, and the data they were judged from that the pages show too. So a page reads that data once.
pub(super) struct Reading {
    /// What keeps failing.
    pub(super) alarms: Vec<Alarm>,
    /// Queued jobs held for the operator.
    pub(super) held: i64,
    /// The newest runs, newest first.
    pub(super) runs: Vec<RunRow>,
}

/// Reads what the alarms are judged from and judges them.
pub(super) async fn read(store: &Store) -> Result<Reading, StoreError> {
    let (recent, held, hold_reason, runs) = tokio::try_join!(
        store.recent_outcomes(RECENT_JOBS),
        store.jobs_needing_operator(),
        store.a_hold_reason(),
        store.runs(NEWEST_RUNS)
    )?;
    let alarms = judge(&recent, (held, hold_reason), &runs);
    Ok(Reading { alarms, held, runs })
}

fn quoted(reason: Option<&str>) -> String {
    let reason: String = reason.unwrap_or("no reason recorded").chars().take(REASON_CHARS).collect();
    escape_control(&reason).into_owned()
}

/// Judges the alarms from the newest ended jobs, the jobs held with one of their reasons, and the newest
/// runs. Jobs and runs come newest first. A running run is passed over.
fn judge(
    recent: &[(JobState, Option<String>)],
    (held, hold_reason): (i64, Option<String>),
    runs: &[RunRow],
) -> Vec<Alarm> {
    let mut alarms = Vec::new();
    if held > 0 {
        alarms.push(Alarm {
            kind: "held",
            message: format!(
                "{held} job(s) held for the operator; the checks at start (`hubalign doctor`) say what to mend. \
                 Latest reason: {}",
                quoted(hold_reason.as_deref())
            ),
        });
    }
    let failing = recent.iter().take_while(|(state, _)| *state == JobState::Failed).count();
    if failing >= FAILING_IN_A_ROW {
        alarms.push(Alarm {
            kind: "jobs_failing",
            message: format!(
                "the last {failing} jobs failed (see /jobs?state=failed). Latest reason: {}",
                quoted(recent[0].1.as_deref())
            ),
        });
    }
    if let Some(run) = runs.iter().find(|r| r.status != "running")
        && run.status == "failed"
    {
        alarms.push(Alarm {
            kind: "audit_failed",
            message: format!("the last audit (run {}) failed: {}", run.id, quoted(run.error.as_deref())),
        });
    }
    alarms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: i64, status: &str) -> RunRow {
        RunRow {
            id,
            kind: "crawl".into(),
            started_at: String::new(),
            finished_at: None,
            status: status.into(),
            started_by: None,
            repos_listed: 0,
            repos_probed: 0,
            shards_probed: 0,
            api_requests: 0,
            resolver_requests: 0,
            bytes_read: 0,
            rate_limited: 0,
            errors: 0,
            invalid_listings: 0,
            error: Some("the Hub said \u{1b}[2J no".into()),
        }
    }

    #[test]
    fn a_failing_streak_a_hold_and_a_failed_audit_each_raise_an_alarm() {
        let failed = (JobState::Failed, Some("MLX load check: differs".to_owned()));
        let published = (JobState::Published, None);
        assert!(judge(&[], (0, None), &[]).is_empty(), "a new service is healthy");
        let two = [failed.clone(), failed.clone(), published.clone()];
        assert!(judge(&two, (0, None), &[run(1, "finished")]).is_empty(), "two failures are a bad repo or two");
        let three = [failed.clone(), failed.clone(), failed.clone(), published];
        let alarms = judge(&three, (2, Some("HTTP 403".into())), &[run(2, "running"), run(1, "failed")]);
        let kinds: Vec<_> = alarms.iter().map(|a| a.kind).collect();
        assert_eq!(kinds, ["held", "jobs_failing", "audit_failed"]);
        assert!(alarms[1].message.contains("the last 3 jobs failed") && alarms[1].message.contains("differs"));
        assert!(!alarms[2].message.contains('\u{1b}'), "escaped: {}", alarms[2].message);
        let recovered = judge(&[], (0, None), &[run(3, "finished"), run(2, "failed")]);
        assert!(recovered.is_empty(), "a later audit that finished clears it");
    }
}
