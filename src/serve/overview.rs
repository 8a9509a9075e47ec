//! Serves `/`. The headline says how much of what loaders duplicate now has an aligned mirror. Below it come
//! the figures, the trend over audits, the chart of the top namespaces and the sortable table of affected
//! namespaces.

use axum::extract::State;
use axum::response::Response;
use minijinja::context;
use minijinja::value::Serde;
use serde::Deserialize;

use std::collections::HashMap;
use std::sync::Arc;

use super::AppState;
use super::pages::{render, size_label};
use super::webhook::WebhookCounters;
use crate::report::Publisher;
use crate::store::changes::Changes;
use crate::store::queries::{Progress, RunRow, Totals, TrendPoint};
use crate::store::{Store, StoreError};

/// Audits the trend shows at most.
const TREND_RUNS: i64 = 60;
/// The trend chart's drawing area, in SVG units.
const TREND_WIDTH: i64 = 640;
const TREND_HEIGHT: i64 = 120;

#[derive(Deserialize)]
pub(super) struct SortQuery {
    sort: Option<String>,
}

/// What `/` reads from the store. It takes six queries over the whole store, seven with webhooks, so it is
/// kept until the next commit.
struct Figures {
    totals: Totals,
    publishers: Vec<Publisher>,
    /// The newest runs, newest first.
    runs: Vec<RunRow>,
    progress: HashMap<String, Progress>,
    trend: Vec<TrendPoint>,
    mirrored_bytes: i64,
    webhook_lag: Option<i64>,
    /// Jobs by state.
    jobs: Vec<(String, i64)>,
    /// Queued jobs held for the operator.
    held: i64,
    /// What keeps failing.
    alarms: Vec<super::alarms::Alarm>,
}

/// Keeps the overview's figures as of the store's last commit. A page costs one `data_version` read until
/// something changes. That holds however large the store, and however busy a repack keeps the machine.
pub(super) struct OverviewCache {
    changes: Changes,
    kept: tokio::sync::Mutex<Option<(i64, Arc<Figures>)>>,
    /// Whether Hub webhooks are served. Only then is their lag read.
    webhooks: bool,
}

impl OverviewCache {
    pub(super) fn new(store: Store, webhooks: bool) -> OverviewCache {
        OverviewCache { changes: Changes::new(store), kept: tokio::sync::Mutex::new(None), webhooks }
    }

    async fn webhook_lag(&self, store: &Store) -> Result<Option<i64>, StoreError> {
        if self.webhooks { store.last_webhook_lag().await } else { Ok(None) }
    }

    async fn figures(&self, store: &Store) -> Result<Arc<Figures>, StoreError> {
        // Read the version before the queries. Then a commit while they run makes the next page read again.
        let version = self.changes.version().await?;
        if let (Some(version), Some((kept_version, figures))) = (version, self.kept.lock().await.as_ref())
            && version == *kept_version
        {
            return Ok(figures.clone());
        }
        // The newest run and the jobs held come with the alarms, which are judged from them.
        let (totals, publishers, progress, trend, mirrored_bytes, webhook_lag, jobs, reading) = tokio::try_join!(
            store.totals(),
            crate::report::by_publisher(store),
            store.progress(),
            store.trend(TREND_RUNS),
            store.mirrored_bytes(),
            self.webhook_lag(store),
            store.job_counts(),
            super::alarms::read(store)
        )?;
        let super::alarms::Reading { alarms, held, runs } = reading;
        let figures = Arc::new(Figures {
            totals,
            publishers,
            runs,
            progress,
            trend,
            mirrored_bytes,
            webhook_lag,
            jobs,
            held,
            alarms,
        });
        if let Some(version) = version {
            *self.kept.lock().await = Some((version, figures.clone()));
        }
        Ok(figures)
    }
}

