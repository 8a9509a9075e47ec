//! `hubalign serve`: one process that audits on a schedule, runs repack workers, and serves the dashboard,
//! the JSON API, `/metrics`, the macOS runners' API and the administrators' endpoints.

mod admin;
mod api;
mod pages;
pub mod schedule;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::routing::get;
use hf_hub::HFClient;

use crate::audit::{AuditOptions, audit};
use crate::hub::HubClient;
use crate::repack::runner::{RunnerApi, router as runner_router};
use crate::repack::{RepackOptions, Repacker};
use crate::store::Store;
use crate::store::jobs::EnqueuePolicy;
use admin::AdminApi;
use schedule::Schedule;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    store: Store,
    templates: Arc<minijinja::Environment<'static>>,
    next_run: Arc<Mutex<String>>,
    hub_url: String,
}

/// A 500 that says what failed.
fn internal(e: impl std::fmt::Display) -> axum::response::Response {
    use axum::response::IntoResponse;
    (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
}

/// How the service runs.
pub struct ServeConfig {
    /// Where to listen.
    pub listen: std::net::SocketAddr,
    /// When audits start.
    pub schedule: Schedule,
    /// Repack workers.
    pub workers: usize,
    /// The audit's options.
    pub audit: AuditOptions,
    /// The workers' options.
    pub repack: RepackOptions,
    /// Which affected repos become jobs.
    pub policy: EnqueuePolicy,
    /// The macOS runners' token; their API is not served without one.
    pub runner_token: Option<String>,
    /// The administrators' token; the endpoints that change state are not served without one.
    pub admin_token: Option<String>,
}

/// Builds the router: dashboard, JSON API, health, metrics, and (each with its token) the runners' and the
/// administrators' APIs.
pub fn router(
    store: Store,
    hub_url: String,
    next_run: Arc<Mutex<String>>,
    runner: Option<Arc<RunnerApi>>,
    admin: Option<AdminApi>,
) -> Result<Router, minijinja::Error> {
    let state = AppState { store, templates: Arc::new(pages::templates()?), next_run, hub_url };
    let app = Router::new()
        .route("/", get(pages::overview))
        .route("/ns/{namespace}", get(pages::namespace))
        .route("/repo/{ns}/{name}", get(pages::repo))
        .route("/healthz", get(api::healthz))
        .route("/metrics", get(api::metrics))
        .route("/api/publishers", get(api::publishers))
        .route("/api/repos", get(api::repos))
        .route("/api/repos/{ns}/{name}/shards", get(api::repo_shards))
        .route("/api/runs", get(api::runs))
        .route("/api/jobs", get(api::jobs))
        .with_state(state);
    let app = match runner {
        Some(api) => app.merge(runner_router(api)),
        None => app,
    };
    Ok(match admin {
        Some(api) => app.merge(admin::router(api)),
        None => app,
    })
}

/// Runs the service until `shutdown` resolves: the HTTP server, the scheduled audit (one at a time; one
/// stopped by the shutdown is marked interrupted and resumed by the next, since stored repos are not probed
/// again) and the workers, which finish the job in hand before stopping.
pub async fn serve(
    config: ServeConfig,
    hub: Arc<HubClient>,
    hf: Arc<HFClient>,
    store: Store,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let next_run = Arc::new(Mutex::new(String::new()));
    let runner = config.runner_token.clone().map(|token| {
        Arc::new(RunnerApi {
            store: store.clone(),
            work_dir: config.repack.work_dir.clone(),
            token,
            lease: config.repack.lease,
        })
    });
    let audit_now = Arc::new(tokio::sync::Notify::new());
    let admin = config.admin_token.as_deref().map(|token| AdminApi {
        store: store.clone(),
        token: token.into(),
        audit_now: audit_now.clone(),
    });
    let app =
        router(store.clone(), hub.endpoint().to_owned(), next_run.clone(), runner, admin).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("listening on {}: {e}", config.listen))?;
    tracing::info!(url = %format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?), "serving");
    let mut tasks = tokio::task::JoinSet::new();
    let mut server_stop = stop.clone();
    tasks.spawn(async move {
        let graceful = async move {
            let _ = server_stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(graceful).await {
            tracing::error!(error = %e, "server stopped");
        }
    });
    {
        let (hub, store, mut stop, opts, policy, schedule) = (
            hub.clone(),
            store.clone(),
            stop.clone(),
            config.audit.clone(),
            config.policy.clone(),
            config.schedule.clone(),
        );
        tasks.spawn(async move {
            let now = SystemTime::now();
            let mut next = if schedule.audits_at_start() { now } else { schedule.next(now, now) };
            loop {
                if let Ok(mut n) = next_run.lock() {
                    *n = crate::time::format_utc(next.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()));
                }
                let wait = next.duration_since(SystemTime::now()).unwrap_or_default();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = audit_now.notified() => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                let started = SystemTime::now();
                let mut events = |_| {};
                let outcome = tokio::select! {
                    outcome = audit(&hub, &store, &opts, &mut events) => Some(outcome),
                    _ = stop.wait_for(|s| *s) => None,
                };
                let Some(outcome) = outcome else {
                    // Each repo recorded so far is complete; the next start resumes after them.
                    if let Err(e) = store.interrupt_stale_runs().await {
                        tracing::warn!(error = %e, "marking the audit interrupted failed");
                    }
                    return;
                };
                match outcome {
                    Ok(summary) => {
                        tracing::info!(run = summary.run_id, repos = summary.stats.repos_probed, "audit finished")
                    }
                    Err(e) => tracing::warn!(error = %e, "audit failed; the next one resumes"),
                }
                if let Err(e) = store.enqueue_affected(&policy).await {
                    tracing::warn!(error = %e, "queueing repack jobs failed");
                }
                next = schedule.next(started, SystemTime::now());
            }
        });
    }
    for n in 0..config.workers {
        let (hub, hf, store, mut stop) = (hub.clone(), hf.clone(), store.clone(), stop.clone());
        let mut opts = config.repack.clone();
        opts.worker = format!("{}-w{n}", opts.worker);
        tasks.spawn(async move {
            let repacker = Repacker { hub: &hub, hf: &hf, store: &store, opts: &opts };
            loop {
                if *stop.borrow() {
                    return;
                }
                match store.claim_job(&opts.worker, opts.lease, None).await {
                    Ok(Some(job)) => {
                        if let Err(e) = repacker.run(&job).await {
                            tracing::warn!(error = %e, "recording a job failed");
                        }
                    }
                    Ok(None) => {
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                            _ = stop.wait_for(|s| *s) => return,
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claiming a job failed");
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                }
            }
        });
    }
    shutdown.await;
    tracing::info!("shutting down: finishing jobs in hand");
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}
