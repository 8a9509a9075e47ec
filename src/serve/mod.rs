//! Runs `hubalign serve`: one process that audits on a schedule, runs repack workers, and serves the
//! dashboard, the JSON API, `/metrics`, the macOS runners' API and the administrators' endpoints.

mod admin;
pub mod after_audit;
mod alarms;
mod api;
mod browse;
mod extract;
mod latency;
pub mod listener;
mod metrics;
mod overview;
mod pages;
mod process;
mod respond;
pub mod runner_api;
pub mod scheduler;
pub mod service;
pub mod webhook;
pub mod workers;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;

use self::runner_api::{RunnerApi, router as runner_router};
use crate::audit::AuditOptions;
use crate::hub::HubClient;
use crate::repack::RepackOptions;
use crate::repack::queue::policy::EnqueuePolicy;
use crate::store::Store;
use crate::worker::WhenIdle;
use admin::AdminApi;
use scheduler::schedule::Schedule;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    store: Store,
    templates: Arc<minijinja::Environment<'static>>,
    next_run: Arc<Mutex<String>>,
    hub_url: String,
    health: Arc<Health>,
    overview: Arc<overview::OverviewCache>,
    webhooks: Option<Arc<webhook::WebhookCounters>>,
    /// Every route's answer times, for `/metrics`.
    http_seconds: latency::HttpSeconds,
}

/// Tracks what is wrong with the service's own tasks: a scheduler or worker loop that stopped, or the count
/// of audits and jobs whose task panicked. Each such task was recorded as failed, and its loop carried on.
#[derive(Debug, Default)]
pub struct Health {
    stopped: Mutex<std::collections::BTreeMap<String, String>>,
    panics: std::sync::atomic::AtomicU64,
    /// The client the service writes through, whose pause the health reports.
    hub: Option<Arc<HubClient>>,
}

impl Health {
    /// The health of a service that writes to the Hub through `hub`.
    pub fn of(hub: Arc<HubClient>) -> Health {
        Health { hub: Some(hub), ..Health::default() }
    }

    /// Lists what slows the service without stopping it: the Hub's quota on actions, which pauses every
    /// write.
    pub fn notices(&self) -> Vec<Notice> {
        let until = self.hub.as_ref().and_then(|hub| hub.actions_paused_until());
        until
            .map(|until| {
                let at = crate::time::format_utc(u64::try_from(crate::time::unix_seconds_after(until)).unwrap_or(0));
                let message = format!("The Hub's hourly quota on actions pauses every write and claim until {at}.");
                Notice { kind: "hub_action_quota", message }
            })
            .into_iter()
            .collect()
    }

    /// Lists the loops that stopped while the service runs, with the reason. `/healthz` fails while there is
    /// any.
    pub fn problems(&self) -> Vec<String> {
        let stopped = self.stopped.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        stopped.iter().map(|(task, why)| format!("{task} stopped: {why}")).collect()
    }

