//! Routes requests, and runs the middleware every request passes: rate limits, faults, counters.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};

use super::actions::Action;
use super::counters::CounterSnapshot;
use super::error::HubError;
use super::faults::{Bucket, Caller, Fault};
use super::{Shared, Sim, collections, history, journal, read, resolve, write, xet_api};

/// The Hub's own routes: API, resolve, and the `/_sim` control endpoints.
pub(crate) fn hub_router(sim: Shared) -> Router {
    Router::new()
        .route("/api/models", get(read::list_models))
        .route("/api/models/{ns}/{name}", get(read::model_info))
        .route("/api/models/{ns}/{name}/revision/{*rev}", get(read::model_info))
        .route("/api/models/{ns}/{name}/tree/{rev}", get(read::tree))
        .route("/api/models/{ns}/{name}/tree/{rev}/{*path}", get(read::tree))
        .route("/api/models/{ns}/{name}/paths-info/{rev}", post(read::paths_info))
        .route("/api/models/{ns}/{name}/commits/{*rev}", get(history::list_commits))
        .route("/api/models/{ns}/{name}/refs", get(history::list_refs))
        .route("/api/whoami-v2", get(read::whoami))
        .route("/api/repos/create", post(write::create_repo))
        .route("/api/repos/delete", axum::routing::delete(write::delete_repo))
        .route("/api/models/{ns}/{name}/settings", put(write::settings))
        .route("/api/models/{ns}/{name}/preupload/{rev}", post(write::preupload))
        .route("/api/models/{ns}/{name}/commit/{rev}", post(write::commit))
        .route("/api/validate-yaml", post(write::validate_yaml))
        .route("/api/models/{ns}/{name}/discussions", post(write::create_discussion).get(write::list_discussions))
        .route("/api/models/{ns}/{name}/discussions/{num}", get(write::get_discussion))
        .route("/api/models/{ns}/{name}/discussions/{num}/status", post(write::set_discussion_status))
        .route("/api/models/{ns}/{name}/discussions/{num}/merge", post(write::merge_pull_request))
        .route("/api/models/{ns}/{name}/xet-read-token/{*rev}", get(xet_api::read_token))
        .route("/api/models/{ns}/{name}/xet-write-token/{*rev}", get(xet_api::write_token))
        // Dataset repositories: the same handlers, which tell the kind from the path (`kind::RepoKind`).
        .route("/api/datasets", get(read::list_models))
        .route("/api/datasets/{ns}/{name}", get(read::model_info))
        .route("/api/datasets/{ns}/{name}/revision/{*rev}", get(read::model_info))
        .route("/api/datasets/{ns}/{name}/tree/{rev}", get(read::tree))
        .route("/api/datasets/{ns}/{name}/tree/{rev}/{*path}", get(read::tree))
        .route("/api/datasets/{ns}/{name}/paths-info/{rev}", post(read::paths_info))
        .route("/api/datasets/{ns}/{name}/commits/{*rev}", get(history::list_commits))
        .route("/api/datasets/{ns}/{name}/refs", get(history::list_refs))
        .route("/api/datasets/{ns}/{name}/settings", put(write::settings))
        .route("/api/datasets/{ns}/{name}/preupload/{rev}", post(write::preupload))
        .route("/api/datasets/{ns}/{name}/commit/{rev}", post(write::commit))
        .route("/api/datasets/{ns}/{name}/xet-read-token/{*rev}", get(xet_api::read_token))
        .route("/api/datasets/{ns}/{name}/xet-write-token/{*rev}", get(xet_api::write_token))
        .route("/datasets/{ns}/{name_git}/info/lfs/objects/batch", post(write::lfs_batch))
        .route("/datasets/{ns}/{name}/resolve/{rev}/{*path}", get(resolve::resolve).head(resolve::resolve))
        .route("/datasets/{ns}/{name}", get(read::repo_page))
        .route("/{ns}/{name_git}/info/lfs/objects/batch", post(write::lfs_batch))
        .route("/{ns}/{name}/resolve/{rev}/{*path}", get(resolve::resolve).head(resolve::resolve))
        .route("/{ns}/{name}", get(read::repo_page))
        .route("/api/settings/webhooks", post(write::hooks::create).get(write::hooks::list))
        .route("/api/settings/webhooks/{id}", axum::routing::delete(write::hooks::delete))
        .route("/_sim/counters", get(counters))
        .route("/_sim/counters/reset", post(reset_counters))
        .route("/_sim/requests", get(requests))
        .route("/_sim/requests/reset", post(reset_requests))
        .route("/_sim/rescan", post(rescan))
        .route("/_sim/webhooks/replay", post(replay_webhooks))
        .route("/_sim/webhooks/flood", post(flood_webhooks))
        .route("/_sim/population", get(population))
        .route("/_sim/population/push", post(push))
        .route("/api/repos/move", post(write::move_repo))
        .route("/api/collections", get(collections::list).post(collections::create))
        .route(
            "/api/collections/{ns}/{rest}",
            get(collections::get).patch(collections::update).delete(collections::delete),
        )
        .route("/api/collections/{ns}/{rest}/items", post(collections::add_item))
        .route("/api/collections/{ns}/{rest}/items/{object_id}", axum::routing::delete(collections::delete_item))
        .fallback(|| async { super::error::HubError::not_found("no such endpoint") })
        .layer(middleware::from_fn_with_state(sim.clone(), super::moves::follow_moves))
        .layer(middleware::from_fn_with_state(sim.clone(), admit))
        .layer(middleware::from_fn_with_state(sim.clone(), record_request))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(sim)
}

