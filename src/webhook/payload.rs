//! The Hub's webhook payloads, parsed strictly and read as hints: which repo may have changed and how.
//! Nothing in a payload is trusted beyond that. Whatever it names is read again from the Hub before anything
//! is recorded. `hub-docs/docs/hub/webhooks.md` describes the payload.

use serde::Deserialize;

use crate::untrusted;

/// The largest payload read. The Hub's are a few KB.
pub const MAX_PAYLOAD_BYTES: usize = 256 << 10;

/// A payload, as far as hubalign reads it.
#[derive(Debug, Clone, Deserialize)]
pub struct Payload {
    /// What happened.
    pub event: Event,
    /// To which repo.
    pub repo: PayloadRepo,
    /// The repo's new name, on a `move`.
    #[serde(default, rename = "movedTo")]
    pub moved_to: Option<MovedTo>,
    /// Config changes on `repo.config`, such as `{"private": true}`.
    #[serde(default, rename = "updatedConfig")]
    pub updated_config: Option<serde_json::Map<String, serde_json::Value>>,
    /// The discussion or pull request, on community scopes.
    #[serde(default)]
    pub discussion: Option<Discussion>,
}

/// `event`.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    /// `create`, `delete`, `update`, `move`.
    pub action: String,
    /// `repo`, `repo.content`, `repo.config`, `discussion`, `discussion.comment`, or one the Hub adds later.
    pub scope: String,
}

/// `repo`.
#[derive(Debug, Clone, Deserialize)]
pub struct PayloadRepo {
    /// `model`, `dataset` or `space`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `namespace/name`.
    pub name: String,
    /// The head of `main`, on `repo*` scopes.
    #[serde(default, rename = "headSha")]
    pub head_sha: Option<String>,
}

/// `movedTo`.
#[derive(Debug, Clone, Deserialize)]
pub struct MovedTo {
    /// The new `namespace/name`.
    pub name: String,
}

/// `discussion`.
#[derive(Debug, Clone, Deserialize)]
pub struct Discussion {
    /// Its number.
    pub num: u64,
    /// `open`, `closed`, `merged`, `draft`.
    pub status: String,
    /// Whether it is a pull request.
    #[serde(default, rename = "isPullRequest")]
    pub is_pull_request: bool,
}

/// The broader scope a payload counts as. An unknown narrower scope counts as an `update` of its broader one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// `repo`: created, deleted, updated, moved.
    Repo,
    /// `repo.content`: new commits, tags, pull request refs.
    Content,
    /// `repo.config`: settings, visibility.
    Config,
    /// `discussion` and `discussion.comment`.
    Discussion,
    /// Anything else.
    Other,
}

impl Scope {
    /// Its label in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Repo => "repo",
            Scope::Content => "repo.content",
            Scope::Config => "repo.config",
            Scope::Discussion => "discussion",
            Scope::Other => "other",
        }
    }

    /// Every scope, for metrics that list each one at zero too.
    pub const ALL: [Scope; 5] = [Scope::Repo, Scope::Content, Scope::Config, Scope::Discussion, Scope::Other];

    /// The scope a payload's `event.scope` counts as, and whether its action is to be read as `update`.
    fn of(scope: &str) -> (Scope, bool) {
        let broad = |prefix: &str| scope.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('.'));
        match scope {
            "repo" => (Scope::Repo, false),
            "repo.content" => (Scope::Content, false),
            "repo.config" => (Scope::Config, false),
            "discussion" | "discussion.comment" => (Scope::Discussion, false),
            _ if broad("repo.content") => (Scope::Content, true),
            _ if broad("repo.config") => (Scope::Config, true),
            _ if broad("discussion") => (Scope::Discussion, true),
            _ if broad("repo") => (Scope::Repo, true),
            _ => (Scope::Other, true),
        }
    }
}

/// What a payload asks hubalign to look at again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// The repo may have new content or settings, so read it again. Skip it if its head is the one audited.
    Changed {
        /// `namespace/name`.
        repo: String,
        /// The head of `main` the payload names, if any. It is a hint only.
        head: Option<String>,
    },
    /// The repo was deleted. Its mirror goes private once the Hub confirms the repo is gone.
    Deleted {
        /// `namespace/name`.
        repo: String,
    },
    /// The repo was renamed. The old name is checked for being gone, and the new one is read.
    Moved {
        /// The old `namespace/name`.
        from: String,
        /// The new one.
        to: String,
    },
    /// A pull request on the repo was closed or merged. The pull-request bookkeeping reads it again.
    PullRequestClosed {
        /// `namespace/name`.
        repo: String,
        /// Its number.
        num: u64,
    },
}

