//! The crawler: list MLX repos, probe the header of every shard of each repo whose commit changed, and record
//! what loaders would copy.
//!
//! A run can resume. A repo is recorded once all its shards are probed, in one transaction with the repos
//! probed meanwhile. A later run skips every repo already audited at its listed commit.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use serde::Serialize;
use thiserror::Error;
use tracing::Instrument;

use crate::hub::info::Entry;
use crate::hub::listing::{InvalidListing, ListQuery, ListedRepo};
use crate::hub::pages::Pagination;
use crate::hub::{Access, HubClient, HubError};
use crate::safetensors::{Alignment, classify};
use crate::sources::{MAX_FILE_BYTES, MAX_FILES, MAX_SHARDS, is_mirror};
use crate::store::{
    ListingEntry, RefusedEntry, RepoOutcome, RepoState, RunKind, RunStats, ShardRow, Store, StoreError,
};

/// How to crawl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditOptions {
    /// What to list.
    pub query: ListQuery,
    /// Repos probed at once.
    pub concurrency: usize,
    /// Bytes asked for by each shard's first range request.
    pub probe_bytes: u64,
    /// Probe every listed repo, even those audited at their current commit.
    pub force: bool,
    /// Data-section alignment the verdicts are judged against.
    pub alignment: Alignment,
    /// The longest a run may take; one that reaches it ends `interrupted` and the next run resumes.
    pub deadline: Duration,
    /// Who starts the run, as the store records it and the pages show it: `hubalign audit on HOST`, `the
    /// schedule, on replica R`, `an administrator, via replica R`.
    pub started_by: Option<String>,
    /// The namespaces mirrors are published to: repos there are mirrors, never sources (see
    /// `sources::is_mirror`).
    pub own_namespaces: Vec<String>,
}

/// How long a run may take unless told otherwise.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(6 * 3600);

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            query: ListQuery::default(),
            concurrency: 8,
            probe_bytes: crate::hub::probe::DEFAULT_PROBE_BYTES,
            force: false,
            alignment: Alignment::DEFAULT,
            deadline: DEFAULT_DEADLINE,
            started_by: None,
            own_namespaces: Vec::new(),
        }
    }
}

