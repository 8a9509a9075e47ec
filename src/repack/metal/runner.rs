//! The macOS runner protocol. A runner claims a job waiting for the Metal check over HTTP with a token.
//! It fetches the staged output shards and their manifest, never the source, because the check judges the
//! output by the manifest's digests. It runs `verify_mlx.py` on the Metal GPU and posts the record.
//!
//! - `POST /api/verifier/claim` → 200 `{"job_id", "repo", "sha", "files"}`, or 204 when nothing waits.
//! - `GET /api/verifier/jobs/{id}/aligned/{file}` → the staged shard or manifest.
//! - `POST /api/verifier/jobs/{id}/result` with the script's JSON record → 200, or 409 if the lease was lost.
//!
//! Every call needs `Authorization: Bearer <runner token>`, compared in constant time. `X-Runner` names the
//! runner in the job's history. This module holds the runner's side of the protocol and its types.
//! Its [`ApiRendezvous`] is one way of [`crate::repack::metal`]. The service's side is `serve::runner_api`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::job::payload::MlxRecord;
use crate::repack::metal::{Fetch, Rendezvous};

/// A claimed job, as the runner receives it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claim {
    /// The job.
    pub job_id: i64,
    /// The source repo, sent as `repo`, which runners of every version read.
    /// `repo_id`, the API's name, is read too.
    #[serde(alias = "repo_id")]
    pub repo: String,
    /// The source commit.
    pub sha: String,
    /// The staged output's shard file names and its manifest.
    pub files: Vec<String>,
}

/// Why a runner's pass stopped before its record was posted. The job's lease lapses and it is claimed again.
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

/// The runner API as a runner's [`Rendezvous`]: the service at `service`, with the runner token.
pub struct ApiRendezvous {
    /// The service's base URL.
    pub service: String,
    /// The runner token.
    pub token: String,
    /// This runner's name in the jobs' history (`X-Runner`).
    pub runner: String,
    /// The HTTP client.
    pub http: reqwest::Client,
}

impl ApiRendezvous {
    fn call(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        r.bearer_auth(&self.token).header("x-runner", &self.runner)
    }
}

/// Makes an [`ApiRunnerError::Request`] of a failed call to `what`.
fn request(what: &str) -> impl FnOnce(reqwest::Error) -> ApiRunnerError + use<> {
    let what = what.to_owned();
    move |source| ApiRunnerError::Request { what, source }
}

impl Rendezvous for ApiRendezvous {
    type Claimed = Claim;
    type Error = ApiRunnerError;

    fn job_id(claimed: &Claim) -> i64 {
        claimed.job_id
    }

    async fn claim(&self) -> Result<Option<Claim>, ApiRunnerError> {
        let url = format!("{}/api/verifier/claim", self.service);
        let response = self.call(self.http.post(url)).send().await.map_err(request("claim"))?;
        if response.status() == reqwest::StatusCode::NO_CONTENT {
            return Ok(None);
        }
        if !response.status().is_success() {
            return Err(ApiRunnerError::Status { what: "claim".into(), status: response.status() });
        }
        let body = crate::hub::read_capped(response, 1 << 20).await.map_err(ApiRunnerError::Unreadable)?;
        let claim: Claim = serde_json::from_slice(&body).map_err(ApiRunnerError::Malformed)?;
        // The claim names the files to write here: only plain names in the job's own directory.
        if let Some(bad) = claim.files.iter().find(|n| crate::untrusted::check_repo_path(n).is_err() || n.contains('/'))
        {
            return Err(ApiRunnerError::Refused(format!("refusing file name {}", crate::untrusted::quote(bad))));
        }
        if !claim.files.iter().any(|n| n == crate::manifest::MANIFEST_FILE) {
            return Err(ApiRunnerError::Refused("no manifest among the staged files".into()));
        }
        Ok(Some(claim))
    }

    async fn fetch(&self, claim: &Claim, dir: &Path) -> Result<PathBuf, Fetch<ApiRunnerError>> {
        let aligned = dir.join("aligned");
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| Fetch::Unknown(ApiRunnerError::Io { path, source })
        };
        let unknown = |what: &str| {
            let failed = request(what);
            move |e| Fetch::Unknown(failed(e))
        };
        std::fs::create_dir_all(&aligned).map_err(io(&aligned))?;
        for name in &claim.files {
            let url = format!("{}/api/verifier/jobs/{}/aligned/{name}", self.service, claim.job_id);
            let mut r = self.call(self.http.get(&url)).send().await.map_err(unknown(&url))?;
            if !r.status().is_success() {
                return Err(Fetch::Unknown(ApiRunnerError::Status { what: url, status: r.status() }));
            }
            // Streamed to disk: shards run to several GB, more than a runner should hold in memory.
            let path = aligned.join(name);
            let file = crate::safe_fs::create_nofollow(&path).map_err(io(&path))?;
            let mut file = tokio::fs::File::from_std(file);
            while let Some(chunk) = r.chunk().await.map_err(unknown(&url))? {
                file.write_all(&chunk).await.map_err(io(&path))?;
            }
            file.flush().await.map_err(io(&path))?;
        }
        Ok(aligned)
    }

    async fn record(&self, claim: Claim, record: MlxRecord) -> Result<bool, ApiRunnerError> {
        let url = format!("{}/api/verifier/jobs/{}/result", self.service, claim.job_id);
        let posted = self.call(self.http.post(url)).json(&record).send().await.map_err(request("result"))?;
        match posted.status() {
            reqwest::StatusCode::CONFLICT => Ok(false),
            status if status.is_success() => Ok(true),
            status => Err(ApiRunnerError::Status { what: "result".into(), status }),
        }
    }
}