    /// Counts the audits and jobs whose task panicked since the start.
    pub fn panics(&self) -> u64 {
        self.panics.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stopped(&self, task: &str, why: String) {
        tracing::error!(task, reason = %why, "a service task stopped; /healthz now fails");
        self.stopped.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(task.to_owned(), why);
    }

    fn panicked(&self) {
        self.panics.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Something that slows the service without stopping it, for `/healthz` and the overview.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Notice {
    /// What it is: `hub_action_quota`.
    pub kind: &'static str,
    /// What it means, for the operator.
    pub message: String,
}

/// A 500 that says what failed.
fn internal(e: impl std::fmt::Display) -> axum::response::Response {
    use axum::response::IntoResponse;
    (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
}

/// How the service runs.
pub struct ServeConfig {
    /// The dashboard's socket, already bound so that a busy address is reported before anything starts.
    pub listener: std::net::TcpListener,
    /// The listener's connection limits and timeouts.
    pub limits: listener::Limits,
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
    /// How long the scheduler lease holds without renewal. After the leading replica dies, another starts
    /// auditing within about this long.
    pub scheduler_lease: Duration,
    /// Whether this replica may take the scheduler lease. `--no-scheduler` leaves the audits to others.
    pub schedules: bool,
    /// The Hub webhooks' endpoint and what acts on them. The endpoint is not served without it.
    pub webhook: Option<WebhookConfig>,
    /// What is published after each audit this replica runs.
    pub after_audit: after_audit::AfterAuditConfig,
}

/// `POST /api/hub/webhook`'s configuration.
pub struct WebhookConfig {
    /// The secret configured on the Hub's webhook.
    pub secret: String,
    /// A Hub client of its own for reading hinted repos again (its counts are each run's).
    pub hub: HubClient,
}

/// The APIs served only when configured, each with its token.
#[derive(Default)]
pub struct Apis {
    /// The macOS runners'.
    pub runner: Option<Arc<RunnerApi>>,
    /// The administrators'.
    pub admin: Option<AdminApi>,
    /// The Hub webhooks'.
    pub webhook: Option<Arc<webhook::WebhookApi>>,
}

/// Builds the router: dashboard, JSON API, health and metrics. When configured, it adds the runners', the
/// administrators' and the Hub webhooks' APIs, each with its secret.
pub fn router(
    store: Store,
    hub_url: String,
    next_run: Arc<Mutex<String>>,
    health: Arc<Health>,
    apis: Apis,
) -> Result<Router, minijinja::Error> {
    let webhooks = apis.webhook.as_ref().map(|w| w.counters.clone());
    let overview = Arc::new(overview::OverviewCache::new(store.clone(), webhooks.is_some()));
    let templates = Arc::new(pages::templates()?);
    let http_seconds = latency::http_seconds();
    let state = AppState {
        store,
        templates,
        next_run,
        hub_url,
        health,
        overview,
        webhooks,
        http_seconds: http_seconds.clone(),
    };
    let Apis { runner, admin, webhook } = apis;
    let app = Router::new()
        .route("/", get(overview::overview))
        .route("/ns/{namespace}", get(pages::namespace))
        .route("/repo/{ns}/{name}", get(pages::repo))
        .route("/jobs", get(pages::jobs))
        .route("/namespaces", get(browse::namespaces))
        .route("/search", get(browse::search))
        .route("/healthz", get(api::healthz))
        .route("/metrics", get(metrics::metrics))
        .route("/api/publishers", get(api::publishers))
        .route("/api/repos", get(api::repos))
        .route("/api/repos/{ns}/{name}/shards", get(api::repo_shards))
        .route("/api/runs", get(api::runs))
        .route("/api/jobs", get(api::jobs))
        .fallback(pages::not_found)
        .with_state(state);
    let app = match runner {
        Some(api) => app.merge(runner_router(api)),
        None => app,
    };
    let app = match webhook {
        Some(api) => app.merge(webhook::router(api)),
        None => app,
    };
    let app = match admin {
        Some(api) => app.merge(admin::router(api)),
        None => app,
    };
    Ok(app.route_layer(axum::middleware::from_fn_with_state(http_seconds, latency::observe)))
}

/// Builds the router of a process that serves only its health (`worker --health-listen`). It answers
/// `GET /healthz` as `serve` does, for a probe.
pub fn health_router(store: Store, health: Arc<Health>) -> Router {
    Router::new().route("/healthz", get(api::healthz_alone)).with_state((store, health))
}

/// Why the service did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The page templates did not compile.
    #[error("the page templates: {0}")]
    Templates(#[from] minijinja::Error),
    /// The listening socket could not be used.
    #[error("using the listening socket: {0}")]
    Socket(#[source] std::io::Error),
    /// The repacks' runtime could not be started.
    #[error("starting the repack runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Everything the scheduler and the workers share.
struct Shared {
    hub: Arc<HubClient>,
    store: Store,
    health: Arc<Health>,
}

/// Runs the service until `shutdown` resolves: the HTTP server, the scheduled audit and the workers. Audits
/// run one at a time. The shutdown marks a running audit interrupted, and the next audit resumes it, since
/// stored repos are not probed again. Workers finish the job in hand before stopping. Each audit and each job
/// runs in a task of its own. A task that panics is recorded as failed, and the loop goes on. A loop that
/// stops makes `/healthz` fail.
pub async fn serve(
    config: ServeConfig,
    hub: Arc<HubClient>,
    store: Store,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let next_run = Arc::new(Mutex::new(String::new()));
    let health = Arc::new(Health::of(hub.clone()));
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
    let counters = Arc::new(webhook::WebhookCounters::default());
    let hints = Arc::new(crate::webhook::queue::HintQueue::new(crate::webhook::queue::DEFAULT_CAPACITY));
    let webhook_api = config.webhook.as_ref().map(|w| {
        Arc::new(webhook::WebhookApi { secret: w.secret.clone(), queue: hints.clone(), counters: counters.clone() })
    });
    let apis = Apis { runner, admin, webhook: webhook_api };
    let app = router(store.clone(), hub.endpoint().to_owned(), next_run.clone(), health.clone(), apis)?;
    let listener = config
        .listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(config.listener))
        .and_then(|l| l.local_addr().map(|addr| (l, addr)));
    let (listener, addr) = listener.map_err(ServeError::Socket)?;
    tracing::info!(url = %format!("http://{addr}"), "serving");
    let shared = Arc::new(Shared { hub, store, health: health.clone() });
    let mut service = service::Service::new(health.clone());
    service.http(listener, app, config.limits);
    let published = Arc::new(tokio::sync::Notify::new());
    if config.after_audit.any() && config.schedules {
        let task =
            after_audit::run(shared.clone(), config.after_audit.clone(), published.clone(), service.stop_signal());
        service.spawn("the publisher", task);
    }
    let scheduling = scheduler::SchedulerConfig {
        opts: config.audit.clone(),
        policy: config.policy.clone(),
        schedule: config.schedule.clone(),
        lease: config.scheduler_lease,
        me: config.repack.worker.clone(),
        next_run,
        audit_now,
        published,
    };
    if config.schedules {
        service.spawn("the scheduler", scheduler::scheduler(shared.clone(), service.stop_signal(), scheduling));
    } else {
        let text = "left to the other replicas (this one runs with --no-scheduler)".to_owned();
        scheduler::show(&scheduling.next_run, text);
    }
    if let Some(webhook) = config.webhook {
        let rereader = webhook::Rereader {
            hub: webhook.hub,
            store: shared.store.clone(),
            audit: config.audit.clone(),
            policy: config.policy.clone(),
            counters,
        };
        service.spawn("the webhook task", rereader.run(hints, service.stop_signal()));
    }
    // Repacks run on a runtime of their own at a lower priority, so that their downloads, uploads and
    // checks never hold a thread or a core a page is waiting for.
    let threads = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    let batch = crate::blocking::BatchRuntime::start(threads).map_err(ServeError::Runtime)?;
    let told = shared.health.clone();
    let workers = workers::Workers {
        hub: shared.hub.clone(),
        store: shared.store.clone(),
        opts: config.repack.clone(),
        idle: Duration::from_secs(2),
        jobs_on: batch.handle().clone(),
        on_panic: Some(Arc::new(move || told.panicked())),
    };
    for n in 0..config.workers {
        service.worker(format!("worker {n}"), workers.worker(&format!("-w{n}")), WhenIdle::Wait);
    }
    service.run(shutdown, false).await;
    Ok(())
}
