//! Serves the read API: listing, model info, tree, paths-info, whoami.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::Shared;
use super::auth::can_see;
use super::error::HubError;
use super::model::{Commit, FileEntry, Repo, lfs_pointer};
use super::query::Params;

/// Properties `full=true` adds to the summary.
const FULL_FIELDS: [&str; 6] = ["author", "gated", "lastModified", "sha", "disabled", "siblings"];
/// The summary a listing gives without `full` or `expand`.
const SUMMARY_FIELDS: [&str; 9] =
    ["likes", "downloads", "trendingScore", "private", "tags", "pipeline_tag", "library_name", "createdAt", "modelId"];

/// Every listable property of a repo at its head, as the Hub names them.
fn properties(repo: &Repo, head: &Commit, blobs: bool) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("author".into(), repo.namespace().into());
    m.insert("sha".into(), head.sha.clone().into());
    m.insert("lastModified".into(), head.date.clone().into());
    m.insert("createdAt".into(), repo.created_at().into());
    m.insert("private".into(), repo.meta.private.into());
    m.insert("disabled".into(), repo.meta.disabled.into());
    m.insert("gated".into(), repo.meta.gated.to_json());
    m.insert("downloads".into(), repo.meta.downloads.into());
    m.insert("likes".into(), repo.meta.likes.into());
    m.insert("trendingScore".into(), 0.into());
    m.insert("tags".into(), repo.tags().into());
    m.insert("modelId".into(), repo.id.clone().into());
    if let Some(lib) = &repo.meta.library_name {
        m.insert("library_name".into(), lib.clone().into());
    }
    if let Some(p) = &repo.meta.pipeline_tag {
        m.insert("pipeline_tag".into(), p.clone().into());
    }
    if let Some(card) = card_data(&repo.meta) {
        m.insert("cardData".into(), card);
    }
    let siblings: Vec<Value> = head.files.iter().map(|(path, f)| sibling(path, f, blobs)).collect();
    m.insert("siblings".into(), siblings.into());
    m.insert("usedStorage".into(), head.files.values().map(|f| f.size).sum::<u64>().into());
    m
}

/// The card metadata the Hub would have parsed: the sidecar's `cardData`, else what its other fields say.
fn card_data(meta: &super::model::RepoMeta) -> Option<Value> {
    if let Some(card) = &meta.card_data {
        return Some(card.clone());
    }
    let mut card = Map::new();
    for (key, value) in
        [("license", &meta.license), ("pipeline_tag", &meta.pipeline_tag), ("library_name", &meta.library_name)]
    {
        if let Some(v) = value {
            card.insert(key.into(), v.clone().into());
        }
    }
    if !meta.tags.is_empty() {
        card.insert("tags".into(), meta.tags.clone().into());
    }
    (!card.is_empty()).then_some(Value::Object(card))
}

fn sibling(path: &str, f: &FileEntry, blobs: bool) -> Value {
    if !blobs {
        return json!({ "rfilename": path });
    }
    let mut v = json!({ "rfilename": path, "size": f.size, "blobId": f.git_oid });
    if f.is_lfs() {
        let pointer_size = lfs_pointer(&f.sha256, f.size).len();
        v["lfs"] = json!({ "sha256": f.sha256, "size": f.size, "pointerSize": pointer_size });
    }
    v
}

fn with_ids(repo: &Repo, props: Map<String, Value>) -> Value {
    let mut m = Map::new();
    m.insert("_id".into(), format!("{:024x}", crate::digests::object_id(&repo.id)).into());
    m.insert("id".into(), repo.id.clone().into());
    m.extend(props);
    Value::Object(m)
}

fn pick(all: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    keys.iter().filter_map(|k| all.get(*k).map(|v| ((*k).to_owned(), v.clone()))).collect()
}

