//! A repo's current state from `GET /api/models/{id}`: what publication checks right before it acts.

use serde::Deserialize;

use super::listing::{ListedRepo, RepoFlags};
use super::pacing::Bucket;
use super::{BodyLimit, HubClient, HubError, INFO_CAP};
use crate::untrusted;

/// What the Hub says of a repo now.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ModelInfo {
    /// The repo the answer is for. It differs from the one asked for when the name was moved.
    #[serde(default)]
    pub id: Option<String>,
    /// The head commit of the default branch.
    #[serde(default)]
    pub sha: Option<String>,
    /// The model card's YAML front matter, as the Hub parsed it.
    #[serde(default, rename = "cardData")]
    pub card_data: Option<serde_json::Value>,
    /// The task the Hub files it under.
    #[serde(default)]
    pub pipeline_tag: Option<String>,
    /// Who may see it.
    #[serde(flatten)]
    pub flags: RepoFlags,
    /// Tags, `license:…` among them.
    #[serde(default)]
    pub tags: Vec<String>,
}

impl ModelInfo {
    /// Returns the repo's new name when the Hub answered a question about `asked` with another repo (a
    /// rename). The new id must pass the checks of `untrusted`. Another letter case of `asked` is the same
    /// repo on the Hub, not a rename.
    pub fn renamed(&self, asked: &str) -> Option<&str> {
        self.id.as_deref().filter(|id| !id.eq_ignore_ascii_case(asked) && untrusted::check_repo_id(id).is_ok())
    }

    /// Returns the licence the Hub tags it with, if it passes the Hub's rules for a name.
    pub fn license(&self) -> Option<String> {
        self.tags.iter().find_map(|t| t.strip_prefix("license:")).filter(|l| is_plain_word(l)).map(str::to_owned)
    }
}

/// A short identifier (`apache-2.0`, `llama3.1`): printable ASCII without spaces or quotes.
fn is_plain_word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'))
}

/// What the Hub answers for a repo asked for by name.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// The repo, as a listing entry, with its tags.
    Listed(Box<ListedRepo>, Vec<String>),
    /// The Hub answered with another repo, which passed the checks of `untrusted`. The name was moved to this
    /// one.
    Renamed(String),
    /// The answer breaks the Hub's rules; nothing of it is used.
    Refused(String),
}

impl HubClient {
    /// Returns the commit `repo`'s main branch is at, and whether the repo is private. Returns `None` if the
    /// repo does not exist (a 404).
    pub async fn head_of(&self, repo: super::repo_ref::RepoRef<'_>) -> Result<Option<(String, bool)>, HubError> {
        self.revision_of(repo, "main").await
    }

    /// Returns the commit that `revision` (a branch, or `refs/pr/N`) of `repo` is at, and whether the repo is
    /// private. Returns `None` if either does not exist (a 404).
    pub async fn revision_of(
        &self,
        repo: super::repo_ref::RepoRef<'_>,
        revision: &str,
    ) -> Result<Option<(String, bool)>, HubError> {
        #[derive(serde::Deserialize)]
        struct Head {
            sha: String,
            #[serde(default)]
            private: bool,
        }
        let url = self.repo_api(repo, &format!("revision/{}", untrusted::encode_segment(revision)));
        let fetched = match self.get(Bucket::Api, &url, &[], BodyLimit::Whole(INFO_CAP)).await {
            Ok(fetched) => fetched,
            Err(HubError::Status { status: reqwest::StatusCode::NOT_FOUND, .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let head: Head = serde_json::from_slice(&fetched.body)
            .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("repo info: {e}") })?;
        untrusted::check_revision(&head.sha)
            .map_err(|e| HubError::Malformed { url, detail: format!("its commit: {e}") })?;
        Ok(Some((head.sha, head.private)))
    }

    /// Reads the repo's current state with the token, so a private repo the token may see shows as private.
    pub async fn model_info(&self, repo: &str) -> Result<ModelInfo, HubError> {
        let url = self.model_api(repo, "");
        let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(INFO_CAP)).await?;
        serde_json::from_slice(&fetched.body)
            .map_err(|e| HubError::Malformed { url, detail: format!("model info: {e}") })
    }

    /// Reads one repo as the crawl reads each listed one: its commit, flags and files, through the same checks
    /// as a listing page's entries. It also returns the tags, for the audit's filters. The Hub answers a
    /// renamed repo's old name with the repo under its new name. That answer is `Entry::Renamed`, the only
    /// proof of a move hubalign acts on.
    pub async fn repo_entry(&self, repo: &str) -> Result<Entry, HubError> {
        let url = self.model_api(repo, "");
        let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(INFO_CAP)).await?;
        let item: serde_json::Value = serde_json::from_slice(&fetched.body)
            .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("model info: {e}") })?;
        let tags: Vec<String> = item["tags"]
            .as_array()
            .map(|t| t.iter().filter_map(|v| v.as_str()).filter(|t| t.len() <= 200).map(str::to_owned).collect())
            .unwrap_or_default();
        let (mut repos, mut invalid) = super::listing::sort_entries(vec![item]);
        Ok(match (repos.pop(), invalid.pop()) {
            (Some(listed), _) if listed.id == repo => Entry::Listed(Box::new(listed), tags),
            (Some(listed), _) => Entry::Renamed(listed.id),
            (None, Some(bad)) => Entry::Refused(bad.reason),
            (None, None) => Entry::Refused("no repo in the answer".into()),
        })
    }
}
