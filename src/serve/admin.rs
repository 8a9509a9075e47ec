//! Serves the endpoints that change state, only when `serve` has an admin token. They answer only a request
//! bearing it. The token is compared in constant time and never logged.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::sync::Notify;

use super::extract::ApiPath;
use crate::secret::bearer_matches;
use crate::store::Store;

/// What the admin endpoints act on.
#[derive(Clone)]
pub struct AdminApi {
    pub store: Store,
    /// The admin token.
    pub token: Arc<str>,
    /// Wakes the scheduler for an audit now.
    pub audit_now: Arc<Notify>,
}

/// The routes, to mount in the service.
pub(super) fn router(api: AdminApi) -> axum::Router {
    axum::Router::new()
        .route("/api/admin/audit", post(audit_now))
        .route("/api/admin/jobs/{id}/retry", post(retry_job))
        .with_state(api)
}

fn refused() -> Response {
    let mut refused =
        super::api::api_error(StatusCode::UNAUTHORIZED, "admin token required: Authorization: Bearer <token>");
    refused.headers_mut().insert("www-authenticate", axum::http::HeaderValue::from_static("Bearer"));
    refused
}

/// `POST /api/admin/audit`: start an audit now, after the one running, if any. Two never run at once.
async fn audit_now(State(api): State<AdminApi>, headers: HeaderMap) -> Response {
    if !bearer_matches(&headers, &api.token) {
        return refused();
    }
    // Record the request in the store for whichever replica leads the schedule. Also wake this one, in case
    // it leads.
    if let Err(e) = api.store.request(crate::store::leases::SCHEDULER).await {
        return super::api::failed(e);
    }
    api.audit_now.notify_one();
    tracing::info!("audit requested by an administrator");
    (StatusCode::ACCEPTED, Json(serde_json::json!({ "status": "audit requested" }))).into_response()
}

/// `POST /api/admin/jobs/{id}/retry`: put a failed or skipped job back in the queue, or release one held
/// for the operator.
async fn retry_job(State(api): State<AdminApi>, headers: HeaderMap, ApiPath(id): ApiPath<i64>) -> Response {
    if !bearer_matches(&headers, &api.token) {
        return refused();
    }
    match api.store.retry_job(id, "an administrator (API)").await {
        Ok(None) => super::api::api_error(StatusCode::NOT_FOUND, format!("no job {id}")),
        Ok(Some(false)) => super::api::api_error(
            StatusCode::CONFLICT,
            format!("job {id} is neither failed, skipped nor held for the operator"),
        ),
        Ok(Some(true)) => match api.store.job(id).await {
            Ok(job) => {
                tracing::info!(job.id = id, "job requeued by an administrator");
                Json(job).into_response()
            }
            Err(e) => super::api::failed(e),
        },
        Err(e) => super::api::failed(e),
    }
}
