//! Git LFS's basic transfer, for a Hub without Xet storage: each file's SHA-256 (one read), the batch
//! negotiation, a PUT of the file to the URL it names, and the verify call it may ask for.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::PathBuf;

use super::error::RepackError;
use crate::hashing::Sha256Stream;
use crate::hub::HubClient;
use crate::hub::commit::Stored;

/// Uploads `files` (path in the repo, path here) to `target`'s LFS storage. Returns each file's oid and size,
/// and the bytes sent.
pub async fn upload(
    hub: &HubClient,
    target: crate::hub::repo_ref::RepoRef<'_>,
    files: &[(String, PathBuf)],
) -> Result<(HashMap<String, Stored>, u64), RepackError> {
    let mut stored = HashMap::new();
    for (rel, path) in files {
        let file = path.clone();
        let digest =
            crate::blocking::run("hashing for Git LFS", move || hash(&file)).await.map_err(RepackError::caused_by)?;
        stored.insert(rel.clone(), digest.map_err(|e| RepackError::io(path.display(), e))?);
    }
    let asked: Vec<&Stored> = stored.values().collect();
    let (answers, mut sent) = hub
        .lfs_batch(target, &asked)
        .await
        .map_err(|e| RepackError::hub(format_args!("Git LFS batch for {target}"), e))?;
    for (rel, path) in files {
        let Some(s) = stored.get(rel) else { continue };
        let Some(object) = answers.iter().find(|o| o.oid == s.sha256) else {
            return Err(RepackError::transient(format!("Git LFS batch for {target}: no answer for {rel}")));
        };
        if let Some(error) = &object.error {
            return Err(RepackError::transient(format!("Git LFS batch for {target}: {rel}: {error}")));
        }
        // No actions: the storage already holds it.
        let Some(actions) = &object.actions else { continue };
        let Some(put) = &actions.upload else { continue };
        if put.header.contains_key("chunk_size") {
            let why = format!("Git LFS for {target}: {rel}: the storage asks for a multipart upload");
            return Err(RepackError::permanent(why));
        }
        let headers: Vec<(String, String)> = put.header.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        sent += hub
            .put_file(&put.href, &headers, path)
            .await
            .map_err(|e| RepackError::hub(format_args!("uploading {rel} to {target}"), e))?;
        if let Some(verify) = &actions.verify {
            sent += hub
                .lfs_verify(verify, s)
                .await
                .map_err(|e| RepackError::hub(format_args!("verifying {rel} on {target}"), e))?;
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
