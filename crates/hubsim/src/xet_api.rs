//! Serves the Hub's Xet endpoints: read and write tokens, and the door to the CAS on the storage origin.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Shared;
use super::auth::can_download;
use super::error::HubError;
use super::read::visible_repo;

/// Tokens last an hour; clients refresh a minute before `exp`.
const TOKEN_SECONDS: u64 = 3600;

fn token_response(sim: &Shared, scope: &str) -> Response {
    let exp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) + TOKEN_SECONDS;
    let token = format!("xet-{scope}-{exp}");
    // hf_xet and hf-hub read the JSON; huggingface_hub's download path reads the headers.
    let mut response = Json(json!({ "accessToken": token, "exp": exp, "casUrl": sim.storage_url })).into_response();
    let h = response.headers_mut();
    for (name, value) in [
        ("x-xet-cas-url", sim.storage_url.clone()),
        ("x-xet-access-token", token),
        ("x-xet-token-expiration", exp.to_string()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    response
}

fn xet_enabled(sim: &Shared) -> Result<(), HubError> {
    sim.xet.as_ref().map(|_| ()).ok_or_else(|| HubError::not_found("Xet storage is disabled on this simulator"))
}

/// `GET /api/models/{ns}/{name}/xet-read-token/{rev}`: for anyone who may download the repo.
pub(super) async fn read_token(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name, _rev)): Path<(String, String, String)>,
) -> Result<Response, HubError> {
    xet_enabled(&sim)?;
    let caller = sim.accounts.caller(&headers)?;
    {
        let repos = sim.repos_of(kind);
        let repo = visible_repo(&repos, &format!("{ns}/{name}"), caller)?;
        can_download(repo, caller)?;
    }
    Ok(token_response(&sim, "read"))
}

/// `GET /api/models/{ns}/{name}/xet-write-token/{rev}[?create_pr=1]`: for the repo's writers. Anyone signed
/// in who asks for a pull request, or uploads to one (`refs/pr/N`), gets one too.
pub(super) async fn write_token(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    headers: HeaderMap,
    Path((ns, name, rev)): Path<(String, String, String)>,
    Query(query): Query<crate::write::ForPullRequest>,
) -> Result<Response, HubError> {
    xet_enabled(&sim)?;
    let caller = sim.accounts.caller(&headers)?;
    let for_pull_request = query.asked() || rev.starts_with("refs/pr/");
    crate::write::uploadable_repo(&sim.repos_of(kind), &format!("{ns}/{name}"), caller, for_pull_request)?;
    Ok(token_response(&sim, "write"))
}

/// Forwards CAS traffic to the embedded CAS and counts the bytes uploads send. It keeps the `Host` header, so
/// the URLs the CAS hands out lead back here.
pub(super) async fn cas_proxy(State(sim): State<Shared>, request: Request) -> Result<Response, HubError> {
    let Some(xet) = &sim.xet else { return Err(HubError::not_found("Xet storage is disabled on this simulator")) };
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let bytes =
        axum::body::to_bytes(body, usize::MAX).await.map_err(|e| HubError::bad_request(format!("CAS request: {e}")))?;
    if matches!(parts.method, axum::http::Method::POST | axum::http::Method::PUT) {
        let n = bytes.len() as u64;
        sim.counters.update(|c| c.xet_bytes_received += n);
    }
    let mut forward = cas_client().request(parts.method.clone(), format!("{}{path}", xet.direct_url)).body(bytes);
    for (k, v) in &parts.headers {
        if k != header::CONTENT_LENGTH && k != header::TRANSFER_ENCODING && k != header::CONNECTION {
            forward = forward.header(k, v);
        }
    }
    let answer = forward.send().await.map_err(|e| HubError::bad_request(format!("CAS unreachable: {e}")))?;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    for (k, v) in answer.headers() {
        if k != header::TRANSFER_ENCODING && k != header::CONNECTION {
            headers.insert(k.clone(), v.clone());
        }
    }
    Ok((status, headers, Body::from_stream(answer.bytes_stream())).into_response())
}

fn cas_client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().build().unwrap_or_default()
    })
}
