//! Serves the write API: repositories, settings, preupload, Git LFS batch and uploads, the NDJSON commit, and
//! pull requests.
//!
//! - `repos`: create, delete, settings, validate-yaml, discussions.
//! - `lfs`: the Git LFS batch negotiation and the basic/multipart upload endpoints on the storage origin.
//! - `commit`: preupload and the commit itself.

mod commit;
pub(super) mod hooks;
mod lfs;
mod repos;

pub(super) use commit::{commit, preupload};
pub(super) use lfs::{lfs_batch, lfs_complete, lfs_upload_basic, lfs_upload_part, lfs_verify};
pub(super) use repos::{
    create_discussion, create_repo, delete_repo, get_discussion, list_discussions, merge_pull_request, move_repo,
    set_discussion_status, settings, validate_yaml,
};

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use super::Sim;
use super::auth::{Account, can_see, can_write};
use super::error::HubError;
use super::model::{Commit, Repo};
use crate::digests::finish_hex;

pub(super) fn caller<'a>(sim: &'a Sim, headers: &HeaderMap) -> Result<Option<&'a Account>, HubError> {
    sim.accounts.caller(headers)
}

pub(super) fn now() -> String {
    crate::clock::now()
}

/// Stores bytes in the content store; returns their sha256.
pub(super) async fn store_bytes(sim: &Sim, bytes: &[u8]) -> Result<String, HubError> {
    let sha256 = finish_hex(Sha256::new_with_prefix(bytes));
    let path = sim.store.join("blobs").join(&sha256);
    let write = async {
        tokio::fs::create_dir_all(sim.store.join("blobs")).await?;
        tokio::fs::write(&path, bytes).await
    };
    write.await.map_err(|e| HubError::bad_request(format!("store: {e}")))?;
    sim.add_blob(sha256.clone(), path);
    Ok(sha256)
}

/// The commit a write to `revision` builds on.
pub(super) fn head_for<'a>(repo: &'a Repo, revision: &str) -> Result<&'a Commit, HubError> {
    repo.resolve(revision).ok_or_else(|| HubError::revision_not_found(revision))
}

/// A repo to change, by id, for a caller already checked to be signed in and allowed to.
pub(super) fn repo_mut<'a>(repos: &'a mut crate::model::RepoMap, id: &str) -> Result<&'a mut Repo, HubError> {
    repos.get_mut(id).ok_or_else(|| HubError::repo_not_found(id, true))
}

/// The query that says a write is for a new pull request: `?create_pr=1`, as huggingface_hub sends it on
/// the preupload, the Xet write token and the commit.
#[derive(serde::Deserialize, Default)]
pub(crate) struct ForPullRequest {
    create_pr: Option<String>,
}

impl ForPullRequest {
    /// Whether the request asks for a pull request (`1`, or `true` as some clients spell it).
    pub(crate) fn asked(&self) -> bool {
        self.create_pr.as_deref().is_some_and(|v| matches!(v, "1" | "true" | "True"))
    }
}

/// A repo the caller may upload to: one it may write to, or, with `create_pr=1`, any repo it can see. A
/// signed-in user who may not write and did not ask for a pull request gets the Hub's 403 naming the
/// parameter.
pub(super) fn uploadable_repo<'a>(
    repos: &'a crate::model::RepoMap,
    id: &str,
    caller: Option<&Account>,
    create_pr: bool,
) -> Result<&'a Repo, HubError> {
    let repo = proposable_repo(repos, id, caller)?;
    if create_pr {
        return Ok(repo);
    }
    let ns = crate::digests::namespace_of(id);
    if let Some(a) = caller
        && !a.read_only
        && !a.namespaces.contains(ns)
    {
        return Err(HubError::pass_create_pr());
    }
    can_write(ns, caller)?;
    Ok(repo)
}

/// A repo the caller may upload to for a pull request. As on the Hub, any signed-in user who can see it may,
/// with a token that is not read-only.
pub(super) fn proposable_repo<'a>(
    repos: &'a crate::model::RepoMap,
    id: &str,
    caller: Option<&Account>,
) -> Result<&'a Repo, HubError> {
    let repo = repos.get(id).ok_or_else(|| HubError::repo_not_found(id, caller.is_some()))?;
    can_see(repo, caller)?;
    let account = caller.ok_or_else(HubError::auth_required)?;
    if account.read_only {
        return Err(HubError::forbidden(format!("the token of {} has the read role", account.user)));
    }
    Ok(repo)
}
