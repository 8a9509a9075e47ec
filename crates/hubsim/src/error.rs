//! Errors as the Hub sends them: status, `X-Error-Code`, `X-Error-Message` and a JSON `{"error": …}` body.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// A refusal, rendered the way huggingface_hub's `hf_raise_for_status` expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubError {
    /// HTTP status.
    pub status: StatusCode,
    /// `X-Error-Code`, when the Hub sends one.
    pub code: Option<&'static str>,
    /// The message (`X-Error-Message` and the body's `error`).
    pub message: String,
    /// `X-Repo-Commit` (sent with `EntryNotFound`).
    pub repo_commit: Option<String>,
}

impl HubError {
    fn new(status: StatusCode, code: Option<&'static str>, message: impl Into<String>) -> HubError {
        HubError { status, code, message: message.into(), repo_commit: None }
    }

    /// 404 `RepoNotFound` (or 401 without a token, deliberately ambiguous as on the Hub).
    pub fn repo_not_found(id: &str, authenticated: bool) -> HubError {
        let status = if authenticated { StatusCode::NOT_FOUND } else { StatusCode::UNAUTHORIZED };
        HubError::new(status, Some("RepoNotFound"), format!("Repository not found: {id}"))
    }

    /// 404 `RevisionNotFound`.
    pub fn revision_not_found(revision: &str) -> HubError {
        HubError::new(StatusCode::NOT_FOUND, Some("RevisionNotFound"), format!("Invalid rev id: {revision}"))
    }

    /// 404 `EntryNotFound`, carrying the commit the revision resolved to.
    pub fn entry_not_found(path: &str, commit: &str) -> HubError {
        let mut e = HubError::new(StatusCode::NOT_FOUND, Some("EntryNotFound"), format!("Entry not found: {path}"));
        e.repo_commit = Some(commit.to_owned());
        e
    }

    /// 401/403 `GatedRepo`.
    pub fn gated(id: &str, authenticated: bool) -> HubError {
        if authenticated {
            let msg = format!(
                "Access to model {id} is restricted and you are not in the authorized list. Visit https://huggingface.co/{id} to ask for access."
            );
            HubError::new(StatusCode::FORBIDDEN, Some("GatedRepo"), msg)
        } else {
            let msg = format!(
                "Access to model {id} is restricted. You must have access to it and be authenticated to access it. Please log in."
            );
            HubError::new(StatusCode::UNAUTHORIZED, Some("GatedRepo"), msg)
        }
    }

    /// 403 for a disabled repo, with the Hub's exact message.
    pub fn disabled() -> HubError {
        HubError::new(StatusCode::FORBIDDEN, None, "Access to this resource is disabled.")
    }

    /// 401 for a token the simulator does not know.
    pub fn invalid_token() -> HubError {
        HubError::new(StatusCode::UNAUTHORIZED, None, "Invalid credentials in Authorization header")
    }

    /// 401 when a write needs a token and none was sent.
    pub fn auth_required() -> HubError {
        HubError::new(StatusCode::UNAUTHORIZED, None, "You must be authenticated to do this.")
    }

    /// 403 when the token may not write to a namespace.
    pub fn forbidden(message: impl Into<String>) -> HubError {
        HubError::new(StatusCode::FORBIDDEN, None, message)
    }

    /// 403 when a signed-in user who may not write to a repo uploads or commits to it without asking for a
    /// pull request. It answers in the Hub's words (huggingface_hub issue 1182, huggingface.js PR 1746).
    pub fn pass_create_pr() -> HubError {
        HubError::forbidden("Forbidden: pass `create_pr=1` as a query parameter to create a Pull Request")
    }

    /// 400 for a malformed request.
    pub fn bad_request(message: impl Into<String>) -> HubError {
        HubError::new(StatusCode::BAD_REQUEST, None, message)
    }

    /// 409 when a repository already exists.
    pub fn conflict(message: impl Into<String>) -> HubError {
        HubError::new(StatusCode::CONFLICT, None, message)
    }

    /// 429 for a quota the Hub does not announce in headers (an action quota): the message only.
    pub fn too_many_requests(message: impl Into<String>) -> HubError {
        HubError::new(StatusCode::TOO_MANY_REQUESTS, None, message)
    }

    /// 412 when `parentCommit` is not the head.
    pub fn stale_parent() -> HubError {
        HubError::new(
            StatusCode::PRECONDITION_FAILED,
            None,
            "A commit has happened since. Please refresh and try again.",
        )
    }

    /// 404 for an unknown route.
    pub fn not_found(message: impl Into<String>) -> HubError {
        HubError::new(StatusCode::NOT_FOUND, None, message)
    }
}

impl IntoResponse for HubError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        let mut response = (self.status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        if let Some(code) = self.code {
            headers.insert("x-error-code", HeaderValue::from_static(code));
        }
        // Header values must be visible ASCII; the body keeps the full message.
        let ascii: String = self.message.chars().filter(|c| c.is_ascii() && !c.is_ascii_control()).collect();
        if let Ok(v) = HeaderValue::from_str(&ascii) {
            headers.insert("x-error-message", v);
        }
        if let Some(commit) = self.repo_commit.and_then(|c| HeaderValue::from_str(&c).ok()) {
            headers.insert("x-repo-commit", commit);
        }
        response
    }
}