/// Keeps in the journal what each API request, and each LFS batch question, asked. A body of at most
/// [`journal::BODY_READ`] bytes is read for its keys and passed on whole.
async fn record_request(State(sim): State<Shared>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    if !path.starts_with("/api/") && !path.ends_with("/info/lfs/objects/batch") {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let header = |name: header::HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let headers = (header(header::CONTENT_TYPE), header(header::ACCEPT));
    let length = header(header::CONTENT_LENGTH).and_then(|l| l.parse::<usize>().ok());
    let (method, query) = (parts.method.to_string(), parts.uri.query().map(str::to_owned));
    let (body, read) = match length {
        Some(n) if n <= journal::BODY_READ => {
            let read = axum::body::to_bytes(body, journal::BODY_READ).await.unwrap_or_default();
            (Body::from(read.clone()), Some(read))
        }
        _ => (body, None),
    };
    let asked = journal::Asked::new(
        &method,
        &path,
        query.as_deref(),
        (headers.0.as_deref(), headers.1.as_deref()),
        read.as_deref(),
    );
    sim.journal.record(asked);
    next.run(Request::from_parts(parts, body)).await
}

/// `GET /_sim/requests`: the journal, oldest first.
async fn requests(State(sim): State<Shared>) -> Response {
    axum::Json(sim.journal.entries()).into_response()
}

/// `POST /_sim/requests/reset`: empties the journal.
async fn reset_requests(State(sim): State<Shared>) -> StatusCode {
    sim.journal.clear();
    StatusCode::NO_CONTENT
}

/// The storage side, on an origin of its own, as the Hub's CDN and S3 are. Clients treat a redirect to
/// another origin as "the file's metadata is on this response". They drop their Hub token on the way.
pub(crate) fn storage_router(sim: Shared) -> Router {
    Router::new()
        .route("/_storage/{sha256}", get(resolve::storage).head(resolve::storage))
        .route("/_lfs/upload/{oid}", put(write::lfs_upload_basic))
        .route("/_lfs/part/{oid}/{part}", put(write::lfs_upload_part))
        .route("/_lfs/complete/{oid}", post(write::lfs_complete))
        .route("/_lfs/verify/{oid}", post(write::lfs_verify))
        .route("/v1/{*rest}", any(xet_api::cas_proxy))
        .route("/v2/{*rest}", any(xet_api::cas_proxy))
        .route("/simulation/{*rest}", any(xet_api::cas_proxy))
        .fallback(|| async { super::error::HubError::not_found("no such storage object") })
        .layer(middleware::from_fn_with_state(sim.clone(), admit))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(sim)
}

async fn counters(State(sim): State<Shared>) -> Response {
    axum::Json(sim.counters.snapshot()).into_response()
}

async fn reset_counters(State(sim): State<Shared>) -> StatusCode {
    sim.counters.reset();
    StatusCode::NO_CONTENT
}

async fn rescan(State(sim): State<Shared>) -> Response {
    match sim.rescan().await {
        Ok(changed) => axum::Json(serde_json::json!({ "changed": changed })).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn replay_webhooks(State(sim): State<Shared>) -> Response {
    axum::Json(serde_json::json!({ "replayed": sim.webhooks.replay() })).into_response()
}

#[derive(serde::Deserialize)]
struct Flood {
    n: usize,
}

async fn flood_webhooks(
    State(sim): State<Shared>,
    axum::extract::Query(flood): axum::extract::Query<Flood>,
) -> Response {
    // At most a million: a test's burst, not a way to exhaust the machine.
    let times = flood.n.min(1_000_000);
    let sent = sim.webhooks.flood(times);
    axum::Json(serde_json::json!({ "flooded": if sent { times } else { 0 } })).into_response()
}

/// `GET /_sim/population`: the census, the sample with its heads, and every push so far.
async fn population(State(sim): State<Shared>) -> Response {
    let answer = tokio::task::spawn_blocking(move || {
        let state = sim.population.as_ref()?;
        Some(serde_json::json!({"census": state.census(), "sample": state.sample(&sim), "events": state.events()}))
    })
    .await;
    match answer {
        Ok(Some(v)) => axum::Json(v).into_response(),
        Ok(None) => super::error::HubError::not_found("this simulator has no population").into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

#[derive(serde::Deserialize)]
struct Push {
    kind: Option<crate::population::pushes::PushKind>,
    repo: Option<String>,
}

/// `POST /_sim/population/push[?kind=update|create|delete][&repo=ID]`: one push, announced by webhook.
async fn push(State(sim): State<Shared>, axum::extract::Query(push): axum::extract::Query<Push>) -> Response {
    // A push may hash a sample repo's new shards, so run it off the runtime.
    let done =
        tokio::task::spawn_blocking(move || crate::population::pushes::push(&sim, push.kind, push.repo.as_deref()))
            .await;
    match done {
        Ok(Ok(event)) => axum::Json(event).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The endpoint class a path is counted under.
fn endpoint_class(method: &axum::http::Method, path: &str) -> &'static str {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", "models"] => "models_list",
        ["api", "datasets"] => "datasets_list",
        ["api", "datasets", _, _] | ["api", "datasets", _, _, "revision", ..] => "dataset_info",
        ["api", "datasets", _, _, "tree", ..] => "tree",
        ["api", "datasets", _, _, "paths-info", ..] => "paths_info",
        ["api", "datasets", _, _, "settings"] => "settings",
        ["api", "datasets", _, _, "preupload", ..] => "preupload",
        ["api", "datasets", _, _, "commit", ..] => "commit",
        ["api", "datasets", _, _, t, ..] if t.starts_with("xet-") => "xet_token",
        ["api", "models", _, _] => "model_info",
        ["api", "models", _, _, "revision", ..] => "model_info",
        ["api", "models", _, _, "tree", ..] => "tree",
        ["api", "models", _, _, "paths-info", ..] => "paths_info",
        ["api", "models", _, _, "preupload", ..] => "preupload",
        ["api", "models", _, _, "commit", ..] => "commit",
        ["api", "models", _, _, "settings"] => "settings",
        ["api", "models", _, _, "discussions", ..] => "discussions",
        ["api", "models", _, _, t, ..] if t.starts_with("xet-") => "xet_token",
        ["api", "whoami-v2"] => "whoami",
        ["api", "repos", "create"] => "repo_create",
        ["api", "repos", "delete"] => "repo_delete",
        ["api", "repos", "move"] => "repo_move",
        ["api", "collections"] if *method == axum::http::Method::GET => "collections_list",
        ["api", "collections"] => "collection_create",
        ["api", "collections", _, _] => "collection",
        ["api", "collections", _, _, "items", ..] => "collection_item",
        ["api", ..] => "api_other",
        ["datasets", _, _, "resolve", ..] if *method == axum::http::Method::HEAD => "resolve_head",
        ["datasets", _, _, "resolve", ..] => "resolve",
        [_, _, "resolve", ..] if *method == axum::http::Method::HEAD => "resolve_head",
        [_, _, "resolve", ..] => "resolve",
        ["_storage", ..] => "storage",
        ["_lfs", ..] | [_, _, "info", "lfs", ..] | ["datasets", _, _, "info", "lfs", ..] => "lfs",
        ["_cas", ..] => "cas",
        ["_sim", ..] => "sim_control",
        ["v1" | "v2" | "simulation" | "health", ..] => "cas",
        _ => "other",
    }
}

fn bucket(path: &str) -> Option<Bucket> {
    if path.contains("/resolve/") {
        Some(Bucket::Resolvers)
    } else if path.starts_with("/api/") {
        Some(Bucket::Api)
    } else if path.starts_with("/_") {
        None
    } else {
        Some(Bucket::Pages)
    }
}

/// Counts the request, applies its bucket's quota, latency and faults, and counts (or truncates) the body.
async fn admit(State(sim): State<Shared>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let class = endpoint_class(request.method(), &path);
    let bucket = bucket(&path);
    let ranged = request.headers().contains_key(header::RANGE);
    sim.counters.update(|c| {
        *c.requests.entry(class.to_owned()).or_default() += 1;
        match bucket {
            Some(Bucket::Api) => c.api_requests += 1,
            Some(Bucket::Resolvers) => c.resolver_requests += 1,
            _ => {}
        }
        c.range_requests += u64::from(ranged);
    });
    if class == "sim_control" {
        return next.run(request).await;
    }
    let latency = sim.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let caller = match request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        Some(token) => Caller::Token(token.to_owned()),
        None => Caller::Anonymous,
    };
    if bucket == Some(Bucket::Api) && sim.faults.edge_refuses() {
        sim.counters.update(|c| c.rate_limited += 1);
        // The edge's refusal: no `RateLimit`, no `Retry-After`, and not the Hub's JSON.
        return (StatusCode::TOO_MANY_REQUESTS, "429 Too Many Requests").into_response();
    }
    let admission = bucket.and_then(|b| sim.limiter.admit(b, caller, Instant::now()));
    if let Some(a) = admission.as_ref().filter(|a| !a.allowed) {
        sim.counters.update(|c| c.rate_limited += 1);
        let mut response =
            (StatusCode::TOO_MANY_REQUESTS, axum::Json(serde_json::json!({"error": "Too Many Requests"})))
                .into_response();
        let h = response.headers_mut();
        h.insert(header::RETRY_AFTER, HeaderValue::from(a.reset_seconds));
        insert_limits(h, a);
        return response;
    }
    if let Some(mut refused) = refused_action(&sim, &request, class, &path) {
        // The request quota's headers go on every API answer, this one too. They say requests are left.
        if let Some(a) = &admission {
            insert_limits(refused.headers_mut(), a);
        }
        return refused;
    }
    let fault = sim.faults.decide();
    if let Fault::ServerError(status) = fault {
        sim.counters.update(|c| c.faults_injected += 1);
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, axum::Json(serde_json::json!({"error": "simulated server error"}))).into_response();
    }
    let (parts, body) = request.into_parts();
    let received = Metered::new(body, sim.clone(), received_bytes, None, None);
    let request = Request::from_parts(parts, Body::new(received));
    let mut response = next.run(request).await;
    if let Some(a) = &admission {
        insert_limits(response.headers_mut(), a);
    }
    let declared = response
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let storage_cut = declared.and_then(|len| sim.faults.storage_cut(len)).filter(|_| class == "storage");
    let cut_at = match (fault, declared) {
        _ if storage_cut.is_some() && response.status().is_success() => {
            sim.counters.update(|c| c.faults_injected += 1);
            storage_cut
        }
        _ if class == "commit" && response.status().is_success() && sim.faults.lose_commit_answer() => {
            sim.counters.update(|c| c.faults_injected += 1);
            Some(declared.unwrap_or(0) / 2)
        }
        (Fault::Truncate, Some(len)) if len > 1 && response.status().is_success() => {
            sim.counters.update(|c| c.faults_injected += 1);
            Some(len / 2)
        }
        _ => None,
    };
    let pace = sim.faults.storage_rate().filter(|_| class == "storage");
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, Body::new(Metered::new(body, sim, served_bytes, cut_at, pace)))
}

/// The Hub's refusal of a write that the user's action quota, or a creation in progress, stops. It is a 429
/// without rate headers that names the action, or the 409 that concurrent creations by one user get.
fn refused_action(sim: &Sim, request: &Request, class: &str, path: &str) -> Option<Response> {
    let action = Action::of(request.method(), class, path)?;
    if action == Action::RepoCreate && sim.faults.conflict_on_create() {
        sim.counters.update(|c| c.faults_injected += 1);
        return Some(HubError::conflict(CREATE_IN_PROGRESS).into_response());
    }
    let user = sim.accounts.caller(request.headers()).ok().flatten()?.user.as_str();
    if sim.actions.admit(user, action, Instant::now()) {
        return None;
    }
    sim.counters.update(|c| c.rate_limited += 1);
    Some(HubError::too_many_requests(action.refusal()).into_response())
}

/// The Hub's 409 to a repo creation while another by the same user is in progress (huggingface_hub's
/// `create_repo` retries on this text).
const CREATE_IN_PROGRESS: &str = "Cannot create repo: another conflicting operation is in progress";

fn insert_limits(headers: &mut axum::http::HeaderMap, a: &super::faults::Admission) {
    if let Ok(v) = HeaderValue::from_str(&a.rate_limit) {
        headers.insert("ratelimit", v);
    }
    if let Ok(v) = HeaderValue::from_str(&a.policy) {
        headers.insert("ratelimit-policy", v);
    }
}

/// A body that counts the bytes passing through it in one counter: a request's bytes received, or a
/// response's bytes served. For an injected truncation, it fails after `cut_at` bytes. So the connection
/// closes short of its `Content-Length`.
struct Metered {
    inner: Body,
    sim: Shared,
    counter: fn(&mut CounterSnapshot) -> &mut u64,
    sent: u64,
    cut_at: Option<u64>,
    cut_flushed: bool,
    /// Bytes per second the body is held to, and since when. `wait` holds the wait before its next frame: the
    /// rate's, or the one before a cut.
    pace: Option<(u64, Instant)>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Metered {
    fn new(
        inner: Body,
        sim: Shared,
        counter: fn(&mut CounterSnapshot) -> &mut u64,
        cut_at: Option<u64>,
        rate: Option<u64>,
    ) -> Metered {
        let pace = rate.map(|r| (r, Instant::now()));
        Metered { inner, sim, counter, sent: 0, cut_at, cut_flushed: false, pace, wait: None }
    }
}

fn received_bytes(c: &mut CounterSnapshot) -> &mut u64 {
    &mut c.bytes_received
}

fn served_bytes(c: &mut CounterSnapshot) -> &mut u64 {
    &mut c.bytes_served
}

impl http_body::Body for Metered {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if let Some(wait) = self.wait.as_mut() {
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.wait = None;
        }
        if self.cut_at.is_some_and(|cut| self.sent >= cut) {
            if self.cut_flushed {
                return Poll::Ready(Some(Err(axum::Error::new("simulated truncated body"))));
            }
            // Wait first, so the server flushes the bytes before the cut. An error right away would drop them
            // with the connection, and the client would see no answer at all.
            self.cut_flushed = true;
            self.wait = Some(Box::pin(tokio::time::sleep(Duration::from_millis(20))));
            return self.poll_frame(cx);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let Poll::Ready(Some(Ok(frame))) = polled else { return polled };
        let frame = match frame.into_data() {
            Ok(mut data) => {
                if let Some(cut) = self.cut_at {
                    data.truncate((cut - self.sent).min(data.len() as u64) as usize);
                }
                self.sent += data.len() as u64;
                let n = data.len() as u64;
                let counter = self.counter;
                self.sim.counters.update(|c| *counter(c) += n);
                if let Some((rate, started)) = self.pace {
                    // The next frame waits until this many bytes would have taken at the rate.
                    let due =
                        started.checked_add(Duration::from_secs_f64(self.sent as f64 / rate as f64)).unwrap_or(started);
                    if due > Instant::now() {
                        self.wait = Some(Box::pin(tokio::time::sleep_until(due.into())));
                    }
                }
                http_body::Frame::data(data)
            }
            Err(frame) => frame,
        };
        Poll::Ready(Some(Ok(frame)))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }

    fn is_end_stream(&self) -> bool {
        self.cut_at.is_none() && self.inner.is_end_stream()
    }
}