/// `GET /api/models`: search, author, repeated filter, sort, limit, full, expand. Pages by cursor via `Link`.
pub(super) async fn list_models(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, HubError> {
    let params = Params::parse(raw.as_deref().unwrap_or(""));
    let caller = sim.accounts.caller(&headers)?;
    let search = params.get("search").map(str::to_lowercase);
    let author = params.get("author");
    let filters = params.all("filter");
    let expand = params.all("expand");
    let full = params.flag("full");
    let repos = sim.repos_of(kind);
    let wanted = |r: &&Repo| {
        can_see(r, caller).is_ok()
            && author.is_none_or(|a| r.namespace().eq_ignore_ascii_case(a))
            && search.as_ref().is_none_or(|s| r.id.to_lowercase().contains(s))
            && {
                let tags = r.tags();
                filters.iter().all(|f| tags.iter().any(|t| t == f) || r.meta.pipeline_tag.as_deref() == Some(*f))
            }
    };
    let page_size =
        params.number("limit").map_or(sim.config.page_size, |l| (l as usize).clamp(1, sim.config.page_size));
    let sort = params
        .get("sort")
        .filter(|s| ["downloads", "likes", "lastModified", "last_modified", "createdAt", "created_at"].contains(s));
    // In the default order, the cursor is the last id served, as the Hub's cursors are keys rather than
    // offsets. So a repo created or deleted before the cursor while a client pages neither hides another repo
    // from it nor shows one twice. Such a page is read from the key on, so a crawl's pages cost what they
    // hold, not what the Hub holds. Sorted listings page by offset.
    let cursor = params.get("cursor");
    let after = match cursor {
        None => Some(""),
        Some(c) => c.strip_prefix("after:"),
    };
    let (rows, offset, more): (Vec<(&Repo, &Commit)>, usize, bool) = match (sort, after) {
        (None, Some(after)) => {
            let mut rows: Vec<_> = repos
                .after(&after.to_ascii_lowercase())
                .filter(wanted)
                .filter_map(|r| r.head().map(|h| (r, h)))
                .take(page_size + 1)
                .collect();
            let more = rows.len() > page_size;
            rows.truncate(page_size);
            (rows, 0, more)
        }
        _ => {
            let mut hits: Vec<(&Repo, &Commit)> =
                repos.values().filter(wanted).filter_map(|r| r.head().map(|h| (r, h))).collect();
            match sort {
                Some("downloads") => hits.sort_by_key(|(r, _)| std::cmp::Reverse(r.meta.downloads)),
                Some("likes") => hits.sort_by_key(|(r, _)| std::cmp::Reverse(r.meta.likes)),
                Some("lastModified" | "last_modified") => hits.sort_by(|a, b| b.1.date.cmp(&a.1.date)),
                Some(_) => hits.sort_by_key(|(r, _)| std::cmp::Reverse(r.created_at())),
                None => {}
            }
            let offset = params.number("cursor").unwrap_or(0) as usize;
            let more = offset.saturating_add(page_size) < hits.len();
            (hits.into_iter().skip(offset).take(page_size).collect(), offset, more)
        }
    };
    let sorted = sort.is_some();
    let page: Vec<Value> = rows
        .iter()
        .map(|(repo, head)| {
            let all = properties(repo, head, false);
            let chosen = if !expand.is_empty() {
                pick(&all, &expand)
            } else if full {
                pick(&all, &[&SUMMARY_FIELDS[..], &FULL_FIELDS[..]].concat())
            } else {
                pick(&all, &SUMMARY_FIELDS)
            };
            with_ids(repo, chosen)
        })
        .collect();
    let mut response = Json(page).into_response();
    if more {
        let mut query = params.encode_without("cursor");
        if !query.is_empty() {
            query.push('&');
        }
        let cursor = match (sorted, rows.last()) {
            (false, Some((last, _))) => {
                format!("after:{}", form_urlencoded::byte_serialize(last.id.as_bytes()).collect::<String>())
            }
            _ => (offset + page_size).to_string(),
        };
        let list = if kind == crate::kind::RepoKind::Dataset { "datasets" } else { "models" };
        let next = format!("<{}/api/{list}?{query}cursor={cursor}>; rel=\"next\"", sim.base_url);
        if let Ok(v) = HeaderValue::from_str(&next) {
            response.headers_mut().insert(header::LINK, v);
        }
    }
    Ok(response)
}

/// Finds a repo the caller may see.
pub fn visible_repo<'a>(
    repos: &'a super::model::RepoMap,
    id: &str,
    caller: Option<&super::auth::Account>,
) -> Result<&'a Repo, HubError> {
    let repo = repos.get(id).ok_or_else(|| HubError::repo_not_found(id, caller.is_some()))?;
    can_see(repo, caller)?;
    Ok(repo)
}

