//! Why a repack step failed, and what that means for its job: tried again later (transient), given up
//! (permanent), or held until the operator has acted (a refused token, a read-only work directory), which no
//! retry fixes and which would fail every other job the same way.
//!
//! A disk that ran out of space is the job's failure, not the operator's: the job was larger than what was
//! free (the room check before a download makes that rare). Its files are removed at once, so the next job
//! has the space back, and it is tried again later like any transient failure.

use std::io;
use std::sync::Arc;

use reqwest::StatusCode;

use crate::hub::HubError;
pub use crate::job::FailureKind;

/// What caused a failure, kept for its chain: a Hub error, an I/O error, a re-layout's error.
type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A failed step: what failed, the error that caused it (its `source`), and its kind, which decides what the
/// queue does with it. [`RepackError::reason`] is the text the job records: what failed, then each cause.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{context}")]
pub struct RepackError {
    /// Retried, given up or held for the operator.
    pub kind: FailureKind,
    /// What failed, naming the repo or file.
    context: String,
    /// The error underneath, if there was one.
    #[source]
    source: Option<Cause>,
    /// The disk ran out of space (or quota) on the way: the job's files are removed rather than kept for
    /// the next attempt to resume from.
    pub out_of_space: bool,
    /// Not a failure: the job waits until this time (Unix seconds) without spending an attempt, because
    /// a cap of the operator's policy is reached for now (new mirrors per day).
    pub deferred_until: Option<i64>,
    /// The worker's configuration failed, not the job (an interpreter that cannot run, or has no MLX): the
    /// job goes back to the queue without spending anything, however often, and the worker holds.
    pub configuration: bool,
}

impl PartialEq for RepackError {
    fn eq(&self, other: &Self) -> bool {
        (self.kind, self.reason(), self.out_of_space, self.deferred_until, self.configuration)
            == (other.kind, other.reason(), other.out_of_space, other.deferred_until, other.configuration)
    }
}

impl Eq for RepackError {}

impl RepackError {
    fn new(kind: FailureKind, context: String, source: Option<Cause>) -> RepackError {
        RepackError { kind, context, source, out_of_space: false, deferred_until: None, configuration: false }
    }

    /// Another attempt may succeed.
    pub fn transient(reason: impl Into<String>) -> RepackError {
        RepackError::new(FailureKind::Transient, reason.into(), None)
    }

    /// No attempt will succeed for this job.
    pub fn permanent(reason: impl Into<String>) -> RepackError {
        RepackError::new(FailureKind::Permanent, reason.into(), None)
    }

    /// The job waits until `until` (Unix seconds), spending no attempt: a cap is reached for now.
    pub fn deferred(reason: impl Into<String>, until: i64) -> RepackError {
        RepackError { deferred_until: Some(until), ..RepackError::new(FailureKind::Transient, reason.into(), None) }
    }

    /// Nothing succeeds until the operator acts.
    pub fn needs_operator(reason: impl Into<String>) -> RepackError {
        RepackError::new(FailureKind::NeedsOperator, reason.into(), None)
    }

    /// The worker's configuration failed, whatever the job: held, never spent (its `configuration` field).
    pub fn configuration(reason: impl Into<String>) -> RepackError {
        RepackError { configuration: true, ..RepackError::new(FailureKind::NeedsOperator, reason.into(), None) }
    }

    /// A Hub request's failure, `what` saying which: a refused token or a missing permission needs the
    /// operator, the Hub's quota on actions defers the job until its pause ends, anything else is tried again.
    pub fn hub(what: impl std::fmt::Display, e: HubError) -> RepackError {
        if let HubError::ActionQuota { until, .. } = e {
            // The user's quota, not the job's: it waits without spending an attempt.
            return RepackError {
                deferred_until: Some(until),
                ..RepackError::new(FailureKind::Transient, what.to_string(), Some(Arc::new(e)))
            };
        }
        let kind = match &e {
            // The repo's own state (gated, gone, disabled), not the token's.
            _ if e.access().is_some() => FailureKind::Transient,
            HubError::Status { status, .. } => FailureKind::of_status(*status),
            _ => FailureKind::Transient,
        };
        RepackError::new(kind, what.to_string(), Some(Arc::new(e)))
    }

    /// A local file's failure, `what` naming the file and the operation: a read-only work directory or one
    /// the worker may not write needs the operator; a full disk or quota is the job's (see the module's
    /// documentation); anything else is tried again.
    pub fn io(what: impl std::fmt::Display, e: io::Error) -> RepackError {
        let kind = e.kind();
        RepackError::of_io_kind(kind, what.to_string(), Arc::new(e))
    }

    /// A failure that carries its `io::Error` inside (a re-layout's, a manifest's): judged by the first I/O
    /// failure in its chain of causes, transient if there is none.
    pub fn caused_by(e: impl std::error::Error + Send + Sync + 'static) -> RepackError {
        match crate::io_error::io_kind_in(&e) {
            Some(kind) => RepackError::of_io_kind(kind, String::new(), Arc::new(e)),
            None => RepackError::new(FailureKind::Transient, String::new(), Some(Arc::new(e))),
        }
    }

    fn of_io_kind(kind: io::ErrorKind, context: String, source: Cause) -> RepackError {
        let out_of_space = matches!(kind, io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded);
        RepackError { out_of_space, ..RepackError::new(FailureKind::of_io(kind), context, Some(source)) }
    }

