//! The write API: repositories, settings, preupload, Git LFS batch and uploads, and the NDJSON commit.

use std::collections::BTreeMap;
use std::path::PathBuf;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::auth::{Account, can_see, can_write};
use super::error::HubError;
use super::ingest::is_lfs_path;
use super::model::{Commit, FileEntry, PullRequest, Repo, RepoMeta, Storage};
use super::{Shared, Sim};
use crate::hashing::finish_hex;

/// The `.gitattributes` a new repository starts with, as on the Hub.
const GITATTRIBUTES: &str = "*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n*.gguf filter=lfs diff=lfs merge=lfs -text\n*.npz filter=lfs diff=lfs merge=lfs -text\n*.pt filter=lfs diff=lfs merge=lfs -text\n";

fn caller<'a>(sim: &'a Sim, headers: &HeaderMap) -> Result<Option<&'a Account>, HubError> {
    sim.accounts.caller(headers)
}

fn now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    crate::time::format_utc_millis(secs)
}

/// Stores bytes in the content store; returns their sha256.
async fn store_bytes(sim: &Sim, bytes: &[u8]) -> Result<String, HubError> {
    let sha256 = finish_hex(Sha256::new_with_prefix(bytes));
    let path = sim.store.join("blobs").join(&sha256);
    let write = async {
        tokio::fs::create_dir_all(sim.store.join("blobs")).await?;
        tokio::fs::write(&path, bytes).await
    };
    write.await.map_err(|e| HubError::bad_request(format!("store: {e}")))?;
    sim.add_blob(sha256.clone(), path);
    Ok(sha256)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CreateRepo {
    name: String,
    organization: Option<String>,
    #[serde(rename = "type")]
    repo_type: Option<String>,
    private: Option<bool>,
    visibility: Option<String>,
}

/// `POST /api/repos/create`: 409 when it exists (with its `url`, as the Hub answers).
pub(super) async fn create_repo(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Json(req): Json<CreateRepo>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let account = caller.ok_or_else(HubError::auth_required)?;
    if req.repo_type.as_deref().is_some_and(|t| t != "model") {
        return Err(HubError::bad_request("the simulator serves model repositories only"));
    }
    let namespace = req.organization.clone().unwrap_or_else(|| account.user.clone());
    can_write(&namespace, caller)?;
    let id = format!("{namespace}/{}", req.name);
    let url = format!("{}/{id}", sim.base_url);
    if sim.repos().contains_key(&id) {
        let body = json!({ "error": "You already created this model repo", "url": url });
        return Ok((StatusCode::CONFLICT, Json(body)).into_response());
    }
    let sha256 = store_bytes(&sim, GITATTRIBUTES.as_bytes()).await?;
    let mut files = BTreeMap::new();
    let entry = FileEntry::new(GITATTRIBUTES.len() as u64, sha256, Storage::Regular, Some(GITATTRIBUTES.as_bytes()));
    files.insert(".gitattributes".to_owned(), entry);
    let private = req.private.unwrap_or(false) || req.visibility.as_deref() == Some("private");
    let meta = RepoMeta { private, ..RepoMeta::default() };
    let first = Commit::new(None, files, "initial commit".into(), now());
    let mut repos = sim.repos_mut();
    if repos.contains_key(&id) {
        return Err(HubError::conflict("You already created this model repo"));
    }
    repos.insert(id.clone(), Repo::new(id.clone(), meta, first));
    tracing::info!(repo.id = %id, private, "repository created");
    Ok(Json(json!({ "id": id, "name": id, "url": url })).into_response())
}

#[derive(Deserialize)]
pub(super) struct DeleteRepo {
    name: String,
    organization: Option<String>,
}

/// `DELETE /api/repos/delete`.
pub(super) async fn delete_repo(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Json(req): Json<DeleteRepo>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let account = caller.ok_or_else(HubError::auth_required)?;
    let namespace = req.organization.clone().unwrap_or_else(|| account.user.clone());
    can_write(&namespace, caller)?;
    let id = format!("{namespace}/{}", req.name);
    match sim.repos_mut().remove(&id) {
        Some(_) => Ok(StatusCode::OK.into_response()),
        None => Err(HubError::repo_not_found(&id, true)),
    }
}

/// `PUT /api/models/{ns}/{name}/settings`: `private`/`visibility`, `gated`.
pub(super) async fn settings(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    can_write(&ns, caller)?;
    let id = format!("{ns}/{name}");
    let mut repos = sim.repos_mut();
    let repo = repos.get_mut(&id).ok_or_else(|| HubError::repo_not_found(&id, true))?;
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
    Ok(Json(json!({ "private": repo.meta.private, "gated": repo.meta.gated.to_json() })).into_response())
}

/// `POST /api/validate-yaml`: the simulator accepts every card.
pub(super) async fn validate_yaml(Json(_body): Json<Value>) -> Response {
    Json(json!({ "errors": [], "warnings": [] })).into_response()
}

/// The commit a write to `revision` builds on.
fn head_for<'a>(repo: &'a Repo, revision: &str) -> Result<&'a Commit, HubError> {
    repo.resolve(revision).ok_or_else(|| HubError::revision_not_found(revision))
}

