//! Which repository a call is about. Models and datasets are apart on the Hub, and `alice/x` may be both.
//! Their APIs live under `/api/models/…` and `/api/datasets/…`, and their git paths under `/{id}` and
//! `/datasets/{id}`. The mirrors are models; the audit's public dataset is a dataset.

/// The kind of a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoKind {
    /// A model repository.
    Model,
    /// A dataset repository.
    Dataset,
}

/// A repository on the Hub: its kind and `namespace/name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepoRef<'a> {
    /// Its kind.
    pub kind: RepoKind,
    /// `namespace/name`.
    pub id: &'a str,
}

impl<'a> RepoRef<'a> {
    /// Names the model repository `id`.
    pub fn model(id: &'a str) -> RepoRef<'a> {
        RepoRef { kind: RepoKind::Model, id }
    }

    /// Names the dataset repository `id`.
    pub fn dataset(id: &'a str) -> RepoRef<'a> {
        RepoRef { kind: RepoKind::Dataset, id }
    }

    /// Returns the API's path segment for the kind: `models` or `datasets`.
    pub fn api_segment(self) -> &'static str {
        match self.kind {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }

    /// Returns the repository's path under the endpoint, percent-encoded: `{id}` or `datasets/{id}`.
    pub fn git_path(self) -> String {
        let id = crate::untrusted::encode_path(self.id);
        match self.kind {
            RepoKind::Model => id,
            RepoKind::Dataset => format!("datasets/{id}"),
        }
    }
}

impl<'a> From<&'a str> for RepoRef<'a> {
    /// A bare id names a model, as everywhere in the mirrors' code.
    fn from(id: &'a str) -> RepoRef<'a> {
        RepoRef::model(id)
    }
}

impl std::fmt::Display for RepoRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            RepoKind::Model => f.write_str(self.id),
            RepoKind::Dataset => write!(f, "datasets/{}", self.id),
        }
    }
}
