//! The read-only JSON API (the schemas of `report --format json`), `/healthz` and `/metrics`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{AppState, internal};

/// `GET /healthz`: the store answers and every scheduler and worker loop is running.
pub(super) async fn healthz(State(state): State<AppState>) -> Response {
    if let Err(e) = state.store.ping().await {
        return (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response();
    }
    let problems = state.health.problems();
    if !problems.is_empty() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", problems.join("\n"))).into_response();
    }
    "ok\n".into_response()
}

/// `GET /api/publishers`: `report --by-publisher`.
pub(super) async fn publishers(State(state): State<AppState>) -> Response {
    crate::report::by_publisher(&state.store).await.map_or_else(internal, |rows| Json(rows).into_response())
}

#[derive(Deserialize)]
pub(super) struct RepoQuery {
    namespace: Option<String>,
}

/// `GET /api/repos[?namespace=NS]`: `report --affected` rows (every audited repo of a namespace when given).
pub(super) async fn repos(State(state): State<AppState>, Query(q): Query<RepoQuery>) -> Response {
    let rows = match &q.namespace {
        Some(ns) => state.store.namespace_repos(ns, i64::MAX, 0).await,
        None => crate::report::affected(&state.store, 0.0).await,
    };
    rows.map_or_else(internal, |rows| Json(rows).into_response())
}

/// `GET /api/repos/{ns}/{name}/shards`: `report --repo`.
pub(super) async fn repo_shards(State(state): State<AppState>, Path((ns, name)): Path<(String, String)>) -> Response {
    crate::report::repo(&state.store, &format!("{ns}/{name}"))
        .await
        .map_or_else(internal, |rows| Json(rows).into_response())
}

/// `GET /api/runs`: the latest audit runs.
pub(super) async fn runs(State(state): State<AppState>) -> Response {
    state.store.runs(50).await.map_or_else(internal, |rows| Json(rows).into_response())
}

/// `GET /api/jobs`: every repack job.
pub(super) async fn jobs(State(state): State<AppState>) -> Response {
    state.store.jobs().await.map_or_else(internal, |rows| Json(rows).into_response())
}
