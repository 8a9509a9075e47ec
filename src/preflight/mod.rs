//! Checks what every job needs before any job starts:
//!
//! - The token may write where the mirrors go.
//! - The work directory is writable, with room.
//! - The interpreter imports MLX and passes the worker's own check on a probe bundle.
//!
//! `serve`, `worker`, `repack` and `verify-runner` stop at start with the failures and their fixes.
//! `hubalign doctor` prints every finding. So a mistyped flag costs no job. Without these checks, a wrong
//! `--python` would show only after a whole download, and fail the job for good.
//!
//! This module judges settings. It must not touch the queue; the caller releases held jobs once all pass.

mod probe;

use std::path::Path;

use serde::Serialize;

use crate::hub::HubClient;
use crate::hub::HubError;
use crate::hub::identity::{Permission, WriteAccess};

pub use probe::{MlxCheck, mlx};

/// How a finding came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// It is as every job needs.
    Ok,
    /// It may be; the first job will tell. Reported, not fatal.
    Warn,
    /// Every job would fail: the service does not start.
    Fail,
    /// Not needed with these settings.
    Skipped,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What was checked (`token`, `work directory`, `python`, …).
    pub check: &'static str,
    /// How it came out.
    pub status: Status,
    /// What was found, naming the setting's value.
    pub detail: String,
    /// What to do about it, when it did not pass.
    pub fix: Option<String>,
    /// A failure that may pass on its own, not a setting to mend: the Hub or the store is out of reach now.
    #[serde(skip)]
    pub temporary: bool,
}

impl Finding {
    /// A check that passed.
    pub fn ok(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding { check, status: Status::Ok, detail: detail.into(), fix: None, temporary: false }
    }

    /// A check that failed, with its fix.
    pub fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { check, status: Status::Fail, detail: detail.into(), fix: Some(fix.into()), temporary: false }
    }

    /// A check that failed for now: something out of reach, which may answer later.
    pub fn unreachable(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { temporary: true, ..Finding::fail(check, detail, fix) }
    }

    /// A check whose answer the first job will give.
    pub fn warn(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding { check, status: Status::Warn, detail: detail.into(), fix: None, temporary: false }
    }

    /// A check these settings do not need.
    pub fn skipped(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding { check, status: Status::Skipped, detail: detail.into(), fix: None, temporary: false }
    }
}

/// Every finding, in the order checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The findings.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The findings that stop a start.
    pub fn failures(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.status == Status::Fail)
    }

    /// Whether nothing failed.
    pub fn passed(&self) -> bool {
        self.failures().next().is_none()
    }

    /// Whether every failure is one that may pass on its own, with nothing to mend in the settings.
    pub fn only_unreachable(&self) -> bool {
        self.failures().all(|f| f.temporary)
    }

    /// Whether `check` ran and passed.
    pub fn passed_check(&self, check: &str) -> bool {
        self.findings.iter().any(|f| f.check == check && f.status == Status::Ok)
    }

    /// The report as `doctor` judges it. A clock off the store's fails there, though it only warns at start.
    pub fn strict(mut self) -> Report {
        for f in self.findings.iter_mut().filter(|f| f.check == CLOCK && f.status == Status::Warn) {
            f.status = Status::Fail;
        }
        self
    }

    /// The failures, one line each with its fix, for an error at start.
    pub fn failures_said(&self) -> Vec<String> {
        self.failures()
            .map(|f| match &f.fix {
                Some(fix) => format!("{}: {} (fix: {fix})", f.check, f.detail),
                None => format!("{}: {}", f.check, f.detail),
            })
            .collect()
    }
}

/// The name of the clock check: a warning at start, a failure for `doctor`.
pub const CLOCK: &str = "clock";

/// How far this machine's clock is from the store's: `skew` seconds behind it, or ahead when negative.
/// Leases, backoffs and run times use the store's clock, so a skewed machine still takes no lease early. But
/// its logs, its progress times and the Hub's token expiry are read on its own clock.
pub fn clock(skew: i64) -> Finding {
    let tolerance = crate::store::clock::SKEW_TOLERANCE_SECS;
    if skew.abs() <= tolerance {
        return Finding::ok(CLOCK, format!("within {tolerance} s of the store's ({skew:+} s)"));
    }
    let (by, way) = (skew.unsigned_abs(), if skew > 0 { "behind" } else { "ahead of" });
    Finding {
        status: Status::Warn,
        fix: Some("synchronise this machine's clock (NTP: timedatectl set-ntp true, chrony)".into()),
        ..Finding::warn(
            CLOCK,
            format!("this machine's clock is {by} s {way} the store's; leases and schedules follow the store's"),
        )
    }
}

/// Where the work goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publishing {
    /// `-aligned` mirrors in the target namespace.
    Mirrors,
    /// Pull requests on the sources (`--pr`).
    PullRequests,
}

