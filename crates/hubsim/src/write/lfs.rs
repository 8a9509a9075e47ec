//! Serves Git LFS: the batch negotiation, which answers `xet` to clients that offer it, and the basic and
//! multipart upload endpoints on the storage origin.

use std::path::PathBuf;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::{caller, proposable_repo};
use crate::digests::finish_hex;
use crate::error::HubError;
use crate::{Shared, Sim};

/// `POST /{ns}/{name}.git/info/lfs/objects/batch`: Git LFS negotiation. Xet is chosen for clients that offer
/// it (see [`super::xet`]). Others get `basic` actions on the simulator's storage, or `multipart` above one
/// part.
pub(crate) async fn lfs_batch(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name_git)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let caller = caller(&sim, &headers)?;
    let name = name_git.strip_suffix(".git").unwrap_or(&name_git);
    let id = format!("{ns}/{name}");
    proposable_repo(&sim.repos_of(kind), &id, caller)?;
    let transfers: Vec<&str> =
        body["transfers"].as_array().map_or_else(|| vec!["basic"], |a| a.iter().filter_map(Value::as_str).collect());
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
pub(crate) async fn lfs_upload_basic(
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
pub(crate) async fn lfs_upload_part(
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
pub(crate) struct CompleteMultipart {
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
pub(crate) async fn lfs_complete(
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
pub(crate) async fn lfs_verify(
    State(sim): State<Shared>,
    Path(oid): Path<String>,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    match (sim.content_size(&oid), body["size"].as_u64()) {
        (Some(have), Some(want)) if have == want => Ok(StatusCode::OK.into_response()),
        _ => Err(HubError::not_found(format!("object {oid} not stored"))),
    }
}
