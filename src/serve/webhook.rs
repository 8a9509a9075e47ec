//! Serves `POST /api/hub/webhook` when `--webhook-secret` is given. It answers the Hub's webhook payloads at
//! once and acts on them later. The secret is compared in constant time, from the header `X-Webhook-Secret`
//! or `?secret=`. The body is capped and parsed strictly. A hint waits in a bounded queue with one entry per
//! repo. A task reads each hinted repo again from the Hub, exactly as the crawl reads a listed one. It
//! records the repo and queues its job by the same policy. It makes the mirror private at once when the
//! source is gone, private, gated or disabled.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::sync::watch;

use crate::audit::{AuditOptions, Reread, Trigger, reread};
use crate::hub::HubClient;
use crate::repack::queue::lifecycle::{hide_mirror, reconcile_mirrors_of};
use crate::repack::queue::policy::{EnqueuePolicy, NameFilters, enqueue_repo};
use crate::secret::same_secret;
use crate::store::{RepoState, Store, StoreError};
use crate::webhook::payload::{self, Hint, MAX_PAYLOAD_BYTES, Scope};
use crate::webhook::queue::{HintQueue, Queued};

/// Most repos one hint reads: the old and new names of a move, and a few further renames.
const MAX_REPOS_PER_HINT: usize = 6;

/// Why a payload was turned away, as `/metrics` labels it.
pub const REJECTIONS: [&str; 4] = ["unauthorized", "malformed", "too_large", "queue_full"];

/// What the endpoint and the task have counted since the start.
#[derive(Debug, Default)]
pub struct WebhookCounters {
    received: [AtomicU64; Scope::ALL.len()],
    accepted: [AtomicU64; Scope::ALL.len()],
    rejected: [AtomicU64; REJECTIONS.len()],
    reread: AtomicU64,
    unchanged: AtomicU64,
}

impl WebhookCounters {
    fn scope(scope: Scope) -> usize {
        Scope::ALL.iter().position(|s| *s == scope).unwrap_or(Scope::ALL.len() - 1)
    }

