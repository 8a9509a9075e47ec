//! Serves `GET /metrics` in the OpenMetrics text format, read from the store. `prometheus-client`, the
//! Prometheus project's Rust client, encodes it. The encoder adds `_total` to counters and units as suffixes,
//! escapes label values, and ends with `# EOF`. Every label value is present, even at zero.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use super::{AppState, internal};
use crate::job::JobState;

/// The families of one scrape. They hold values read from the store at this moment, so each request gets a
/// fresh registry.
struct Exposition(Registry);

/// One label's values with their samples.
type Labelled<'a> = (&'a str, Vec<(String, i64)>);

impl Exposition {
    // prometheus-client ends every help text with a full stop itself.
    fn help(help: &str) -> &str {
        help.trim_end_matches('.')
    }

    fn gauge(&mut self, name: &str, help: &str, value: i64) {
        let g: Gauge = Gauge::default();
        g.set(value);
        self.0.register(name, Self::help(help), g);
    }

    fn gauge_seconds(&mut self, name: &str, help: &str, value: i64) {
        let g: Gauge = Gauge::default();
        g.set(value);
        self.0.register_with_unit(name, Self::help(help), Unit::Seconds, g);
    }

    fn gauge_unit(&mut self, name: &str, help: &str, unit: Unit, value: u64) {
        let g: Gauge = Gauge::default();
        g.set(i64::try_from(value).unwrap_or(i64::MAX));
        self.0.register_with_unit(name, Self::help(help), unit, g);
    }

    fn gauges(&mut self, name: &str, help: &str, (label, samples): Labelled<'_>) {
        let family = Family::<Vec<(String, String)>, Gauge>::default();
        for (value, n) in samples {
            family.get_or_create(&vec![(label.to_owned(), value)]).set(n);
        }
        self.0.register(name, Self::help(help), family);
    }

    /// Registers a counter family. `name` leaves out `_total`, which the encoder adds. The store's counts are
    /// never negative.
    fn counters(&mut self, name: &str, help: &str, (label, samples): Labelled<'_>) {
        let family = Family::<Vec<(String, String)>, Counter>::default();
        for (value, n) in samples {
            family.get_or_create(&vec![(label.to_owned(), value)]).inc_by(u64::try_from(n).unwrap_or(0));
        }
        self.0.register(name, Self::help(help), family);
    }

    fn counter(&mut self, name: &str, help: &str, n: u64) {
        let c: Counter = Counter::default();
        c.inc_by(n);
        self.0.register(name, Self::help(help), c);
    }
}

/// Samples labelled by each of `values`.
fn by<const N: usize>(values: [(&str, i64); N]) -> Vec<(String, i64)> {
    values.into_iter().map(|(v, n)| (v.to_owned(), n)).collect()
}

/// Every way an audit run ends.
const RUN_ENDS: [&str; 3] = ["finished", "failed", "interrupted"];