/// Progress, for a progress bar.
#[derive(Debug, Clone)]
pub enum AuditEvent {
    /// A listing page arrived: repos listed so far, and how many of them need probing.
    Listed {
        /// Repos listed so far.
        repos: u64,
        /// Of those, repos to probe.
        pending: u64,
    },
    /// A repo was recorded.
    Recorded {
        /// `namespace/name`.
        repo: String,
        /// Its state.
        state: RepoState,
        /// Shards probed.
        shards: u64,
    },
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditSummary {
    /// The run's id in the store.
    pub run_id: i64,
    /// Its counters.
    pub stats: RunStats,
    /// Why the run stopped early, such as a wait longer than allowed or the deadline. The next run resumes.
    pub interrupted: Option<String>,
}

/// Why a run stopped.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AuditError {
    /// Listing failed after retries: without the listing there is nothing to audit.
    #[error("listing repositories: {0}")]
    Listing(#[source] HubError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a crawl ended early. An `Interrupted` run resumes in the next run; a `Failed` one returns its error.
enum Stop {
    Interrupted(String),
    Failed(AuditError),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Stop {
        Stop::Failed(e.into())
    }
}

/// Runs one audit, at most `opts.deadline` long. `events` is called from this task only.
pub async fn audit(
    client: &HubClient,
    store: &Store,
    opts: &AuditOptions,
    events: &mut (dyn FnMut(AuditEvent) + Send),
) -> Result<AuditSummary, AuditError> {
    audit_until(client, store, opts, events, std::future::pending()).await
}

/// Runs [`audit`], and ends it early when `stop` resolves to a reason such as `Ctrl-C`. The run is then
/// recorded `interrupted` with its work so far: repos and shards probed, requests, bytes. The next run
/// resumes after the repos recorded.
#[tracing::instrument(name = "audit", skip_all, fields(endpoint = %client.endpoint()))]
pub async fn audit_until(
    client: &HubClient,
    store: &Store,
    opts: &AuditOptions,
    events: &mut (dyn FnMut(AuditEvent) + Send),
    stop: impl Future<Output = String>,
) -> Result<AuditSummary, AuditError> {
    store.interrupt_stale_runs().await?;
    // A `serve` replica's client may serve many runs. This run counts only the requests after this point.
    let before = client.stats.snapshot();
    let query_text = opts.query.first_url("");
    let run = store.start_run(client.endpoint(), &query_text, opts.started_by.as_deref()).await?;
    #[cfg(debug_assertions)]
    debug_panic();
    let mut stats = RunStats::default();
    let crawling = tokio::time::timeout(opts.deadline, crawl(client, store, opts, run, &mut stats, events));
    // Dropping the crawl at `stop` keeps what `stats` counted so far. A batch is counted only after its
    // transaction commits. So a repo is either recorded and counted, or neither.
    let result = tokio::select! {
        timed = crawling => match timed {
            Ok(result) => result,
            Err(_) => Err(Stop::Interrupted(format!(
                "the run's deadline of {} s was reached; the next run resumes after the repos recorded",
                opts.deadline.as_secs()
            ))),
        },
        reason = stop => Err(Stop::Interrupted(reason)),
    };
    let net = client.stats.snapshot().since(&before);
    stats.api_requests = net.api_requests;
    stats.resolver_requests = net.resolver_requests;
    stats.bytes_read = net.bytes_read;
    stats.rate_limited = net.rate_limited;
    stats.retries = net.retries;
    match result {
        Ok(()) => {
            store.finish_run(run, "finished", &stats, None).await?;
            Ok(AuditSummary { run_id: run, stats, interrupted: None })
        }
        Err(Stop::Interrupted(reason)) => {
            tracing::warn!(run = run, reason = %reason, "audit interrupted");
            store.finish_run(run, "interrupted", &stats, Some(&reason)).await?;
            Ok(AuditSummary { run_id: run, stats, interrupted: Some(reason) })
        }
        Err(Stop::Failed(e)) => {
            store.finish_run(run, "failed", &stats, Some(&e.to_string())).await?;
            Err(e)
        }
    }
}

/// Panics in the first `HUBALIGN_DEBUG_PANIC_AUDITS` audits of the process, in debug builds only. The tests
/// of `serve`'s supervision use it.
#[cfg(debug_assertions)]
fn debug_panic() {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicI64, Ordering};
    static LEFT: OnceLock<AtomicI64> = OnceLock::new();
    let left = LEFT.get_or_init(|| {
        AtomicI64::new(std::env::var("HUBALIGN_DEBUG_PANIC_AUDITS").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
    });
    assert!(left.fetch_sub(1, Ordering::SeqCst) <= 0, "HUBALIGN_DEBUG_PANIC_AUDITS: a panic the tests asked for");
}

/// Maps a Hub error to a stop. A wait longer than allowed interrupts the run, and the next run resumes. Any
/// other error fails the run.
fn stop_for(e: HubError, wrap: impl FnOnce(HubError) -> AuditError) -> Stop {
    match e {
        HubError::WaitTooLong { .. } => Stop::Interrupted(e.to_string()),
        e => Stop::Failed(wrap(e)),
    }
}

/// The most repos recorded in one transaction. The recording half takes whatever has arrived. So a batch
/// grows only when recording falls behind the probes. A batch costs the same few statements as one repo.
const RECORD_BATCH: usize = 64;

/// Lists, probes and records at once. The probes of a page's repos start once the page is recorded, while
/// the next pages are read. Outcomes are recorded while the next probes run. Listing and probing draw on
/// different Hub quotas, the API and resolver buckets. So a crawl takes as long as the slower of the two,
/// not their sum; see BENCHMARKS.md. The three halves run joined on this task, and the first to fail ends
/// the others.
async fn crawl(
    client: &HubClient,
    store: &Store,
    opts: &AuditOptions,
    run: i64,
    stats: &mut RunStats,
    events: &mut (dyn FnMut(AuditEvent) + Send),
) -> Result<(), Stop> {
    let (found, to_probe) = tokio::sync::mpsc::unbounded_channel();
    // Bounded: probes wait for the recording rather than pile up outcomes it has not written.
    let (probed, to_record) = tokio::sync::mpsc::channel(2 * RECORD_BATCH);
    let crawl = Crawl { client, store, opts, run, stats: Mutex::new(stats), events: Mutex::new(events) };
    tokio::try_join!(crawl.list(found), crawl.probe(to_probe, probed), crawl.record(to_record))?;
    Ok(())
}

/// What one crawl's three halves share. All three run on one task, so their locks are never contended. A
/// lock is held for one synchronous step, never across an `await`. A `Mutex`, not a `RefCell`, keeps the
/// crawl's future `Send` for `serve`'s spawned runs.
struct Crawl<'a> {
    client: &'a HubClient,
    store: &'a Store,
    opts: &'a AuditOptions,
    run: i64,
    stats: Mutex<&'a mut RunStats>,
    events: Mutex<&'a mut (dyn FnMut(AuditEvent) + Send)>,
}

impl<'a> Crawl<'a> {
    fn stats(&self) -> MutexGuard<'_, &'a mut RunStats> {
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tell(&self, event: AuditEvent) {
        (self.events.lock().unwrap_or_else(PoisonError::into_inner))(event);
    }

    /// The listing half: reads every page, records it, and sends each repo that needs probing to `found`.
    /// It returns, closing `found`, once the last page is recorded and the unlisted repos are marked.
    async fn list(&self, found: tokio::sync::mpsc::UnboundedSender<ListedRepo>) -> Result<(), Stop> {
        let (client, store, opts, run) = (self.client, self.store, self.opts, self.run);
        let mut pending = 0u64;
        let mut listed = 0u64;
        let first = opts.query.first_url(client.endpoint());
        let mut pages = Pagination::new(client.endpoint(), &first);
        let mut next = Some(first);
        while let Some(url) = next.take() {
            let mut page = client.list_page(&url).await.map_err(|e| stop_for(e, AuditError::Listing))?;
            if let Some(limit) = opts.query.limit {
                page.repos.truncate(limit.saturating_sub(listed as usize));
            }
            for bad in &page.invalid {
                tracing::warn!(repo.id = %bad.id, reason = %bad.reason, "invalid listing entry; skipped");
            }
            let refused: Vec<RefusedEntry> = page.invalid.iter().map(refused_entry).collect();
            store.record_invalid_listings(run, &refused).await?;
            // Mirrors are not sources. The crawl skips them and forgets any that an earlier crawl recorded.
            let (mirrors, sources): (Vec<ListedRepo>, Vec<ListedRepo>) =
                page.repos.into_iter().partition(|r| is_mirror(&r.id, &r.tags, &opts.own_namespaces));
            page.repos = sources;
            if !mirrors.is_empty() {
                let ids: Vec<String> = mirrors.into_iter().map(|r| r.id).collect();
                let known = store.forget_mirrors(&ids).await?;
                tracing::info!(mirrors = ids.len(), forgotten = known, "mirrors in the listing; not audited");
            }
            let entries: Vec<ListingEntry> = page.repos.iter().map(listing_entry).collect();
            let flags = store.record_listing(run, &entries, opts.force).await?;
            listed += page.repos.len() as u64;
            for repo in page.repos.into_iter().zip(flags).filter(|(_, p)| *p).map(|(r, _)| r) {
                pending += 1;
                // The probing half waits for `found` to close, so it ends after this half unless it fails.
                // If it fails, `try_join!` drops this half too. So a failed send has nothing left to do.
                let _ = found.send(repo);
            }
            {
                let mut stats = self.stats();
                stats.repos_listed = listed;
                stats.invalid_listings += page.invalid.len() as u64;
            }
            self.tell(AuditEvent::Listed { repos: listed, pending });
            if opts.query.limit.is_none_or(|l| (listed as usize) < l) {
                next = pages.next(&url, &page.headers).map_err(|e| stop_for(e, AuditError::Listing))?;
            }
        }
        // The whole listing was read, so the repos it no longer shows leave the population the reports
        // describe. Skip this after a limited listing. Skip it after an empty one too: a Hub that answered
        // nothing did not delete everything.
        if opts.query.limit.is_none() && listed > 0 {
            let gone = store.mark_unlisted(run).await?;
            if gone > 0 {
                tracing::info!(repos = gone, run, "repos no longer listed; recorded vanished");
            }
        }
        store.refresh_statistics().await?;
        Ok(())
    }

    /// The probing half: probes the repos `found` sends, `opts.concurrency` at once. It hands each outcome to
    /// the recording half once its requests are done, so no network call runs inside a transaction. It
    /// returns, closing `probed`, once `found` is closed and every probe has answered.
    async fn probe(
        &self,
        mut found: tokio::sync::mpsc::UnboundedReceiver<ListedRepo>,
        probed: tokio::sync::mpsc::Sender<RepoOutcome>,
    ) -> Result<(), Stop> {
        // Use `poll_fn`, not `unfold` over an `async` block. rustc cannot prove that block `Send` for every
        // lifetime, and `serve`'s spawned runs need `Send`.
        let repos = futures_util::stream::poll_fn(move |cx| found.poll_recv(cx));
        let (client, opts) = (self.client, self.opts);
        let outcomes = repos
            .map(move |repo| {
                let span =
                    tracing::info_span!("repo", repo.id = %repo.id, repo.sha = repo.sha.as_deref().unwrap_or(""));
                audit_repo(client, repo, opts).instrument(span)
            })
            .buffer_unordered(self.opts.concurrency.max(1));
        let mut outcomes = std::pin::pin!(outcomes);
        while let Some(outcome) = outcomes.next().await {
            let outcome = outcome.map_err(|e| Stop::Interrupted(e.to_string()))?;
            // As with `found`: a closed channel means the recording half failed, and `try_join!` ends this.
            if probed.send(outcome).await.is_err() {
                break;
            }
        }
        Ok(())
    }

    /// The recording half: records what has arrived, up to `RECORD_BATCH` repos per transaction. It counts
    /// each repo only after its transaction commits, so a crawl stopped midway counts only what it stored.
    async fn record(&self, mut probed: tokio::sync::mpsc::Receiver<RepoOutcome>) -> Result<(), Stop> {
        let mut batch = Vec::with_capacity(RECORD_BATCH);
        while probed.recv_many(&mut batch, RECORD_BATCH).await > 0 {
            self.store.record_repos(self.run, &batch).await?;
            {
                let mut stats = self.stats();
                for outcome in &batch {
                    stats.repos_probed += 1;
                    stats.shards_probed += outcome.shards.len() as u64;
                    if outcome.state == RepoState::Error {
                        stats.errors += 1;
                    }
                }
            }
            for outcome in batch.drain(..) {
                let shards = outcome.shards.len() as u64;
                self.tell(AuditEvent::Recorded { repo: outcome.id, state: outcome.state, shards });
            }
        }
        Ok(())
    }
}

/// What reading one repo again found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reread {
    /// Audited and recorded, in a run of its own.
    Recorded(RepoOutcome),
    /// Nothing is recorded. The repo lacks the tags the audit lists by (`--filter`), is a mirror, or is gone
    /// and unknown to the store.
    Unlisted,
    /// The Hub's answer breaks the Hub's rules: nothing recorded.
    Refused(String),
    /// The Hub answers the name with this other repo, so the repo was renamed. The old name is recorded
    /// `renamed` if the store knew it. The new name is not read here.
    Renamed(String),
}

/// What started a re-read: the event, as the repo page names it, and when its payload arrived.
#[derive(Debug, Clone, Copy)]
pub struct Trigger<'a> {
    /// `webhook: update`, …
    pub event: &'a str,
    /// The arrival of the earliest payload the hint stands for, `YYYY-MM-DDTHH:MM:SSZ`.
    pub received_at: &'a str,
}