fn writable_repo<'a>(
    repos: &'a BTreeMap<String, Repo>,
    id: &str,
    caller: Option<&Account>,
) -> Result<&'a Repo, HubError> {
    let ns = id.split_once('/').map_or(id, |(ns, _)| ns);
    let repo = repos.get(id).ok_or_else(|| HubError::repo_not_found(id, caller.is_some()))?;
    can_see(repo, caller)?;
    can_write(ns, caller)?;
    Ok(repo)
}

/// `POST /api/models/{ns}/{name}/preupload/{rev}`: which files go to LFS, and which are already there.
pub(super) async fn preupload(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((ns, name, revision)): Path<(String, String, String)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let id = format!("{ns}/{name}");
    let repos = sim.repos();
    let repo = writable_repo(&repos, &id, caller)?;
    let head = head_for(repo, &revision).or_else(|_| head_for(repo, "main"))?;
    let files = body["files"].as_array().cloned().unwrap_or_default();
    let answers: Vec<Value> = files
        .iter()
        .map(|f| {
            let path = f["path"].as_str().unwrap_or_default();
            let size = f["size"].as_u64().unwrap_or(0);
            let lfs = size > 0 && is_lfs_path(path, size);
            let mut answer =
                json!({ "path": path, "uploadMode": if lfs { "lfs" } else { "regular" }, "shouldIgnore": false });
            if let Some(existing) = head.files.get(path) {
                answer["oid"] =
                    if existing.is_lfs() { existing.sha256.clone() } else { existing.git_oid.clone() }.into();
            }
            answer
        })
        .collect();
    Ok(Json(json!({ "files": answers, "commitOid": head.sha })).into_response())
}

/// `POST /{ns}/{name}.git/info/lfs/objects/batch`: Git LFS negotiation. Xet is chosen for clients that offer it
/// (see [`super::xet`]); others get `basic` (or `multipart` above one part) actions on the simulator's storage.
pub(super) async fn lfs_batch(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((ns, name_git)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let name = name_git.strip_suffix(".git").unwrap_or(&name_git);
    let id = format!("{ns}/{name}");
    writable_repo(&sim.repos(), &id, caller)?;
    let transfers: Vec<&str> = body["transfers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_else(|| vec!["basic"]);
    let multipart = transfers.contains(&"multipart");
    let mut objects = Vec::new();
    for o in body["objects"].as_array().cloned().unwrap_or_default() {
        let oid = o["oid"].as_str().unwrap_or_default().to_owned();
        let size = o["size"].as_u64().unwrap_or(0);
        if sim.content_size(&oid) == Some(size) {
            objects.push(json!({ "oid": oid, "size": size }));
            continue;
        }
        let verify = json!({ "href": format!("{}/_lfs/verify/{oid}", sim.storage_url) });
        let part_size = sim.config.lfs_part_size.max(1);
        let upload = if multipart && size > part_size {
            let mut header = serde_json::Map::new();
            header.insert("chunk_size".into(), part_size.to_string().into());
            for part in 1..=size.div_ceil(part_size) {
                header.insert(format!("{part:05}"), format!("{}/_lfs/part/{oid}/{part}", sim.storage_url).into());
            }
            json!({ "href": format!("{}/_lfs/complete/{oid}", sim.storage_url), "header": header })
        } else {
            json!({ "href": format!("{}/_lfs/upload/{oid}", sim.storage_url) })
        };
        objects.push(json!({ "oid": oid, "size": size, "authenticated": true, "actions": { "upload": upload, "verify": verify } }));
    }
    if sim.xet.is_some() && transfers.contains(&"xet") {
        // Xet-aware clients upload to the CAS; the objects need no actions here.
        let objects: Vec<Value> = objects.iter().map(|o| json!({ "oid": o["oid"], "size": o["size"] })).collect();
        let mut response =
            Json(json!({ "transfer": "xet", "objects": objects, "hash_algo": "sha256" })).into_response();
        response.headers_mut().insert("content-type", HeaderValue::from_static("application/vnd.git-lfs+json"));
        return Ok(response);
    }
    let transfer = if multipart { "multipart" } else { "basic" };
    let mut response = Json(json!({ "transfer": transfer, "objects": objects, "hash_algo": "sha256" })).into_response();
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/vnd.git-lfs+json"));
    Ok(response)
}

/// Streams a request body to a file, returning its size and sha256.
async fn receive(sim: &Sim, body: Body, path: &std::path::Path) -> Result<(u64, String), HubError> {
    let io = |e: std::io::Error| HubError::bad_request(format!("upload: {e}"));
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(io)?;
    }
    let mut file = tokio::fs::File::create(path).await.map_err(io)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| HubError::bad_request(format!("upload interrupted: {e}")))?;
        hasher.update(&chunk);
        size += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(io)?;
    }
    file.flush().await.map_err(io)?;
    sim.counters.update(|c| c.lfs_bytes_received += size);
    Ok((size, finish_hex(hasher)))
}

