//! Collections, as the Hub's API serves them to `huggingface_hub` (`list_collections`, `get_collection`,
//! `create_collection`, `update_collection_metadata`, `delete_collection`, `add_collection_item`,
//! `delete_collection_item`).
//!
//! Each rule here is as on the Hub. A slug names a collection: `namespace/title-words-<24 hex id>`. Its title
//! is unique in its namespace; creating it again answers 409 with the existing slug. A private collection
//! exists only for its owners. An item is a repo the caller can see, and it is added once; adding it again
//! answers 409. Each caller sees an item only while that caller can still see the repo. So a repo made
//! private or deleted drops out of what others read, without the collection changing. A listing cuts each
//! collection's items to four and pages by `Link`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Shared;
use super::auth::{Account, can_see, can_write};
use super::error::HubError;
use super::kind::RepoKind;
use super::query::Params;

/// Items a listing shows of each collection, as on the Hub.
const LISTED_ITEMS: usize = 4;
/// Titles longer than this are refused, as on the Hub.
const MAX_TITLE: usize = 60;

/// Every collection, by id.
#[derive(Debug, Default)]
pub struct Collections {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Ids handed out so far (collections and items share the counter, as object ids do).
    issued: u64,
    by_id: BTreeMap<String, Collection>,
}

#[derive(Debug, Clone)]
struct Collection {
    id: String,
    namespace: String,
    title: String,
    description: Option<String>,
    private: bool,
    theme: String,
    position: u64,
    last_updated: String,
    items: Vec<Item>,
}

#[derive(Debug, Clone)]
struct Item {
    object_id: String,
    kind: RepoKind,
    repo_id: String,
    note: Option<String>,
}

impl Inner {
    fn issue(&mut self) -> String {
        self.issued += 1;
        // Object ids are 24 hex digits on the Hub.
        format!("6{:023x}", self.issued)
    }

    /// The collection `slug` names, if its id exists under that namespace.
    fn find(&self, namespace: &str, rest: &str) -> Option<&Collection> {
        let id = rest.rsplit('-').next()?;
        self.by_id.get(id).filter(|c| c.namespace.eq_ignore_ascii_case(namespace))
    }

    fn find_mut(&mut self, namespace: &str, rest: &str) -> Option<&mut Collection> {
        let id = rest.rsplit('-').next()?;
        self.by_id.get_mut(id).filter(|c| c.namespace.eq_ignore_ascii_case(namespace))
    }
}

impl Collections {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lists the repos that `slug` holds as items, whoever could see them. Tests and the counters read it.
    pub fn items_of(&self, slug: &str) -> Option<Vec<String>> {
        let (namespace, rest) = slug.split_once('/')?;
        self.lock().find(namespace, rest).map(|c| c.items.iter().map(|i| i.repo_id.clone()).collect())
    }
}

/// Turns the words of a title into a slug's: lower case, with each run of anything else as one `-`.
fn words(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_matches('-');
    if trimmed.is_empty() { "collection".to_owned() } else { trimmed.to_owned() }
}

fn slug_of(c: &Collection) -> String {
    format!("{}/{}-{}", c.namespace, words(&c.title), c.id)
}

fn owns(caller: Option<&Account>, namespace: &str) -> bool {
    caller.is_some_and(|a| a.namespaces.contains(namespace))
}

/// The collection as `caller` sees it. Returns `None` if it is private and not theirs. Items they cannot see
/// are left out.
fn view(sim: &Shared, c: &Collection, caller: Option<&Account>, listed: bool) -> Option<Value> {
    if c.private && !owns(caller, &c.namespace) {
        return None;
    }
    let visible: Vec<&Item> = c
        .items
        .iter()
        .filter(|i| sim.repos_of(i.kind).get(&i.repo_id).is_some_and(|r| can_see(r, caller).is_ok()))
        .collect();
    let items: Vec<Value> = visible
        .iter()
        .enumerate()
        .take(if listed { LISTED_ITEMS } else { usize::MAX })
        .map(|(position, i)| item_json(sim, i, position))
        .collect();
    let mut out = json!({
        "slug": slug_of(c),
        "title": c.title,
        "description": c.description,
        "gating": false,
        "owner": account_json(sim, &c.namespace),
        "items": items,
        "lastUpdated": c.last_updated,
        "private": c.private,
        "theme": c.theme,
        "upvotes": 0,
        "isUpvotedByUser": false,
    });
    // A listing's entries carry no position, since the client numbers them itself and refuses one given. They
    // carry no share link either. One collection's answer has both.
    if !listed && let Some(map) = out.as_object_mut() {
        map.insert("position".into(), json!(c.position));
        map.insert("shareUrl".into(), json!(format!("{}/collections/{}", sim.base_url, slug_of(c))));
    }
    Some(out)
}

