//! `GET /metrics`: Prometheus text read from the store, named by Prometheus's conventions (`_total` for
//! counters, units as suffixes, every label value present even at zero).

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::{AppState, internal};
use crate::store::jobs::JobState;

/// Prometheus exposition text, one family at a time.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: &[(String, i64)]) {
        self.0.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, value) in samples {
            self.0.push_str(&format!("{name}{labels} {value}\n"));
        }
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, value: i64) {
        self.family(name, kind, help, &[(String::new(), value)]);
    }
}

/// Every way an audit run ends (or is still going).
const RUN_STATUSES: [&str; 4] = ["running", "finished", "failed", "interrupted"];

/// `GET /metrics`.
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let (totals, runs, run_counts, jobs, (down, up), last_ok, held) = match tokio::try_join!(
        state.store.totals(),
        state.store.runs(1),
        state.store.run_counts(),
        state.store.job_counts(),
        state.store.job_bytes(),
        state.store.last_finished_run_at(),
        state.store.jobs_needing_operator()
    ) {
        Ok(all) => all,
        Err(e) => return internal(e),
    };
    let mut m = Exposition::default();
    m.family(
        "hubalign_build_info",
        "gauge",
        "The running build: its version as a label, value 1.",
        &[(format!("{{version=\"{}\"}}", env!("CARGO_PKG_VERSION")), 1)],
    );
    m.one("hubalign_repos_audited", "gauge", "Repos audited.", totals.repos_audited);
    m.one(
        "hubalign_repos_affected",
        "gauge",
        "Audited repos a copying mmap loader duplicates bytes of.",
        totals.repos_affected,
    );
    let verdicts = [
        ("aligned", totals.shards_aligned),
        ("header_pad", totals.shards_header_pad),
        ("relayout", totals.shards_relayout),
        ("invalid", totals.shards_invalid),
    ];
    m.family(
        "hubalign_shards",
        "gauge",
        "Audited shards by verdict.",
        &verdicts.map(|(v, n)| (format!("{{verdict=\"{v}\"}}"), n)),
    );
    m.one(
        "hubalign_duplicated_bytes",
        "gauge",
        "Bytes a copying mmap loader duplicates, Hub-wide.",
        totals.misaligned_bytes,
    );
    let count_of = |rows: &[(String, i64)], key: &str| rows.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n);
    m.family(
        "hubalign_jobs",
        "gauge",
        "Repack jobs by state.",
        // Every state, so a state with no job reads 0 rather than missing.
        &JobState::ALL.map(|s| (format!("{{state=\"{}\"}}", s.as_str()), count_of(&jobs, s.as_str()))),
    );
    m.one(
        "hubalign_jobs_needing_operator",
        "gauge",
        "Queued jobs held for the operator: the Hub refused the token, or the disk is full.",
        held,
    );
    m.family(
        "hubalign_audit_runs_total",
        "counter",
        "Audit runs by how they ended.",
        &RUN_STATUSES.map(|s| (format!("{{status=\"{s}\"}}"), count_of(&run_counts, s))),
    );
    m.family(
        "hubalign_job_bytes_total",
        "counter",
        "Bytes repack jobs moved: down (downloads) and up (uploads after Xet deduplication).",
        &[("{direction=\"down\"}".to_owned(), down), ("{direction=\"up\"}".to_owned(), up)],
    );
    m.one(
        "hubalign_task_panics_total",
        "counter",
        "Audits and repack jobs whose task panicked (each recorded as failed; the loop went on).",
        state.health.panics() as i64,
    );
    m.one(
        "hubalign_tasks_stopped",
        "gauge",
        "Scheduler or worker loops that stopped while the service runs (/healthz fails while any has).",
        state.health.problems().len() as i64,
    );
    if let Some(at) = last_ok {
        m.one(
            "hubalign_last_successful_audit_timestamp_seconds",
            "gauge",
            "When the newest finished audit ended, in Unix seconds.",
            at,
        );
    }
    if let Some(r) = runs.first() {
        m.one("hubalign_last_audit_run_id", "gauge", "Id of the newest audit run.", r.id);
        let buckets = [("api", r.api_requests), ("resolvers", r.resolver_requests)];
        m.family(
            "hubalign_last_audit_requests",
            "gauge",
            "Requests of the newest audit run by rate-limit bucket.",
            &buckets.map(|(b, n)| (format!("{{bucket=\"{b}\"}}"), n)),
        );
        m.one(
            "hubalign_last_audit_rate_limited_responses",
            "gauge",
            "429 answers the newest audit run received.",
            r.rate_limited,
        );
        m.one("hubalign_last_audit_read_bytes", "gauge", "Body bytes the newest audit run read.", r.bytes_read);
    }
    if let Some(w) = &state.webhooks {
        let labelled = |rows: Vec<(&str, u64)>, label: &str| -> Vec<(String, i64)> {
            rows.into_iter().map(|(k, n)| (format!("{{{label}=\"{k}\"}}"), n as i64)).collect()
        };
        m.family(
            "hubalign_webhooks_received_total",
            "counter",
            "Hub webhook payloads parsed, by the scope they count as.",
            &labelled(w.received(), "scope"),
        );
        m.family(
            "hubalign_webhooks_accepted_total",
            "counter",
            "Hub webhook payloads whose hint was queued (one per repo waits), by scope.",
            &labelled(w.accepted(), "scope"),
        );
        m.family(
            "hubalign_webhooks_rejected_total",
            "counter",
            "Hub webhook payloads turned away, by reason.",
            &labelled(w.rejected(), "reason"),
        );
        match state.store.last_webhook_lag().await {
            Ok(Some(lag)) => m.one(
                "hubalign_webhook_last_lag_seconds",
                "gauge",
                "From a webhook payload's arrival (its wait in the queue included) to its mirror's publication, for the newest one.",
                lag,
            ),
            Ok(None) => {}
            Err(e) => return internal(e),
        }
        let (reread, unchanged) = w.rereads();
        m.family(
            "hubalign_webhook_rereads_total",
            "counter",
            "Repos a webhook hinted at: read again from the Hub, or skipped as already audited at that head.",
            &[
                ("{outcome=\"read\"}".to_owned(), reread as i64),
                ("{outcome=\"unchanged\"}".to_owned(), unchanged as i64),
            ],
        );
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], m.0).into_response()
}
