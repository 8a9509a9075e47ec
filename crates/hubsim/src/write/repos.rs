//! Handles repositories: create, delete, settings, card validation, and pull requests opened as discussions.

use crate::kind::RepoKind;
use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{caller, head_for, now, proposable_repo, repo_mut, store_bytes};
use crate::auth::can_write;
use crate::error::HubError;
use crate::model::{Commit, FileEntry, PullRequest, Repo, RepoMeta, Storage};
use crate::{Shared, Sim};

/// The `.gitattributes` a new repository starts with, as on the Hub.
const GITATTRIBUTES: &str = "*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n*.gguf filter=lfs diff=lfs merge=lfs -text\n*.npz filter=lfs diff=lfs merge=lfs -text\n*.pt filter=lfs diff=lfs merge=lfs -text\n*.parquet filter=lfs diff=lfs merge=lfs -text\n*.arrow filter=lfs diff=lfs merge=lfs -text\n";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateRepo {
    name: String,
    organization: Option<String>,
    #[serde(rename = "type")]
    repo_type: Option<String>,
    private: Option<bool>,
    visibility: Option<String>,
}

/// The namespace a create or delete names (`organization`, else the caller's own), if the caller may write
/// there.
fn writable_namespace(organization: Option<&str>, caller: Option<&crate::auth::Account>) -> Result<String, HubError> {
    let account = caller.ok_or_else(HubError::auth_required)?;
    let namespace = organization.map_or_else(|| account.user.clone(), str::to_owned);
    can_write(&namespace, caller)?;
    Ok(namespace)
}

/// `POST /api/repos/create`. Answers 409 when the repo exists, with its `url`, as the Hub answers.
pub(crate) async fn create_repo(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Json(req): Json<CreateRepo>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let kind = RepoKind::of_type(req.repo_type.as_deref())?;
    let namespace = writable_namespace(req.organization.as_deref(), caller)?;
    let id = format!("{namespace}/{}", req.name);
    let url = kind.url(&sim.base_url, &id);
    let exists = format!("You already created this {} repo", kind.noun());
    if sim.repos_of(kind).contains_key(&id) {
        let body = json!({ "error": exists, "url": url });
        return Ok((StatusCode::CONFLICT, Json(body)).into_response());
    }
    let sha256 = store_bytes(&sim, GITATTRIBUTES.as_bytes()).await?;
    let mut files = BTreeMap::new();
    let entry = FileEntry::new(GITATTRIBUTES.len() as u64, sha256, Storage::Regular, Some(GITATTRIBUTES.as_bytes()));
    files.insert(".gitattributes".to_owned(), entry);
    let private = req.private.unwrap_or(false) || req.visibility.as_deref() == Some("private");
    let meta = RepoMeta { private, ..RepoMeta::default() };
    let first = Commit::new(None, files, "initial commit".into(), now());
    let mut repos = sim.repos_of_mut(kind);
    if repos.contains_key(&id) {
        return Err(HubError::conflict(exists));
    }
    let head = first.sha.clone();
    repos.insert(id.clone(), Repo::new(id.clone(), meta, first));
    drop(repos);
    sim.webhooks.send_for(kind, ("repo", "create"), &id, private, Some(&head), json!({}));
    tracing::info!(repo.id = %id, private, "repository created");
    // As the Hub answers: `id` is the repo's object id (24 hex digits), `name` the repo id.
    let object_id = head.get(..24).unwrap_or(&head).to_owned();
    Ok(Json(json!({ "url": url, "name": id, "id": object_id })).into_response())
}

#[derive(Deserialize)]
pub(crate) struct DeleteRepo {
    name: String,
    organization: Option<String>,
    #[serde(rename = "type")]
    repo_type: Option<String>,
}

