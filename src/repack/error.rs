//! Why a repack step failed, and what happens to its job next ([`WhatNext`]).
//!
//! A job is tried again, given up, held for the operator, held for the worker's configuration, or deferred.
//! A refused token or a read-only work directory needs the operator: no retry fixes it.
//! A disk that ran out of space is the job's failure, not the operator's: the job was larger than what was free.
//! Its files are removed at once, so the next job has the space back, and it is tried again later.

use std::io;
use std::sync::Arc;

use reqwest::StatusCode;

use crate::hub::HubError;
pub(crate) use crate::job::FailureKind;

/// What caused a failure, kept for its chain: a Hub error, an I/O error, a re-layout's error.
type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What happens to a job after a failed step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhatNext {
    /// The job is tried again later, with backoff.
    /// `free_disk` says the disk ran out of space on the way: the job's files are removed first.
    Retry {
        /// The disk (or a quota) ran out of space.
        free_disk: bool,
    },
    /// The job fails for good.
    GiveUp,
    /// Nothing succeeds until the operator acts (a refused token, a read-only work directory).
    /// The job goes back to the queue without spending an attempt, and the worker stops claiming for a while.
    /// `free_disk` says the disk also ran out of space: the job's files are removed.
    AskOperator {
        /// The disk (or a quota) ran out of space too.
        free_disk: bool,
    },
    /// The worker's configuration failed, not the job (an interpreter without MLX).
    /// The job goes back to the queue without spending anything, however often, and the worker holds.
    HoldWorker,
    /// A cap of the operator's policy is reached for now (new mirrors per day).
    /// The job waits until this time (Unix seconds) without spending an attempt.
    DeferUntil(i64),
}

impl WhatNext {
    /// The kind of failure the job records.
    pub fn kind(self) -> FailureKind {
        match self {
            WhatNext::Retry { .. } | WhatNext::DeferUntil(_) => FailureKind::Transient,
            WhatNext::GiveUp => FailureKind::Permanent,
            WhatNext::AskOperator { .. } | WhatNext::HoldWorker => FailureKind::NeedsOperator,
        }
    }

    /// What happens after a failure of this kind.
    fn of_kind(kind: FailureKind) -> WhatNext {
        match kind {
            FailureKind::Transient => WhatNext::Retry { free_disk: false },
            FailureKind::Permanent => WhatNext::GiveUp,
            FailureKind::NeedsOperator => WhatNext::AskOperator { free_disk: false },
        }
    }

    /// Whether the job's files are removed, so that the next job has the disk's space back.
    pub fn frees_disk(self) -> bool {
        matches!(self, WhatNext::Retry { free_disk: true } | WhatNext::AskOperator { free_disk: true })
    }

    /// The more serious of two: several files that failed at once.
    /// A held worker outranks the operator, who outranks giving up, which outranks a retry or a wait.
    /// A full disk in either is kept where the job is queued again.
    /// Two waits wait for the later time.
    fn join(self, other: WhatNext) -> WhatNext {
        use WhatNext::{AskOperator, DeferUntil, GiveUp, HoldWorker, Retry};
        let free_disk = self.frees_disk() || other.frees_disk();
        match (self, other) {
            (HoldWorker, _) | (_, HoldWorker) => HoldWorker,
            (AskOperator { .. }, _) | (_, AskOperator { .. }) => AskOperator { free_disk },
            (GiveUp, _) | (_, GiveUp) => GiveUp,
            (Retry { free_disk: a }, Retry { free_disk: b }) => Retry { free_disk: a || b },
            (Retry { free_disk }, DeferUntil(_)) | (DeferUntil(_), Retry { free_disk }) => Retry { free_disk },
            (DeferUntil(a), DeferUntil(b)) => DeferUntil(a.max(b)),
        }
    }
}

/// A failed step: what failed, the error that caused it (its `source`), and what happens to the job next.
/// [`RepackError::reason`] is the text the job records: what failed, then each cause.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{context}")]
pub struct RepackError {
    /// What the queue does with the job.
    pub next: WhatNext,
    /// What failed, naming the repo or file.
    context: String,
    /// The error underneath, if there was one.
    #[source]
    source: Option<Cause>,
}

