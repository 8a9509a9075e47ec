//! Publishes a verified bundle as `{namespace}/{name}-aligned`. The repo and its settings go through
//! `hub::repos`. The files and the commit go through [`crate::repack::upload`], over Xet, so a header-padded
//! shard uploads little more than what changed.

pub mod card;
pub(crate) mod finish;
pub(crate) mod pull_request;

use std::path::{Path, PathBuf};

use crate::hashing::sha256_hex;
use crate::hub::pacing::Bucket;
use crate::hub::{BodyLimit, HubClient};
use crate::manifest::MANIFEST_FILE;
use crate::repack::error::RepackError;
use crate::repack::queue::policy::{Visibility, same_name};
use crate::repack::upload::ahead::{self, Ahead};
use crate::repack::upload::{self, CommitError};
use crate::store::Store;
use crate::store::mirrors::{Claim, MirrorCaps};

/// What publishing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// A new commit on the mirror, and the bytes sent for it.
    Committed {
        /// The commit.
        commit: String,
        /// Bytes sent: Xet's post-dedup transfer plus the small files sent inline with the commit.
        bytes_uploaded: u64,
    },
    /// The mirror already holds this source commit's repair; nothing was sent.
    AlreadyThere(String),
}

use crate::mirror_name::MAX_NAME;
pub use crate::mirror_name::mirror_name;

/// The names mirrors took before [`mirror_name`]. Each source took the first of these that no other source
/// held, in the order the sources were seen. A new store may not record a mirror published under one.
/// Its manifest then finds it, so it is updated in place instead of published twice.
fn legacy_names(source: &str, target_namespace: &str) -> Vec<String> {
    let (ns, name) = source.split_once('/').unwrap_or(("", source));
    let hash = &sha256_hex(source.as_bytes())[..8];
    let keep = MAX_NAME - "-aligned-".len() - hash.len();
    let stem: String = name.chars().take(keep).collect();
    let stem = stem.trim_end_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    [format!("{name}-aligned"), format!("{ns}-{name}-aligned"), format!("{stem}-aligned-{hash}")]
        .into_iter()
        .filter(|n| n.len() <= MAX_NAME)
        .map(|n| format!("{target_namespace}/{n}"))
        .filter(|id| crate::untrusted::check_repo_id(id).is_ok())
        .collect()
}

/// Who a mirror repo on the Hub belongs to, from its manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// No such repo: the name is free.
    Free,
    /// The repo exists without a hubalign manifest: someone else's, or one never committed to.
    Unknown,
    /// The repo's manifest names this source, at this commit.
    Source {
        /// The source repo.
        repo: String,
        /// The source commit.
        revision: Option<String>,
    },
}

/// Largest manifest read from a mirror (a bundle of thousands of tensors has one of a few MB).
const MANIFEST_CAP: usize = 64 << 20;

/// Reads the mirror's manifest on its main branch to say whose mirror it is.
pub async fn holder(hub: &HubClient, target: &str) -> Result<Holder, RepackError> {
    holder_at(hub, target, "main").await
}

/// Reads the mirror's manifest at `revision` to say whose mirror it was there.
async fn holder_at(hub: &HubClient, target: &str, revision: &str) -> Result<Holder, RepackError> {
    let url = hub.resolve_url(target, revision, MANIFEST_FILE);
    match hub.get(Bucket::Resolvers, &url, &[], BodyLimit::Whole(MANIFEST_CAP)).await {
        Ok(fetched) => {
            let manifest: serde_json::Value = serde_json::from_slice(&fetched.body)
                .map_err(|e| RepackError::permanent(format!("{target}: its {MANIFEST_FILE} is not JSON: {e}")))?;
            let text = |k: &str| manifest.get(k).and_then(|v| v.as_str()).map(str::to_owned);
            Ok(match text("source_repo") {
                Some(repo) => Holder::Source { repo, revision: text("source_revision") },
                None => Holder::Unknown,
            })
        }
        Err(e) => match (e.error_code(), e.access()) {
            (Some("RepoNotFound"), _) | (None, Some(crate::hub::Access::Vanished)) => Ok(Holder::Free),
            (Some("EntryNotFound" | "RevisionNotFound"), _) => Ok(Holder::Unknown),
            _ => Err(RepackError::hub(format_args!("reading {target}'s manifest"), e)),
        },
    }
}

/// A source's mirror, as chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// `namespace/name` of the mirror.
    pub target: String,
    /// The source's former name, which the mirror's manifest still names after a rename was followed.
    pub moved_from: Option<String>,
}

