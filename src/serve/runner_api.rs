//! Serves the service's side of the macOS runner protocol. `repack::metal::runner` describes the protocol and
//! the runner. This side answers claims of jobs waiting for the Metal check, serves their staged files, and
//! takes the posted records. `serve` mounts it beside the pages. `hubalign worker --runner-listen` mounts it
//! alone: the same service, with its pages off.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::extract::ApiPath;
use crate::job::payload::MlxRecord;
use crate::repack::metal::runner::Claim;
use crate::secret::bearer_matches;
use crate::store::Store;

/// What the service side needs.
#[derive(Debug)]
pub struct RunnerApi {
    /// The store with the jobs.
    pub store: Store,
    /// The workers' work directory, where jobs stage their files.
    pub work_dir: PathBuf,
    /// The runners' token.
    pub token: String,
    /// How long a runner may take.
    pub lease: Duration,
}

/// The runner's name if it presented the token.
fn authorized(api: &RunnerApi, headers: &HeaderMap) -> Option<String> {
    if !bearer_matches(headers, &api.token) {
        return None;
    }
    Some(headers.get("x-runner").and_then(|v| v.to_str().ok()).unwrap_or("macos-runner").chars().take(64).collect())
}

fn unauthorized() -> Response {
    super::api::api_error(StatusCode::UNAUTHORIZED, "runner token required: Authorization: Bearer <token>")
}

/// The routes, to mount in the service.
pub fn router(api: Arc<RunnerApi>) -> axum::Router {
    axum::Router::new()
        .route("/api/verifier/claim", post(claim))
        .route("/api/verifier/jobs/{id}/{side}/{file}", get(file))
        .route("/api/verifier/jobs/{id}/result", post(result))
        .with_state(api)
}

fn staged(api: &RunnerApi, id: i64) -> PathBuf {
    api.work_dir.join(format!("job-{id}"))
}

async fn claim(State(api): State<Arc<RunnerApi>>, headers: HeaderMap) -> Response {
    let Some(runner) = authorized(&api, &headers) else { return unauthorized() };
    let job = match api.store.claim_metal_job(&runner, api.lease, false).await {
        Ok(Some(job)) => job,
        Ok(None) => return StatusCode::NO_CONTENT.into_response(),
        Err(e) => return super::api::failed(e),
    };
    // List every file the mirror will carry: shards, manifest, config, tokenizer. The runner loads the bundle
    // with mlx-lm as a reader does, and that reads more than the shards.
    let mut files: Vec<String> = std::fs::read_dir(staged(&api, job.id).join("aligned"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| crate::untrusted::check_repo_path(n).is_ok())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    Json(Claim { job_id: job.id, repo: job.repo_id, sha: job.source_sha, files }).into_response()
}

async fn file(
    State(api): State<Arc<RunnerApi>>,
    headers: HeaderMap,
    ApiPath((id, side, name)): ApiPath<(i64, String, String)>,
) -> Response {
    if authorized(&api, &headers).is_none() {
        return unauthorized();
    }
    // Serve only the output. The check judges it by the manifest's digests, so the source never leaves the
    // worker.
    if side != "aligned" || crate::untrusted::check_repo_path(&name).is_err() || name.contains('/') {
        return super::api::api_error(StatusCode::BAD_REQUEST, "no such staged file");
    }
    match tokio::fs::File::open(staged(&api, id).join(side).join(&name)).await {
        Ok(f) => Body::from_stream(tokio_util::io::ReaderStream::new(f)).into_response(),
        Err(_) => super::api::api_error(StatusCode::NOT_FOUND, "no such staged file"),
    }
}

async fn result(
    State(api): State<Arc<RunnerApi>>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<i64>,
    Json(record): Json<MlxRecord>,
) -> Response {
    let Some(runner) = authorized(&api, &headers) else { return unauthorized() };
    match api.store.metal_result(id, &runner, &record).await {
        Ok(true) => StatusCode::OK.into_response(),
        Ok(false) => super::api::api_error(StatusCode::CONFLICT, "this runner does not hold the job"),
        Err(e) => super::api::failed(e),
    }
}
