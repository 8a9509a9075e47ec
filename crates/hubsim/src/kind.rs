//! Tells model and dataset repositories apart, as the Hub does: `alice/x` may be both a model and a dataset.
//! Models live under `/api/models/…` and `/{id}/…`; datasets under `/api/datasets/…` and `/datasets/{id}/…`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::HubError;

/// The kind of repository a request is about, as its path says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RepoKind {
    /// A model repository.
    #[default]
    Model,
    /// A dataset repository.
    Dataset,
}

impl RepoKind {
    /// The kind a request path names: a dataset under `/api/datasets/` or `/datasets/`, a model otherwise.
    pub fn of_path(path: &str) -> RepoKind {
        if path.starts_with("/api/datasets/") || path == "/api/datasets" || path.starts_with("/datasets/") {
            RepoKind::Dataset
        } else {
            RepoKind::Model
        }
    }

    /// The kind a create, delete or move names in its `type`. No `type` means a model; another word is a 400.
    pub fn of_type(repo_type: Option<&str>) -> Result<RepoKind, HubError> {
        match repo_type {
            None | Some("model") => Ok(RepoKind::Model),
            Some("dataset") => Ok(RepoKind::Dataset),
            Some(other) => {
                Err(HubError::bad_request(format!("the simulator serves models and datasets, not {other}s")))
            }
        }
    }

    /// The page of `id` on the Hub, under `base`.
    pub fn url(self, base: &str, id: &str) -> String {
        match self {
            RepoKind::Model => format!("{base}/{id}"),
            RepoKind::Dataset => format!("{base}/datasets/{id}"),
        }
    }

    /// The API's path of `id`: `/api/models/{id}` or `/api/datasets/{id}`.
    pub fn api_path(self, id: &str) -> String {
        match self {
            RepoKind::Model => format!("/api/models/{id}"),
            RepoKind::Dataset => format!("/api/datasets/{id}"),
        }
    }

    /// `id` as the storage redirect carries it: `{id}` or `datasets/{id}`.
    pub fn tagged(self, id: &str) -> String {
        match self {
            RepoKind::Model => id.to_owned(),
            RepoKind::Dataset => format!("datasets/{id}"),
        }
    }

    /// The kind and id of a [`tagged`](Self::tagged) id.
    pub fn untag(tagged: &str) -> (RepoKind, &str) {
        match tagged.strip_prefix("datasets/") {
            Some(id) => (RepoKind::Dataset, id),
            None => (RepoKind::Model, tagged),
        }
    }

    /// The word the Hub's messages use.
    pub fn noun(self) -> &'static str {
        match self {
            RepoKind::Model => "model",
            RepoKind::Dataset => "dataset",
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RepoKind {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<RepoKind, Self::Rejection> {
        Ok(RepoKind::of_path(parts.uri.path()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_or_the_type_says_the_kind() {
        assert_eq!(RepoKind::of_path("/api/datasets/alice/audit/tree/main"), RepoKind::Dataset);
        assert_eq!(RepoKind::of_path("/datasets/alice/audit/resolve/main/README.md"), RepoKind::Dataset);
        assert_eq!(RepoKind::of_path("/api/datasets"), RepoKind::Dataset);
        // A model whose namespace is `datasets` is still a model on its own page's path.
        assert_eq!(RepoKind::of_path("/api/models/datasets/x"), RepoKind::Model);
        assert_eq!(RepoKind::of_path("/alice/tiny/resolve/main/config.json"), RepoKind::Model);
        assert_eq!(RepoKind::of_type(None).unwrap(), RepoKind::Model);
        assert_eq!(RepoKind::of_type(Some("dataset")).unwrap(), RepoKind::Dataset);
        assert!(RepoKind::of_type(Some("space")).is_err());
        assert_eq!(RepoKind::Dataset.url("http://h", "a/b"), "http://h/datasets/a/b");
    }
}
