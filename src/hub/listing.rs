//! `GET /api/models` with `full=true`: one request returns a page of repos with their commit and file names.

use serde::Deserialize;

use super::pacing::Bucket;
use super::{HubClient, HubError};

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
    /// Private (visible because the token owns it).
    #[serde(default)]
    pub private: bool,
    /// Disabled by the Hub.
    #[serde(default)]
    pub disabled: bool,
    /// `false`, `"auto"` or `"manual"`.
    #[serde(default)]
    pub gated: serde_json::Value,
    /// File names.
    #[serde(default)]
    pub siblings: Vec<Sibling>,
}

/// A file name in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Sibling {
    /// Path in the repo.
    pub rfilename: String,
}

impl ListedRepo {
    /// The namespace.
    pub fn namespace(&self) -> &str {
        self.id.split_once('/').map_or(self.id.as_str(), |(ns, _)| ns)
    }

    /// Whether the repo is gated.
    pub fn is_gated(&self) -> bool {
        !matches!(self.gated, serde_json::Value::Bool(false) | serde_json::Value::Null)
    }

    /// Its `*.safetensors` files, sorted.
    pub fn shard_paths(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.siblings.iter().map(|s| s.rfilename.clone()).filter(|p| p.ends_with(".safetensors")).collect();
        v.sort();
        v
    }
}

/// One page and where the next one is.
#[derive(Debug, Clone)]
pub struct Page {
    /// The repos.
    pub repos: Vec<ListedRepo>,
    /// The `Link: <…>; rel="next"` URL.
    pub next: Option<String>,
}

impl ListQuery {
    /// The first page's URL; later pages come from `Link` headers, used as given.
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

/// The `rel="next"` target of a `Link` header.
pub fn next_link(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let link = headers.get(reqwest::header::LINK)?.to_str().ok()?;
    link.split(',').find(|part| part.contains("rel=\"next\"")).and_then(|part| {
        let start = part.find('<')? + 1;
        let end = part.find('>')?;
        Some(part[start..end].trim().to_owned())
    })
}

impl HubClient {
    /// Fetches one listing page.
    pub async fn list_page(&self, url: &str) -> Result<Page, HubError> {
        let fetched = self.get(Bucket::Api, url, &[], None).await?;
        let repos: Vec<ListedRepo> = serde_json::from_slice(&fetched.body).map_err(|e| HubError::Malformed {
            url: url.to_owned(),
            detail: format!("listing is not a list of models: {e}"),
        })?;
        Ok(Page { repos, next: next_link(&fetched.headers) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_links() {
        let q = ListQuery { author: Some("mlx-community".into()), limit: Some(20), ..ListQuery::default() };
        assert_eq!(q.first_url("http://h"), "http://h/api/models?filter=mlx&author=mlx-community&full=true&limit=20");
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("link", "<http://h/api/models?cursor=abc>; rel=\"next\"".parse().unwrap());
        assert_eq!(next_link(&h).as_deref(), Some("http://h/api/models?cursor=abc"));
        h.insert("link", "<http://h/x>; rel=\"prev\"".parse().unwrap());
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn listing_items() {
        let r: ListedRepo = serde_json::from_str(
            r#"{"id":"a/b","sha":"s","gated":"manual","siblings":[{"rfilename":"z.safetensors"},{"rfilename":"config.json"},{"rfilename":"a.safetensors"}]}"#,
        )
        .unwrap();
        assert!(r.is_gated());
        assert_eq!(r.shard_paths(), ["a.safetensors", "z.safetensors"]);
        assert_eq!(r.namespace(), "a");
    }
}
