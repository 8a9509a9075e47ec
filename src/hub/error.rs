//! Hub request failures, with the context the Hub gives (`X-Error-Code`, `X-Request-Id`).

use reqwest::StatusCode;
use thiserror::Error;

/// Why a request to the Hub failed, after any retries.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum HubError {
    /// The Hub answered with an error status that retrying does not fix.
    #[error("{url}: HTTP {status}{}{}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default(), if message.is_empty() { String::new() } else { format!(": {message}") })]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: StatusCode,
        /// `X-Error-Code` (`RepoNotFound`, `GatedRepo`, …).
        code: Option<String>,
        /// `X-Error-Message` or the body's `error`.
        message: String,
        /// `X-Request-Id`, to trace it on the Hub's side.
        request_id: Option<String>,
    },
    /// Transient failures did not stop before the attempts ran out.
    #[error("{url}: gave up after {attempts} attempts: {last}")]
    Exhausted {
        /// The URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// A body was longer than the cap for its kind; it was not read further.
    #[error("{url}: the answer is larger than the {cap}-byte cap for it; not read further")]
    TooLarge {
        /// The URL.
        url: String,
        /// The cap, in bytes.
        cap: u64,
    },
    /// The Hub asked to wait (`Retry-After`, a `RateLimit` reset) longer than allowed.
    #[error(
        "{url}: the Hub asked to wait {seconds} s, longer than the {max_seconds} s allowed (--max-wait); stopped here, the next run resumes"
    )]
    WaitTooLong {
        /// The URL.
        url: String,
        /// The wait the Hub named, in seconds.
        seconds: u64,
        /// The most this client waits.
        max_seconds: u64,
    },
    /// A write refused by the Hub's hourly quota on an action (commits, repo creations, discussions). The
    /// refusal is a 429 that names no wait. This client sends no such action until `until`.
    #[error("{url}: the Hub's hourly quota on this action is spent ({message}); this client's actions pause until {}", crate::time::format_utc(u64::try_from(*until).unwrap_or(0)))]
    ActionQuota {
        /// The URL.
        url: String,
        /// The Hub's words.
        message: String,
        /// When writes may start again, in Unix seconds.
        until: i64,
    },
    /// The answer was not what the protocol promises.
    #[error("{url}: {detail}")]
    Malformed {
        /// The URL.
        url: String,
        /// What was wrong.
        detail: String,
    },
}

/// What a repo-level failure means for the audit: not every error is a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Gated, and the token has not been granted access.
    Gated,
    /// Disabled by the Hub.
    Disabled,
    /// Missing, or private to someone else.
    Vanished,
    /// The commit was replaced since the listing (force-push); the next run sees the new one.
    Moved,
}

impl HubError {
    /// The Hub's `X-Error-Code`, if any.
    pub fn error_code(&self) -> Option<&str> {
        match self {
            HubError::Status { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// Whether this is an access state to record rather than an error.
    pub fn access(&self) -> Option<Access> {
        let HubError::Status { status, code, message, .. } = self else { return None };
        match code.as_deref() {
            Some("GatedRepo") => Some(Access::Gated),
            Some("RepoNotFound") => Some(Access::Vanished),
            Some("RevisionNotFound") => Some(Access::Moved),
            _ if *status == StatusCode::FORBIDDEN && message == "Access to this resource is disabled." => {
                Some(Access::Disabled)
            }
            _ if *status == StatusCode::NOT_FOUND && code.is_none() => Some(Access::Vanished),
            _ => None,
        }
    }
}