/// Chooses the mirror of `source`. It takes the one the store records, else one published under a legacy
/// name (see `legacy_names`) whose manifest names this source, else [`mirror_name`].
/// The store takes the name before anything is committed, within the day's [caps](MirrorCaps) for a new one.
/// The commit decides whether the Hub's repo of that name is this source's, by the manifest it builds on.
#[tracing::instrument(skip_all, fields(repo.id = %source))]
pub async fn choose_mirror(
    hub: &HubClient,
    store: &Store,
    source: &str,
    target_namespace: &str,
    (private, caps): (bool, &MirrorCaps),
) -> Result<Chosen, RepackError> {
    let store_err = |e: crate::store::StoreError| RepackError::transient(e.to_string());
    if let Some(row) = store.mirror_of(source).await.map_err(store_err)? {
        return Ok(Chosen { target: row.target_repo, moved_from: row.moved_from });
    }
    for legacy in legacy_names(source, target_namespace) {
        if store.mirror_holder(&legacy).await.map_err(store_err)?.is_some() {
            continue;
        }
        if let Holder::Source { repo, .. } = holder(hub, &legacy).await?
            && same_name(&repo, source)
            && store.claim_mirror(&legacy, source, private).await.map_err(store_err)?
        {
            tracing::info!(repo.id = %source, mirror = %legacy, "kept the mirror published under its former name");
            return Ok(Chosen { target: legacy, moved_from: None });
        }
    }
    let target = mirror_name(source, target_namespace);
    // The caps' day is the database's, as every worker's is.
    let now = store.db_now().await.map_err(store_err)?;
    let day_start = now - now.rem_euclid(DAY);
    let since = crate::time::format_utc(u64::try_from(day_start).unwrap_or(0));
    match store.claim_new_mirror((&target, source, private), caps, &since).await.map_err(store_err)? {
        Claim::Taken => Ok(Chosen { target, moved_from: None }),
        Claim::HeldBy(holder) => Err(RepackError::permanent(format!(
            "{source}: its mirror name {target} is recorded for {}; nothing published",
            crate::untrusted::quote(&holder)
        ))),
        Claim::Capped => Err(RepackError::deferred(
            format!(
                "today's cap of new mirrors is reached ({} of {}'s namespace or {} in all, --max-new-mirrors-per-namespace \
                 and --max-new-mirrors); tried again tomorrow",
                caps.per_namespace,
                crate::untrusted::quote(source),
                caps.total
            ),
            // A deferral is a time of this process's clock; the store moves it onto its own.
            crate::job::unix_now().saturating_add(day_start + DAY - now),
        )),
    }
}

/// Seconds in a day: the caps count new mirrors per UTC day.
const DAY: i64 = 86_400;

/// Removes the mirror `store` records for `source` if nothing was ever committed to it.
/// That happens when a job failed or was skipped after taking the name or creating the repo.
/// An empty private repo is deleted and the name released, so it counts in no cap.
/// A mirror holding a manifest, published or staged for the Metal check, is kept.
/// Failures are only logged: the name is this source's alone, and its next job reuses the repo.
#[tracing::instrument(skip_all, fields(repo.id = %source))]
pub async fn abandon(hub: &HubClient, store: &Store, source: &str) {
    let Ok(Some(row)) = store.mirror_of(source).await else { return };
    let target = row.target_repo;
    let removed = async {
        match holder(hub, &target).await? {
            Holder::Unknown => {
                hub.delete_repo(&target).await.map_err(|e| RepackError::hub(format_args!("deleting {target}"), e))?;
            }
            // Taken before the download, never created: only the name goes.
            Holder::Free => {}
            Holder::Source { .. } => return Ok(false),
        }
        Ok::<_, RepackError>(true)
    };
    match removed.await {
        Ok(true) => {
            if let Err(e) = store.release_mirror(&target, source).await {
                tracing::warn!(repo.id = %source, mirror = %target, error = %e, "releasing the mirror name failed");
            }
            tracing::info!(repo.id = %source, mirror = %target, "removed the empty mirror a failed attempt left");
        }
        Ok(false) => {}
        Err(e) => tracing::warn!(repo.id = %source, mirror = %target, error = %e, "the empty mirror stays"),
    }
}

/// Where a bundle is published and what its upload may deduplicate against.
pub struct Mirror<'a> {
    /// The Hub client: the repo, its manifest, the upload and the commit.
    pub hub: &'a HubClient,
    /// `namespace/name` of the mirror.
    pub target: &'a str,
    /// The source repo.
    pub source: &'a str,
    /// The source's former name, when the mirror followed a rename and its manifest still names that.
    pub moved_from: Option<&'a str>,
    /// The source shards the staged ones were made from.
    pub sources: &'a [PathBuf],
    /// The MLX check's verdict when it runs beside the upload. The commit is sent only once it has passed.
    /// `None` means the check has already passed.
    pub verdict: Option<tokio::sync::watch::Receiver<Verdict>>,
    /// What went to the CAS while the bundle still downloaded.
    pub ahead: Option<&'a Ahead>,
}

