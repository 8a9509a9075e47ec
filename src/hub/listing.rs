//! `GET /api/models` with `full=true`: one request returns a page of repos with their commit and file names.

use serde::Deserialize;

use super::pacing::Bucket;
use super::{BodyLimit, HubClient, HubError, LISTING_PAGE_CAP};
use crate::untrusted;

/// Who may see a repo, as listings and repo info report it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RepoFlags {
    /// Private (seen because the token may).
    #[serde(default)]
    pub private: bool,
    /// Disabled by the Hub.
    #[serde(default)]
    pub disabled: bool,
    /// `false`, `"auto"` or `"manual"`.
    #[serde(default)]
    pub gated: serde_json::Value,
}

impl RepoFlags {
    /// Whether a licence gate guards the files.
    pub fn is_gated(&self) -> bool {
        !matches!(self.gated, serde_json::Value::Bool(false) | serde_json::Value::Null)
    }
}

/// The Hub's largest page.
pub const MAX_PAGE: usize = 1000;

/// What to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Tags every repo must have (`mlx`).
    pub filters: Vec<String>,
    /// Only this namespace.
    pub author: Option<String>,
    /// Substring of the repo id.
    pub search: Option<String>,
    /// Stop after this many repos.
    pub limit: Option<usize>,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery { filters: vec!["mlx".into()], author: None, search: None, limit: None }
    }
}

/// One listed repository.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedRepo {
    /// `namespace/name`.
    pub id: String,
    /// The head commit of the default branch.
    #[serde(default)]
    pub sha: Option<String>,
    /// Last change, ISO-8601.
    #[serde(default)]
    pub last_modified: Option<String>,
    /// Who may see it.
    #[serde(flatten)]
    pub flags: RepoFlags,
    /// File names.
    #[serde(default)]
    pub siblings: Vec<Sibling>,
    /// Tags (the card's and the Hub's): a mirror carries [`crate::sources::MIRROR_TAG`].
    #[serde(default)]
    pub tags: Vec<String>,
    /// Downloads over the last 30 days.
    #[serde(default)]
    pub downloads: u64,
    /// Likes.
    #[serde(default)]
    pub likes: u64,
}

/// A file name in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Sibling {
    /// Path in the repo.
    pub rfilename: String,
}

impl ListedRepo {
    /// Returns the namespace part of the repo's id.
    pub fn namespace(&self) -> &str {
        untrusted::namespace_of(&self.id)
    }

    /// Checks the id, the commit and every file path against the Hub's rules.
    pub fn check(&self) -> Result<(), untrusted::Invalid> {
        untrusted::check_repo_id(&self.id)?;
        if let Some(sha) = &self.sha {
            untrusted::check_commit(sha)?;
        }
        self.siblings.iter().try_for_each(|s| untrusted::check_repo_path(&s.rfilename))
    }

    /// Returns its `*.safetensors` files, sorted.
    pub fn shard_paths(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.siblings.iter().map(|s| s.rfilename.clone()).filter(|p| p.ends_with(".safetensors")).collect();
        v.sort();
        v
    }
}

/// A listing entry that breaks the Hub's rules: recorded as `invalid_listing`, never probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidListing {
    /// The id as listed, control characters escaped and cut to [`INVALID_ID_LEN`] characters.
    pub id: String,
    /// The part of that id before its first `/`.
    pub namespace: String,
    /// Which rule it breaks.
    pub reason: String,
}

/// How much of an invalid entry's id is kept.
pub const INVALID_ID_LEN: usize = 200;

impl InvalidListing {
    fn new(raw_id: &str, reason: String) -> InvalidListing {
        let mut id: String = untrusted::escape_control(raw_id).chars().take(INVALID_ID_LEN).collect();
        if id.is_empty() {
            id = "(no id)".into();
        }
        let namespace = untrusted::namespace_of(&id).to_owned();
        InvalidListing { id, namespace, reason }
    }
}

/// One page and where the next one is.
#[derive(Debug, Clone)]
pub struct Page {
    /// The entries that passed the checks of `untrusted`.
    pub repos: Vec<ListedRepo>,
    /// The entries that did not, with why.
    pub invalid: Vec<InvalidListing>,
    /// The response's headers, for the `Link` to the next page.
    pub headers: reqwest::header::HeaderMap,
}