/// Reads one repo again for a webhook's hint, the way the crawl reads each: its info, then one range probe
/// per shard. It records the repo in a run of kind `webhook`, started by `trigger`. The run's request counts
/// are the client's, so the caller gives it a client of its own. A repo the Hub reports gone, gated or
/// disabled is recorded so, and its mirror's lifecycle follows. Any other failure returns the Hub's error,
/// for the next crawl to retry.
#[tracing::instrument(name = "reread", skip_all, fields(repo.id = %repo))]
pub async fn reread(
    client: &HubClient,
    store: &Store,
    opts: &AuditOptions,
    repo: &str,
    trigger: Trigger<'_>,
) -> Result<Reread, RereadError> {
    let before = client.stats.snapshot();
    let listed = match client.repo_entry(repo).await {
        Ok(Entry::Listed(_, tags)) if is_mirror(repo, &tags, &opts.own_namespaces) => {
            store.forget_mirrors(&[repo.to_owned()]).await?;
            return Ok(Reread::Unlisted);
        }
        Ok(Entry::Listed(listed, tags)) if opts.query.filters.iter().all(|f| tags.contains(f)) => Ok(*listed),
        Ok(Entry::Listed(..)) => return Ok(Reread::Unlisted),
        Ok(Entry::Renamed(to)) => Err((RepoState::Renamed, Some(to))),
        Ok(Entry::Refused(reason)) => return Ok(Reread::Refused(reason)),
        Err(e) => match e.access() {
            Some(Access::Gated) => Err((RepoState::Gated, None)),
            Some(Access::Disabled) => Err((RepoState::Disabled, None)),
            Some(Access::Vanished) => Err((RepoState::Vanished, None)),
            Some(Access::Moved) | None => return Err(RereadError::Hub(e)),
        },
    };
    let renamed = listed.as_ref().err().and_then(|(_, to)| to.clone());
    // The Hub does not show the repo and the store never knew it: there is no row to record on.
    let known = store.repo(repo).await?;
    if listed.is_err() && known.is_none() {
        return Ok(renamed.map_or(Reread::Unlisted, Reread::Renamed));
    }
    let (event, received) = (Some(trigger.event), Some(trigger.received_at));
    let run = store.start_run_of(RunKind::Webhook, client.endpoint(), repo, event, received).await?;
    let outcome = match listed {
        Ok(listed) => {
            store.record_listing(run, &[listing_entry(&listed)], true).await?;
            match audit_repo(client, listed, opts).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    store.finish_run(run, "interrupted", &RunStats::default(), Some(&e.to_string())).await?;
                    return Err(RereadError::Hub(e));
                }
            }
        }
        Err((state, to)) => {
            let sha = known.and_then(|r| r.sha).unwrap_or_else(|| "main".to_owned());
            let error = to.map(|to| format!("renamed to {to}"));
            RepoOutcome { id: repo.to_owned(), sha, state, shards: Vec::new(), error }
        }
    };
    if let Err(e) = store.record_repo(run, &outcome).await {
        // Mark the run failed so it does not stay `running`. interrupt_stale_runs clears only crawl runs.
        let _ = store.finish_run(run, "failed", &RunStats::default(), Some(&e.to_string())).await;
        return Err(e.into());
    }
    let net = client.stats.snapshot().since(&before);
    let stats = RunStats {
        repos_probed: 1,
        shards_probed: outcome.shards.len() as u64,
        api_requests: net.api_requests,
        resolver_requests: net.resolver_requests,
        ..RunStats::default()
    };
    store.finish_run(run, "finished", &stats, None).await?;
    Ok(renamed.map_or(Reread::Recorded(outcome), Reread::Renamed))
}