    /// What the job records: what failed, then each cause in its chain (a cause whose text an earlier one
    /// already says is not said twice).
    pub fn reason(&self) -> String {
        let mut text = self.context.clone();
        let mut cause: Option<&(dyn std::error::Error + 'static)> = self.source.as_deref().map(|c| c as _);
        while let Some(c) = cause {
            let said = c.to_string();
            if !text.contains(&said) {
                if !text.is_empty() {
                    text.push_str(": ");
                }
                text.push_str(&said);
            }
            cause = c.source();
        }
        text
    }

    /// The same failure, said as part of `what`.
    pub fn context(self, what: impl std::fmt::Display) -> RepackError {
        let context = if self.context.is_empty() { what.to_string() } else { format!("{what}: {}", self.context) };
        RepackError { context, ..self }
    }

    /// The same kind of failure, said as `reason` alone (its causes are in it already).
    pub fn said_as(self, reason: String) -> RepackError {
        RepackError { context: reason, source: None, ..self }
    }

    /// The more serious of two failures' kinds, with both reasons: several files that failed at once.
    pub fn join(self, other: RepackError) -> RepackError {
        RepackError {
            kind: self.kind.max(other.kind),
            context: format!("{}; {}", self.reason(), other.reason()),
            source: None,
            out_of_space: self.out_of_space || other.out_of_space,
            deferred_until: None,
            configuration: self.configuration || other.configuration,
        }
    }
}

impl FailureKind {
    /// What an HTTP error status means for a job, once a repo's own state (gated, gone, disabled) is ruled
    /// out: 401, 402 and 403 (the token is refused, the account cannot pay, the token may not write there)
    /// need the operator; every other status is tried again.
    pub fn of_status(status: StatusCode) -> FailureKind {
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::PAYMENT_REQUIRED | StatusCode::FORBIDDEN => {
                FailureKind::NeedsOperator
            }
            _ => FailureKind::Transient,
        }
    }

    /// What a local file failure means: a full disk or quota, a read-only file system or a denied
    /// permission is the machine's state, not the job's.
    pub fn of_io(kind: io::ErrorKind) -> FailureKind {
        match kind {
            io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::PermissionDenied => FailureKind::NeedsOperator,
            _ => FailureKind::Transient,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, code: Option<&str>) -> HubError {
        HubError::Status {
            url: "https://hub/api/models/a/b".into(),
            status: StatusCode::from_u16(status).unwrap(),
            code: code.map(str::to_owned),
            message: String::new(),
            request_id: None,
        }
    }

    #[test]
    fn a_refused_token_needs_the_operator_and_a_gated_repo_does_not() {
        assert_eq!(RepackError::hub("x", status(401, None)).kind, FailureKind::NeedsOperator);
        assert_eq!(RepackError::hub("x", status(403, None)).kind, FailureKind::NeedsOperator);
        assert_eq!(RepackError::hub("x", status(402, None)).kind, FailureKind::NeedsOperator);
        assert_eq!(RepackError::hub("x", status(403, Some("GatedRepo"))).kind, FailureKind::Transient);
        assert_eq!(RepackError::hub("x", status(401, Some("RepoNotFound"))).kind, FailureKind::Transient);
        assert_eq!(RepackError::hub("x", status(500, None)).kind, FailureKind::Transient);
        let e = RepackError::hub("creating me/x-aligned", status(401, None));
        assert!(
            e.reason().starts_with("creating me/x-aligned: https://hub/api/models/a/b: HTTP 401"),
            "{}",
            e.reason()
        );
    }

    #[test]
    fn a_full_disk_is_the_jobs_and_a_read_only_one_needs_the_operator_wherever_it_is_in_the_chain() {
        let full = RepackError::io("work/x", io::Error::from(io::ErrorKind::StorageFull));
        assert_eq!((full.kind, full.out_of_space), (FailureKind::Transient, true));
        let read_only = RepackError::io("work/x", io::Error::from(io::ErrorKind::ReadOnlyFilesystem));
        assert_eq!((read_only.kind, read_only.out_of_space), (FailureKind::NeedsOperator, false));
        assert_eq!(RepackError::io("work/x", io::Error::other("reset")).kind, FailureKind::Transient);
        let wrapped = crate::io_error::PathIoError {
            path: "work/x".into(),
            op: "write",
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        let e = RepackError::caused_by(wrapped);
        assert_eq!(e.kind, FailureKind::NeedsOperator);
        assert!(e.reason().starts_with("work/x: write"), "{}", e.reason());
        let quota = crate::io_error::PathIoError {
            path: "work/x".into(),
            op: "write",
            source: io::Error::from(io::ErrorKind::QuotaExceeded),
        };
        let e = RepackError::caused_by(quota).context("re-layout");
        assert_eq!((e.kind, e.out_of_space), (FailureKind::Transient, true));
        assert!(RepackError::transient("a").join(e).out_of_space);
        let other = crate::io_error::PathIoError { path: "y".into(), op: "read", source: io::Error::other("eio") };
        assert_eq!(RepackError::caused_by(other).kind, FailureKind::Transient);
    }

    #[test]
    fn joined_failures_keep_the_most_serious_kind() {
        let joined = RepackError::transient("a").join(RepackError::needs_operator("b"));
        assert_eq!((joined.kind, joined.reason().as_str()), (FailureKind::NeedsOperator, "a; b"));
        let joined = RepackError::permanent("a").join(RepackError::transient("b"));
        assert_eq!(joined.kind, FailureKind::Permanent);
    }
}