    fn reject(&self, why: &str) {
        if let Some(i) = REJECTIONS.iter().position(|r| *r == why) {
            self.rejected[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn by_scope(counts: &[AtomicU64]) -> Vec<(&'static str, u64)> {
        Scope::ALL.iter().zip(counts).map(|(s, n)| (s.as_str(), n.load(Ordering::Relaxed))).collect()
    }

    /// Payloads parsed, by the scope they count as.
    pub fn received(&self) -> Vec<(&'static str, u64)> {
        Self::by_scope(&self.received)
    }

    /// Payloads whose hint was queued or merged into its repo's, by scope.
    pub fn accepted(&self) -> Vec<(&'static str, u64)> {
        Self::by_scope(&self.accepted)
    }

    /// Payloads turned away, by reason.
    pub fn rejected(&self) -> Vec<(&'static str, u64)> {
        REJECTIONS.iter().copied().zip(self.rejected.iter().map(|n| n.load(Ordering::Relaxed))).collect()
    }

    /// Repos read again from the Hub, and hints skipped because their head was the one audited.
    pub fn rereads(&self) -> (u64, u64) {
        (self.reread.load(Ordering::Relaxed), self.unchanged.load(Ordering::Relaxed))
    }
}

/// The endpoint's state.
#[derive(Debug)]
pub struct WebhookApi {
    /// The secret configured on the Hub's webhook.
    pub secret: String,
    /// Where hints wait.
    pub queue: Arc<HintQueue>,
    /// What was counted.
    pub counters: Arc<WebhookCounters>,
}

/// The route, to merge into the service's router.
pub fn router(api: Arc<WebhookApi>) -> axum::Router {
    axum::Router::new()
        .route("/api/hub/webhook", post(receive))
        .layer(DefaultBodyLimit::max(MAX_PAYLOAD_BYTES))
        .with_state(api)
}

async fn receive(
    State(api): State<Arc<WebhookApi>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let sent =
        headers.get("x-webhook-secret").and_then(|v| v.to_str().ok()).or(query.get("secret").map(String::as_str));
    if !same_secret(sent.unwrap_or(""), &api.secret) {
        api.counters.reject("unauthorized");
        return super::api::api_error(StatusCode::UNAUTHORIZED, "webhook secret required (X-Webhook-Secret)");
    }
    let body = match body {
        Ok(body) => body,
        Err(e) => {
            let status = e.status();
            api.counters.reject(if status == StatusCode::PAYLOAD_TOO_LARGE { "too_large" } else { "malformed" });
            return super::api::api_error(status, format!("payload: {e}"));
        }
    };
    let (scope, hint) = match payload::read(&body) {
        Ok(read) => read,
        Err(e) => {
            api.counters.reject("malformed");
            return super::api::api_error(StatusCode::BAD_REQUEST, e);
        }
    };
    let i = WebhookCounters::scope(scope);
    api.counters.received[i].fetch_add(1, Ordering::Relaxed);
    let Some(hint) = hint else { return accepted("nothing to do") };
    match api.queue.push(hint) {
        Queued::Full => {
            api.counters.reject("queue_full");
            // The scheduled crawl is the backstop for what is dropped here.
            super::api::api_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many repos waiting; the scheduled audit will see it",
            )
        }
        Queued::New | Queued::Merged => {
            api.counters.accepted[i].fetch_add(1, Ordering::Relaxed);
            accepted("queued")
        }
    }
}

/// What the task that acts on hints needs.
pub struct Rereader {
    /// A Hub client of its own, so each run's request counts are its own.
    pub hub: HubClient,
    /// The store.
    pub store: Store,
    /// The crawl's options: its filters (`--filter`, `--author`) and probe.
    pub audit: AuditOptions,
    /// Which repos become jobs. `--include`, `--skip` and opt-out also drop hints.
    pub policy: EnqueuePolicy,
    /// What it counts.
    pub counters: Arc<WebhookCounters>,
}

impl Rereader {
    /// Acts on hints until `stop` turns true.
    pub async fn run(self, queue: Arc<HintQueue>, mut stop: watch::Receiver<bool>) {
        loop {
            let pending = tokio::select! {
                pending = queue.pop() => pending,
                _ = stop.wait_for(|s| *s) => return,
            };
            self.act(&pending.hint, &pending.received_at).await;
        }
    }

    /// Reads the hinted repos again; for a move, the old name and then the new. It queues a job for an
    /// affected repo and follows a rename the Hub confirms. Then it makes private the mirror of each repo
    /// read whose source is no longer public.
    #[tracing::instrument(name = "webhook", skip_all)]
    pub async fn act(&self, hint: &Hint, received_at: &str) {
        let (mut todo, event): (VecDeque<(String, Option<String>)>, &str) = match hint {
            Hint::Changed { repo, head } => ([(repo.clone(), head.clone())].into(), "webhook: update"),
            Hint::Deleted { repo } => ([(repo.clone(), None)].into(), "webhook: delete"),
            // The payload's new name is only a hint. The task follows the Hub's answer for the old name.
            Hint::Moved { from, to } => ([(from.clone(), None), (to.clone(), None)].into(), "webhook: move"),
            // The `--pr` bookkeeping records the end of hubalign's own pull request. A merged one changed the
            // source, so the source is read again.
            Hint::PullRequestClosed { repo, num } => {
                self.pull_request_ended(repo, *num).await;
                ([(repo.clone(), None)].into(), "webhook: pull request closed")
            }
        };
        let mut seen = HashSet::new();
        while let Some((repo, head)) = todo.pop_front() {
            // Read a repo the store knows under the store's spelling of its id. The Hub matches ids in any
            // case, so a payload spelled otherwise names the same repo, audited or not.
            let repo = self.store.repo_spelled(&repo).await.ok().flatten().unwrap_or(repo);
            // Follow a chain of renames a few steps, never round a loop.
            if seen.len() >= MAX_REPOS_PER_HINT || !seen.insert(repo.clone()) {
                continue;
            }
            let trigger = Trigger { event, received_at };
            if let Some(to) = self.read_again(&repo, head.as_deref(), trigger).await {
                match self.follow(&repo, &to).await {
                    Ok(()) => todo.push_front((to, None)),
                    Err(e) => tracing::warn!(repo.id = %repo, to = %to, error = %e, "following the rename failed"),
                }
            }
        }
        let read: Vec<String> = seen.into_iter().collect();
        match reconcile_mirrors_of(&self.hub, &self.store, self.filters(), &read).await {
            Ok(hidden) => {
                for h in hidden {
                    tracing::warn!(mirror = %h.target, reason = %h.reason, "mirror made private after a webhook");
                }
            }
            Err(e) => tracing::warn!(error = %e, "checking the mirrors' sources failed"),
        }
    }

    /// Reads one repo again and queues its job. Returns `Some(new name)` when the Hub answers it under
    /// another name.
    async fn read_again(&self, repo: &str, head: Option<&str>, trigger: Trigger<'_>) -> Option<String> {
        if let Err(why) = self.watched(repo) {
            tracing::debug!(repo.id = %repo, reason = why, "webhook for a repo outside the filters; dropped");
            return None;
        }
        if let Some(head) = head
            && let Ok(Some(known)) = self.store.repo(repo).await
            && known.state == RepoState::Ok.as_str()
            && known.sha.as_deref() == Some(head)
        {
            self.counters.unchanged.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(repo.id = %repo, repo.sha = %head, "webhook for a head already audited; nothing asked");
            return None;
        }
        let event = trigger.event;
        match reread(&self.hub, &self.store, &self.audit, repo, trigger).await {
            Ok(Reread::Recorded(outcome)) => {
                self.counters.reread.fetch_add(1, Ordering::Relaxed);
                tracing::info!(repo.id = %repo, state = outcome.state.as_str(), shards = outcome.shards.len(), event, "read again");
                if outcome.state == RepoState::Ok
                    && let Err(e) = enqueue_repo(&self.store, &self.policy, repo).await
                {
                    tracing::warn!(repo.id = %repo, error = %e, "queueing its job failed");
                }
            }
            Ok(Reread::Renamed(to)) => {
                self.counters.reread.fetch_add(1, Ordering::Relaxed);
                tracing::info!(repo.id = %repo, to = %to, event, "the Hub answers it under a new name");
                return Some(to);
            }
            Ok(Reread::Unlisted) => {
                tracing::debug!(repo.id = %repo, "no longer has the audit's tags; not recorded");
            }
            Ok(Reread::Refused(reason)) => {
                tracing::warn!(repo.id = %repo, reason = %crate::untrusted::escape_control(&reason), "the Hub's answer was refused");
            }
            Err(e) => tracing::warn!(repo.id = %repo, error = %e, "reading it again failed; the crawl will"),
        }
        None
    }

    /// Records that hubalign's pull request `num` on `repo` was closed or merged, once the Hub says so. The
    /// payload only says which to look at. A pull request that no job of this store opened asks the Hub
    /// nothing.
    async fn pull_request_ended(&self, repo: &str, num: u64) {
        if self.watched(repo).is_err() {
            return;
        }
        let pr = i64::try_from(num).unwrap_or(i64::MAX);
        let spelled = self.store.repo_spelled(repo).await.ok().flatten();
        let repo = spelled.as_deref().unwrap_or(repo);
        let ours = match self.store.opened_pull_request(repo, pr).await {
            Ok(ours) => ours,
            Err(e) => {
                tracing::warn!(repo.id = %repo, error = %e, "reading its jobs failed");
                return;
            }
        };
        if !ours {
            tracing::debug!(repo.id = %repo, pr = num, "not a pull request of hubalign's; nothing recorded");
            return;
        }
        let status = match self.hub.pull_request(repo, num).await {
            Ok(pr) if matches!(pr.status.as_str(), "closed" | "merged") => pr.status,
            Ok(pr) => {
                tracing::info!(repo.id = %repo, pr = num, status = %crate::untrusted::escape_control(&pr.status), "the Hub says it is not closed; nothing recorded");
                return;
            }
            Err(e) => {
                tracing::warn!(repo.id = %repo, pr = num, error = %e, "reading the pull request failed");
                return;
            }
        };
        match self.store.pull_request_ended(repo, pr, &status).await {
            Ok(_) => tracing::info!(repo.id = %repo, pr = num, status = %status, "pull request ended"),
            Err(e) => tracing::warn!(repo.id = %repo, pr = num, error = %e, "recording the pull request failed"),
        }
    }

    /// Carries the old name's mirror and jobs over to the new name, which the Hub gave for the old one. A new
    /// name outside the filters is not followed. The mirror goes private instead, saying where the source
    /// went.
    async fn follow(&self, from: &str, to: &str) -> Result<(), StoreError> {
        if let Err(why) = self.watched(to) {
            if let Some(mirror) = self.store.mirror_of(from).await?.filter(|m| !m.private) {
                let reason = format!("its source was renamed to {to}, which is not mirrored ({why})");
                hide_mirror(&self.hub, &self.store, &mirror.target_repo, &reason).await?;
            }
            return Ok(());
        }
        let followed = self.store.follow_move(from, to).await?;
        tracing::info!(repo.id = %from, to = %to, mirror = followed.mirror.as_deref().unwrap_or(""), jobs = followed.jobs, "rename followed");
        Ok(())
    }

    /// Whether a repo is one the service watches: the audit's `--author`, the policy's `--include`,
    /// `--skip` and opt-out.
    fn watched(&self, repo: &str) -> Result<(), &'static str> {
        self.filters().excludes(repo).map_or(Ok(()), Err)
    }

    fn filters(&self) -> NameFilters<'_> {
        NameFilters { policy: &self.policy, author: self.audit.query.author.as_deref() }
    }
}

/// A 202 with what became of the payload, as JSON.
fn accepted(status: &str) -> Response {
    (StatusCode::ACCEPTED, axum::Json(serde_json::json!({ "status": status }))).into_response()
}