/// Fails unless the mirror at `revision` is free, holds no manifest yet, or names this source.
/// A repo without a manifest is a failed attempt's empty repo, and the name is this source's alone.
/// The manifest may name the source as it is now, or by the former name a followed rename left there.
/// Names compare as the Hub compares them.
async fn check_holder(mirror: &Mirror<'_>, revision: &str) -> Result<Holder, RepackError> {
    let holder = holder_at(mirror.hub, mirror.target, revision).await?;
    if let Holder::Source { repo, .. } = &holder
        && !same_name(repo, mirror.source)
        && !mirror.moved_from.is_some_and(|from| same_name(repo, from))
    {
        return Err(RepackError::permanent(format!(
            "{} holds the mirror of {}, not of {}; nothing committed",
            mirror.target,
            crate::untrusted::quote(repo),
            mirror.source
        )));
    }
    Ok(holder)
}

/// Uploads `dir` to the mirror and commits it, creating the mirror private if new.
/// `set_visibility` makes it public later, unless it must stay private.
/// The mirror's manifest is checked before every commit, so a repo that holds another source's mirror is
/// never committed to. If the mirror already holds this source commit's repair, nothing is sent.
#[tracing::instrument(name = "publish", skip_all, fields(mirror.id = %mirror.target))]
pub async fn publish(mirror: &Mirror<'_>, dir: &Path, source_sha: &str) -> Result<Published, RepackError> {
    let (hub, target) = (mirror.hub, mirror.target);
    if let Holder::Source { repo: named, revision: Some(rev) } = check_holder(mirror, "main").await?
        && rev == source_sha
        && same_name(&named, mirror.source)
    {
        return Ok(Published::AlreadyThere(head(mirror.hub, target).await?));
    }
    create_private(hub, target).await?;
    // Each file is read once: Xet's chunking takes the SHA-256 the commit names beside it.
    let files = upload::files_of(dir);
    let (lfs, asked) = upload::preupload(mirror.hub, target.into(), &files).await?;
    let (to_store, inline) = upload::split_by_lfs(files, &lfs);
    let ahead::StillToSend { to_send, sent_ahead } = ahead::still_to_send(to_store.clone(), mirror.ahead);
    // Priming asks about the sources of the files still to send only.
    let sources: Vec<PathBuf> =
        mirror.sources.iter().filter(|p| to_send.iter().any(|f| p.ends_with(&f.rel))).cloned().collect();
    let (mut stored, through_xet) =
        upload::to_xet(mirror.hub, target.into(), &to_send, (&sources, &std::collections::HashMap::new())).await?;
    stored.extend(sent_ahead.into_iter().map(|f| (f.rel, f.stored)));
    if let Some(verdict) = &mirror.verdict {
        wait_for_verdict(verdict.clone(), target).await?;
    }
    // The holder check and the commit act as one step. The check reads the manifest at the new commit's
    // parent, and the Hub refuses the commit if the branch has moved since.
    let parent = head(mirror.hub, target).await?;
    check_holder(mirror, &parent).await?;
    let stored = upload::in_order(&to_store, &mut stored);
    let summary = format!("Aligned safetensors from source commit {source_sha}");
    let committed = upload::commit(mirror.hub, target.into(), &parent, summary.as_str().into(), &stored, &inline).await;
    let (commit, committed) = match committed {
        Ok(made) => (made.commit, made.sent),
        // A send's answer was lost and the resend was refused. The first send landed if the manifest says so.
        Err(CommitError::Moved) => match check_holder(mirror, "main").await? {
            Holder::Source { repo, revision: Some(rev) } if rev == source_sha && same_name(&repo, mirror.source) => {
                (head(mirror.hub, target).await?, 0)
            }
            _ => return Err(RepackError::transient(format!("{target}: its main branch moved during the commit"))),
        },
        Err(CommitError::Failed(why)) => return Err(why),
    };
    tracing::info!(repo.id = %target, preupload.bytes = asked, xet.bytes = through_xet, commit.bytes = committed, "uploaded");
    Ok(Published::Committed { commit, bytes_uploaded: asked + through_xet + committed })
}

/// Gives `target` its `visibility` once `published`. This is the one place a mirror is made public.
/// A new commit went to a mirror created private, so only a public one needs a change.
/// A mirror that already held the repair may have been left either way, by a worker that died between its
/// commit and this call. So its visibility is always set.
pub async fn set_visibility(
    hub: &HubClient,
    target: &str,
    visibility: Visibility,
    published: &Published,
) -> Result<(), RepackError> {
    let private = visibility == Visibility::Private;
    if private && matches!(published, Published::Committed { .. }) {
        return Ok(());
    }
    let what = if private { "making private" } else { "making public" };
    hub.set_private(target, private).await.map_err(|e| RepackError::hub(format_args!("{what} {target}"), e))
}

