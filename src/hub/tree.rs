//! A repo's files at a commit with their hashes. hubalign reads trees itself because hf-hub 1.0's tree
//! entries drop the LFS `oid`: they read `sha256`, which the tree endpoint does not send. Downloads must be
//! checked against exactly that hash.

use serde::Deserialize;

use super::pacing::Bucket;
use super::pages::Pagination;
use super::{BodyLimit, HubClient, HubError, TREE_PAGE_CAP};
use crate::untrusted;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TreeFile {
    /// Path in the repo.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Git blob id (of the content, or of the LFS pointer).
    pub oid: String,
    /// For LFS/Xet files, the content's sha256.
    #[serde(default)]
    pub lfs: Option<LfsInfo>,
}

/// The LFS part of a tree entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LfsInfo {
    /// sha256 of the content.
    pub oid: String,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    file: Option<TreeFile>,
}

#[derive(Deserialize)]
struct DirEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
}

/// Paths asked about in one `paths-info` request.
const PATHS_PER_REQUEST: usize = 1000;

impl HubClient {
    /// Lists every file of `repo` at `revision`, following the tree's pagination. Each page is at most
    /// [`TREE_PAGE_CAP`] bytes, and no page is read twice. Paths are returned as listed; the caller checks
    /// them.
    pub async fn tree(&self, repo: &str, revision: &str) -> Result<Vec<TreeFile>, HubError> {
        self.tree_of(repo.into(), revision).await
    }

    /// Does what [`tree`](Self::tree) does, for a repository of any kind.
    pub async fn tree_of(&self, repo: super::repo_ref::RepoRef<'_>, revision: &str) -> Result<Vec<TreeFile>, HubError> {
        let rest = format!("tree/{}?recursive=true&expand=false", untrusted::encode_segment(revision));
        let first = self.repo_api(repo, &rest);
        let mut pages = Pagination::new(self.endpoint(), &first);
        let mut next = Some(first);
        let mut files = Vec::new();
        while let Some(url) = next.take() {
            let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(TREE_PAGE_CAP)).await?;
            let entries: Vec<Entry> = serde_json::from_slice(&fetched.body)
                .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("tree: {e}") })?;
            files.extend(entries.into_iter().filter(|e| e.kind == "file").filter_map(|e| e.file));
            next = pages.next(&url, &fetched.headers)?;
        }
        Ok(files)
    }

    /// Returns which of `paths` exist as files in `repo` at `revision`. It asks `paths-info`, in one request
    /// per `PATHS_PER_REQUEST` paths. A writer that knows which paths it may touch needs no more, whatever
    /// else the repo holds. Paths are returned as the Hub answered them; the caller compares them with its own.
    pub async fn paths_info_of(
        &self,
        repo: super::repo_ref::RepoRef<'_>,
        revision: &str,
        paths: &[String],
    ) -> Result<Vec<TreeFile>, HubError> {
        let url = self.repo_api(repo, &format!("paths-info/{}", untrusted::encode_segment(revision)));
        let mut files = Vec::new();
        // Send a bounded number of paths per request, however many are asked about.
        for chunk in paths.chunks(PATHS_PER_REQUEST) {
            let body = serde_json::json!({ "paths": chunk, "expand": false });
            let fetched = self.post(&url, "application/json", body.to_string().into_bytes()).await?;
            let entries: Vec<Entry> = serde_json::from_slice(&fetched.body)
                .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("paths-info: {e}") })?;
            files.extend(entries.into_iter().filter(|e| e.kind == "file").filter_map(|e| e.file));
        }
        Ok(files)
    }

    /// Returns the directories directly under `path` in `repo` at `revision`, as the first page of its tree
    /// lists them. Paths are returned as the Hub answered them; the caller compares them with its own.
    pub async fn dirs_of(
        &self,
        repo: super::repo_ref::RepoRef<'_>,
        revision: &str,
        path: &str,
    ) -> Result<Vec<String>, HubError> {
        let rest =
            format!("tree/{}/{}?expand=false", untrusted::encode_segment(revision), untrusted::encode_path(path));
        let url = self.repo_api(repo, &rest);
        let fetched = match self.get(Bucket::Api, &url, &[], BodyLimit::Whole(TREE_PAGE_CAP)).await {
            Ok(fetched) => fetched,
            // A path the revision does not have: no directories under it.
            Err(HubError::Status { status: reqwest::StatusCode::NOT_FOUND, .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let entries: Vec<DirEntry> = serde_json::from_slice(&fetched.body)
            .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("tree: {e}") })?;
        Ok(entries.into_iter().filter(|e| e.kind == "directory").map(|e| e.path).collect())
    }
}
