//! Handles mirrors whose source stopped being public. After each audit, the Hub is asked again about every
//! public mirror whose source the store no longer knows as public.
//! A mirror goes private if its source is now private, gated, disabled or gone. The reason is recorded for
//! the dashboard. A mirror follows its source's new name if the Hub answers the old name with a renamed repo.

use crate::hub::HubClient;
use crate::repack::queue::policy::{self, NameFilters, PrivateMirrors};
use crate::store::{Store, StoreError};

/// A mirror made private, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    /// The mirror.
    pub target: String,
    /// The reason recorded.
    pub reason: String,
}

/// What the pass after an audit did: the mirrors made private, then the jobs queued.
/// Each part runs whatever became of the other.
#[derive(Debug)]
pub struct AfterAudit {
    /// The mirrors made private (or renamed to follow their source).
    pub hidden: Result<Vec<Hidden>, StoreError>,
    /// Jobs queued from the affected repos.
    pub queued: Result<u64, StoreError>,
}

/// Runs the pass that follows every audit, in `serve`'s scheduler and in `hubalign worker` alike.
/// Mirrors go first, so a renamed source's mirror and jobs follow its new name before that name is queued.
/// Then it queues the affected repos by `filters`' policy. Logs what it did.
pub async fn reconcile_then_enqueue(hub: &HubClient, store: &Store, filters: NameFilters<'_>) -> AfterAudit {
    let hidden = reconcile_mirrors(hub, store, filters).await;
    match &hidden {
        Ok(hidden) => {
            for h in hidden {
                tracing::info!(mirror = %h.target, reason = %h.reason, "mirror made private");
            }
        }
        Err(e) => tracing::warn!(error = %e, "checking mirrors' sources failed"),
    }
    let queued = policy::enqueue_affected(store, filters.policy).await;
    match &queued {
        Ok(0) => {}
        Ok(jobs) => tracing::info!(jobs, "queued repack jobs from the audit"),
        Err(e) => tracing::warn!(error = %e, "queueing repack jobs failed"),
    }
    AfterAudit { hidden, queued }
}

/// Makes private every public mirror whose source is no longer public. A source the Hub cannot answer for
/// now is left for the next pass. A source that is public again is left alone.
/// A source the Hub answers under a new name was renamed, and its mirror follows the new name.
/// If the [`NameFilters`] exclude that name, the mirror goes private instead, saying where the source went.
#[tracing::instrument(skip_all)]
pub async fn reconcile_mirrors(
    hub: &HubClient,
    store: &Store,
    filters: NameFilters<'_>,
) -> Result<Vec<Hidden>, StoreError> {
    reconcile(hub, store, filters, None).await
}

/// [`reconcile_mirrors`] for the mirrors of `sources` alone. A webhook's re-read concerns only them, so the
/// Hub is not asked about every other source the last crawl did not list.
pub async fn reconcile_mirrors_of(
    hub: &HubClient,
    store: &Store,
    filters: NameFilters<'_>,
    sources: &[String],
) -> Result<Vec<Hidden>, StoreError> {
    reconcile(hub, store, filters, Some(sources)).await
}

async fn reconcile(
    hub: &HubClient,
    store: &Store,
    filters: NameFilters<'_>,
    only: Option<&[String]>,
) -> Result<Vec<Hidden>, StoreError> {
    let mut hidden = Vec::new();
    let mirrors = store.mirrors_to_recheck().await?;
    for mirror in mirrors.into_iter().filter(|m| only.is_none_or(|o| o.contains(&m.source_repo))) {
        let Some((ns, _)) = mirror.target_repo.split_once('/') else { continue };
        let info = hub.model_info(&mirror.source_repo).await;
        let mut source = mirror.source_repo.as_str();
        if let Ok(found) = &info
            && let Some(to) = found.renamed(source)
        {
            if let Some(why) = filters.excludes(to) {
                let reason = format!("its source was renamed to {to}, which is not mirrored ({why})");
                if hide_mirror(hub, store, &mirror.target_repo, &reason).await? {
                    hidden.push(Hidden {
                        target: mirror.target_repo.clone(),
                        reason: format!("made private because {reason}"),
                    });
                }
                continue;
            }
            let followed = store.follow_move(source, to).await?;
            tracing::info!(repo.id = %source, to = %to, mirror = followed.mirror.as_deref().unwrap_or(""), jobs = followed.jobs, "rename followed");
            source = to;
        }
        // A public mirror stays public only where a public one may be published now.
        let source = source.to_owned();
        let reason = match policy::may_mirror_now(&source, info, ns, &PrivateMirrors::default()) {
            Ok(policy::MayMirror::Yes { .. }) => continue,
            Ok(policy::MayMirror::No(reason)) => reason,
            Err(e) => {
                tracing::warn!(repo.id = %source, mirror = %mirror.target_repo, error = %e, "source visibility unknown; checked again next time");
                continue;
            }
        };
        let reason = format!("its source is no longer public ({reason})");
        if hide_mirror(hub, store, &mirror.target_repo, &reason).await? {
            tracing::warn!(repo.id = %source, mirror = %mirror.target_repo, reason = %reason, "mirror hidden");
            hidden.push(Hidden { target: mirror.target_repo, reason: format!("made private because {reason}") });
        }
    }
    Ok(hidden)
}

/// Makes `target` private on the Hub, then records `made private because {why}`.
/// Returns `Ok(false)` when the Hub refused; the next pass tries again.
#[tracing::instrument(skip_all, fields(mirror.id = %target))]
pub async fn hide_mirror(hub: &HubClient, store: &Store, target: &str, why: &str) -> Result<bool, StoreError> {
    match hub.set_private(target, true).await {
        Ok(()) => {
            store.hide_mirror(target, &format!("made private because {why}")).await?;
            Ok(true)
        }
        Err(e) => {
            tracing::warn!(mirror = %target, error = %e, "making a mirror private failed; tried again next time");
            Ok(false)
        }
    }
}