/// The repo id, revision (default `main`) and path a route captured.
fn route_target(segments: &[(String, String)]) -> (String, String, String) {
    let get = |k: &str| segments.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let id = format!("{}/{}", get("ns").unwrap_or(""), get("name").unwrap_or(""));
    (id, get("rev").unwrap_or("main").to_owned(), get("path").unwrap_or("").to_owned())
}

/// `GET /api/models/{ns}/{name}` and `…/revision/{rev}` (`blobs=true` adds sizes and LFS data).
pub(super) async fn model_info(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path(segments): Path<Vec<(String, String)>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, HubError> {
    let params = Params::parse(raw.as_deref().unwrap_or(""));
    let (id, revision, _) = route_target(&segments);
    let caller = sim.accounts.caller(&headers)?;
    let repos = sim.repos_of(kind);
    let repo = visible_repo(&repos, &id, caller)?;
    let commit = repo.resolve(&revision).ok_or_else(|| HubError::revision_not_found(&revision))?;
    let all = properties(repo, commit, params.flag("blobs"));
    let expand = params.all("expand");
    let chosen = if expand.is_empty() { all } else { pick(&all, &expand) };
    Ok(Json(with_ids(repo, chosen)).into_response())
}

/// One tree item as the tree and paths-info endpoints give it.
fn tree_file(path: &str, f: &FileEntry) -> Value {
    let mut v = json!({ "type": "file", "oid": f.git_oid, "size": f.size, "path": path });
    if f.is_lfs() {
        let pointer_size = lfs_pointer(&f.sha256, f.size).len();
        v["lfs"] = json!({ "oid": f.sha256, "size": f.size, "pointerSize": pointer_size });
    }
    if let Some(x) = f.xet_hash() {
        v["xetHash"] = x.into();
    }
    v
}

fn tree_dir(path: &str) -> Value {
    json!({ "type": "directory", "oid": super::model::git_blob_oid(path.as_bytes()), "size": 0, "path": path })
}

/// The entries under `prefix`, or the whole tree when it is empty. Directories come first at each level, as
/// the Hub lists them.
fn tree_items(commit: &Commit, prefix: &str, recursive: bool) -> Vec<Value> {
    let base = if prefix.is_empty() { String::new() } else { format!("{}/", prefix.trim_end_matches('/')) };
    let mut dirs = std::collections::BTreeSet::new();
    let mut files = Vec::new();
    for (path, f) in &commit.files {
        let Some(rest) = path.strip_prefix(&base) else { continue };
        let parts: Vec<&str> = rest.split('/').collect();
        for depth in 1..parts.len() {
            if recursive || depth == 1 {
                dirs.insert(format!("{base}{}", parts[..depth].join("/")));
            }
        }
        if recursive || parts.len() == 1 {
            files.push(tree_file(path, f));
        }
    }
    dirs.iter().map(|d| tree_dir(d)).chain(files).collect()
}

/// `GET /api/models/{ns}/{name}/tree/{rev}[/{path}]`, paginated by `Link`.
pub(super) async fn tree(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path(segments): Path<Vec<(String, String)>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, HubError> {
    let params = Params::parse(raw.as_deref().unwrap_or(""));
    let (id, revision, prefix) = route_target(&segments);
    let caller = sim.accounts.caller(&headers)?;
    let repos = sim.repos_of(kind);
    let repo = visible_repo(&repos, &id, caller)?;
    let commit = repo.resolve(&revision).ok_or_else(|| HubError::revision_not_found(&revision))?;
    let items = tree_items(commit, &prefix, params.flag("recursive"));
    if !prefix.is_empty() && items.is_empty() && !commit.files.contains_key(&prefix) {
        return Err(HubError::entry_not_found(&prefix, &commit.sha));
    }
    let page_size =
        params.number("limit").map_or(sim.config.tree_page_size, |l| (l as usize).clamp(1, sim.config.tree_page_size));
    let offset = params.number("cursor").unwrap_or(0) as usize;
    let page: Vec<Value> = items.iter().skip(offset).take(page_size).cloned().collect();
    let mut response = Json(page).into_response();
    if offset + page_size < items.len() {
        let mut query = params.encode_without("cursor");
        if !query.is_empty() {
            query.push('&');
        }
        let path_part = if prefix.is_empty() { String::new() } else { format!("/{prefix}") };
        let rev = form_urlencoded::byte_serialize(revision.as_bytes()).collect::<String>();
        let next = format!(
            "<{}{}/tree/{rev}{path_part}?{query}cursor={}>; rel=\"next\"",
            sim.base_url,
            kind.api_path(&id),
            offset + page_size
        );
        if let Ok(v) = HeaderValue::from_str(&next) {
            response.headers_mut().insert(header::LINK, v);
        }
    }
    Ok(response)
}

/// `POST /api/models/{ns}/{name}/paths-info/{rev}` with a form body of `paths=…`.
pub(super) async fn paths_info(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name, revision)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, HubError> {
    // huggingface_hub sends a form body, hf-hub a JSON one.
    let paths: Vec<String> =
        if headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json")) {
            let v: Value = serde_json::from_str(&body).map_err(|e| HubError::bad_request(e.to_string()))?;
            v["paths"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
        } else {
            Params::parse(&body).all("paths").into_iter().map(str::to_owned).collect()
        };
    let id = format!("{ns}/{name}");
    let caller = sim.accounts.caller(&headers)?;
    let repos = sim.repos_of(kind);
    let repo = visible_repo(&repos, &id, caller)?;
    let commit = repo.resolve(&revision).ok_or_else(|| HubError::revision_not_found(&revision))?;
    let items: Vec<Value> = paths
        .iter()
        .filter_map(|p| match commit.files.get(p) {
            Some(f) => Some(tree_file(p, f)),
            None => commit.files.keys().any(|k| k.starts_with(&format!("{p}/"))).then(|| tree_dir(p)),
        })
        .collect();
    Ok(Json(items).into_response())
}

/// `GET /api/whoami-v2`, keyed as the recorded answer of a classic token (hub-ci, huggingface.js's
/// `who-am-i.spec.ts`).
pub(super) async fn whoami(State(sim): State<Shared>, headers: HeaderMap) -> Result<Response, HubError> {
    let account = sim.accounts.caller(&headers)?.ok_or_else(HubError::auth_required)?;
    let orgs: Vec<Value> = account
        .namespaces
        .iter()
        .filter(|n| **n != account.user)
        .map(|n| json!({ "name": n, "type": "org", "roleInOrg": "write" }))
        .collect();
    Ok(Json(json!({
        "type": "user",
        "id": format!("{:024x}", crate::digests::object_id(&account.user)),
        "name": account.user,
        "fullname": account.user,
        "email": format!("{}@hubsim.invalid", account.user),
        "emailVerified": true,
        "canPay": false,
        "isPro": false,
        "periodEnd": null,
        "avatarUrl": format!("/avatars/{:032x}.svg", crate::digests::object_id(&account.user)),
        "billingMode": "postpaid",
        "orgs": orgs,
        "auth": {
            "type": "access_token",
            "accessToken": {
                "createdAt": "2026-01-01T00:00:00.000Z",
                "displayName": "hubsim",
                "role": if account.read_only { "read" } else { "write" },
            },
        },
    }))
    .into_response())
}

/// `GET /{ns}/{name}`: the repo's page, as the Hub serves one to a browser: its id and the files of `main`.
/// It is seen with the caller's rights, so a private repo is a 404 to others, as on the Hub.
pub(super) async fn repo_page(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, HubError> {
    let id = format!("{ns}/{name}");
    let caller = sim.accounts.caller(&headers)?;
    let repos = sim.repos_of(kind);
    let repo = visible_repo(&repos, &id, caller)?;
    let commit = repo.resolve("main").ok_or_else(|| HubError::revision_not_found("main"))?;
    let escape = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
    let files: String = commit.files.keys().map(|f| format!("<li>{}</li>", escape(f))).collect::<Vec<_>>().join("\n");
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{id} · Hub simulator</title></head>\n\
         <body><h1>{id}</h1>\n<p>Commit {sha}</p>\n<ul>\n{files}\n</ul></body></html>\n",
        id = escape(&id),
        sha = escape(&commit.sha)
    );
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}
