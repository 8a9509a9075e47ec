//! Repos as the worker manages them: created private, deleted, made public or private, and a pull request's
//! commit. hf-hub does these requests well; it is wrapped here so that the rest of hubalign has one Hub client
//! and one error type, [`HubError`], whose statuses decide what a failure means for a job.

use std::path::PathBuf;

use hf_hub::repository::CommitOperation;
use hf_hub::{HFError, RepoTypeDataset, RepoTypeModel};
use reqwest::StatusCode;

use super::{HubClient, HubError};

/// What creating a repo found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// It was made now.
    New,
    /// A repo of that name exists (409): whose it is, is for the caller to find out.
    Existed,
}

/// A pull request opened with its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedPullRequest {
    /// Its number.
    pub num: u64,
    /// Its commit.
    pub commit: String,
}

/// `namespace/name` as its two parts, as hf-hub's model handle takes them.
fn parts(repo: &str) -> Result<(&str, &str), HubError> {
    repo.split_once('/')
        .ok_or_else(|| HubError::Malformed { url: repo.to_owned(), detail: "not namespace/name".into() })
}

/// hf-hub's failure as the Hub's: a status where the Hub answered one (with its error code, message and
/// request id), a malformed-answer error naming `what` otherwise (a transport failure, tried again).
fn from_hf(what: &str, e: HFError) -> HubError {
    let context = match &e {
        HFError::Http { context }
        | HFError::AuthRequired { context }
        | HFError::Forbidden { context }
        | HFError::Conflict { context }
        | HFError::RateLimited { context, .. } => Some(context.as_ref()),
        HFError::RepoNotFound { context, .. }
        | HFError::RevisionNotFound { context, .. }
        | HFError::EntryNotFound { context, .. } => context.as_deref(),
        _ => None,
    };
    match context {
        Some(c) => HubError::Status {
            url: c.url.clone(),
            status: c.status,
            code: c.error_code.clone(),
            message: c.server_message.clone().unwrap_or_default(),
            request_id: c.request_id.clone(),
        },
        None => HubError::Malformed { url: what.to_owned(), detail: e.to_string() },
    }
}

impl HubClient {
    /// hf-hub's client for this endpoint and token, made once per client.
    fn hf(&self) -> Result<&hf_hub::HFClient, HubError> {
        if let Some(hf) = self.hf.get() {
            return Ok(hf);
        }
        let mut builder = hf_hub::HFClient::builder().endpoint(self.config.endpoint.clone()).cache_enabled(false);
        if let Some(token) = &self.config.token {
            builder = builder.token(token.expose());
        }
        let built = builder
            .build()
            .map_err(|e| HubError::Malformed { url: self.config.endpoint.clone(), detail: format!("hf-hub: {e}") })?;
        Ok(self.hf.get_or_init(|| built))
    }

    /// Creates `repo` (`namespace/name`), private; a 409 is [`Created::Existed`], not an error.
    pub async fn create_private_repo(&self, repo: &str) -> Result<Created, HubError> {
        let request = self.hf()?.create_repository().repo_id(repo).repo_type(RepoTypeModel).private(true);
        Self::created(request.send().await.map_err(|e| from_hf(repo, e)))
    }

    /// Creates the dataset repo `repo` (`namespace/name`), public or private; a 409 is
    /// [`Created::Existed`], not an error.
    pub async fn create_dataset_repo(&self, repo: &str, private: bool) -> Result<Created, HubError> {
        let request = self.hf()?.create_repository().repo_id(repo).repo_type(RepoTypeDataset).private(private);
        Self::created(request.send().await.map_err(|e| from_hf(repo, e)))
    }

    fn created<T>(sent: Result<T, HubError>) -> Result<Created, HubError> {
        match sent {
            Ok(_) => Ok(Created::New),
            Err(HubError::Status { status: StatusCode::CONFLICT, .. }) => Ok(Created::Existed),
            Err(e) => Err(e),
        }
    }

    /// Deletes `repo`; one already gone is not an error.
    pub async fn delete_repo(&self, repo: &str) -> Result<(), HubError> {
        let request = self.hf()?.delete_repository().repo_id(repo).repo_type(RepoTypeModel).missing_ok(true);
        request.send().await.map_err(|e| from_hf(repo, e))
    }

    /// Makes `repo` private or public.
    pub async fn set_private(&self, repo: &str, private: bool) -> Result<(), HubError> {
        let (ns, name) = parts(repo)?;
        self.hf()?.model(ns, name).update_settings().private(private).send().await.map_err(|e| from_hf(repo, e))
    }

    /// Opens a pull request on `repo` on top of `parent`, adding each of `files` (path in the repo, path here).
    pub async fn open_pull_request(
        &self,
        repo: &str,
        parent: &str,
        (title, description): (&str, &str),
        files: Vec<(String, PathBuf)>,
    ) -> Result<OpenedPullRequest, HubError> {
        let (ns, name) = parts(repo)?;
        let operations = files.into_iter().map(|(path, file)| CommitOperation::add_file(path, file)).collect();
        let info = self
            .hf()?
            .model(ns, name)
            .create_commit()
            .operations(operations)
            .commit_message(title)
            .commit_description(description)
            .parent_commit(parent)
            .create_pr(true)
            .send()
            .await
            .map_err(|e| from_hf(repo, e))?;
        Ok(OpenedPullRequest { num: info.pr_num.unwrap_or(0), commit: info.commit_oid.unwrap_or_default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_hub_errors_without_an_answer_name_what_was_asked() {
        let e = from_hf("me/x", HFError::Other("connection reset".into()));
        assert!(matches!(&e, HubError::Malformed { url, .. } if url == "me/x"), "{e}");
    }
}