/// `DELETE /api/repos/delete`.
pub(crate) async fn delete_repo(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Json(req): Json<DeleteRepo>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let namespace = writable_namespace(req.organization.as_deref(), caller)?;
    let id = format!("{namespace}/{}", req.name);
    let kind = RepoKind::of_type(req.repo_type.as_deref())?;
    let removed = sim.repos_of_mut(kind).remove(&id);
    match removed {
        Some(repo) => {
            sim.webhooks.send_for(kind, ("repo", "delete"), &id, repo.meta.private, None, json!({}));
            // As the Hub answers (the recorded deletion): a plain "OK".
            Ok((StatusCode::OK, "OK").into_response())
        }
        None => Err(HubError::repo_not_found(&id, true)),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MoveRepo {
    from_repo: String,
    to_repo: String,
    #[serde(rename = "type")]
    repo_type: Option<String>,
}

/// `POST /api/repos/move` with `{fromRepo, toRepo, type}`: renames a repo. The caller must be able to write
/// both namespaces. The old name then redirects to the new one. Watchers get a `repo` `move` payload naming
/// the old repo with `movedTo`.
pub(crate) async fn move_repo(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Json(req): Json<MoveRepo>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    if req.repo_type.as_deref().is_some_and(|t| t != "model") {
        return Err(HubError::bad_request("the simulator moves model repositories only"));
    }
    let namespace = |id: &str| id.split_once('/').map(|(ns, _)| ns.to_owned());
    let (Some(from_ns), Some(to_ns)) = (namespace(&req.from_repo), namespace(&req.to_repo)) else {
        return Err(HubError::bad_request("fromRepo and toRepo must be namespace/name"));
    };
    can_write(&from_ns, caller)?;
    can_write(&to_ns, caller)?;
    let mut repos = sim.repos_mut();
    if repos.contains_key(&req.to_repo) {
        return Err(HubError::conflict(format!("{} already exists", req.to_repo)));
    }
    let mut repo = repos.remove(&req.from_repo).ok_or_else(|| HubError::repo_not_found(&req.from_repo, true))?;
    repo.id = req.to_repo.clone();
    let (private, head) = (repo.meta.private, repo.head().map(|c| c.sha.clone()));
    repos.insert(req.to_repo.clone(), repo);
    sim.moves.record(&req.from_repo, &req.to_repo);
    drop(repos);
    let moved = json!({"movedTo": {"name": req.to_repo, "owner": {"id": "0"}}});
    sim.webhooks.send("repo", "move", &req.from_repo, private, head.as_deref(), moved);
    tracing::info!(repo.id = %req.from_repo, to = %req.to_repo, "repository moved");
    Ok(StatusCode::OK.into_response())
}

/// `PUT /api/models/{ns}/{name}/settings`: `private`/`visibility`, `gated`.
pub(crate) async fn settings(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    can_write(&ns, caller)?;
    let id = format!("{ns}/{name}");
    let mut repos = sim.repos_of_mut(kind);
    let repo = repo_mut(&mut repos, &id)?;
    if let Some(p) = body.get("private").and_then(Value::as_bool) {
        repo.meta.private = p;
    }
    if let Some(v) = body.get("visibility").and_then(Value::as_str) {
        repo.meta.private = v != "public";
    }
    if let Some(g) = body.get("gated") {
        repo.meta.gated =
            serde_json::from_value(g.clone()).map_err(|e| HubError::bad_request(format!("gated: {e}")))?;
    }
    tracing::info!(repo.id = %id, private = repo.meta.private, "settings updated");
    let answer = json!({ "private": repo.meta.private, "gated": repo.meta.gated.to_json() });
    let (private, head) = (repo.meta.private, repo.head().map(|c| c.sha.clone()));
    drop(repos);
    let config = json!({"updatedConfig": {"private": private}});
    sim.webhooks.send_for(kind, ("repo.config", "update"), &id, private, head.as_deref(), config);
    Ok(Json(answer).into_response())
}

/// `POST /api/validate-yaml`: the simulator accepts every card.
pub(crate) async fn validate_yaml(Json(_body): Json<Value>) -> Response {
    Json(json!({ "errors": [], "warnings": [] })).into_response()
}

/// `POST /api/models/{ns}/{name}/discussions` with `pullRequest: true`: opens `refs/pr/N` at `main`'s head
/// (what `upload_folder(create_pr=True)` does before committing to that ref).
pub(crate) async fn create_discussion(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let id = format!("{ns}/{name}");
    proposable_repo(&sim.repos_of(kind), &id, caller)?;
    let title = body["title"].as_str().unwrap_or("Pull request").to_owned();
    let mut repos = sim.repos_of_mut(kind);
    let repo = repo_mut(&mut repos, &id)?;
    let num = repo.pull_requests.len() as u64 + 1;
    let author = caller.map(|a| a.user.clone()).unwrap_or_default();
    if body["pullRequest"].as_bool().unwrap_or(false) {
        let head = head_for(repo, "main")?.sha.clone();
        repo.pull_requests.push(PullRequest::opened(num, title, author, head.clone()));
        repo.refs.insert(format!("refs/pr/{num}"), head);
    } else {
        repo.pull_requests.push(PullRequest::discussion(num, title, author));
    }
    Ok(Json(discussion_json(&sim, repo, num)).into_response())
}

/// `GET /api/models/{ns}/{name}/discussions/{num}`.
pub(crate) async fn get_discussion(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name, num)): Path<(String, String, u64)>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let id = format!("{ns}/{name}");
    let repos = sim.repos_of(kind);
    let repo = crate::read::visible_repo(&repos, &id, caller)?;
    if !repo.pull_requests.iter().any(|p| p.num == num) {
        return Err(HubError::not_found(format!("no discussion #{num}")));
    }
    Ok(Json(discussion_json(&sim, repo, num)).into_response())
}

/// What a pull request's `changes.base` names: the branch it targets, not the commit it was built on
/// (huggingface_hub's `get_discussion_details` reads it as `target_branch`).
const TARGET_BRANCH: &str = "refs/heads/main";