impl Hint {
    /// The repo the hint is about; for a move, the new name.
    pub fn repo(&self) -> &str {
        match self {
            Hint::Changed { repo, .. } | Hint::Deleted { repo } | Hint::PullRequestClosed { repo, .. } => repo,
            Hint::Moved { to, .. } => to,
        }
    }

    /// The key by which a newer hint replaces an older one. A change and a deletion of a repo share the
    /// repo's key, since each reads the repo again. A move away from a repo, and one pull request's end, each
    /// have a key of their own. So a push after a move, or a merge's commit after its pull request's end,
    /// does not erase the move or the end. Ids compare in any case, as the Hub compares them. So a payload
    /// spelled otherwise replaces its twin.
    pub fn key(&self) -> String {
        let key = match self {
            Hint::Changed { repo, .. } | Hint::Deleted { repo } => repo.clone(),
            Hint::Moved { from, .. } => format!("move {from}"),
            Hint::PullRequestClosed { repo, num } => format!("pr {repo} {num}"),
        };
        key.to_ascii_lowercase()
    }
}

/// Why a payload was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not JSON of the payload's shape, or a name that breaks the Hub's rules. The answer is a 400.
    #[error("malformed payload: {0}")]
    Malformed(String),
}

/// Reads a payload's body: the scope it counts as, and the hint it gives. The hint is `None` when there is
/// nothing to do, as for a dataset's event or a comment.
pub fn read(body: &[u8]) -> Result<(Scope, Option<Hint>), Refusal> {
    let payload: Payload = serde_json::from_slice(body).map_err(|e| Refusal::Malformed(e.to_string()))?;
    let (scope, as_update) = Scope::of(&payload.event.scope);
    let action = if as_update { "update" } else { payload.event.action.as_str() };
    untrusted::check_repo_id(&payload.repo.name).map_err(|e| Refusal::Malformed(e.to_string()))?;
    let head = payload.repo.head_sha.filter(|s| untrusted::check_commit(s).is_ok());
    if payload.repo.kind != "model" {
        return Ok((scope, None));
    }
    let repo = payload.repo.name;
    let hint = match (scope, action) {
        (Scope::Repo, "delete") => Some(Hint::Deleted { repo }),
        (Scope::Repo, "move") => {
            let to = payload.moved_to.ok_or_else(|| Refusal::Malformed("a move without movedTo".into()))?.name;
            untrusted::check_repo_id(&to).map_err(|e| Refusal::Malformed(e.to_string()))?;
            Some(Hint::Moved { from: repo, to })
        }
        // Only a content hint carries the head: if that head is audited already, the hint is moot. A
        // settings or visibility change leaves the head where it was, and must be read all the same.
        (Scope::Content, _) => Some(Hint::Changed { repo, head }),
        (Scope::Repo | Scope::Config, _) => Some(Hint::Changed { repo, head: None }),
        (Scope::Discussion, _) => payload
            .discussion
            .filter(|d| d.is_pull_request && matches!(d.status.as_str(), "closed" | "merged"))
            .map(|d| Hint::PullRequestClosed { repo, num: d.num }),
        (Scope::Other, _) => None,
    };
    Ok((scope, hint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(scope: &str, action: &str, extra: serde_json::Value) -> Vec<u8> {
        let mut p = serde_json::json!({
            "event": {"action": action, "scope": scope},
            "repo": {"type": "model", "name": "mlx-community/tiny", "id": "1", "private": false,
                     "headSha": "a".repeat(40), "url": {"web": "w", "api": "a"}, "owner": {"id": "2"}},
            "webhook": {"id": "3", "version": 3}
        });
        if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
            p.extend(extra.clone());
        }
        serde_json::to_vec(&p).unwrap()
    }

    #[test]
    fn repo_scopes_become_hints_and_unknown_narrower_scopes_count_as_updates() {
        let changed = |head: Option<String>| Some(Hint::Changed { repo: "mlx-community/tiny".into(), head });
        for scope in ["repo.content", "repo.content.lfs"] {
            let read = read(&payload(scope, "update", serde_json::json!({}))).unwrap().1;
            assert_eq!(read, changed(Some("a".repeat(40))), "{scope}");
        }
        // A settings change keeps the head. So the hint carries no head, and the repo is read even when
        // that head was audited.
        for scope in ["repo.config", "repo.config.dois", "repo.something-new"] {
            assert_eq!(read(&payload(scope, "update", serde_json::json!({}))).unwrap().1, changed(None), "{scope}");
        }
        assert_eq!(read(&payload("repo.config.dois", "delete", serde_json::json!({}))).unwrap().0, Scope::Config);
        assert_eq!(
            read(&payload("repo", "delete", serde_json::json!({}))).unwrap().1,
            Some(Hint::Deleted { repo: "mlx-community/tiny".into() })
        );
        let moved = payload("repo", "move", serde_json::json!({"movedTo": {"name": "other/tiny", "owner": {}}}));
        assert_eq!(
            read(&moved).unwrap().1,
            Some(Hint::Moved { from: "mlx-community/tiny".into(), to: "other/tiny".into() })
        );
        assert_eq!(read(&payload("spaces.something", "update", serde_json::json!({}))).unwrap(), (Scope::Other, None));
    }

    #[test]
    fn hints_about_one_repo_in_other_cases_replace_each_other() {
        let changed = |repo: &str| Hint::Changed { repo: repo.into(), head: None };
        assert_eq!(changed("MLX-Community/Tiny").key(), changed("mlx-community/tiny").key());
        let closed = |repo: &str| Hint::PullRequestClosed { repo: repo.into(), num: 3 };
        assert_eq!(closed("A/B").key(), closed("a/b").key());
        assert_ne!(changed("a/b").key(), closed("a/b").key(), "a push does not replace a pull request's end");
    }

    #[test]
    fn discussions_matter_only_when_a_pull_request_closes() {
        let pr = |status: &str, is_pr: bool| {
            let d = serde_json::json!({"discussion": {"id": "x", "num": 7, "status": status, "isPullRequest": is_pr,
                                                      "title": "t", "url": {}, "author": {}}});
            read(&payload("discussion", "update", d)).unwrap().1
        };
        assert_eq!(pr("merged", true), Some(Hint::PullRequestClosed { repo: "mlx-community/tiny".into(), num: 7 }));
        assert_eq!(pr("closed", true), Some(Hint::PullRequestClosed { repo: "mlx-community/tiny".into(), num: 7 }));
        assert_eq!(pr("open", true), None);
        assert_eq!(pr("closed", false), None);
        assert_eq!(read(&payload("discussion.comment", "create", serde_json::json!({}))).unwrap().1, None);
    }

    #[test]
    fn malformed_payloads_and_hostile_names_are_refused_and_other_repo_types_ignored() {
        for body in [
            b"".to_vec(),
            b"{".to_vec(),
            b"[]".to_vec(),
            br#"{"event": {"action": "update"}, "repo": {"type": "model", "name": "a/b"}}"#.to_vec(),
            br#"{"event": {"action": "update", "scope": "repo"}, "repo": {"type": "model", "name": "../etc"}}"#
                .to_vec(),
            br#"{"event": {"action": "update", "scope": "repo"}, "repo": {"type": "model", "name": "a/b\u001b[2J"}}"#
                .to_vec(),
            payload("repo", "move", serde_json::json!({})),
            payload("repo", "move", serde_json::json!({"movedTo": {"name": "../../x"}})),
        ] {
            assert!(read(&body).is_err(), "{}", String::from_utf8_lossy(&body));
        }
        let dataset =
            br#"{"event": {"action": "update", "scope": "repo.content"}, "repo": {"type": "dataset", "name": "a/b"}}"#;
        assert_eq!(read(dataset).unwrap(), (Scope::Content, None));
        // A head that is not a commit id is dropped, not trusted.
        let odd = br#"{"event": {"action": "update", "scope": "repo.content"}, "repo": {"type": "model", "name": "a/b", "headSha": "main"}}"#;
        assert_eq!(read(odd).unwrap().1, Some(Hint::Changed { repo: "a/b".into(), head: None }));
    }
}
