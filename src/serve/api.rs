//! Serves the read-only JSON API and `/healthz`. Lists are JSON arrays, a page at a time: `limit`, `offset`,
//! and a `Link: <…>; rel="next"` header while there may be more. `deploy/openapi.json` describes every
//! answer.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::AppState;
use super::extract::{ApiPath, ApiQuery};
use crate::store::StoreError;
use crate::store::jobs::JobFilter;
use crate::store::queries::RepoFilter;

/// `GET /healthz`. Answers 503 unless the store answers and every scheduler and worker loop is running, since
/// a restart may mend that. Answers `degraded`, with each alarm on a line of its own, while the work keeps
/// failing or the Hub's quota on actions pauses every write. The work keeps failing when jobs are held for
/// the operator, the newest jobs all failed, or the newest audit failed. `degraded` comes with a 200, as a
/// restart mends none of them. Otherwise answers `ok`.
pub(super) async fn healthz(State(state): State<AppState>) -> Response {
    health(&state.store, &state.health).await
}

/// `GET /healthz` of a process that serves nothing else (`worker --health-listen`).
pub(super) async fn healthz_alone(
    State((store, health_of)): State<(crate::store::Store, std::sync::Arc<super::Health>)>,
) -> Response {
    health(&store, &health_of).await
}

