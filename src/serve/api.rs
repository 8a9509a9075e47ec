//! The read-only JSON API (the schemas of `report --format json`), `/healthz` and `/metrics`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
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

/// `GET /metrics`: Prometheus text from the store.
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let (totals, runs, run_counts, jobs, (down, up)) = match tokio::try_join!(
        state.store.totals(),
        state.store.runs(1),
        state.store.run_counts(),
        state.store.job_counts(),
        state.store.job_bytes()
    ) {
        Ok(all) => all,
        Err(e) => return internal(e),
    };
    let mut out = String::new();
    let mut metric = |name: &str, help: &str, kind: &str, samples: &[(String, i64)]| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, value) in samples {
            out.push_str(&format!("{name}{labels} {value}\n"));
        }
    };
    metric("hubalign_repos_audited", "Repos audited.", "gauge", &[(String::new(), totals.repos_audited)]);
    metric(
        "hubalign_repos_affected",
        "Audited repos a copying mmap loader duplicates bytes of.",
        "gauge",
        &[(String::new(), totals.repos_affected)],
    );
    let verdicts = [
        ("aligned", totals.shards_aligned),
        ("header_pad", totals.shards_header_pad),
        ("relayout", totals.shards_relayout),
        ("invalid", totals.shards_invalid),
    ];
    metric(
        "hubalign_shards",
        "Audited shards by verdict.",
        "gauge",
        &verdicts.map(|(v, n)| (format!("{{verdict=\"{v}\"}}"), n)),
    );
    metric(
        "hubalign_duplicated_bytes",
        "Bytes a copying mmap loader duplicates, Hub-wide.",
        "gauge",
        &[(String::new(), totals.misaligned_bytes)],
    );
    metric(
        "hubalign_jobs",
        "Repack jobs by state.",
        "gauge",
        &jobs.iter().map(|(s, n)| (format!("{{state=\"{s}\"}}"), *n)).collect::<Vec<_>>(),
    );
    metric(
        "hubalign_audit_runs",
        "Audit runs by how they ended.",
        "gauge",
        &run_counts.iter().map(|(s, n)| (format!("{{status=\"{s}\"}}"), *n)).collect::<Vec<_>>(),
    );
    metric(
        "hubalign_job_bytes_total",
        "Bytes repack jobs moved: down (downloads) and up (uploads after Xet deduplication).",
        "counter",
        &[("{direction=\"down\"}".to_owned(), down), ("{direction=\"up\"}".to_owned(), up)],
    );
    metric(
        "hubalign_task_panics_total",
        "Audits and repack jobs whose task panicked (each recorded as failed; the loop went on).",
        "counter",
        &[(String::new(), state.health.panics() as i64)],
    );
    metric(
        "hubalign_tasks_stopped",
        "Scheduler or worker loops that stopped while the service runs (/healthz fails while any has).",
        "gauge",
        &[(String::new(), state.health.problems().len() as i64)],
    );
    if let Some(r) = runs.first() {
        metric("hubalign_audit_run", "Id of the latest audit run.", "gauge", &[(String::new(), r.id)]);
        let buckets = [("api", r.api_requests), ("resolvers", r.resolver_requests)];
        metric(
            "hubalign_last_run_requests",
            "Requests of the latest audit run by bucket.",
            "gauge",
            &buckets.map(|(b, n)| (format!("{{bucket=\"{b}\"}}"), n)),
        );
        metric(
            "hubalign_last_run_rate_limited",
            "429s received by the latest audit run.",
            "gauge",
            &[(String::new(), r.rate_limited)],
        );
        metric(
            "hubalign_last_run_bytes_read",
            "Bytes read by the latest audit run.",
            "gauge",
            &[(String::new(), r.bytes_read)],
        );
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
