//! Runs the scheduled audits. Any number of `serve` replicas may share a store. The replica holding the
//! `scheduler` lease runs the audits, one at a time, and renews the lease while it lives. When it dies,
//! another replica takes the lease over once it lapses. That replica goes on from the last run's start, so
//! each tick is audited once.

pub mod schedule;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, watch};

use schedule::Schedule;

use super::Shared;
use crate::audit::{AuditOptions, audit};
use crate::repack::queue::policy::{EnqueuePolicy, NameFilters};
use crate::store::leases::SCHEDULER;

/// What the scheduler needs beside the shared clients.
pub(super) struct SchedulerConfig {
    pub(super) opts: AuditOptions,
    pub(super) policy: EnqueuePolicy,
    pub(super) schedule: Schedule,
    /// How long the lease holds without renewal. The scheduler renews it every third of that.
    pub(super) lease: Duration,
    /// This replica's name in the lease and the runs it starts.
    pub(super) me: String,
    /// What the overview shows as the next audit.
    pub(super) next_run: Arc<Mutex<String>>,
    /// Woken by an administrator's "audit now" on this replica. For any other replica, the request waits in
    /// the store.
    pub(super) audit_now: Arc<Notify>,
    /// Told when an audit and its pass over the mirrors end. The publisher (`super::after_audit`), if any,
    /// waits on it.
    pub(super) published: Arc<Notify>,
}

/// Runs the scheduler until `stop`, then gives the lease up so another replica takes over at once.
pub(super) async fn scheduler(shared: Arc<Shared>, mut stop: watch::Receiver<bool>, config: SchedulerConfig) {
    let beat = (config.lease / 3).max(Duration::from_secs(1));
    let mut opts = config.opts.clone();
    // The next audit's time, with the start of the last run it was computed from. It is kept while that is
    // still the last run. So a cron time is waited for, not pushed past by computing it again from "now"
    // after the wait.
    let mut target: Option<(Option<i64>, SystemTime)> = None;
    // Whether this replica has queued the store's affected repos since it took the lease. Why: a store
    // audited by `hubalign audit`, or by a replica that died before its pass, must not stay unqueued until
    // the next audit. That may be a day away.
    let mut queued_since_lead = false;
    while !*stop.borrow() {
        let leading = match shared.store.try_lead(SCHEDULER, &config.me, config.lease).await {
            Ok(leading) => leading,
            Err(e) => {
                tracing::warn!(error = %e, "taking the scheduler lease failed");
                false
            }
        };
        if !leading {
            target = None;
            queued_since_lead = false;
            let lease = shared.store.lease_holder(SCHEDULER).await.ok().flatten();
            show(&config.next_run, format!("run by another replica ({})", lease.as_ref().map_or("", |(h, _)| h)));
            // Ask again the moment the holder's lease lapses. Then a dead holder is replaced within its lease
            // time of its last renewal, not up to a beat later.
            let lapse = match (lease, shared.store.db_now().await) {
                (Some((_, until)), Ok(now)) => Some(until_lapse(until, now, beat)),
                _ => None,
            };
            wait(lapse.unwrap_or(beat), &config.audit_now, &mut stop).await;
            continue;
        }
        // The schedule runs on the database's clock, as the run times it goes on from do.
        let now = match shared.store.db_now().await {
            Ok(now) => UNIX_EPOCH + Duration::from_secs(u64::try_from(now).unwrap_or(0)),
            Err(e) => {
                tracing::warn!(error = %e, "reading the database's clock failed");
                wait(beat, &config.audit_now, &mut stop).await;
                continue;
            }
        };
        let last = shared.store.last_run_started().await.ok().flatten().as_deref().and_then(crate::time::parse_utc);
        let next = match target {
            Some((from, at)) if from == last => at,
            _ => {
                let at = match last {
                    Some(at) => config.schedule.next(UNIX_EPOCH + Duration::from_secs(at.max(0) as u64), now),
                    None if config.schedule.audits_at_start() => now,
                    None => config.schedule.next(now, now),
                };
                target = Some((last, at));
                at
            }
        };
        show(&config.next_run, crate::time::format_utc(next.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())));
        let requested = shared.store.take_request(SCHEDULER, &config.me).await.unwrap_or(false);
        // A leader killed mid-crawl leaves its crawl running in the store. Whoever takes the lease over
        // resumes it at once, not at the next scheduled time. The crawl skips the repos already recorded.
        let resumed = !queued_since_lead && !requested && shared.store.crawl_left_running().await.unwrap_or(false);
        if resumed {
            tracing::warn!("the last crawl was left running by a replica that stopped; resuming it now");
        }
        let requested = requested || resumed;
        if next > now && !requested {
            if !queued_since_lead {
                let filters = NameFilters { policy: &config.policy, author: opts.query.author.as_deref() };
                crate::repack::queue::lifecycle::reconcile_then_enqueue(&shared.hub, &shared.store, filters).await;
                queued_since_lead = true;
                continue;
            }
            wait(next.duration_since(now).unwrap_or_default().min(beat), &config.audit_now, &mut stop).await;
            continue;
        }
        if requested && !resumed {
            tracing::info!("audit requested by an administrator");
        }
        // Who started it, as the run's history shows it.
        opts.started_by = Some(if resumed {
            format!("the schedule, on replica {}, resuming a crawl left running", config.me)
        } else if requested {
            format!("an administrator, via replica {}", config.me)
        } else {
            format!("the schedule, on replica {}", config.me)
        });
        run_audit(&shared, &mut stop, &config, &opts, beat).await;
        target = None;
        queued_since_lead = true;
    }
    if let Err(e) = shared.store.resign(SCHEDULER, &config.me).await {
        tracing::warn!(error = %e, "giving the scheduler lease up failed");
    }
}