/// Moves a received file into the content store if its hash is the one announced.
async fn admit_object(sim: &Sim, temp: PathBuf, oid: &str, sha256: &str) -> Result<(), HubError> {
    if sha256 != oid {
        let _ = tokio::fs::remove_file(&temp).await;
        return Err(HubError::bad_request(format!("content hashes to {sha256}, not {oid}")));
    }
    let dest = sim.store.join("blobs").join(oid);
    tokio::fs::create_dir_all(sim.store.join("blobs")).await.map_err(|e| HubError::bad_request(e.to_string()))?;
    tokio::fs::rename(&temp, &dest).await.map_err(|e| HubError::bad_request(e.to_string()))?;
    sim.add_blob(oid.to_owned(), dest);
    Ok(())
}

/// `PUT /_lfs/upload/{oid}`: a basic-transfer upload.
pub(super) async fn lfs_upload_basic(
    State(sim): State<Shared>,
    Path(oid): Path<String>,
    body: Body,
) -> Result<Response, HubError> {
    let temp = sim.store.join("incoming").join(format!("{oid}.{}", std::process::id()));
    let (_, sha256) = receive(&sim, body, &temp).await?;
    admit_object(&sim, temp, &oid, &sha256).await?;
    Ok(StatusCode::OK.into_response())
}

/// `PUT /_lfs/part/{oid}/{part}`: one part of a multipart upload; answers its `ETag`.
pub(super) async fn lfs_upload_part(
    State(sim): State<Shared>,
    Path((oid, part)): Path<(String, u64)>,
    body: Body,
) -> Result<Response, HubError> {
    let path = sim.store.join("parts").join(&oid).join(format!("{part:05}"));
    let (_, sha256) = receive(&sim, body, &path).await?;
    let mut response = StatusCode::OK.into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", &sha256[..32])) {
        response.headers_mut().insert("etag", v);
    }
    Ok(response)
}

#[derive(Deserialize)]
pub(super) struct CompleteMultipart {
    oid: String,
    parts: Vec<Part>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    part_number: u64,
    #[allow(dead_code)]
    etag: String,
}

/// `POST /_lfs/complete/{oid}`: joins the parts, in the order given, and checks the hash.
pub(super) async fn lfs_complete(
    State(sim): State<Shared>,
    Path(oid): Path<String>,
    Json(req): Json<CompleteMultipart>,
) -> Result<Response, HubError> {
    if req.oid != oid {
        return Err(HubError::bad_request("oid mismatch"));
    }
    let dir = sim.store.join("parts").join(&oid);
    let temp = sim.store.join("incoming").join(format!("{oid}.joined"));
    let io = |e: std::io::Error| HubError::bad_request(format!("complete: {e}"));
    tokio::fs::create_dir_all(sim.store.join("incoming")).await.map_err(io)?;
    let mut out = tokio::fs::File::create(&temp).await.map_err(io)?;
    let mut hasher = Sha256::new();
    for part in &req.parts {
        let bytes = tokio::fs::read(dir.join(format!("{:05}", part.part_number))).await.map_err(io)?;
        hasher.update(&bytes);
        out.write_all(&bytes).await.map_err(io)?;
    }
    out.flush().await.map_err(io)?;
    let _ = tokio::fs::remove_dir_all(&dir).await;
    admit_object(&sim, temp, &oid, &finish_hex(hasher)).await?;
    Ok(StatusCode::OK.into_response())
}

