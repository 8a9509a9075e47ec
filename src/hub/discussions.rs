//! A repo's pull requests, for the repack worker's de-duplication and the `--pr` bookkeeping. Also its
//! discussions, for the one note on a mirrored source. hf-hub 1.0 has no discussions API.

use serde::Deserialize;

use super::pacing::Bucket;
use super::{BodyLimit, HubClient, HubError, INFO_CAP};
use crate::untrusted;

/// A pull request as the de-duplication needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestInfo {
    /// Its number (`refs/pr/{num}`).
    pub num: u64,
    pub title: String,
    /// `open`, `closed`, `merged` or `draft`.
    pub status: String,
    /// Who opened it.
    pub author: String,
}

/// A discussion (not a pull request) as the notes on sources need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscussionInfo {
    pub num: u64,
    pub title: String,
    /// `open` or `closed`.
    pub status: String,
}

#[derive(Deserialize)]
struct Opened {
    num: u64,
}

#[derive(Deserialize)]
struct Listing {
    #[serde(default)]
    discussions: Vec<Item>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Item {
    num: u64,
    #[serde(default)]
    title: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    is_pull_request: bool,
    #[serde(default)]
    author: Option<Author>,
}

#[derive(Deserialize)]
struct Author {
    #[serde(default)]
    name: String,
}

impl HubClient {
    /// Returns the first page of the repo's discussions of `kind` (`pull_request`, `discussion`) by `author`,
    /// as the Hub lists them. The callers filter again, because a Hub that ignores a filter must not widen
    /// what they see.
    async fn discussions_listed(&self, repo: &str, kind: &str, author: &str) -> Result<Vec<Item>, HubError> {
        let url = format!(
            "{}/api/models/{}/discussions?type={kind}&status=all&author={}",
            self.endpoint(),
            untrusted::encode_path(repo),
            untrusted::encode_segment(author)
        );
        let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(INFO_CAP)).await?;
        let listing: Listing = serde_json::from_slice(&fetched.body)
            .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("discussions: {e}") })?;
        Ok(listing.discussions)
    }

    /// Returns the repo's pull requests titled `title` by `author`, as its first page of discussions lists
    /// them.
    pub async fn pull_requests(&self, repo: &str, title: &str, author: &str) -> Result<Vec<PullRequestInfo>, HubError> {
        let listing = self.discussions_listed(repo, "pull_request", author).await?;
        Ok(listing
            .into_iter()
            .filter(|d| d.is_pull_request && d.title == title && d.author.as_ref().is_some_and(|a| a.name == author))
            .map(|d| PullRequestInfo { num: d.num, title: d.title, status: d.status, author: author.to_owned() })
            .collect())
    }

    /// Returns the repo's discussions opened by `author`, newest first, as its first page of discussions lists
    /// them. Pull requests are left out.
    pub async fn discussions_by(&self, repo: &str, author: &str) -> Result<Vec<DiscussionInfo>, HubError> {
        let listing = self.discussions_listed(repo, "discussion", author).await?;
        Ok(listing
            .into_iter()
            .filter(|d| !d.is_pull_request && d.author.as_ref().is_some_and(|a| a.name == author))
            .map(|d| DiscussionInfo { num: d.num, title: d.title, status: d.status })
            .collect())
    }

    /// Returns one discussion's status now (`open`, `closed`).
    pub async fn discussion_status(&self, repo: &str, num: u64) -> Result<String, HubError> {
        let url = self.model_api(repo, &format!("discussions/{num}"));
        let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(INFO_CAP)).await?;
        let item: Item = serde_json::from_slice(&fetched.body)
            .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("discussion: {e}") })?;
        if item.num != num {
            return Err(HubError::Malformed { url, detail: format!("not discussion #{num}") });
        }
        Ok(item.status)
    }

    /// Opens a discussion on `repo` titled `title` with `description`, and returns its number.
    pub async fn open_discussion(&self, repo: &str, title: &str, description: &str) -> Result<u64, HubError> {
        let url = self.model_api(repo, "discussions");
        let body = serde_json::json!({ "title": title, "description": description, "pullRequest": false });
        // Send once: a retry after a lost answer would open a second discussion.
        let fetched = self.post_action_once(&url, "application/json", body.to_string().into_bytes()).await?;
        let opened: Opened = serde_json::from_slice(&fetched.body)
            .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("discussion: {e}") })?;
        Ok(opened.num)
    }

    /// Returns one pull request, as its page describes it now.
    pub async fn pull_request(&self, repo: &str, num: u64) -> Result<PullRequestInfo, HubError> {
        let url = self.model_api(repo, &format!("discussions/{num}"));
        let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(INFO_CAP)).await?;
        let item: Item = serde_json::from_slice(&fetched.body)
            .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("discussion: {e}") })?;
        if item.num != num || !item.is_pull_request {
            return Err(HubError::Malformed { url, detail: format!("not pull request #{num}") });
        }
        Ok(PullRequestInfo {
            num,
            title: item.title,
            status: item.status,
            author: item.author.map(|a| a.name).unwrap_or_default(),
        })
    }
}
