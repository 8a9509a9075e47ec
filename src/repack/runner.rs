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

use crate::job::payload::MlxRecord;

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

/// Why a runner's pass stopped before its record was posted: the job's lease lapses and it is claimed again.
#[derive(Debug, thiserror::Error)]
pub enum ApiRunnerError {
    /// A request to the service did not complete.
    #[error("{what}: {source}")]
    Request {
        /// The call (`claim`, a file's URL, `result`).
        what: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The service answered with an error status.
    #[error("{what}: HTTP {status}")]
    Status {
        /// The call.
        what: String,
        /// Its status.
        status: reqwest::StatusCode,
    },
    /// The claim could not be read.
    #[error("claim: {0}")]
    Unreadable(#[source] crate::hub::HubError),
    /// The claim is not the protocol's JSON.
    #[error("claim: {0}")]
    Malformed(#[source] serde_json::Error),
    /// The claim names something this runner will not write.
    #[error("claim: {0}")]
    Refused(String),
    /// A staged file could not be written here.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
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
) -> Result<Option<(i64, bool)>, ApiRunnerError> {
    let http = reqwest::Client::new();
    let auth = |r: reqwest::RequestBuilder| r.bearer_auth(token).header("x-runner", runner);
    let request = |what: &str| {
        let what = what.to_owned();
        move |source| ApiRunnerError::Request { what, source }
    };
    let response = auth(http.post(format!("{service}/api/verifier/claim"))).send().await.map_err(request("claim"))?;
    if response.status() == reqwest::StatusCode::NO_CONTENT {
        return Ok(None);
    }
    if !response.status().is_success() {
        return Err(ApiRunnerError::Status { what: "claim".into(), status: response.status() });
    }
    let body = crate::hub::read_capped(response, 1 << 20).await.map_err(ApiRunnerError::Unreadable)?;
    let claim: Claim = serde_json::from_slice(&body).map_err(ApiRunnerError::Malformed)?;
    // The claim names the files to write here: only plain names in the job's own directory.
    if let Some(bad) = claim.files.iter().find(|n| crate::gate::check_repo_path(n).is_err() || n.contains('/')) {
        return Err(ApiRunnerError::Refused(format!("refusing file name {}", crate::gate::quote(bad))));
    }
    let dir = work.join(format!("runner-job-{}", claim.job_id));
    if !claim.files.iter().any(|n| n == crate::manifest::MANIFEST_FILE) {
        return Err(ApiRunnerError::Refused("no manifest among the staged files".into()));
    }
    let aligned = dir.join("aligned");
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ApiRunnerError::Io { path, source }
    };
    std::fs::create_dir_all(&aligned).map_err(io(&aligned))?;
    for name in &claim.files {
        let url = format!("{service}/api/verifier/jobs/{}/aligned/{name}", claim.job_id);
        let mut r = auth(http.get(&url)).send().await.map_err(request(&url))?;
        if !r.status().is_success() {
            return Err(ApiRunnerError::Status { what: url, status: r.status() });
        }
        // Streamed to disk: shards run to several GB, more than a runner should hold in memory.
        let path = aligned.join(name);
        let file = crate::safe_fs::create_nofollow(&path).map_err(io(&path))?;
        let mut file = tokio::fs::File::from_std(file);
        while let Some(chunk) = r.chunk().await.map_err(request(&url))? {
            file.write_all(&chunk).await.map_err(io(&path))?;
        }
        file.flush().await.map_err(io(&path))?;
    }
    let interpreter = (python.to_owned(), script.to_owned());
    let checked = super::mlx::run_off_executor(interpreter, dir.join("aligned"), device, |_| {}).await;
    let record = checked.unwrap_or_else(|e| MlxRecord::failed(device, e.to_string()));
    let _ = std::fs::remove_dir_all(&dir);
    let posted = auth(http.post(format!("{service}/api/verifier/jobs/{}/result", claim.job_id)))
        .json(&record)
        .send()
        .await
        .map_err(request("result"))?;
    if !posted.status().is_success() {
        return Err(ApiRunnerError::Status { what: "result".into(), status: posted.status() });
    }
    Ok(Some((claim.job_id, record.ok)))
}