impl PartialEq for RepackError {
    fn eq(&self, other: &Self) -> bool {
        self.next == other.next && self.reason() == other.reason()
    }
}

impl Eq for RepackError {}

impl RepackError {
    fn new(next: WhatNext, context: String, source: Option<Cause>) -> RepackError {
        RepackError { next, context, source }
    }

    /// Another attempt may succeed.
    pub fn transient(reason: impl Into<String>) -> RepackError {
        RepackError::new(WhatNext::Retry { free_disk: false }, reason.into(), None)
    }

    /// No attempt will succeed for this job.
    pub fn permanent(reason: impl Into<String>) -> RepackError {
        RepackError::new(WhatNext::GiveUp, reason.into(), None)
    }

    /// The job waits until `until` (Unix seconds), spending no attempt: a cap is reached for now.
    pub fn deferred(reason: impl Into<String>, until: i64) -> RepackError {
        RepackError::new(WhatNext::DeferUntil(until), reason.into(), None)
    }

    /// Nothing succeeds until the operator acts.
    pub fn needs_operator(reason: impl Into<String>) -> RepackError {
        RepackError::new(WhatNext::AskOperator { free_disk: false }, reason.into(), None)
    }

    /// The worker's configuration failed, whatever the job: held, never spent.
    pub fn configuration(reason: impl Into<String>) -> RepackError {
        RepackError::new(WhatNext::HoldWorker, reason.into(), None)
    }

    /// The kind of failure the job records.
    pub fn kind(&self) -> FailureKind {
        self.next.kind()
    }

    /// A Hub request's failure, `what` saying which.
    /// A refused token or a missing permission needs the operator.
    /// The Hub's quota on actions defers the job until its pause ends.
    /// Anything else is tried again.
    pub fn hub(what: impl std::fmt::Display, e: HubError) -> RepackError {
        let next = match &e {
            // The user's quota, not the job's: it waits without spending an attempt.
            HubError::ActionQuota { until, .. } => WhatNext::DeferUntil(*until),
            // The repo's own state (gated, gone, disabled), not the token's.
            _ if e.access().is_some() => WhatNext::Retry { free_disk: false },
            HubError::Status { status, .. } => WhatNext::of_kind(FailureKind::of_status(*status)),
            _ => WhatNext::Retry { free_disk: false },
        };
        RepackError::new(next, what.to_string(), Some(Arc::new(e)))
    }

    /// A local file's failure, `what` naming the file and the operation.
    /// A read-only work directory or one the worker may not write needs the operator.
    /// A full disk or quota is the job's (see the module's documentation).
    /// Anything else is tried again.
    pub fn io(what: impl std::fmt::Display, e: io::Error) -> RepackError {
        let kind = e.kind();
        RepackError::of_io_kind(kind, what.to_string(), Arc::new(e))
    }

    /// A failure that carries its `io::Error` inside (a re-layout's, a manifest's).
    /// It is judged by the first I/O failure in its chain of causes, and is transient if there is none.
    pub fn caused_by(e: impl std::error::Error + Send + Sync + 'static) -> RepackError {
        match crate::io_error::io_kind_in(&e) {
            Some(kind) => RepackError::of_io_kind(kind, String::new(), Arc::new(e)),
            None => RepackError::new(WhatNext::Retry { free_disk: false }, String::new(), Some(Arc::new(e))),
        }
    }

    fn of_io_kind(kind: io::ErrorKind, context: String, source: Cause) -> RepackError {
        let next = match FailureKind::of_io(kind) {
            FailureKind::Transient => {
                WhatNext::Retry { free_disk: matches!(kind, io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded) }
            }
            other => WhatNext::of_kind(other),
        };
        RepackError::new(next, context, Some(source))
    }

    /// What the job records: what failed, then each cause in its chain.
    /// A cause whose text an earlier one already says is not said twice.
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

