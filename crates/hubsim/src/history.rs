//! Serves a repository's history as the Hub does, for `list_repo_commits` and `list_repo_refs`.
//! `GET /api/models/{id}/commits/{rev}` lists commits newest first, paginated by `Link` with `?p=`.
//! `GET /api/models/{id}/refs` lists branches, tags and converts, and with `include_prs=1` the pull requests.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::Shared;
use crate::error::HubError;
use crate::query::Params;
use crate::read::visible_repo;

/// Commits per page, as the Hub's commits endpoint pages them.
const COMMITS_PER_PAGE: usize = 50;

/// `GET /api/models/{ns}/{name}/commits/{*rev}`.
pub(crate) async fn list_commits(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name, revision)): Path<(String, String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Response, HubError> {
    let params = Params::parse(raw.as_deref().unwrap_or(""));
    let id = format!("{ns}/{name}");
    let caller = sim.accounts.caller(&headers)?;
    let repos = sim.repos_of(kind);
    let repo = visible_repo(&repos, &id, caller)?;
    let mut at = Some(repo.resolve(&revision).ok_or_else(|| HubError::revision_not_found(&revision))?);
    let mut chain = Vec::new();
    // The parent chain is finite, since every parent was made before its child. Still, bound it as a reader
    // would.
    while let Some(commit) = at.take().filter(|_| chain.len() <= repo.commits.len()) {
        chain.push(json!({
            "id": commit.sha,
            "title": commit.title,
            "message": "",
            "authors": [],
            "date": commit.date,
        }));
        at = commit.parent.as_deref().and_then(|p| repo.commits.get(p));
    }
    let page = usize::try_from(params.number("p").unwrap_or(0)).unwrap_or(usize::MAX);
    let start = page.saturating_mul(COMMITS_PER_PAGE);
    let items: Vec<Value> = chain.iter().skip(start).take(COMMITS_PER_PAGE).cloned().collect();
    let mut response = Json(items).into_response();
    if start.saturating_add(COMMITS_PER_PAGE) < chain.len() {
        let rev = form_urlencoded::byte_serialize(revision.as_bytes()).collect::<String>();
        let next = format!("<{}{}/commits/{rev}?p={}>; rel=\"next\"", sim.base_url, kind.api_path(&id), page + 1);
        if let Ok(v) = HeaderValue::from_str(&next) {
            response.headers_mut().insert(header::LINK, v);
        }
    }
    Ok(response)
}

/// `GET /api/models/{ns}/{name}/refs`.
pub(crate) async fn list_refs(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Response, HubError> {
    let params = Params::parse(raw.as_deref().unwrap_or(""));
    let id = format!("{ns}/{name}");
    let caller = sim.accounts.caller(&headers)?;
    let repos = sim.repos_of(kind);
    let repo = visible_repo(&repos, &id, caller)?;
    let mut branches = Vec::new();
    let mut pull_requests = Vec::new();
    for (name, sha) in &repo.refs {
        if name.starts_with("refs/pr/") {
            pull_requests.push(json!({ "name": name, "ref": name, "targetCommit": sha }));
        } else {
            branches.push(json!({ "name": name, "ref": format!("refs/heads/{name}"), "targetCommit": sha }));
        }
    }
    let mut body = json!({ "branches": branches, "converts": [], "tags": [] });
    if params.flag("include_prs") {
        body["pullRequests"] = pull_requests.into();
    }
    Ok(Json(body).into_response())
}
