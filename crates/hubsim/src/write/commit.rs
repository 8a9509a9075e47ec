//! Serves preupload and the commit. A commit is NDJSON (`header`, `file`, `lfsFile`, `deletedFile`,
//! `deletedFolder`) or the legacy JSON form. `parentCommit` is checked, and `create_pr=1` opens `refs/pr/N`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::{ForPullRequest, caller, head_for, now, proposable_repo, repo_mut, store_bytes, uploadable_repo};
use crate::Shared;
use crate::error::HubError;
use crate::ingest::is_lfs_path;
use crate::model::{Commit, FileEntry, PullRequest, Storage};

/// `POST /api/models/{ns}/{name}/preupload/{rev}[?create_pr=1]`: which files go to LFS, and which are already
/// there. A non-writer must ask for a pull request.
pub(crate) async fn preupload(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name, revision)): Path<(String, String, String)>,
    Query(query): Query<ForPullRequest>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let id = format!("{ns}/{name}");
    let repos = sim.repos_of(kind);
    let repo = if revision.starts_with("refs/pr/") {
        proposable_repo(&repos, &id, caller)?
    } else {
        uploadable_repo(&repos, &id, caller, query.asked())?
    };
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

/// One parsed commit operation.
enum Op {
    Add { path: String, entry: FileEntry },
    Delete { path: String },
    DeleteFolder { path: String },
}

/// `POST /api/models/{ns}/{name}/commit/{rev}[?create_pr=1]`: NDJSON (`header`, `file`, `lfsFile`,
/// `deletedFile`, `deletedFolder`) or the legacy JSON form. `parentCommit` is checked (412).
pub(crate) async fn commit(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name, revision)): Path<(String, String, String)>,
    Query(query): Query<ForPullRequest>,
    body: String,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let id = format!("{ns}/{name}");
    let create_pr = query.asked();
    // Anyone signed in may open or add to a pull request. Branches are the owner's.
    if revision.starts_with("refs/pr/") {
        proposable_repo(&sim.repos_of(kind), &id, caller)?;
    } else {
        uploadable_repo(&sim.repos_of(kind), &id, caller, create_pr)?;
    }
    let lines = parse_commit_body(&body)?;
    let mut summary = String::from("Upload files");
    let mut parent_commit = None;
    let mut ops = Vec::new();
    let mut card = None;
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
                if path == "README.md" {
                    card = Some(String::from_utf8_lossy(&bytes).into_owned());
                }
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
    let mut repos = sim.repos_of_mut(kind);
    let repo = repo_mut(&mut repos, &id)?;
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
    let head_sha = head.sha.clone();
    let commit = Commit::new(Some(head.sha.clone()), files, summary.clone(), now());
    let sha = commit.sha.clone();
    // As on the Hub, the card's front matter sets the library, licence and tags. Only a main-branch card
    // does.
    if let Some(card) = card.as_deref().filter(|_| !create_pr && revision == "main") {
        crate::card::apply(&mut repo.meta, card, false);
    }
    repo.commits.insert(sha.clone(), commit);
    let mut body = json!({ "success": true, "commitOid": sha, "commitUrl": format!("{}/commit/{sha}", kind.url(&sim.base_url, &id)), "hookOutput": "" });
    if create_pr {
        let num = repo.pull_requests.len() as u64 + 1;
        let author = caller.map(|a| a.user.clone()).unwrap_or_default();
        repo.pull_requests.push(PullRequest::opened(num, summary, author, head_sha.clone()));
        repo.refs.insert(format!("refs/pr/{num}"), sha.clone());
        // Send the Hub's keys only (huggingface_hub's `CommitInfo` reads `pullRequestUrl`). The answer has no
        // number of its own.
        body["pullRequestUrl"] = format!("{}/discussions/{num}", kind.url(&sim.base_url, &id)).into();
    } else {
        let branch = if repo.refs.contains_key(&revision) { revision.clone() } else { "main".to_owned() };
        repo.refs.insert(branch, sha.clone());
    }
    let (private, main) = (repo.meta.private, repo.head().map(|c| c.sha.clone()));
    let moved =
        if create_pr { format!("refs/pr/{}", repo.pull_requests.len()) } else { format!("refs/heads/{revision}") };
    drop(repos);
    let refs = crate::json_ref(&moved, (!create_pr).then_some(head_sha.as_str()), &sha);
    sim.webhooks.send_for(kind, ("repo.content", "update"), &id, private, main.as_deref(), refs);
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