impl ListQuery {
    /// Builds the first page's URL. Later pages come from `Link` headers, checked by `hub::pages::Pagination`.
    pub fn first_url(&self, endpoint: &str) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for f in &self.filters {
            q.append_pair("filter", f);
        }
        if let Some(a) = &self.author {
            q.append_pair("author", a);
        }
        if let Some(s) = &self.search {
            q.append_pair("search", s);
        }
        q.append_pair("full", "true");
        q.append_pair("limit", &self.limit.map_or(MAX_PAGE, |l| l.min(MAX_PAGE)).to_string());
        format!("{endpoint}/api/models?{}", q.finish())
    }
}

/// Splits a listing page's items into entries that pass the checks of `untrusted` and entries that do not. An
/// item that is not even a repo object is invalid too. The page as a whole must be a JSON array.
pub fn sort_entries(items: Vec<serde_json::Value>) -> (Vec<ListedRepo>, Vec<InvalidListing>) {
    let mut repos = Vec::new();
    let mut invalid = Vec::new();
    for item in items {
        let raw_id = item.get("id").and_then(|v| v.as_str()).unwrap_or("").to_owned();
        match serde_json::from_value::<ListedRepo>(item) {
            Ok(mut repo) => match repo.check() {
                Ok(()) => {
                    repo.last_modified =
                        repo.last_modified.filter(|t| t.len() <= 40 && t.bytes().all(|b| b.is_ascii_graphic()));
                    repos.push(repo);
                }
                Err(e) => invalid.push(InvalidListing::new(&raw_id, e.to_string())),
            },
            Err(e) => invalid.push(InvalidListing::new(
                &raw_id,
                format!("not a repo entry: {}", untrusted::escape_control(&e.to_string())),
            )),
        }
    }
    (repos, invalid)
}

impl HubClient {
    /// Fetches one listing page, at most [`LISTING_PAGE_CAP`] bytes.
    pub async fn list_page(&self, url: &str) -> Result<Page, HubError> {
        let fetched = self.get(Bucket::Api, url, &[], BodyLimit::Whole(LISTING_PAGE_CAP)).await?;
        let items: Vec<serde_json::Value> = serde_json::from_slice(&fetched.body).map_err(|e| HubError::Malformed {
            url: url.to_owned(),
            detail: format!("listing is not a list of models: {e}"),
        })?;
        let (repos, invalid) = sort_entries(items);
        Ok(Page { repos, invalid, headers: fetched.headers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let q = ListQuery { author: Some("mlx-community".into()), limit: Some(20), ..ListQuery::default() };
        assert_eq!(q.first_url("http://h"), "http://h/api/models?filter=mlx&author=mlx-community&full=true&limit=20");
    }

    #[test]
    fn entries_that_break_the_rules_are_set_aside_with_the_reason() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let items = serde_json::json!([
            {"id": "ok/fine", "sha": sha, "siblings": [{"rfilename": "model.safetensors"}]},
            {"id": "evil/\u{1b}[2Jx\nforged row", "sha": sha},
            {"id": "ok/badpath", "sha": sha, "siblings": [{"rfilename": "../../etc/passwd"}]},
            {"id": "ok/badsha", "sha": "../../../x"},
            {"id": 7},
            "not an object",
        ]);
        let serde_json::Value::Array(items) = items else { unreachable!() };
        let (repos, invalid) = sort_entries(items);
        assert_eq!(repos.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["ok/fine"]);
        assert_eq!(invalid.len(), 5);
        assert_eq!(invalid[0].id, "evil/\\u{1b}[2Jx\\u{a}forged row");
        assert_eq!(invalid[0].namespace, "evil");
        assert!(invalid[1].reason.contains("file path"), "{:?}", invalid[1]);
        assert!(invalid[2].reason.contains("commit"), "{:?}", invalid[2]);
        assert_eq!(invalid[3].id, "(no id)");
        for i in &invalid {
            assert!(!i.id.contains(['\u{1b}', '\n']) && !i.reason.contains(['\u{1b}', '\n']), "{i:?}");
        }
    }

    #[test]
    fn listing_items() {
        let r: ListedRepo = serde_json::from_str(
            r#"{"id":"a/b","sha":"s","gated":"manual","siblings":[{"rfilename":"z.safetensors"},{"rfilename":"config.json"},{"rfilename":"a.safetensors"}]}"#,
        )
        .unwrap();
        assert!(r.flags.is_gated());
        assert_eq!(r.shard_paths(), ["a.safetensors", "z.safetensors"]);
        assert_eq!(r.namespace(), "a");
    }
}