    /// The more serious of two failures, with both reasons: several files that failed at once.
    pub fn join(self, other: RepackError) -> RepackError {
        let context = format!("{}; {}", self.reason(), other.reason());
        RepackError::new(self.next.join(other.next), context, None)
    }
}

impl FailureKind {
    /// Maps an HTTP error status to a failure kind, once the repo's own state (gated, gone, disabled) is
    /// ruled out. 401, 402 and 403 need the operator: the token is refused, the account cannot pay, or the
    /// token may not write there. Every other status is tried again.
    pub fn of_status(status: StatusCode) -> FailureKind {
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::PAYMENT_REQUIRED | StatusCode::FORBIDDEN => {
                FailureKind::NeedsOperator
            }
            _ => FailureKind::Transient,
        }
    }

    /// Maps a local file failure to a failure kind.
    /// A read-only file system or a denied permission needs the operator.
    /// Anything else is tried again, a full disk or quota included.
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
        assert_eq!(RepackError::hub("x", status(401, None)).kind(), FailureKind::NeedsOperator);
        assert_eq!(RepackError::hub("x", status(403, None)).kind(), FailureKind::NeedsOperator);
        assert_eq!(RepackError::hub("x", status(402, None)).kind(), FailureKind::NeedsOperator);
        assert_eq!(RepackError::hub("x", status(403, Some("GatedRepo"))).kind(), FailureKind::Transient);
        assert_eq!(RepackError::hub("x", status(401, Some("RepoNotFound"))).kind(), FailureKind::Transient);
        assert_eq!(RepackError::hub("x", status(500, None)).kind(), FailureKind::Transient);
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
        assert_eq!(full.next, WhatNext::Retry { free_disk: true });
        let read_only = RepackError::io("work/x", io::Error::from(io::ErrorKind::ReadOnlyFilesystem));
        assert_eq!(read_only.next, WhatNext::AskOperator { free_disk: false });
        assert_eq!(RepackError::io("work/x", io::Error::other("reset")).kind(), FailureKind::Transient);
        let wrapped = crate::io_error::PathIoError {
            path: "work/x".into(),
            op: "write",
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        let e = RepackError::caused_by(wrapped);
        assert_eq!(e.next, WhatNext::AskOperator { free_disk: false });
        assert!(e.reason().starts_with("work/x: write"), "{}", e.reason());
        let quota = crate::io_error::PathIoError {
            path: "work/x".into(),
            op: "write",
            source: io::Error::from(io::ErrorKind::QuotaExceeded),
        };
        let e = RepackError::caused_by(quota).context("re-layout");
        assert_eq!(e.next, WhatNext::Retry { free_disk: true });
        assert_eq!(RepackError::transient("a").join(e).next, WhatNext::Retry { free_disk: true });
        let other = crate::io_error::PathIoError { path: "y".into(), op: "read", source: io::Error::other("eio") };
        assert_eq!(RepackError::caused_by(other).kind(), FailureKind::Transient);
    }

    #[test]
    fn joined_failures_keep_the_most_serious_kind() {
        let joined = RepackError::transient("a").join(RepackError::needs_operator("b"));
        assert_eq!((joined.next, joined.reason().as_str()), (WhatNext::AskOperator { free_disk: false }, "a; b"));
        let full = || RepackError::io("b", io::Error::from(io::ErrorKind::StorageFull));
        let joined = RepackError::needs_operator("a").join(full());
        assert_eq!(joined.next, WhatNext::AskOperator { free_disk: true }, "the full disk is still freed");
        assert_eq!(RepackError::deferred("a", 5).join(RepackError::deferred("b", 9)).next, WhatNext::DeferUntil(9));
        let joined = RepackError::permanent("a").join(RepackError::transient("b"));
        assert_eq!(joined.next, WhatNext::GiveUp);
        let joined = RepackError::configuration("a").join(RepackError::needs_operator("b"));
        assert_eq!(joined.next, WhatNext::HoldWorker);
        let joined =
            RepackError::deferred("a", 5).join(RepackError::io("b", io::Error::from(io::ErrorKind::StorageFull)));
        assert_eq!(joined.next, WhatNext::Retry { free_disk: true });
    }
}
