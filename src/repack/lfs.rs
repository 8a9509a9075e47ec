//! Git LFS's basic transfer, for a Hub without Xet storage: each file's SHA-256 (one read), the batch
//! negotiation, a PUT of the file to the URL it names, and the verify call it may ask for.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::PathBuf;

use super::error::RepackError;
use super::upload::Stored;
use crate::hashing::Sha256Stream;
use crate::hub::HubClient;

/// Uploads `files` (path in the repo, path here) to `target`'s LFS storage. Returns each file's oid and size,
/// and the bytes sent.
pub async fn upload(
    hub: &HubClient,
    target: &str,
    files: &[(String, PathBuf)],
) -> Result<(HashMap<String, Stored>, u64), RepackError> {
    let mut stored = HashMap::new();
    for (rel, path) in files {
        let file = path.clone();
        let digest = crate::blocking::run("hashing for Git LFS", move || hash(&file))
            .await
            .map_err(|e| RepackError::caused_by(&e))?;
        stored.insert(rel.clone(), digest.map_err(|e| RepackError::io(path.display(), &e))?);
    }
    let objects: Vec<_> = stored.values().map(|s| serde_json::json!({"oid": s.sha256, "size": s.size})).collect();
    let ask =
        serde_json::json!({"operation": "upload", "transfers": ["basic"], "objects": objects, "hash_algo": "sha256"});
    let body = serde_json::to_vec(&ask).map_err(|e| RepackError::permanent(e.to_string()))?;
    let mut sent = body.len() as u64;
    let url = format!("{}/{}.git/info/lfs/objects/batch", hub.endpoint(), crate::gate::encode_path(target));
    let answer = hub
        .post(&url, "application/vnd.git-lfs+json", body)
        .await
        .map_err(|e| RepackError::hub(format_args!("Git LFS batch for {target}"), &e))?;
    let answer: serde_json::Value = serde_json::from_slice(&answer.body)
        .map_err(|e| RepackError::transient(format!("Git LFS batch for {target}: {e}")))?;
    for (rel, path) in files {
        let Some(s) = stored.get(rel) else { continue };
        let objects = answer["objects"].as_array().map(Vec::as_slice).unwrap_or_default();
        let Some(object) = objects.iter().find(|o| o["oid"] == s.sha256.as_str()) else {
            return Err(RepackError::transient(format!("Git LFS batch for {target}: no answer for {rel}")));
        };
        if let Some(error) = object.get("error") {
            return Err(RepackError::transient(format!("Git LFS batch for {target}: {rel}: {error}")));
        }
        // No actions: the storage already holds it.
        let Some(put) = object["actions"]["upload"]["href"].as_str() else { continue };
        let headers: Vec<(String, String)> = object["actions"]["upload"]["header"]
            .as_object()
            .map(|h| h.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        if headers.iter().any(|(k, _)| k == "chunk_size") {
            let why = format!("Git LFS for {target}: {rel}: the storage asks for a multipart upload");
            return Err(RepackError::permanent(why));
        }
        sent += hub
            .put_file(put, &headers, path)
            .await
            .map_err(|e| RepackError::hub(format_args!("uploading {rel} to {target}"), &e))?;
        if let Some(verify) = object["actions"]["verify"]["href"].as_str() {
            let body = serde_json::to_vec(&serde_json::json!({"oid": s.sha256, "size": s.size})).unwrap_or_default();
            sent += body.len() as u64;
            hub.post(verify, "application/vnd.git-lfs+json", body)
                .await
                .map_err(|e| RepackError::hub(format_args!("verifying {rel} on {target}"), &e))?;
        }
    }
    Ok((stored, sent))
}

fn hash(path: &std::path::Path) -> std::io::Result<Stored> {
    let mut file = crate::safe_fs::open_regular(path)?;
    let mut digest = Sha256Stream::default();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        digest.update(&buf[..n]);
        size += n as u64;
    }
    Ok(Stored { sha256: digest.finish_hex(), size })
}