fn discussion_json(sim: &Sim, repo: &Repo, num: u64) -> Value {
    let pr = repo.pull_requests.iter().find(|p| p.num == num);
    let head = repo.refs.get(&format!("refs/pr/{num}")).cloned().unwrap_or_default();
    json!({
        "num": num,
        "title": pr.map(|p| p.title.clone()).unwrap_or_default(),
        "status": pr.map_or("closed", PullRequest::status),
        "isPullRequest": pr.is_some_and(|p| p.is_pull_request),
        "createdAt": now(),
        "author": { "name": pr.map(|p| p.author.clone()).unwrap_or_default() },
        "repo": { "name": repo.id, "type": "model" },
        "events": [],
        "changes": { "base": TARGET_BRANCH, "mergeCommitId": null },
        "filesWithConflicts": [],
        "headRef": head,
        "url": format!("{}/{}/discussions/{num}", sim.base_url, repo.id),
    })
}

/// `GET /api/models/{ns}/{name}/discussions`: discussions and pull requests, newest first.
pub(crate) async fn list_discussions(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let repos = sim.repos_of(kind);
    let repo = crate::read::visible_repo(&repos, &format!("{ns}/{name}"), caller)?;
    let items: Vec<Value> = repo.pull_requests.iter().rev().map(|p| discussion_json(&sim, repo, p.num)).collect();
    let closed = repo.pull_requests.iter().filter(|p| !p.open).count();
    Ok(Json(json!({ "discussions": items, "count": items.len(), "start": 0, "numClosedDiscussions": closed }))
        .into_response())
}

/// `POST /api/models/{ns}/{name}/discussions/{num}/status` with `{"status": "open" | "closed"}`: the owner
/// closes or reopens a pull request.
pub(crate) async fn set_discussion_status(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name, num)): Path<(String, String, u64)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    can_write(&ns, caller)?;
    let id = format!("{ns}/{name}");
    let mut repos = sim.repos_of_mut(kind);
    let repo = repo_mut(&mut repos, &id)?;
    let pr = repo
        .pull_requests
        .iter_mut()
        .find(|p| p.num == num)
        .ok_or_else(|| HubError::not_found(format!("no discussion #{num}")))?;
    if pr.merged {
        return Err(HubError::conflict(format!("#{num} is merged")));
    }
    pr.open = body["status"].as_str() != Some("closed");
    let status = pr.status();
    let discussion = discussion_payload(&id, pr);
    let private = repo.meta.private;
    drop(repos);
    sim.webhooks.send("discussion", "update", &id, private, None, discussion);
    // The Hub answers with the status-change event (huggingface_hub's `change_discussion_status` reads it).
    let author = caller.map(|a| a.user.clone()).unwrap_or_default();
    let event = json!({"id": format!("status-{num}"), "type": "status-change", "createdAt": now(),
        "author": {"name": author}, "data": {"status": status}});
    Ok(Json(json!({ "status": status, "newStatus": event })).into_response())
}

/// The `discussion` part of a community payload.
fn discussion_payload(id: &str, pr: &PullRequest) -> Value {
    json!({"discussion": {"num": pr.num, "status": pr.status(), "isPullRequest": pr.is_pull_request, "title": pr.title,
        "author": {"id": "0"}, "url": {"web": format!("/{id}/discussions/{}", pr.num)}}})
}

/// `POST /api/models/{ns}/{name}/discussions/{num}/merge`: the owner merges an open pull request. `main`
/// gets a merge commit: its files with what the pull request changed from its base.
pub(crate) async fn merge_pull_request(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name, num)): Path<(String, String, u64)>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    can_write(&ns, caller)?;
    let id = format!("{ns}/{name}");
    let mut repos = sim.repos_of_mut(kind);
    let repo = repo_mut(&mut repos, &id)?;
    let Some(at) = repo.pull_requests.iter().position(|p| p.num == num && p.open && p.is_pull_request) else {
        return Err(HubError::not_found(format!("no open pull request #{num}")));
    };
    let main = head_for(repo, "main")?;
    let proposed = head_for(repo, &format!("refs/pr/{num}"))?;
    let base = repo.resolve(&repo.pull_requests[at].base).map(|c| c.files.clone()).unwrap_or_default();
    let mut files = main.files.clone();
    for (path, entry) in &proposed.files {
        if base.get(path) != Some(entry) {
            files.insert(path.clone(), entry.clone());
        }
    }
    files.retain(|path, _| proposed.files.contains_key(path) || !base.contains_key(path));
    let parent = main.sha.clone();
    let commit = Commit::new(Some(parent.clone()), files, format!("Merge pull request #{num}"), now());
    let sha = commit.sha.clone();
    repo.commits.insert(sha.clone(), commit);
    repo.refs.insert("main".into(), sha.clone());
    let pr = &mut repo.pull_requests[at];
    (pr.open, pr.merged) = (false, true);
    let discussion = discussion_payload(&id, pr);
    let private = repo.meta.private;
    drop(repos);
    let refs = crate::json_ref("refs/heads/main", Some(&parent), &sha);
    sim.webhooks.send("repo.content", "update", &id, private, Some(&sha), refs);
    sim.webhooks.send("discussion", "update", &id, private, None, discussion);
    tracing::info!(repo.id = %id, pr = num, commit = %sha, "pull request merged");
    Ok(Json(json!({ "status": "merged", "oid": sha })).into_response())
}
