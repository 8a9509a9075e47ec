//! Publishing a verified bundle as `{namespace}/{name}-aligned`: the repo and its settings through hf-hub,
//! the files and the commit through [`super::upload`] (Xet, so a header-padded shard uploads little more
//! than what changed).

use std::path::{Path, PathBuf};

use hf_hub::{HFClient, RepoTypeModel};

use super::ahead::{self, Ahead};
use super::error::RepackError;
use super::policy::Visibility;
use super::upload::{self, CommitError, Verdict};
use crate::hashing::sha256_hex;
use crate::hub::pacing::Bucket;
use crate::hub::{BodyLimit, HubClient};
use crate::manifest::MANIFEST_FILE;
use crate::store::Store;

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

/// Longest name the mirror may have (the Hub's limit for a repo name).
const MAX_NAME: usize = crate::gate::MAX_NAME_LEN;

/// The names a source's mirror may take, in order of preference: `{name}-aligned`, then
/// `{namespace}-{name}-aligned` (another source of the same name holds the first), then a name with a hash
/// of the source id, which no other source shares. Each fits the Hub's length limit and passes the gate.
pub fn mirror_candidates(source: &str, target_namespace: &str) -> Vec<String> {
    let (ns, name) = source.split_once('/').unwrap_or(("", source));
    let hash = &sha256_hex(source.as_bytes())[..8];
    let keep = MAX_NAME - "-aligned-".len() - hash.len();
    let stem: String = name.chars().take(keep).collect();
    let stem = stem.trim_end_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    [format!("{name}-aligned"), format!("{ns}-{name}-aligned"), format!("{stem}-aligned-{hash}")]
        .into_iter()
        .filter(|n| n.len() <= MAX_NAME)
        .map(|n| format!("{target_namespace}/{n}"))
        .filter(|id| crate::gate::check_repo_id(id).is_ok())
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

/// Reads the mirror's manifest to say whose mirror it is.
pub async fn holder(hub: &HubClient, target: &str) -> Result<Holder, RepackError> {
    let url = hub.resolve_url(target, "main", MANIFEST_FILE);
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
            _ => Err(RepackError::hub(format_args!("reading {target}'s manifest"), &e)),
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

/// The mirror of `source`: the one the store records, or the first candidate name that neither the store
/// nor the Hub gives to another source, taken in the store before anything is committed to it.
pub async fn choose_mirror(
    hub: &HubClient,
    store: &Store,
    source: &str,
    target_namespace: &str,
    private: bool,
) -> Result<Chosen, RepackError> {
    let store_err = |e: crate::store::StoreError| RepackError::transient(e.to_string());
    if let Some(row) = store.mirror_of(source).await.map_err(store_err)? {
        return Ok(Chosen { target: row.target_repo, moved_from: row.moved_from });
    }
    for candidate in mirror_candidates(source, target_namespace) {
        if store.mirror_holder(&candidate).await.map_err(store_err)?.is_some_and(|s| s != source) {
            continue;
        }
        match holder(hub, &candidate).await? {
            Holder::Free => {}
            Holder::Source { repo, .. } if repo == source => {}
            Holder::Source { .. } | Holder::Unknown => continue,
        }
        if store.claim_mirror(&candidate, source, private).await.map_err(store_err)? {
            return Ok(Chosen { target: candidate, moved_from: None });
        }
    }
    Err(RepackError::permanent(format!("{source}: every mirror name in {target_namespace} is taken by another source")))
}

/// Where a bundle is published and what its upload may deduplicate against.
pub struct Mirror<'a> {
    /// hf-hub, for the repo and the commit.
    pub hf: &'a HFClient,
    /// The crawler's client, for the mirror's manifest and the Xet token that priming needs.
    pub hub: &'a HubClient,
    /// `namespace/name` of the mirror.
    pub target: &'a str,
    /// The source repo.
    pub source: &'a str,
    /// The source's former name, when the mirror followed a rename and its manifest still names that.
    pub moved_from: Option<&'a str>,
    /// The source shards the staged ones were made from.
    pub sources: &'a [PathBuf],
    /// Whether the mirror stays private.
    pub visibility: Visibility,
    /// The MLX check's verdict when it runs beside the upload: the commit is sent only once it has passed.
    /// `None`: the check has already passed.
    pub verdict: Option<tokio::sync::watch::Receiver<Verdict>>,
    /// What went to the CAS while the bundle still downloaded.
    pub ahead: Option<&'a Ahead>,
}

/// Fails unless the mirror is free, unknown to any source yet, or this source's (under its current name, or
/// the former one a followed rename left in the manifest).
async fn check_holder(mirror: &Mirror<'_>) -> Result<Holder, RepackError> {
    let holder = holder(mirror.hub, mirror.target).await?;
    if let Holder::Source { repo, .. } = &holder
        && repo != mirror.source
        && Some(repo.as_str()) != mirror.moved_from
    {
        return Err(RepackError::permanent(format!(
            "{} holds the mirror of {}, not of {}; nothing committed",
            mirror.target,
            crate::gate::quote(repo),
            mirror.source
        )));
    }
    Ok(holder)
}

/// Uploads `dir` to the mirror: created private, committed, then made public unless it must stay private.
/// The mirror's manifest is checked before every commit: a repo that holds another source's mirror is never
/// committed to. If it already holds this source commit's repair, nothing is sent.
pub async fn publish(mirror: &Mirror<'_>, dir: &Path, source_sha: &str) -> Result<Published, RepackError> {
    let (hf, target) = (mirror.hf, mirror.target);
    let failed = |what: &str, e: &hf_hub::HFError| RepackError::hf(format_args!("{what} {target}"), e);
    let (ns, name) =
        target.split_once('/').ok_or_else(|| RepackError::permanent(format!("{target}: not namespace/name")))?;
    let repo = hf.model(ns, name);
    let public = mirror.visibility == Visibility::Public;
    if let Holder::Source { repo: named, revision: Some(rev) } = check_holder(mirror).await?
        && rev == source_sha
        && named == mirror.source
    {
        // A worker that died between the upload and making the mirror public left it private.
        repo.update_settings().private(!public).send().await.map_err(|e| failed("setting the visibility of", &e))?;
        return Ok(Published::AlreadyThere(head(mirror.hub, target).await?));
    }
    create_private(hf, target).await?;
    // Each file is read once: Xet's chunking takes the SHA-256 the commit names beside it.
    let files = upload::files_of(dir);
    let (lfs, asked) = upload::preupload(mirror.hub, target, &files).await?;
    let (to_store, inline): (Vec<_>, Vec<_>) =
        files.into_iter().map(|(rel, path, _)| (rel, path)).partition(|(rel, _)| lfs.contains(rel));
    let order: Vec<String> = to_store.iter().map(|(rel, _)| rel.clone()).collect();
    let (to_send, sent_ahead) = ahead::still_to_send(to_store, mirror.ahead);
    // Priming asks about the sources of the files still to send only.
    let sources: Vec<PathBuf> =
        mirror.sources.iter().filter(|p| to_send.iter().any(|(rel, _)| p.ends_with(rel))).cloned().collect();
    let (mut stored, through_xet) = upload::to_xet(mirror.hub, target, &to_send, &sources).await?;
    stored.extend(sent_ahead);
    if let Some(verdict) = &mirror.verdict {
        wait_for_verdict(verdict.clone(), target).await?;
    }
    // Again, right before the commit: the name may have been taken since it was chosen.
    check_holder(mirror).await?;
    let parent = head(mirror.hub, target).await?;
    let stored: Vec<_> = order.into_iter().filter_map(|rel| Some((rel.clone(), stored.remove(&rel)?))).collect();
    let summary = format!("Aligned safetensors from source commit {source_sha}");
    let (commit, committed) = match upload::commit(mirror.hub, target, &parent, &summary, &stored, &inline).await {
        Ok(made) => made,
        // A send whose answer was lost, then a resend refused: the first one landed if the manifest says so.
        Err(CommitError::Moved) => match check_holder(mirror).await? {
            Holder::Source { repo, revision: Some(rev) } if rev == source_sha && repo == mirror.source => {
                (head(mirror.hub, target).await?, 0)
            }
            _ => return Err(RepackError::transient(format!("{target}: its main branch moved during the commit"))),
        },
        Err(CommitError::Failed(why)) => return Err(why),
    };
    if public {
        repo.update_settings().private(false).send().await.map_err(|e| failed("making public", &e))?;
    }
    tracing::info!(repo.id = %target, preupload.bytes = asked, xet.bytes = through_xet, commit.bytes = committed, "uploaded");
    Ok(Published::Committed { commit, bytes_uploaded: asked + through_xet + committed })
}

/// Creates `target`, private, unless it exists.
async fn create_private(hf: &HFClient, target: &str) -> Result<(), RepackError> {
    let request = hf.create_repository().repo_id(target).repo_type(RepoTypeModel).private(true).exist_ok(true);
    request.send().await.map_err(|e| RepackError::hf(format_args!("creating {target}"), &e))?;
    Ok(())
}

/// Readies `mirror` for uploads ahead of the publish step: created (private) if new. `Ok(false)` when there
/// is nothing to upload ahead, because it already holds this source commit's repair.
pub async fn ready_for_uploads(mirror: &Mirror<'_>, source_sha: &str) -> Result<bool, RepackError> {
    if let Holder::Source { repo: named, revision: Some(rev) } = check_holder(mirror).await?
        && rev == source_sha
        && named == mirror.source
    {
        return Ok(false);
    }
    create_private(mirror.hf, mirror.target).await?;
    Ok(true)
}

/// The commit `target`'s main branch is at.
pub(super) async fn head(hub: &HubClient, target: &str) -> Result<String, RepackError> {
    let info = hub.model_info(target).await.map_err(|e| RepackError::hub(format_args!("reading {target}"), &e))?;
    info.sha
        .filter(|s| crate::gate::check_revision(s).is_ok())
        .ok_or_else(|| RepackError::transient(format!("{target}: the Hub names no commit for its main branch")))
}

/// Waits for the MLX check's verdict; anything but a pass commits nothing.
async fn wait_for_verdict(mut verdict: tokio::sync::watch::Receiver<Verdict>, target: &str) -> Result<(), RepackError> {
    let decided = verdict.wait_for(Option::is_some).await.ok().and_then(|v| v.clone());
    match decided {
        Some(Ok(())) => Ok(()),
        Some(Err(why)) => Err(RepackError::transient(format!("nothing committed to {target}: {why}"))),
        None => Err(RepackError::transient(format!("nothing committed to {target}: the MLX check gave no verdict"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_names_are_distinct_per_source_and_fit_the_hub() {
        assert_eq!(
            mirror_candidates("pubco/public-4bit", "me"),
            [
                "me/public-4bit-aligned",
                "me/pubco-public-4bit-aligned",
                &format!("me/public-4bit-aligned-{}", &sha256_hex(b"pubco/public-4bit")[..8])
            ]
        );
        let other = mirror_candidates("otherco/public-4bit", "me");
        assert_eq!(other[0], "me/public-4bit-aligned", "the same first choice: the store and the manifests decide");
        assert_ne!(other[1], mirror_candidates("pubco/public-4bit", "me")[1]);
        let long = format!("ns/{}", "x".repeat(96));
        let names = mirror_candidates(&long, "me");
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].len() <= "me/".len() + 96);
        let dashy = format!("ns/{}-{}", "y".repeat(78), "z".repeat(17));
        for n in mirror_candidates(&dashy, "me") {
            assert!(crate::gate::check_repo_id(&n).is_ok(), "{n}");
        }
    }
}
