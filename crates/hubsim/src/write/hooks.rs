//! Serves `/api/settings/webhooks`: the caller's webhooks, created, listed and deleted as on the Hub. The
//! simulator then sends each one the payloads of the repos of the namespaces it watches.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::caller;
use crate::Shared;
use crate::error::HubError;
use crate::webhooks::{Registered, WebhookTarget};

/// The signed-in caller, whose webhooks these are.
fn owner(sim: &Shared, headers: &HeaderMap) -> Result<String, HubError> {
    Ok(caller(sim, headers)?.ok_or_else(HubError::auth_required)?.user.clone())
}

/// `POST /api/settings/webhooks` with `watched`, `url`, `domains`, `secret`.
pub(crate) async fn create(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Result<Response, HubError> {
    let owner = owner(&sim, &headers)?;
    let url = body["url"].as_str().ok_or_else(|| HubError::bad_request("url is required"))?;
    let mut target: WebhookTarget =
        url.parse().map_err(|e: crate::webhooks::NotHttp| HubError::bad_request(e.to_string()))?;
    target.secret = body["secret"].as_str().map(str::to_owned);
    let watched: Vec<(String, String)> = body["watched"]
        .as_array()
        .map(|w| {
            w.iter().filter_map(|i| Some((i["type"].as_str()?.to_owned(), i["name"].as_str()?.to_owned()))).collect()
        })
        .unwrap_or_default();
    if watched.is_empty() {
        return Err(HubError::bad_request("watched must name a user or an organisation"));
    }
    let domains = body["domains"].as_array().map_or_else(
        || vec!["repo".to_owned(), "discussion".to_owned()],
        |d| d.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
    );
    let hook = Registered { id: sim.webhooks.next_id(), owner, target, watched, domains };
    let mut registered = sim.webhooks.registered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let answer = serde_json::json!({ "webhook": hook.to_json() });
    registered.push(hook);
    Ok(Json(answer).into_response())
}

/// `GET /api/settings/webhooks`: the caller's.
pub(crate) async fn list(State(sim): State<Shared>, headers: HeaderMap) -> Result<Response, HubError> {
    let owner = owner(&sim, &headers)?;
    let registered = sim.webhooks.registered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mine: Vec<Value> = registered.iter().filter(|r| r.owner == owner).map(Registered::to_json).collect();
    Ok(Json(mine).into_response())
}

/// `DELETE /api/settings/webhooks/{id}`: one of the caller's.
pub(crate) async fn delete(
    State(sim): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, HubError> {
    let owner = owner(&sim, &headers)?;
    let mut registered = sim.webhooks.registered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let before = registered.len();
    registered.retain(|r| !(r.id == id && r.owner == owner));
    if registered.len() == before {
        return Err(HubError::not_found("no such webhook"));
    }
    Ok(StatusCode::OK.into_response())
}