/// Serves `/`.
pub(super) async fn overview(
    State(state): State<AppState>,
    super::extract::PageParams(q): super::extract::PageParams<SortQuery>,
) -> Response {
    let figures = match state.overview.figures(&state.store).await {
        Ok(figures) => figures,
        Err(e) => return super::pages::page_failed(&state, e),
    };
    let Figures { totals, publishers, runs, progress, trend, mirrored_bytes, webhook_lag, jobs, held, alarms } =
        &*figures;
    let jobs_in =
        |states: &[&str]| jobs.iter().filter(|(s, _)| states.contains(&s.as_str())).map(|(_, n)| n).sum::<i64>();
    let job_figures = context! {
        queued => jobs_in(&["queued"]) - held, held => *held,
        running => jobs_in(&["downloading", "relaying", "verifying", "publishing"]),
        awaiting_metal => jobs_in(&["awaiting_metal_verify"]),
        published => jobs_in(&["published"]), failed => jobs_in(&["failed"]), skipped => jobs_in(&["skipped"]),
    };
    let (mirrored_bytes, mut publishers) = (*mirrored_bytes, publishers.clone());
    let progress_of = |ns: &str| progress.get(ns).cloned().unwrap_or_default();
    match q.sort.as_deref() {
        Some("namespace") => publishers.sort_by(|a, b| a.namespace.cmp(&b.namespace)),
        Some("affected") => publishers.sort_by_key(|p| std::cmp::Reverse(p.repos_affected)),
        Some("relayout") => publishers.sort_by_key(|p| std::cmp::Reverse(p.shards_relayout)),
        Some("header_pad") => publishers.sort_by_key(|p| std::cmp::Reverse(p.shards_header_pad)),
        Some("mirrored") => publishers.sort_by_key(|p| std::cmp::Reverse(progress_of(&p.namespace).mirrored)),
        Some("fixed") => publishers.sort_by_key(|p| std::cmp::Reverse(progress_of(&p.namespace).fixed_upstream)),
        _ => {}
    }
    let top = publishers.iter().filter(|p| p.misaligned_bytes > 0).take(10).collect::<Vec<_>>();
    let max = top.iter().map(|p| p.misaligned_bytes).max().unwrap_or(1).max(1);
    let chart: Vec<_> = top
        .iter()
        .map(|p| context! { namespace => p.namespace.clone(), bytes => p.misaligned_bytes, width => (p.misaligned_bytes * 400 / max).max(1), label => size_label(p.misaligned_bytes) })
        .collect();
    let rows: Vec<_> = publishers
        .iter()
        .filter(|p| p.repos_affected > 0)
        .map(|p| {
            let progress = progress_of(&p.namespace);
            context! {
                namespace => p.namespace.clone(), repos_affected => p.repos_affected, repos_audited => p.repos_audited,
                shards_aligned => p.shards_aligned, shards_header_pad => p.shards_header_pad, shards_relayout => p.shards_relayout,
                shards_invalid => p.shards_invalid, misaligned_bytes => p.misaligned_bytes, gb => size_label(p.misaligned_bytes),
                mirrored => progress.mirrored, fixed_upstream => progress.fixed_upstream,
            }
        })
        .collect();
    let columns = [
        ("namespace", "namespace"),
        ("affected", "repos affected / audited"),
        ("aligned", "aligned"),
        ("header_pad", "header_pad"),
        ("relayout", "relayout"),
        ("invalid", "invalid"),
        ("bytes", "duplicated"),
        ("mirrored", "with a mirror"),
        ("fixed", "fixed upstream"),
    ]
    .map(|(key, title)| context! { key, title });
    let percent = |part: i64, whole: i64| {
        if whole > 0 { format!("{:.0}%", 100.0 * part as f64 / whole as f64) } else { "—".into() }
    };
    let next_run = state.next_run.lock().map(|n| n.clone()).unwrap_or_default();
    render(
        &state,
        "overview.html.j2",
        context! {
            totals => Serde(&totals), share_affected => percent(totals.repos_affected, totals.repos_audited),
            gb_duplicated => size_label(totals.misaligned_bytes), chart, publishers => rows, columns,
            mirrored_share => percent(mirrored_bytes, totals.misaligned_bytes), mirrored_bytes => size_label(mirrored_bytes),
            trend => trend_chart(trend),
            last_run => runs.first().map(|r| context! { at => r.finished_at.clone().unwrap_or_else(|| r.started_at.clone()), status => r.status.clone(),
                error => r.error.clone().filter(|_| r.status != "finished") }),
            next_run, problems => state.health.problems(), alarms => Serde(alarms), jobs => job_figures,
            notices => Serde(state.health.notices()),
            webhooks => state.webhooks.as_deref().map(|w| webhook_summary(w, *webhook_lag)),
        },
    )
}