async fn health(store: &crate::store::Store, health: &super::Health) -> Response {
    if let Err(e) = store.ping().await {
        return (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response();
    }
    let problems = health.problems();
    if !problems.is_empty() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", problems.join("\n"))).into_response();
    }
    match super::alarms::read(store).await {
        Ok(reading) => {
            let mut lines: Vec<String> = reading.alarms.iter().map(|a| format!("{}: {}", a.kind, a.message)).collect();
            lines.extend(health.notices().into_iter().map(|n| format!("{}: {}", n.kind, n.message)));
            match lines.is_empty() {
                true => "ok\n".into_response(),
                false => format!("degraded\n{}\n", lines.join("\n")).into_response(),
            }
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

pub(super) use super::respond::{api_error, failed};

/// `GET /api/publishers`: `report --by-publisher`.
pub(super) async fn publishers(State(state): State<AppState>) -> Response {
    crate::report::by_publisher(&state.store).await.map_or_else(failed, |rows| Json(rows).into_response())
}

/// Items a list answer holds when no `limit` is given. `limit` may ask for at most [`MAX_LIMIT`].
const DEFAULT_LIMIT: i64 = 100;
/// The most items one list answer holds.
const MAX_LIMIT: i64 = 1000;

/// A page of a list: `limit` (1–1000, default 100) items after `offset`.
#[derive(Deserialize)]
pub(super) struct Paging {
    limit: Option<i64>,
    offset: Option<i64>,
}

/// Gives the list answer of every list endpoint. It answers 400 for a bad page. Otherwise it answers the rows
/// `fetch(limit, offset)` reads from the store, as a [`page`].
async fn listed<T, F, Fut>(uri: &Uri, paging: Paging, fetch: F) -> Response
where
    T: serde::Serialize,
    F: FnOnce(i64, i64) -> Fut,
    Fut: Future<Output = Result<Vec<T>, StoreError>>,
{
    let limit = paging.limit.unwrap_or(DEFAULT_LIMIT);
    let offset = paging.offset.unwrap_or(0);
    if !(1..=MAX_LIMIT).contains(&limit) || offset < 0 {
        return api_error(StatusCode::BAD_REQUEST, format!("limit must be 1 to {MAX_LIMIT}, offset 0 or more"));
    }
    match fetch(limit, offset).await {
        Ok(rows) => page(uri, &rows, limit, offset),
        Err(e) => failed(e),
    }
}

/// A list answer: the rows as a JSON array, and a `Link` to the next page when this one is full.
fn page<T: serde::Serialize>(uri: &Uri, rows: &[T], limit: i64, offset: i64) -> Response {
    let mut response = Json(rows).into_response();
    if rows.len() as i64 == limit {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (k, v) in form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
            if k != "offset" && k != "limit" {
                query.append_pair(&k, &v);
            }
        }
        query.append_pair("limit", &limit.to_string());
        query.append_pair("offset", &offset.saturating_add(limit).to_string());
        let link = format!("<{}?{}>; rel=\"next\"", uri.path(), query.finish());
        if let Ok(v) = HeaderValue::from_str(&link) {
            response.headers_mut().insert(header::LINK, v);
        }
    }
    response
}

// Do not use `#[serde(flatten)] paging`. Flattened, a query string's numbers and booleans no longer parse.
#[derive(Deserialize)]
pub(super) struct RepoQuery {
    namespace: Option<String>,
    affected: Option<bool>,
    limit: Option<i64>,
    offset: Option<i64>,
}

/// `GET /api/repos[?namespace=NS][&affected=true|false][&limit=N&offset=M]`: every repo the store knows,
/// audited or not, most bytes duplicated first. Gated, private, disabled and invalid listing entries say so
/// in `state`.
pub(super) async fn repos(State(state): State<AppState>, uri: Uri, ApiQuery(q): ApiQuery<RepoQuery>) -> Response {
    listed(&uri, Paging { limit: q.limit, offset: q.offset }, |limit, offset| {
        let filter = RepoFilter { namespace: q.namespace, affected: q.affected, limit, offset };
        async move { state.store.repo_listing(&filter).await }
    })
    .await
}

/// `GET /api/repos/{ns}/{name}/shards`: `report --repo`; 404 for a repo the store does not know.
pub(super) async fn repo_shards(
    State(state): State<AppState>,
    ApiPath((ns, name)): ApiPath<(String, String)>,
) -> Response {
    // Any letter case names the repo, as on the Hub, so look up the store's spelling.
    let asked = format!("{ns}/{name}");
    let id = match state.store.repo_spelled(&asked).await {
        Ok(spelled) => spelled.unwrap_or(asked),
        Err(e) => return failed(e),
    };
    match tokio::try_join!(state.store.repo(&id), crate::report::repo(&state.store, &id)) {
        Ok((None, _)) => api_error(StatusCode::NOT_FOUND, format!("no repository {id} in the store")),
        Ok((Some(_), rows)) => Json(rows).into_response(),
        Err(e) => failed(e),
    }
}

/// `GET /api/runs[?limit=N&offset=M]`: audit runs, newest first.
pub(super) async fn runs(State(state): State<AppState>, uri: Uri, ApiQuery(p): ApiQuery<Paging>) -> Response {
    listed(&uri, p, |limit, offset| state.store.runs_page(limit, offset)).await
}

#[derive(Deserialize)]
pub(super) struct JobQuery {
    state: Option<String>,
    repo: Option<String>,
    failure_kind: Option<String>,
    limit: Option<i64>,
    offset: Option<i64>,
}

impl JobQuery {
    /// The filter the query asks for, or why it cannot be one.
    fn filter(&self) -> Result<JobFilter, crate::error_text::Unrecognized> {
        Ok(JobFilter {
            state: self.state.as_deref().map(str::parse).transpose()?,
            repo: self.repo.clone(),
            failure_kind: self.failure_kind.as_deref().map(str::parse).transpose()?,
        })
    }
}

/// `GET /api/jobs[?state=S][&repo=NS/NAME][&failure_kind=K][&limit=N&offset=M]`: repack jobs, newest first,
/// with their timestamps and the MLX check's record as a JSON object. Answers 400 for a state or kind that
/// does not exist.
pub(super) async fn jobs(State(state): State<AppState>, uri: Uri, ApiQuery(q): ApiQuery<JobQuery>) -> Response {
    let filter = match q.filter() {
        Ok(filter) => filter,
        Err(why) => return api_error(StatusCode::BAD_REQUEST, why),
    };
    listed(&uri, Paging { limit: q.limit, offset: q.offset }, |limit, offset| async move {
        state.store.jobs_page(&filter, limit, offset).await
    })
    .await
}