/// A user or organisation as a collection names its owner (and a model item its author).
fn account_json(sim: &Shared, name: &str) -> Value {
    let id = crate::digests::object_id(name);
    json!({
        "_id": format!("{id:024x}"),
        "avatarUrl": format!("/avatars/{id:032x}.svg"),
        "fullname": name,
        "name": name,
        "type": if sim.accounts.is_user(name) { "user" } else { "org" },
        "followerCount": 0,
        "isHf": false,
        "isHfAdmin": false,
        "isMod": false,
        "isUserFollowing": false,
    })
}

/// One item as the Hub shows it in a collection: the repo's own listing fields, its place, and its note only
/// when it has one. It is keyed as the recorded answers of huggingface.js's `collection-info.spec.ts`.
fn item_json(sim: &Shared, i: &Item, position: usize) -> Value {
    let repos = sim.repos_of(i.kind);
    let repo = repos.get(&i.repo_id);
    let kind = match i.kind {
        RepoKind::Model => "model",
        RepoKind::Dataset => "dataset",
    };
    let mut out = json!({
        "_id": i.object_id,
        "id": i.repo_id,
        "type": kind,
        "repoType": kind,
        "position": position,
        "author": crate::digests::namespace_of(&i.repo_id),
        "downloads": repo.map_or(0, |r| r.meta.downloads),
        "likes": repo.map_or(0, |r| r.meta.likes),
        "gated": repo.map_or(json!(false), |r| r.meta.gated.to_json()),
        "private": repo.is_some_and(|r| r.meta.private),
        "isLikedByUser": false,
        "lastModified": repo.and_then(|r| r.head()).map(|c| c.date.clone()).unwrap_or_default(),
    });
    match i.kind {
        RepoKind::Model => {
            out["authorData"] = account_json(sim, crate::digests::namespace_of(&i.repo_id));
            out["availableInferenceProviders"] = json!([]);
        }
        RepoKind::Dataset => {
            out["isBenchmark"] = false.into();
            out["isTraces"] = false.into();
            out["datasetsServerInfo"] =
                json!({ "formats": [], "libraries": [], "modalities": [], "numRows": 0, "viewer": "viewer" });
        }
    }
    if let Some(text) = &i.note {
        out["note"] = json!({ "text": text, "html": html_escape(text) });
    }
    out
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A title as the Hub takes it: trimmed, 1 to [`MAX_TITLE`] characters.
fn checked_title(title: &str) -> Result<&str, HubError> {
    let title = title.trim();
    if title.is_empty() || title.chars().count() > MAX_TITLE {
        return Err(HubError::bad_request(format!("title must be 1 to {MAX_TITLE} characters")));
    }
    Ok(title)
}

fn caller<'a>(sim: &'a Shared, headers: &HeaderMap) -> Result<Option<&'a Account>, HubError> {
    sim.accounts.caller(headers)
}

fn no_such(namespace: &str, rest: &str) -> HubError {
    HubError::not_found(format!("Collection {namespace}/{rest} not found"))
}