/// Creates `target`, private. A 409 (it exists) is not a failure here.
/// The manifest at the commit the upload builds on decides whose it is (see [`check_holder`]).
async fn create_private(hub: &HubClient, target: &str) -> Result<(), RepackError> {
    hub.create_private_repo(target).await.map(drop).map_err(|e| RepackError::hub(format_args!("creating {target}"), e))
}

/// Readies `mirror` for uploads ahead of the publish step, creating it private if new.
/// Returns `Ok(false)` when the mirror already holds this source commit's repair, so nothing goes ahead.
pub async fn ready_for_uploads(mirror: &Mirror<'_>, source_sha: &str) -> Result<bool, RepackError> {
    if let Holder::Source { repo: named, revision: Some(rev) } = check_holder(mirror, "main").await?
        && rev == source_sha
        && same_name(&named, mirror.source)
    {
        return Ok(false);
    }
    create_private(mirror.hub, mirror.target).await?;
    Ok(true)
}

/// The commit `target`'s main branch is at.
pub(super) async fn head(hub: &HubClient, target: &str) -> Result<String, RepackError> {
    let info = hub.model_info(target).await.map_err(|e| RepackError::hub(format_args!("reading {target}"), e))?;
    info.sha
        .filter(|s| crate::untrusted::check_revision(s).is_ok())
        .ok_or_else(|| RepackError::transient(format!("{target}: the Hub names no commit for its main branch")))
}

/// What the MLX check that runs beside the upload has decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Still running.
    Pending,
    /// Every array loaded bit-identical, in the MLX version the card names: the check's record.
    Passed(Box<crate::job::payload::MlxRecord>),
    /// It failed, and why.
    Failed(String),
}

/// Waits for the MLX check's verdict; anything but a pass commits nothing.
async fn wait_for_verdict(mut verdict: tokio::sync::watch::Receiver<Verdict>, target: &str) -> Result<(), RepackError> {
    let decided = verdict.wait_for(|v| *v != Verdict::Pending).await.ok().map(|v| v.clone());
    match decided {
        Some(Verdict::Passed(_)) => Ok(()),
        Some(Verdict::Failed(why)) => Err(RepackError::transient(format!("nothing committed to {target}: {why}"))),
        Some(Verdict::Pending) | None => {
            Err(RepackError::transient(format!("nothing committed to {target}: the MLX check gave no verdict")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_name_follows_from_the_source_id_alone() {
        let digest = |id: &str| sha256_hex(id.as_bytes())[..crate::mirror_name::NAME_DIGEST_HEX].to_owned();
        assert_eq!(
            mirror_name("mlx-community/Llama-3.2-1B-Instruct-4bit", "me"),
            format!(
                "me/mlx-community-llama-3.2-1b-instruct-4bit-{}-aligned",
                digest("mlx-community/llama-3.2-1b-instruct-4bit")
            )
        );
        // The Hub takes these for one repo: one name.
        assert_eq!(mirror_name("OptCo/Tiny-4bit", "me"), mirror_name("optco/tiny-4bit", "me"));
        // Alike to read, two repos: two names, distinct without regard to case.
        let (a, b) = (mirror_name("a-b/c", "me"), mirror_name("a/b-c", "me"));
        assert!(!a.eq_ignore_ascii_case(&b), "{a} {b}");
        // A squatter's copy of a popular name gets its own, never the popular one's.
        assert_ne!(mirror_name("squatter/Llama-tiny-4bit", "me"), mirror_name("mlx-community/Llama-tiny-4bit", "me"));
        for id in
            [format!("ns/{}", "x".repeat(96)), format!("{}/{}-{}", "n".repeat(40), "y".repeat(60), "z".repeat(30))]
        {
            let name = mirror_name(&id, "me");
            assert!(crate::untrusted::check_repo_id(&name).is_ok(), "{name}");
            assert!(name.ends_with(&format!("-{}-aligned", digest(&id.to_ascii_lowercase()))), "{name}");
        }
        // A cut that would end on `-` or `.` is trimmed, never making a `--` run.
        let dashy = format!("ns/{}-{}", "y".repeat(68), "z".repeat(17));
        assert!(crate::untrusted::check_repo_id(&mirror_name(&dashy, "me")).is_ok());
    }

    #[test]
    fn the_former_names_are_still_recognised() {
        assert_eq!(
            legacy_names("pubco/public-4bit", "me"),
            [
                "me/public-4bit-aligned",
                "me/pubco-public-4bit-aligned",
                &format!("me/public-4bit-aligned-{}", &sha256_hex(b"pubco/public-4bit")[..8])
            ]
        );
    }
}