/// `GET /metrics`.
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let (totals, run_counts, jobs, (down, up), last_ok, reading, last_duration) = match tokio::try_join!(
        state.store.totals(),
        state.store.run_counts(),
        state.store.job_counts(),
        state.store.job_bytes(),
        state.store.last_finished_run_at(),
        super::alarms::read(&state.store),
        last_audit_duration(&state.store)
    ) {
        Ok(all) => all,
        Err(e) => return internal(e),
    };
    // The newest run and the jobs held come with the alarms, which are judged from them.
    let super::alarms::Reading { alarms, held, runs } = reading;
    let mut m = Exposition(Registry::default());
    let build = Info::new(vec![("version".to_owned(), env!("CARGO_PKG_VERSION").to_owned())]);
    m.0.register("hubalign_build", "The running build: its version as a label, value 1", build);
    m.gauge("hubalign_repos_audited", "Repos audited.", totals.repos_audited);
    m.gauge(
        "hubalign_repos_affected",
        "Audited repos a copying mmap loader duplicates bytes of.",
        totals.repos_affected,
    );
    let verdicts = [
        ("aligned", totals.shards_aligned),
        ("header_pad", totals.shards_header_pad),
        ("relayout", totals.shards_relayout),
        ("invalid", totals.shards_invalid),
    ];
    m.gauges("hubalign_shards", "Audited shards by verdict.", ("verdict", by(verdicts)));
    m.gauge("hubalign_duplicated_bytes", "Bytes a copying mmap loader duplicates, Hub-wide.", totals.misaligned_bytes);
    let count_of = |rows: &[(String, i64)], key: &str| rows.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n);
    // Every state, so a state with no job reads 0 rather than missing.
    let states = JobState::ALL.map(|s| (s.as_str(), count_of(&jobs, s.as_str())));
    m.gauges("hubalign_jobs", "Repack jobs by state.", ("state", by(states)));
    m.gauge(
        "hubalign_jobs_needing_operator",
        "Queued jobs held for the operator: the Hub refused the token, or the disk is full.",
        held,
    );
    // Counters only go up: every run started, and every run ended, by how. The running ones are a gauge.
    let started = run_counts.iter().map(|(_, n)| *n).sum::<i64>();
    m.counter("hubalign_audit_runs_started", "Audit runs started.", u64::try_from(started).unwrap_or(0));
    let ends = RUN_ENDS.map(|s| (s, count_of(&run_counts, s)));
    m.counters("hubalign_audit_runs_ended", "Audit runs ended, by how.", ("status", by(ends)));
    m.gauge("hubalign_audit_runs_running", "Audit runs going on now.", count_of(&run_counts, "running"));
    if let Some(seconds) = last_duration {
        m.gauge_seconds(
            "hubalign_last_audit_duration",
            "How long the newest finished audit took, start to end.",
            seconds,
        );
    }
    m.gauge(
        "hubalign_alarms",
        "What keeps failing now (jobs held, the newest jobs all failed, the newest audit failed): /healthz says degraded while it is above 0.",
        i64::try_from(alarms.len()).unwrap_or(i64::MAX),
    );
    m.0.register_with_unit(
        "hubalign_http_request_duration",
        "Time to answer a request, by route, method and status class",
        Unit::Seconds,
        state.http_seconds.clone(),
    );
    m.0.register_with_unit(
        "hubalign_hub_request_duration",
        "Time the Hub took to answer a request (each attempt), by rate-limit bucket and outcome",
        Unit::Seconds,
        crate::hub::latency::REQUEST_SECONDS.clone(),
    );
    if let Some(p) = super::process::read() {
        let cpu = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        cpu.inc_by(p.cpu_seconds);
        m.0.register_with_unit("process_cpu", "Total user and system CPU time spent", Unit::Seconds, cpu);
        m.gauge_unit("process_resident_memory", "Resident memory size", Unit::Bytes, p.resident_bytes);
        m.gauge("process_open_fds", "Open file descriptors", i64::try_from(p.open_fds).unwrap_or(i64::MAX));
        m.gauge_unit(
            "process_start_time",
            "Start time of the process since the Unix epoch",
            Unit::Seconds,
            p.start_time,
        );
    }
    m.counters(
        "hubalign_job_bytes",
        "Bytes repack jobs moved: down (downloads) and up (uploads after Xet deduplication).",
        ("direction", by([("down", down), ("up", up)])),
    );
    m.counter(
        "hubalign_task_panics",
        "Audits and repack jobs whose task panicked (each recorded as failed; the loop went on).",
        state.health.panics(),
    );
    m.gauge(
        "hubalign_tasks_stopped",
        "Scheduler or worker loops that stopped while the service runs (/healthz fails while any has).",
        i64::try_from(state.health.problems().len()).unwrap_or(i64::MAX),
    );
    if let Some(at) = last_ok {
        m.gauge_seconds(
            "hubalign_last_successful_audit_timestamp",
            "When the newest finished audit ended, in Unix seconds.",
            at,
        );
    }
    if let Some(r) = runs.first() {
        m.gauge("hubalign_last_audit_run_id", "Id of the newest audit run.", r.id);
        let buckets = [("api", r.api_requests), ("resolvers", r.resolver_requests)];
        m.gauges(
            "hubalign_last_audit_requests",
            "Requests of the newest audit run by rate-limit bucket.",
            ("bucket", by(buckets)),
        );
        m.gauge(
            "hubalign_last_audit_rate_limited_responses",
            "429 answers the newest audit run received.",
            r.rate_limited,
        );
        m.gauge("hubalign_last_audit_read_bytes", "Body bytes the newest audit run read.", r.bytes_read);
    }
    if let Some(w) = &state.webhooks {
        let labelled = |rows: Vec<(&str, u64)>| -> Vec<(String, i64)> {
            rows.into_iter().map(|(k, n)| (k.to_owned(), i64::try_from(n).unwrap_or(i64::MAX))).collect()
        };
        m.counters(
            "hubalign_webhooks_received",
            "Hub webhook payloads parsed, by the scope they count as.",
            ("scope", labelled(w.received())),
        );
        m.counters(
            "hubalign_webhooks_accepted",
            "Hub webhook payloads whose hint was queued (one per repo waits), by scope.",
            ("scope", labelled(w.accepted())),
        );
        m.counters(
            "hubalign_webhooks_rejected",
            "Hub webhook payloads turned away, by reason.",
            ("reason", labelled(w.rejected())),
        );
        match state.store.last_webhook_lag().await {
            Ok(Some(lag)) => m.gauge_seconds(
                "hubalign_webhook_last_lag",
                "From a webhook payload's arrival (its wait in the queue included) to its mirror's publication, for the newest one.",
                lag,
            ),
            Ok(None) => {}
            Err(e) => return internal(e),
        }
        let (reread, unchanged) = w.rereads();
        m.counters(
            "hubalign_webhook_rereads",
            "Repos a webhook hinted at: read again from the Hub, or skipped as already audited at that head.",
            ("outcome", labelled(vec![("read", reread), ("unchanged", unchanged)])),
        );
    }
    let mut text = String::new();
    if let Err(e) = encode(&mut text, &m.0) {
        return internal(e);
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}

/// How long the newest finished audit took, in seconds, from the stored start and end.
async fn last_audit_duration(store: &crate::store::Store) -> Result<Option<i64>, crate::store::StoreError> {
    let runs = store.runs(5).await?;
    Ok(runs.iter().filter(|r| r.status == "finished" && r.kind == "crawl").find_map(|r| {
        let start = crate::time::parse_utc(&r.started_at)?;
        let end = crate::time::parse_utc(r.finished_at.as_deref()?)?;
        Some(end.saturating_sub(start))
    }))
}