/// `POST /_lfs/verify/{oid}`: whether the object is stored with the announced size.
pub(super) async fn lfs_verify(
    State(sim): State<Shared>,
    Path(oid): Path<String>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    match (sim.content_size(&oid), body["size"].as_u64()) {
        (Some(have), Some(want)) if have == want => Ok(StatusCode::OK.into_response()),
        _ => Err(HubError::not_found(format!("object {oid} not stored"))),
    }
}

#[derive(Deserialize, Default)]
pub(super) struct CommitQuery {
    create_pr: Option<String>,
}

/// One parsed commit operation.
enum Op {
    Add { path: String, entry: FileEntry },
    Delete { path: String },
    DeleteFolder { path: String },
}

/// `POST /api/models/{ns}/{name}/commit/{rev}[?create_pr=1]`: NDJSON (`header`, `file`, `lfsFile`,
/// `deletedFile`, `deletedFolder`) or the legacy JSON form; `parentCommit` is checked (412).
pub(super) async fn commit(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((ns, name, revision)): Path<(String, String, String)>,
    Query(query): Query<CommitQuery>,
    body: String,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let id = format!("{ns}/{name}");
    writable_repo(&sim.repos(), &id, caller)?;
    let create_pr = query.create_pr.as_deref().is_some_and(|v| matches!(v, "1" | "true" | "True"));
    let lines = parse_commit_body(&body)?;
    let mut summary = String::from("Upload files");
    let mut parent_commit = None;
    let mut ops = Vec::new();
    for (key, value) in lines {
        match key.as_str() {
            "header" => {
                summary = value["summary"].as_str().unwrap_or(&summary).to_owned();
                parent_commit = value["parentCommit"].as_str().map(str::to_owned);
            }
            "file" => {
                let path = value["path"].as_str().ok_or_else(|| HubError::bad_request("file without path"))?.to_owned();
                let content = value["content"].as_str().unwrap_or_default();
                let bytes = match value["encoding"].as_str() {
                    Some("base64") => {
                        BASE64.decode(content).map_err(|e| HubError::bad_request(format!("{path}: {e}")))?
                    }
                    _ => content.as_bytes().to_vec(),
                };
                let sha256 = store_bytes(&sim, &bytes).await?;
                let storage = if is_lfs_path(&path, bytes.len() as u64) { Storage::Lfs } else { Storage::Regular };
                let entry = FileEntry::new(bytes.len() as u64, sha256, storage, Some(&bytes));
                ops.push(Op::Add { path, entry });
            }
            "lfsFile" => {
                let path =
                    value["path"].as_str().ok_or_else(|| HubError::bad_request("lfsFile without path"))?.to_owned();
                let oid = value["oid"].as_str().unwrap_or_default().to_owned();
                let size = value["size"].as_u64().unwrap_or(0);
                let storage =
                    sim.lfs_storage(&oid, size).await.map_err(|e| HubError::bad_request(e.to_string()))?.ok_or_else(
                        || HubError::bad_request(format!("{path}: LFS object {oid} ({size} bytes) was never uploaded")),
                    )?;
                ops.push(Op::Add { path, entry: FileEntry::new(size, oid, storage, None) });
            }
            "deletedFile" | "deletedEntry" => {
                let path = value["path"].as_str().unwrap_or_default().to_owned();
                ops.push(Op::Delete { path });
            }
            "deletedFolder" => {
                let path = value["path"].as_str().unwrap_or_default().trim_end_matches('/').to_owned();
                ops.push(Op::DeleteFolder { path });
            }
            other => return Err(HubError::bad_request(format!("unknown commit operation `{other}`"))),
        }
    }
    let mut repos = sim.repos_mut();
    let repo = repos.get_mut(&id).ok_or_else(|| HubError::repo_not_found(&id, true))?;
    let target = if create_pr { "main" } else { revision.as_str() };
    let head = head_for(repo, target)?;
    if let Some(parent) = parent_commit.as_deref()
        && parent != head.sha
    {
        return Err(HubError::stale_parent());
    }
    let mut files = head.files.clone();
    for op in ops {
        match op {
            Op::Add { path, entry } => {
                files.insert(path, entry);
            }
            Op::Delete { path } => {
                files.remove(&path);
            }
            Op::DeleteFolder { path } => files.retain(|p, _| !p.starts_with(&format!("{path}/"))),
        }
    }
    let commit = Commit::new(Some(head.sha.clone()), files, summary.clone(), now());
    let sha = commit.sha.clone();
    repo.commits.insert(sha.clone(), commit);
    let mut body = json!({ "success": true, "commitOid": sha, "commitUrl": format!("{}/{id}/commit/{sha}", sim.base_url), "hookOutput": "" });
    if create_pr {
        let num = repo.pull_requests.len() as u64 + 1;
        repo.pull_requests.push(PullRequest { num, title: summary, open: true });
        repo.refs.insert(format!("refs/pr/{num}"), sha.clone());
        let pr_url = format!("{}/{id}/discussions/{num}", sim.base_url);
        // huggingface_hub reads `pullRequestUrl`; hf-hub reads `prUrl` and `prNum`.
        body["pullRequestUrl"] = pr_url.clone().into();
        body["prUrl"] = pr_url.into();
        body["prNum"] = num.into();
    } else {
        let branch = if repo.refs.contains_key(&revision) { revision.clone() } else { "main".to_owned() };
        repo.refs.insert(branch, sha.clone());
    }
    tracing::info!(repo.id = %id, commit = %sha, create_pr, "commit");
    Ok(Json(body).into_response())
}