/// `GET /api/collections?owner=&item=&sort=&limit=&cursor=`.
pub(crate) async fn list(
    State(sim): State<Shared>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let params = Params::parse(raw.as_deref().unwrap_or(""));
    let owners = params.all("owner");
    let items = params.all("item");
    let page_size =
        params.number("limit").map_or(sim.config.page_size, |l| (l as usize).clamp(1, sim.config.page_size));
    let offset = params.number("cursor").unwrap_or(0) as usize;
    let mut chosen: Vec<Collection> = {
        let inner = sim.collections.lock();
        inner
            .by_id
            .values()
            .filter(|c| owners.is_empty() || owners.iter().any(|o| o.eq_ignore_ascii_case(&c.namespace)))
            .filter(|c| {
                items.iter().all(|wanted| {
                    c.items.iter().any(|i| {
                        let prefix = if i.kind == RepoKind::Dataset { "datasets" } else { "models" };
                        format!("{prefix}/{}", i.repo_id).eq_ignore_ascii_case(wanted)
                    })
                })
            })
            .cloned()
            .collect()
    };
    // Sort the newest change first, as `sort=lastModified` does. It is the only order the simulator keeps.
    chosen.sort_by(|a, b| b.last_updated.cmp(&a.last_updated).then_with(|| b.id.cmp(&a.id)));
    let visible: Vec<Value> = chosen.iter().filter_map(|c| view(&sim, c, caller, true)).collect();
    let more = offset.saturating_add(page_size) < visible.len();
    let page: Vec<Value> = visible.into_iter().skip(offset).take(page_size).collect();
    let mut response = Json(page).into_response();
    if more {
        let mut query = params.encode_without("cursor");
        if !query.is_empty() {
            query.push('&');
        }
        let next = format!("<{}/api/collections?{query}cursor={}>; rel=\"next\"", sim.base_url, offset + page_size);
        if let Ok(v) = HeaderValue::from_str(&next) {
            response.headers_mut().insert(header::LINK, v);
        }
    }
    Ok(response)
}

/// `GET /api/collections/{namespace}/{title-words-id}`.
pub(crate) async fn get(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((namespace, rest)): Path<(String, String)>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let found = sim.collections.lock().find(&namespace, &rest).cloned();
    found
        .and_then(|c| view(&sim, &c, caller, false))
        .map(|v| Json(v).into_response())
        .ok_or_else(|| no_such(&namespace, &rest))
}

/// `POST /api/collections` `{title, namespace, description?, private?}`. Answers 409 with the slug if the
/// title exists.
pub(crate) async fn create(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let namespace = body["namespace"].as_str().ok_or_else(|| HubError::bad_request("namespace is required"))?;
    can_write(namespace, caller)?;
    let title = checked_title(body["title"].as_str().unwrap_or_default())?;
    let mut inner = sim.collections.lock();
    if let Some(existing) =
        inner.by_id.values().find(|c| c.namespace.eq_ignore_ascii_case(namespace) && c.title == title)
    {
        let slug = slug_of(existing);
        let body = json!({ "error": "You already have a collection with this title", "slug": slug });
        return Ok((StatusCode::CONFLICT, Json(body)).into_response());
    }
    let id = inner.issue();
    let position = inner.by_id.values().filter(|c| c.namespace.eq_ignore_ascii_case(namespace)).count() as u64;
    let collection = Collection {
        id: id.clone(),
        namespace: namespace.to_owned(),
        title: title.to_owned(),
        description: body["description"].as_str().map(str::to_owned),
        private: body["private"].as_bool().unwrap_or(false),
        theme: "default".into(),
        position,
        last_updated: crate::clock::now(),
        items: Vec::new(),
    };
    inner.by_id.insert(id, collection.clone());
    drop(inner);
    view(&sim, &collection, caller, false)
        .map(|v| Json(v).into_response())
        .ok_or_else(|| HubError::not_found("collection"))
}

/// The collection `namespace/rest` for a change by `caller`, who must own it.
fn writable<'a>(
    inner: &'a mut Inner,
    caller: Option<&Account>,
    namespace: &str,
    rest: &str,
) -> Result<&'a mut Collection, HubError> {
    let visible = inner.find(namespace, rest).is_some_and(|c| !c.private || owns(caller, &c.namespace));
    if !visible {
        return Err(no_such(namespace, rest));
    }
    can_write(namespace, caller)?;
    inner.find_mut(namespace, rest).ok_or_else(|| no_such(namespace, rest))
}