/// Checks the token: present, accepted, and allowed to write where the work goes. When the Hub says who it
/// is, also returns the token's user and the mirrors' namespace: `target`, else the user's own.
pub async fn token(
    hub: &HubClient,
    target: Option<&str>,
    publishing: Publishing,
) -> (Finding, Option<(String, String)>) {
    const CHECK: &str = "token";
    if !hub.has_token() {
        let fix =
            "give a token with the write role: --token, HF_TOKEN, or `hf auth login` (huggingface.co/settings/tokens)";
        return (Finding::fail(CHECK, "no Hub token: publishing needs one", fix), None);
    }
    let who = match hub.identity().await {
        Ok(who) => who,
        Err(HubError::Status { status, .. }) if status.as_u16() == 401 => {
            let fix = "the token is mistyped, revoked or for another Hub: give a valid one (--token, HF_TOKEN)";
            return (Finding::fail(CHECK, format!("{} refused the token (HTTP 401)", hub.endpoint()), fix), None);
        }
        Err(e) => {
            let fix = "check --endpoint (or HF_ENDPOINT) and this machine's network";
            let said = format!("cannot ask {} who the token is: {e}", hub.endpoint());
            return (Finding::unreachable(CHECK, said, fix), None);
        }
    };
    let namespace = target.unwrap_or(&who.name).to_owned();
    let access = match publishing {
        // A pull request goes to a source of any namespace, so a fine-grained token needs it everywhere.
        Publishing::PullRequests => who.may_everywhere(Permission::DiscussionWrite),
        Publishing::Mirrors => who.may_write(&namespace),
    };
    let finding = match (publishing, access) {
        (Publishing::PullRequests, WriteAccess::Refused(why)) => {
            Finding::fail(CHECK, why, "a pull request needs a token with the write role, or discussion.write")
        }
        (Publishing::PullRequests, WriteAccess::Granted) => {
            Finding::ok(CHECK, format!("the token of {} may open pull requests", who.name))
        }
        (Publishing::PullRequests, WriteAccess::Unknown(why)) => {
            Finding::warn(CHECK, format!("whether the token of {} may open pull requests is unknown: {why}", who.name))
        }
        (Publishing::Mirrors, WriteAccess::Granted) => {
            Finding::ok(CHECK, format!("the token of {} may create and publish repos in {namespace}", who.name))
        }
        (Publishing::Mirrors, WriteAccess::Refused(why)) => {
            Finding::fail(CHECK, format!("the token cannot publish to {namespace}"), why)
        }
        (Publishing::Mirrors, WriteAccess::Unknown(why)) => Finding::warn(
            CHECK,
            format!("whether the token of {} may write to {namespace} is unknown: {why}", who.name),
        ),
    };
    (finding, Some((who.name, namespace)))
}

/// Checks the work directory: there, writable, and with room for the reserve every job keeps free. It is
/// made if it is missing, but not if its parent is.
pub fn work_dir(dir: &Path) -> Finding {
    const CHECK: &str = "work directory";
    let shown = dir.display();
    let fix = "give --work-dir a writable directory on a disk with room for the largest bundle twice over";
    // The MLX check is told where each bundle is in a line of JSON, which holds text only.
    if dir.to_str().is_none() {
        return Finding::fail(CHECK, format!("{shown}: the path is not UTF-8"), "give --work-dir a path in UTF-8");
    }
    if !dir.is_dir() {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty() && !p.is_dir()) {
            return Finding::fail(CHECK, format!("{shown}: its parent {} does not exist", parent.display()), fix);
        }
        if let Err(e) = std::fs::create_dir(dir) {
            return Finding::fail(CHECK, format!("{shown}: cannot create it: {e}"), fix);
        }
    }
    let probe = dir.join(format!(".hubalign-write-check-{}", std::process::id()));
    let written = std::fs::write(&probe, b"hubalign");
    let _ = std::fs::remove_file(&probe);
    if let Err(e) = written {
        return Finding::fail(CHECK, format!("{shown}: cannot write in it: {e}"), fix);
    }
    match crate::repack::download::disk_space::space(dir) {
        Ok(space) if space.free < crate::repack::download::disk_space::RESERVE => Finding::fail(
            CHECK,
            format!(
                "{shown}: {} free, less than the {} every job keeps free",
                crate::report::human_bytes(space.free),
                crate::report::human_bytes(crate::repack::download::disk_space::RESERVE)
            ),
            fix,
        ),
        Ok(space) => Finding::ok(
            CHECK,
            format!(
                "{shown}: writable, {} free of {}",
                crate::report::human_bytes(space.free),
                crate::report::human_bytes(space.capacity)
            ),
        ),
        Err(e) => Finding::warn(CHECK, format!("{shown}: writable; its free space is unknown: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_work_directory_is_made_only_where_its_parent_is() {
        let dir = tempfile::tempdir().unwrap();
        let made = dir.path().join("work");
        assert_eq!(work_dir(&made).status, Status::Ok, "{:?}", work_dir(&made));
        assert!(made.is_dir());
        let typo = dir.path().join("no-such-parent/work");
        let refused = work_dir(&typo);
        assert_eq!(refused.status, Status::Fail);
        assert!(refused.detail.contains("does not exist") && refused.fix.is_some(), "{refused:?}");
        assert!(!typo.exists(), "nothing made under a mistyped path");
    }

    #[test]
    fn a_report_says_each_failure_with_its_fix() {
        let report = Report {
            findings: vec![
                Finding::ok("store", "x.db"),
                Finding::fail("python", "cannot run /nope", "give --python"),
                Finding::warn("token", "unknown"),
            ],
        };
        assert!(!report.passed());
        assert_eq!(report.failures_said(), ["python: cannot run /nope (fix: give --python)"]);
    }
}