/// How long a replica that does not lead waits before asking for the lease again. It waits until just after
/// the current lease lapses, at most a beat, and never in a busy loop. Leases lapse on whole unix seconds of
/// the database's clock, which gives `now`.
fn until_lapse(lapses_after: i64, now: i64, beat: Duration) -> Duration {
    let left = u64::try_from(lapses_after.saturating_add(1).saturating_sub(now)).unwrap_or(0);
    Duration::from_secs(left).clamp(Duration::from_millis(100), beat)
}

/// Sets what the overview shows as the next audit.
pub(super) fn show(next_run: &Mutex<String>, text: String) {
    if let Ok(mut shown) = next_run.lock() {
        *shown = text;
    }
}

/// Resolves once the service stops. The watch's guard is dropped here, never held across an await.
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Sleeps `d`, or less if an administrator asks for an audit or the service stops.
async fn wait(d: Duration, audit_now: &Notify, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        () = tokio::time::sleep(d) => {}
        () = audit_now.notified() => {}
        () = stopping(stop) => {}
    }
}

/// Runs one audit and renews the lease while it runs. It stops the audit if the lease is lost. Then it queues
/// what the audit found and checks the mirrors' sources.
async fn run_audit(
    shared: &Arc<Shared>,
    stop: &mut watch::Receiver<bool>,
    config: &SchedulerConfig,
    opts: &AuditOptions,
    beat: Duration,
) {
    tracing::info!(replica = %config.me, "audit started");
    let mut run = {
        let (hub, store, opts) = (shared.hub.clone(), shared.store.clone(), opts.clone());
        tokio::spawn(async move { audit(&hub, &store, &opts, &mut |_| {}).await })
    };
    let outcome = loop {
        tokio::select! {
            outcome = &mut run => break Some(outcome),
            () = stopping(stop) => break None,
            () = tokio::time::sleep(beat) => {
                if let Ok(false) = shared.store.try_lead(SCHEDULER, &config.me, config.lease).await {
                    tracing::warn!(replica = %config.me, "lost the scheduler lease; stopping the audit");
                    break None;
                }
            }
        }
    };
    let Some(outcome) = outcome else {
        run.abort();
        // Each repo recorded so far is complete. The next audit, by whichever replica, resumes after them.
        if let Err(e) = shared.store.interrupt_stale_runs().await {
            tracing::warn!(error = %e, "marking the audit interrupted failed");
        }
        return;
    };
    match outcome {
        Ok(Ok(summary)) => match &summary.interrupted {
            None => tracing::info!(run = summary.run_id, repos = summary.stats.repos_probed, "audit finished"),
            Some(reason) => {
                tracing::warn!(run = summary.run_id, reason = %reason, "audit interrupted; the next one resumes");
            }
        },
        Ok(Err(e)) => tracing::warn!(error = %e, "audit failed; the next one resumes"),
        Err(e) => {
            shared.health.panicked();
            let why = format!("the audit task {}", crate::blocking::join_error_message(e));
            tracing::error!(reason = %why, "audit failed; the next one resumes");
            if let Err(e) = shared.store.fail_running_runs(&why).await {
                tracing::warn!(error = %e, "recording the failed audit failed");
            }
        }
    }
    let filters = NameFilters { policy: &config.policy, author: opts.query.author.as_deref() };
    crate::repack::queue::lifecycle::reconcile_then_enqueue(&shared.hub, &shared.store, filters).await;
    // Notify after the mirrors' pass, so that a mirror it made private leaves the collections in the same
    // round.
    config.published.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica that does not lead asks again just after the lease lapses: not a beat later, and not in a
    /// busy loop.
    #[test]
    fn a_replica_that_does_not_lead_asks_again_just_after_the_lease_lapses() {
        let beat = Duration::from_secs(5);
        let now = 1_800_000_000;
        assert_eq!(until_lapse(now - 10, now, beat), Duration::from_millis(100), "lapsed: at once, not a spin");
        assert_eq!(until_lapse(now + 2, now, beat), Duration::from_secs(3));
        assert_eq!(until_lapse(now + 60, now, beat), beat, "a fresh lease: a beat at most");
        assert_eq!(until_lapse(i64::MAX, i64::MIN, beat), beat, "no overflow");
    }
}