/// `PATCH /api/collections/{slug}` `{title?, description?, private?, position?, theme?}`: answers `{data}`.
pub(crate) async fn update(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((namespace, rest)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let mut inner = sim.collections.lock();
    let id = writable(&mut inner, caller, &namespace, &rest)?.id.clone();
    // A title stays unique in its namespace, renamed or not.
    if let Some(title) = body["title"].as_str().map(checked_title).transpose()? {
        let taken = inner
            .by_id
            .values()
            .any(|o| o.id != id && o.namespace.eq_ignore_ascii_case(&namespace) && o.title == title);
        if taken {
            return Err(HubError::conflict("You already have a collection with this title"));
        }
    }
    let c = inner.by_id.get_mut(&id).ok_or_else(|| no_such(&namespace, &rest))?;
    if let Some(title) = body["title"].as_str() {
        c.title = checked_title(title)?.to_owned();
    }
    if let Some(description) = body["description"].as_str() {
        c.description = Some(description.to_owned());
    }
    if let Some(private) = body["private"].as_bool() {
        c.private = private;
    }
    if let Some(theme) = body["theme"].as_str() {
        c.theme = theme.to_owned();
    }
    if let Some(position) = body["position"].as_u64() {
        c.position = position;
    }
    c.last_updated = crate::clock::now();
    let c = c.clone();
    drop(inner);
    let data = view(&sim, &c, caller, false).ok_or_else(|| no_such(&namespace, &rest))?;
    Ok(Json(json!({ "success": true, "data": data })).into_response())
}

/// `DELETE /api/collections/{slug}`.
pub(crate) async fn delete(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((namespace, rest)): Path<(String, String)>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let mut inner = sim.collections.lock();
    let id = writable(&mut inner, caller, &namespace, &rest)?.id.clone();
    inner.by_id.remove(&id);
    Ok(Json(json!({ "success": true })).into_response())
}

/// `POST /api/collections/{slug}/items` `{item: {type, id}, note?}`. The repo must exist for the caller.
/// Answers 409 if it is in already.
pub(crate) async fn add_item(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((namespace, rest)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let kind = match body["item"]["type"].as_str() {
        Some("model") => RepoKind::Model,
        Some("dataset") => RepoKind::Dataset,
        Some(other) => return Err(HubError::bad_request(format!("the simulator keeps no {other} in collections"))),
        None => return Err(HubError::bad_request("item.type is required")),
    };
    let wanted = body["item"]["id"].as_str().ok_or_else(|| HubError::bad_request("item.id is required"))?;
    // Use the repo's own spelling. Names are case-insensitive, and the collection shows the repo's spelling.
    let repo_id = {
        let repos = sim.repos_of(kind);
        let repo = repos.get(wanted).ok_or_else(|| HubError::repo_not_found(wanted, caller.is_some()))?;
        can_see(repo, caller)?;
        repo.id.clone()
    };
    let note = match &body["note"] {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        _ => return Err(HubError::bad_request("note must be a string")),
    };
    let mut inner = sim.collections.lock();
    let object_id = inner.issue();
    let c = writable(&mut inner, caller, &namespace, &rest)?;
    if c.items.iter().any(|i| i.kind == kind && i.repo_id.eq_ignore_ascii_case(&repo_id)) {
        return Err(HubError::conflict("Item already exists in this collection"));
    }
    c.items.push(Item { object_id, kind, repo_id, note });
    c.last_updated = crate::clock::now();
    let c = c.clone();
    drop(inner);
    view(&sim, &c, caller, false).map(|v| Json(v).into_response()).ok_or_else(|| no_such(&namespace, &rest))
}

/// `DELETE /api/collections/{slug}/items/{item_object_id}`.
pub(crate) async fn delete_item(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((namespace, rest, object_id)): Path<(String, String, String)>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let mut inner = sim.collections.lock();
    let c = writable(&mut inner, caller, &namespace, &rest)?;
    let before = c.items.len();
    c.items.retain(|i| i.object_id != object_id);
    if c.items.len() == before {
        return Err(HubError::not_found(format!("no item {object_id} in this collection")));
    }
    c.last_updated = crate::clock::now();
    Ok(Json(json!({ "success": true })).into_response())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_slug_keeps_the_words_of_the_title_and_ends_with_the_id() {
        assert_eq!(super::words("Aligned MLX: mlx-community"), "aligned-mlx-mlx-community");
        assert_eq!(super::words("***"), "collection");
    }
}
