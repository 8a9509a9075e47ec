//! The Hub's per-user quotas on actions: commits, repo creations and discussions per hour.
//!
//! These are apart from the request quotas of `faults`, which count per bucket in 5-minute windows and send
//! `RateLimit` headers. An action quota counts one kind of write per user. Its 429 carries no `RateLimit` and
//! no `Retry-After`. It carries only a text naming the action, as `datasets` issue 6257 recorded it
//! ("You have exceeded our hourly quotas for action: commit").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::Method;
use serde::Serialize;

/// A write the Hub counts per user per hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A commit (`POST …/commit/{rev}`), to a branch or as a pull request.
    Commit,
    /// A repo creation (`POST /api/repos/create`).
    RepoCreate,
    /// A new discussion or pull request opened through `POST …/discussions`.
    Discussion,
}

impl Action {
    /// The action a request is, from its method, endpoint class and path, if it is one the Hub counts.
    pub fn of(method: &Method, class: &str, path: &str) -> Option<Action> {
        if *method != Method::POST {
            return None;
        }
        match class {
            "commit" => Some(Action::Commit),
            "repo_create" => Some(Action::RepoCreate),
            // Only opening one counts. A status change or a merge is not a new discussion.
            "discussions" if path.trim_end_matches('/').ends_with("/discussions") => Some(Action::Discussion),
            _ => None,
        }
    }

    /// The action's name in the Hub's refusal.
    pub fn name(self) -> &'static str {
        match self {
            Action::Commit => "commit",
            Action::RepoCreate => "repo_create",
            Action::Discussion => "discussion",
        }
    }

    /// The Hub's refusal text for this action.
    pub fn refusal(self) -> String {
        format!("You have exceeded our hourly quotas for action: {}. We invite you to retry later.", self.name())
    }
}

/// How many of each action a user may take per window; an action not listed is not limited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionQuotas {
    /// Actions allowed per window, by kind.
    pub limits: Vec<(Action, u32)>,
    /// The window (an hour on the Hub; shorter in tests).
    pub window: Duration,
}

/// Fixed windows per user and action.
#[derive(Debug)]
pub struct ActionLimiter {
    quotas: ActionQuotas,
    windows: Mutex<HashMap<(String, Action), (Instant, u32)>>,
}

impl ActionLimiter {
    /// Limits the actions `quotas` lists.
    pub fn new(quotas: ActionQuotas) -> ActionLimiter {
        ActionLimiter { quotas, windows: Mutex::new(HashMap::new()) }
    }

    /// Counts `action` by `user`. Returns false when the user's quota for it is spent in this window.
    pub fn admit(&self, user: &str, action: Action, now: Instant) -> bool {
        let Some(&(_, limit)) = self.quotas.limits.iter().find(|(a, _)| *a == action) else { return true };
        let mut windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (started, used) = windows.entry((user.to_owned(), action)).or_insert((now, 0));
        if now.duration_since(*started) >= self.quotas.window {
            *started = now;
            *used = 0;
        }
        if *used >= limit {
            return false;
        }
        *used += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_user_has_a_quota_per_action_that_a_new_window_restores() {
        let quotas = ActionQuotas { limits: vec![(Action::Commit, 2)], window: Duration::from_secs(3600) };
        let limiter = ActionLimiter::new(quotas);
        let t0 = Instant::now();
        assert!(limiter.admit("alice", Action::Commit, t0));
        assert!(limiter.admit("alice", Action::Commit, t0));
        assert!(!limiter.admit("alice", Action::Commit, t0 + Duration::from_secs(600)), "alice's commits are spent");
        assert!(limiter.admit("bob", Action::Commit, t0), "bob's are not");
        assert!(limiter.admit("alice", Action::RepoCreate, t0), "creations are not limited here");
        assert!(limiter.admit("alice", Action::Commit, t0 + Duration::from_secs(3600)), "a new hour");
    }

    #[test]
    fn the_refusal_names_the_action_as_the_hub_does() {
        assert!(Action::Commit.refusal().contains("exceeded our hourly quotas for action: commit"));
        assert_eq!(Action::of(&Method::POST, "commit", "/api/models/a/b/commit/main"), Some(Action::Commit));
        let opened = Action::of(&Method::POST, "discussions", "/api/models/a/b/discussions");
        assert_eq!(opened, Some(Action::Discussion));
        assert_eq!(Action::of(&Method::GET, "discussions", "/api/models/a/b/discussions"), None, "reading");
        assert_eq!(Action::of(&Method::POST, "discussions", "/api/models/a/b/discussions/3/status"), None);
    }
}