/// Why a repo could not be read again.
#[derive(Debug, Error)]
pub enum RereadError {
    /// The Hub failed (after retries) for another reason than the repo's own state.
    #[error(transparent)]
    Hub(HubError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Probes every shard of one repo at its listed commit. It returns a wait longer than the client allows as
/// the error. That error stops the run, which the next one resumes, rather than failing repo after repo.
pub async fn audit_repo(client: &HubClient, repo: ListedRepo, opts: &AuditOptions) -> Result<RepoOutcome, HubError> {
    let sha = repo.sha.clone().unwrap_or_else(|| "main".to_owned());
    let outcome = |state, shards, error| RepoOutcome { id: repo.id.clone(), sha: sha.clone(), state, shards, error };
    if repo.flags.disabled {
        return Ok(outcome(RepoState::Disabled, Vec::new(), None));
    }
    // Probes are the crawl's scarcest budget: the Hub allows 5,000 resolver requests per 5 minutes. A repo
    // listing more shards or files than any real one is recorded as over the cap, with no shard probed.
    let paths = repo.shard_paths();
    if paths.len() > MAX_SHARDS || repo.siblings.len() > MAX_FILES {
        let why = format!(
            "over the cap: {} shards and {} files (a repo may have at most {MAX_SHARDS} shards and {MAX_FILES} files); none probed",
            paths.len(),
            repo.siblings.len()
        );
        tracing::warn!(repo.id = %repo.id, shards = paths.len(), files = repo.siblings.len(), "over the cap; not probed");
        return Ok(outcome(RepoState::Error, Vec::new(), Some(why)));
    }
    let mut shards = Vec::new();
    for path in paths {
        match client.probe_header(&repo.id, &sha, &path, opts.probe_bytes).await {
            Ok(probed) => shards.push(shard_row(&repo.id, &sha, &path, probed, opts.alignment)),
            Err(e @ HubError::WaitTooLong { .. }) => return Err(e),
            Err(e) => {
                let state = match e.access() {
                    Some(Access::Gated) => RepoState::Gated,
                    Some(Access::Disabled) => RepoState::Disabled,
                    Some(Access::Vanished) => RepoState::Vanished,
                    Some(Access::Moved) => RepoState::Moved,
                    None => RepoState::Error,
                };
                if state == RepoState::Error {
                    tracing::warn!(repo.id = %repo.id, shard.file = %path, error = %e, "probe failed");
                } else {
                    tracing::info!(repo.id = %repo.id, state = state.as_str(), "repository not auditable");
                }
                let error = (!state.is_final() || state == RepoState::Vanished).then(|| format!("{path}: {e}"));
                return Ok(outcome(state, Vec::new(), error));
            }
        }
    }
    Ok(outcome(RepoState::Ok, shards, None))
}

fn shard_row(repo: &str, sha: &str, path: &str, probed: crate::hub::probe::Probed, alignment: Alignment) -> ShardRow {
    let base = ShardRow {
        repo: repo.to_owned(),
        path: path.to_owned(),
        sha: sha.to_owned(),
        size: probed.size as i64,
        header_len: None,
        data_start: None,
        data_start_mod8: None,
        tensors: None,
        misaligned_tensors: None,
        misaligned_bytes: None,
        verdict: "invalid".into(),
        error: None,
        writer: None,
    };
    // No Hub file can be this large, so the size is the pusher's claim. Its bytes count in no total.
    if probed.size > MAX_FILE_BYTES {
        let error = format!("claims {} bytes, more than the Hub's {MAX_FILE_BYTES}-byte limit for a file", probed.size);
        return ShardRow { error: Some(error), ..base };
    }
    match probed.header {
        Ok(h) => {
            let a = classify(&h, alignment);
            tracing::debug!(shard.file = %path, verdict = a.verdict.as_str(), bytes = a.misaligned_bytes, "probed");
            ShardRow {
                header_len: Some(a.header_len as i64),
                data_start: Some(a.data_start as i64),
                data_start_mod8: Some(a.data_start_mod8 as i64),
                tensors: Some(a.tensors as i64),
                misaligned_tensors: Some(a.misaligned_tensors as i64),
                misaligned_bytes: Some(a.misaligned_bytes as i64),
                verdict: a.verdict.as_str().into(),
                writer: a.writer,
                ..base
            }
        }
        Err(e) => ShardRow { error: Some(e.to_string()), ..base },
    }
}

/// What the store keeps of a listed repo.
fn listing_entry(r: &ListedRepo) -> ListingEntry {
    ListingEntry {
        id: r.id.clone(),
        namespace: r.namespace().to_owned(),
        sha: r.sha.clone(),
        last_modified: r.last_modified.clone(),
        private: r.flags.private,
        gated: r.flags.is_gated(),
        disabled: r.flags.disabled,
        downloads: i64::try_from(r.downloads).unwrap_or(i64::MAX),
        likes: i64::try_from(r.likes).unwrap_or(i64::MAX),
    }
}

/// What the store keeps of a listing entry the checks refused.
fn refused_entry(bad: &InvalidListing) -> RefusedEntry {
    RefusedEntry { id: bad.id.clone(), namespace: bad.namespace.clone(), reason: bad.reason.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard larger than any Hub file is recorded invalid, whatever its header. Its bytes count nowhere.
    #[test]
    fn a_shard_claiming_more_than_any_hub_file_counts_in_no_total() {
        let header = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let mut prefix = (header.len() as u64).to_le_bytes().to_vec();
        prefix.extend_from_slice(header);
        let probe = |size: u64| crate::hub::probe::Probed {
            header: crate::safetensors::header::parse(&prefix, size),
            prefix: prefix.clone(),
            size,
            requests: 1,
        };
        let honest = shard_row("ns/r", "sha", "model.safetensors", probe(prefix.len() as u64 + 8), Alignment::DEFAULT);
        assert_ne!(honest.verdict, "invalid", "{honest:?}");
        let lying = shard_row("ns/r", "sha", "model.safetensors", probe(5_000_000_000_000), Alignment::DEFAULT);
        assert_eq!(lying.verdict, "invalid");
        assert_eq!(lying.misaligned_bytes, None, "its bytes count in no total");
        assert!(lying.error.as_deref().unwrap_or("").contains("more than the Hub's"), "{lying:?}");
    }
}
