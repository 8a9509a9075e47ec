//! Repos as the worker manages them: created, deleted, made public or private.
//! Creation and settings are sent as huggingface_hub sends them (`visibility`, not `private`).
//! Deletion goes through hf-hub. Its errors become [`HubError`]s, so the rest of hubalign has one error type.

use hf_hub::{HFError, RepoTypeModel};
use reqwest::StatusCode;

use super::repo_ref::{RepoKind, RepoRef};
use super::{HubClient, HubError};

/// What creating a repo found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// It was made now.
    New,
    /// A repo of that name exists (409). The caller finds out whose it is.
    Existed,
}

/// The Hub's 409 to a creation while another by the same user is in progress. huggingface_hub's
/// `create_repo` sends the request again on this text.
const CREATE_IN_PROGRESS: &str = "another conflicting operation is in progress";

/// A repo's `visibility`, as huggingface_hub names it in a creation and in settings.
fn visibility(private: bool) -> &'static str {
    if private { "private" } else { "public" }
}

/// Creation requests sent at most while the Hub answers [`CREATE_IN_PROGRESS`].
const CREATE_ATTEMPTS: u32 = 8;

/// Splits `namespace/name` into its two parts, as hf-hub's model handle takes them.
fn parts(repo: &str) -> Result<(&str, &str), HubError> {
    repo.split_once('/')
        .ok_or_else(|| HubError::Malformed { url: repo.to_owned(), detail: "not namespace/name".into() })
}

/// Turns hf-hub's failure into the Hub's. Where the Hub answered with a status, it returns that status with
/// its error code, message and request id. Otherwise it returns a malformed-answer error naming `what` (a
/// transport failure, tried again).
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
    /// Returns hf-hub's client for this endpoint and token, made once per client.
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

    /// Creates the model repo `repo` (`namespace/name`), private. One that exists is [`Created::Existed`].
    pub async fn create_private_repo(&self, repo: &str) -> Result<Created, HubError> {
        self.create_repo(RepoRef::model(repo), true).await
    }

    /// Creates the dataset repo `repo` (`namespace/name`), public or private. One that exists is
    /// [`Created::Existed`].
    pub async fn create_dataset_repo(&self, repo: &str, private: bool) -> Result<Created, HubError> {
        self.create_repo(RepoRef::dataset(repo), private).await
    }

    /// Sends `POST /api/repos/create` as huggingface_hub sends it: `name`, `organization`, `visibility`, and
    /// `type` for a dataset. After a 409 that says another creation by this user is in progress, it waits and
    /// sends the request again, as huggingface_hub does. It sends at most [`CREATE_ATTEMPTS`] requests in all.
    /// Any other 409 means the repo exists.
    async fn create_repo(&self, repo: RepoRef<'_>, private: bool) -> Result<Created, HubError> {
        let (organization, name) = parts(repo.id)?;
        let mut ask = serde_json::json!({
            "name": name,
            "organization": organization,
            "visibility": visibility(private),
        });
        if repo.kind == RepoKind::Dataset {
            ask["type"] = "dataset".into();
        }
        let url = format!("{}/api/repos/create", self.endpoint());
        let mut attempt = 1;
        loop {
            match self.post_action(&url, "application/json", ask.to_string().into_bytes()).await {
                Ok(_) => return Ok(Created::New),
                Err(HubError::Status { status: StatusCode::CONFLICT, message, .. })
                    if message.contains(CREATE_IN_PROGRESS) && attempt < CREATE_ATTEMPTS =>
                {
                    let delay = self.retry.delay(attempt, super::retry::jitter_unit());
                    tracing::info!(repo.id = %repo, attempt, delay_ms = delay.as_millis() as u64, "another creation is in progress; trying again");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(HubError::Status { status: StatusCode::CONFLICT, message, .. })
                    if !message.contains(CREATE_IN_PROGRESS) =>
                {
                    return Ok(Created::Existed);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes `repo`; one already gone is not an error.
    pub async fn delete_repo(&self, repo: &str) -> Result<(), HubError> {
        let request = self.hf()?.delete_repository().repo_id(repo).repo_type(RepoTypeModel).missing_ok(true);
        request.send().await.map_err(|e| from_hf(repo, e))
    }

    /// Makes the model repo `repo` private or public: `PUT …/settings` with `visibility`, as huggingface_hub's
    /// `update_repo_settings` sends it.
    pub async fn set_private(&self, repo: &str, private: bool) -> Result<(), HubError> {
        let url = self.model_api(repo, "settings");
        let body = serde_json::json!({ "visibility": visibility(private) });
        self.put_json(&url, body.to_string().into_bytes()).await.map(drop)
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