/// Builds the webhook line. It counts payloads since this replica started, by scope and by the reason they
/// were turned away. It also shows the newest push-to-mirror lag.
fn webhook_summary(counters: &WebhookCounters, lag: Option<i64>) -> minijinja::Value {
    let listed = |rows: Vec<(&str, u64)>| {
        let parts: Vec<String> = rows.iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k} {n}")).collect();
        (rows.iter().map(|(_, n)| n).sum::<u64>(), parts.join(", "))
    };
    let (received, by_scope) = listed(counters.received());
    let (accepted, _) = listed(counters.accepted());
    let (rejected, by_reason) = listed(counters.rejected());
    context! { received, by_scope, accepted, rejected, by_reason, lag => lag.map(|s| format!("{s} s")) }
}

/// The trend as SVG points: bytes duplicated and repos affected per audit, each scaled to its own maximum.
fn trend_chart(points: &[TrendPoint]) -> minijinja::Value {
    if points.len() < 2 {
        return minijinja::Value::from(());
    }
    let max_bytes = points.iter().map(|p| p.bytes_duplicated).max().unwrap_or(1).max(1);
    let max_repos = points.iter().map(|p| p.repos_affected).max().unwrap_or(1).max(1);
    let step = TREND_WIDTH / (points.len() as i64 - 1).max(1);
    let y = |v: i64, max: i64| TREND_HEIGHT - v.saturating_mul(TREND_HEIGHT) / max;
    let dots: Vec<_> = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let x = i as i64 * step;
            context! { x, run => p.run_id, at => p.at.clone(), bytes => p.bytes_duplicated, repos => p.repos_affected,
            y_bytes => y(p.bytes_duplicated, max_bytes), y_repos => y(p.repos_affected, max_repos),
            label => size_label(p.bytes_duplicated) }
        })
        .collect();
    let line = |key: fn(&TrendPoint) -> i64, max: i64| {
        points
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{},{}", i as i64 * step, y(key(p), max)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    context! {
        dots, width => TREND_WIDTH, height => TREND_HEIGHT,
        bytes_line => line(|p| p.bytes_duplicated, max_bytes), repos_line => line(|p| p.repos_affected, max_repos),
        max_bytes => size_label(max_bytes), max_repos,
        first => points.first().map(|p| p.at.clone()), last => points.last().map(|p| p.at.clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::OverviewCache;
    use crate::store::{RunStats, Store};

    async fn page(base: &str) -> String {
        reqwest::get(format!("{base}/")).await.unwrap().text().await.unwrap()
    }

    #[tokio::test]
    async fn the_overview_shows_a_commit_by_another_process_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("store.db");
        let store = Store::open(&db).await.unwrap();
        let next_run = Arc::new(Mutex::new(String::new()));
        let app = super::super::router(
            store,
            "http://hub.test".into(),
            next_run,
            Arc::default(),
            super::super::Apis::default(),
        )
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        assert!(page(&base).await.contains("Last audit: none yet"));
        // Another pool on the same file stands for another process (a `hubalign worker`, an audit).
        let other = Store::open(&db).await.unwrap();
        let run = other.start_run("http://hub.test", "mlx", None).await.unwrap();
        let running = page(&base).await;
        assert!(running.contains("(running)"), "{running}");
        other.finish_run(run, "finished", &RunStats::default(), None).await.unwrap();
        let finished = page(&base).await;
        assert!(finished.contains("(finished)"), "{finished}");
    }

    #[tokio::test]
    async fn the_figures_are_kept_until_the_next_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store.db")).await.unwrap();
        let cache = OverviewCache::new(store.clone(), false);
        let first = cache.figures(&store).await.unwrap();
        assert!(Arc::ptr_eq(&first, &cache.figures(&store).await.unwrap()), "nothing changed: kept");
        store.start_run("http://hub.test", "mlx", None).await.unwrap();
        let second = cache.figures(&store).await.unwrap();
        assert!(!Arc::ptr_eq(&first, &second), "a run was committed: read again");
        assert_eq!(second.runs.len(), 1);
        assert!(Arc::ptr_eq(&second, &cache.figures(&store).await.unwrap()));
        // An in-memory store cannot tell, so it is read every time.
        let memory = Store::open_at("sqlite::memory:").await.unwrap();
        let cache = OverviewCache::new(memory.clone(), false);
        assert!(!Arc::ptr_eq(&cache.figures(&memory).await.unwrap(), &cache.figures(&memory).await.unwrap()));
    }
}
