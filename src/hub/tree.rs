//! A repo's files at a commit with their hashes. Written here because hf-hub 1.0's tree entries drop the
//! LFS `oid` (they read `sha256`, which the tree endpoint does not send), and downloads must be checked
//! against exactly that hash.

use serde::Deserialize;

use super::listing::next_link;
use super::pacing::Bucket;
use super::{HubClient, HubError};

/// One file of a tree.
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

impl HubClient {
    /// Every file of `repo` at `revision`, following the tree's pagination.
    pub async fn tree(&self, repo: &str, revision: &str) -> Result<Vec<TreeFile>, HubError> {
        let rev: String = form_urlencoded::byte_serialize(revision.as_bytes()).collect();
        let mut next = Some(format!("{}/api/models/{repo}/tree/{rev}?recursive=true&expand=false", self.endpoint()));
        let mut files = Vec::new();
        while let Some(url) = next.take() {
            let fetched = self.get(Bucket::Api, &url, &[], None).await?;
            let entries: Vec<Entry> = serde_json::from_slice(&fetched.body)
                .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("tree: {e}") })?;
            files.extend(entries.into_iter().filter(|e| e.kind == "file").filter_map(|e| e.file));
            next = next_link(&fetched.headers);
        }
        Ok(files)
    }
}
