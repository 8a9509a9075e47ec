//! The macOS runner protocol: a job waiting for the Metal check is claimed over HTTP with a token, the runner
//! fetches the staged output shards and their manifest (never the source: the check judges the output by the
//! manifest's digests), runs `verify_mlx.py` on the Metal GPU, and posts the record.
//!
//! - `POST /api/verifier/claim` → 200 `{"job_id", "repo", "sha", "files"}`, or 204 when nothing waits.
//! - `GET /api/verifier/jobs/{id}/aligned/{file}` → the staged shard or manifest.
//! - `POST /api/verifier/jobs/{id}/result` with the script's JSON record → 200, or 409 if the lease was lost.
//!
//! Every call needs `Authorization: Bearer <runner token>`, compared in constant time; `X-Runner` names the
//! runner in the job's history. This is the runner's side (`hubalign verify-runner`) and the protocol's types;
//! the service's side is `serve::runner_api`.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

/// A claimed job, as the runner receives it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claim {
    /// The job.
    pub job_id: i64,
    /// The source repo.
    pub repo: String,
    /// The source commit.
    pub sha: String,
    /// The staged output's shard file names and its manifest.
    pub files: Vec<String>,
}

/// The runner's side: claims one job, fetches its shards, runs the check, posts the record. Returns the job
/// and whether it passed, or `None` when nothing waits.
#[tracing::instrument(name = "metal check", skip_all, fields(runner = %runner))]
pub async fn run_once(
    service: &str,
    token: &str,
    runner: &str,
    python: &Path,
    script: &Path,
    device: &str,
    work: &Path,
) -> Result<Option<(i64, bool)>, String> {
    let http = reqwest::Client::new();
    let auth = |r: reqwest::RequestBuilder| r.bearer_auth(token).header("x-runner", runner);
    let response =
        auth(http.post(format!("{service}/api/verifier/claim"))).send().await.map_err(|e| format!("claim: {e}"))?;
    if response.status() == reqwest::StatusCode::NO_CONTENT {
        return Ok(None);
    }
    if !response.status().is_success() {
        return Err(format!("claim: HTTP {}", response.status()));
    }
    let claim: Claim =
        serde_json::from_slice(&crate::hub::read_capped(response, 1 << 20).await.map_err(|e| e.to_string())?)
            .map_err(|e| format!("claim: {e}"))?;
    // The claim names the files to write here: only plain names in the job's own directory.
    if let Some(bad) = claim.files.iter().find(|n| crate::gate::check_repo_path(n).is_err() || n.contains('/')) {
        return Err(format!("claim: refusing file name {}", crate::gate::quote(bad)));
    }
    let dir = work.join(format!("runner-job-{}", claim.job_id));
    if !claim.files.iter().any(|n| n == crate::manifest::MANIFEST_FILE) {
        return Err("claim: no manifest among the staged files".into());
    }
    let aligned = dir.join("aligned");
    std::fs::create_dir_all(&aligned).map_err(|e| e.to_string())?;
    for name in &claim.files {
        let url = format!("{service}/api/verifier/jobs/{}/aligned/{name}", claim.job_id);
        let mut r = auth(http.get(&url)).send().await.map_err(|e| format!("{url}: {e}"))?;
        if !r.status().is_success() {
            return Err(format!("{url}: HTTP {}", r.status()));
        }
        // Streamed to disk: shards run to several GB, more than a runner should hold in memory.
        let path = aligned.join(name);
        let file = crate::safe_fs::create_nofollow(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut file = tokio::fs::File::from_std(file);
        while let Some(chunk) = r.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            file.write_all(&chunk).await.map_err(|e| format!("{}: {e}", path.display()))?;
        }
        file.flush().await.map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let interpreter = (python.to_owned(), script.to_owned());
    let checked = super::mlx::run_off_executor(interpreter, dir.join("aligned"), device, |_| {}).await;
    let record = match checked {
        Ok(record) => record,
        Err(e) => serde_json::json!({ "ok": false, "device": device, "error": e.to_string() }),
    };
    let _ = std::fs::remove_dir_all(&dir);
    let passed = record["ok"] == true;
    let posted = auth(http.post(format!("{service}/api/verifier/jobs/{}/result", claim.job_id)))
        .json(&record)
        .send()
        .await
        .map_err(|e| format!("result: {e}"))?;
    if !posted.status().is_success() {
        return Err(format!("result: HTTP {}", posted.status()));
    }
    Ok(Some((claim.job_id, passed)))
}