/// NDJSON lines as `(key, value)`, or the legacy JSON object translated to the same.
fn parse_commit_body(body: &str) -> Result<Vec<(String, Value)>, HubError> {
    let trimmed = body.trim_start();
    if trimmed.starts_with('{') && !trimmed.contains("\"key\"") {
        let v: Value = serde_json::from_str(trimmed).map_err(|e| HubError::bad_request(format!("commit body: {e}")))?;
        let mut out =
            vec![("header".to_owned(), json!({ "summary": v["summary"], "parentCommit": v["parentCommit"] }))];
        for (list, key) in [("files", "file"), ("lfsFiles", "lfsFile"), ("deletedEntries", "deletedFile")] {
            for item in v[list].as_array().cloned().unwrap_or_default() {
                out.push((key.to_owned(), item));
            }
        }
        return Ok(out);
    }
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let v: Value =
                serde_json::from_str(line).map_err(|e| HubError::bad_request(format!("commit line: {e}")))?;
            let key = v["key"].as_str().ok_or_else(|| HubError::bad_request("commit line without key"))?.to_owned();
            Ok((key, v["value"].clone()))
        })
        .collect()
}

/// `POST /api/models/{ns}/{name}/discussions` with `pullRequest: true`: opens `refs/pr/N` at `main`'s head
/// (what `upload_folder(create_pr=True)` does before committing to that ref).
pub(super) async fn create_discussion(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let id = format!("{ns}/{name}");
    writable_repo(&sim.repos(), &id, caller)?;
    if !body["pullRequest"].as_bool().unwrap_or(false) {
        return Err(HubError::bad_request("the simulator only opens pull requests"));
    }
    let title = body["title"].as_str().unwrap_or("Pull request").to_owned();
    let mut repos = sim.repos_mut();
    let repo = repos.get_mut(&id).ok_or_else(|| HubError::repo_not_found(&id, true))?;
    let head = head_for(repo, "main")?.sha.clone();
    let num = repo.pull_requests.len() as u64 + 1;
    repo.pull_requests.push(PullRequest { num, title, open: true });
    repo.refs.insert(format!("refs/pr/{num}"), head);
    Ok(Json(discussion_json(&sim, repo, num)).into_response())
}

/// `GET /api/models/{ns}/{name}/discussions/{num}`.
pub(super) async fn get_discussion(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path((ns, name, num)): Path<(String, String, u64)>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let id = format!("{ns}/{name}");
    let repos = sim.repos();
    let repo = super::read::visible_repo(&repos, &id, caller)?;
    if !repo.pull_requests.iter().any(|p| p.num == num) {
        return Err(HubError::not_found(format!("no discussion #{num}")));
    }
    Ok(Json(discussion_json(&sim, repo, num)).into_response())
}

fn discussion_json(sim: &Sim, repo: &Repo, num: u64) -> Value {
    let pr = repo.pull_requests.iter().find(|p| p.num == num);
    let head = repo.refs.get(&format!("refs/pr/{num}")).cloned().unwrap_or_default();
    let base = repo.refs.get("main").cloned().unwrap_or_default();
    json!({
        "num": num,
        "title": pr.map(|p| p.title.clone()).unwrap_or_default(),
        "status": if pr.is_some_and(|p| p.open) { "open" } else { "closed" },
        "isPullRequest": true,
        "createdAt": now(),
        "author": { "name": repo.namespace() },
        "repo": { "name": repo.id, "type": "model" },
        "events": [],
        "changes": { "base": base, "mergeCommitId": null },
        "filesWithConflicts": [],
        "headRef": head,
        "url": format!("{}/{}/discussions/{num}", sim.base_url, repo.id),
    })
}
