//! Publishes a snapshot to its dataset repo. It sends only the files whose bytes differ from what the repo
//! holds. It sends them in one commit on the head they were compared against. When nothing changed, it sends
//! nothing.
//!
//! The repo must be the service's. Either its card carries the mark ([`super::MARKER`]), or it has no card
//! yet and the store records its creation. The second case covers a repo before its first push. Any other
//! repo is refused before anything is written.
//!
//! A file is unchanged when the repo's tree names the same content. For a file in LFS or the CAS, the LFS oid
//! must equal its SHA-256. For a small file such as the card, the git blob id must match. A part the repo
//! holds for the snapshot's day is deleted if the snapshot no longer has it. That happens when all the
//! publishers of a bucket went private. The other days of the tables that name repos are deleted too
//! ([`super::stale_parts`]). Earlier days of the sums stay.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::Snapshot;
use crate::hub::BodyLimit;
use crate::hub::commit::{Change, CommitRefused, Stored};
use crate::hub::pacing::Bucket;
use crate::hub::repo_ref::RepoRef;
use crate::hub::repos::Created;
use crate::hub::{HubClient, HubError};
use crate::repack::RepackError;
use crate::repack::upload;
use crate::store::owned::OwnedKind;
use crate::store::{Store, StoreError};

/// Whether a push writes, or only says what it would write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Create the repo if needed, and commit.
    Apply,
    /// Read the Hub and the store, and fill [`Pushed`] with what would be written and deleted.
    DryRun,
}

/// The largest card read to look for the marker.
const CARD_CAP: usize = 1 << 20;

/// What a push did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pushed {
    /// The commit made; `None` when nothing had changed, or in a dry run.
    pub commit: Option<String>,
    /// Whether the repo did not exist, so the push created it. In a dry run, the push would have.
    pub created: bool,
    /// Files written by the commit (new or changed), by path.
    pub written: Vec<String>,
    /// Files it deleted.
    pub deleted: Vec<String>,
    /// Files already as they are.
    pub unchanged: usize,
    /// Bytes of the files written.
    pub bytes_written: u64,
    /// Bytes sent to the Hub: the preupload question, the upload, the commit.
    pub bytes_sent: u64,
}

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The Hub refused or failed a request.
    #[error("{what} of {repo}: {source}")]
    Hub {
        /// The request.
        what: &'static str,
        /// The dataset repo.
        repo: String,
        /// Why.
        #[source]
        source: Box<HubError>,
    },
    /// Uploading the files failed.
    #[error(transparent)]
    Upload(#[from] RepackError),
    /// The branch moved between the comparison and the commit. Either another writer committed, or this very
    /// commit landed and its answer was lost. The next push compares again. In the second case it finds
    /// nothing to do.
    #[error(
        "{0}: the branch moved during the push (another writer, or this commit landed and its answer was lost); the next push compares again"
    )]
    Moved(String),
    /// The dataset repo exists and is private. The dataset is published public, so a private repo of that
    /// name is not written into.
    #[error("{0} exists and is private; give a public dataset repo, or make it public")]
    Private(String),
    /// The dataset repo exists, but the service did not make it, so nothing is written into it.
    #[error(
        "{0} exists and hubalign did not make it: its README.md does not carry {marker}. Nothing was written. \
          Choose another dataset repo with --repo (serve: --publish-dataset)",
        marker = super::MARKER
    )]
    NotOurs(String),
    /// The store could not be read or written.
    #[error("the store's record of the dataset repo")]
    Store(#[from] StoreError),
    /// The repo holds a newer day than the snapshot's. Pushing would delete the newer day's tables.
    #[error("{repo} holds {newest}, newer than the snapshot's {date}; push a snapshot of {newest} or later")]
    Older {
        /// The dataset repo.
        repo: String,
        /// The snapshot's day.
        date: String,
        /// The newest day the repo holds.
        newest: String,
    },
    /// The card could not be rendered.
    #[error("rendering the dataset card")]
    Card(#[source] Box<super::DatasetError>),
    /// A batch thread for the work could not run it.
    #[error(transparent)]
    Blocking(#[from] crate::blocking::BlockingError),
    /// A file could not be staged for the upload.
    #[error("staging {path}: {source}")]
    Stage {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Pushes the snapshot's files, keyed by path, and its card to the public dataset repo `repo`. It creates the
/// repo if it does not exist. It stages the files to upload in `scratch` first. A repo that exists must be
/// ours.
pub async fn push(
    (hub, store): (&HubClient, &Store),
    repo: &str,
    (snapshot, mut files): (&Snapshot, BTreeMap<String, Vec<u8>>),
    scratch: &Path,
    mode: Mode,
) -> Result<Pushed, PushError> {
    let target = RepoRef::dataset(repo);
    let failed =
        |what: &'static str| move |source| PushError::Hub { what, repo: repo.to_owned(), source: Box::new(source) };
    let mut created = false;
    let head = match hub.head_of(target).await.map_err(failed("reading the head"))? {
        // The card names a public dataset. A private repo of that name is the operator's, not this one's.
        Some((_, true)) => return Err(PushError::Private(repo.to_owned())),
        Some((head, false)) => {
            ensure_ours((hub, store), repo, &head, mode).await?;
            head
        }
        None if mode == Mode::DryRun => {
            let written: Vec<String> = std::iter::once("README.md".to_owned()).chain(files.keys().cloned()).collect();
            let bytes_written = files.values().map(|b| b.len() as u64).sum();
            return Ok(Pushed { created: true, written, bytes_written, ..Pushed::default() });
        }
        None => {
            // Record the claim before creating the repo. Then a creation whose answer is lost, followed by a
            // 409, is still known as ours.
            store.record_owned(OwnedKind::Dataset, repo).await?;
            let made = match hub.create_dataset_repo(repo, false).await {
                Ok(made) => made,
                Err(e) => {
                    // The repo was not made, so a repo someone makes under that name later is theirs.
                    store.forget_owned(OwnedKind::Dataset, repo).await?;
                    return Err(failed("creating")(e));
                }
            };
            let head = hub.head_of(target).await.map_err(failed("reading the head"))?.map(|(head, _)| head);
            let head = head.ok_or_else(|| PushError::Hub {
                what: "reading the head",
                repo: repo.to_owned(),
                source: Box::new(HubError::Malformed { url: repo.to_owned(), detail: "created, yet not found".into() }),
            })?;
            match made {
                Created::New => created = true,
                // Either ours with its answer lost, or someone else's made meanwhile. A repo that already has
                // a card is not one this push made a moment ago.
                Created::Existed => {
                    let card = ["README.md".to_owned()];
                    let held = hub.paths_info_of(target, &head, &card).await.map_err(failed("reading the card"))?;
                    if !held.is_empty() {
                        store.forget_owned(OwnedKind::Dataset, repo).await?;
                        ensure_ours((hub, store), repo, &head, mode).await?;
                    }
                }
            }
            head
        }
    };
    // List the days each table holds. The other days of the tables that name repos are deleted. A table of
    // sums with no rows today keeps its config while the repo holds its parts of other days.
    let mut found: Vec<(&str, String)> = Vec::new();
    for (table, _) in super::tables::COLUMNS {
        let dirs = hub.dirs_of(target, &head, table).await.map_err(failed("listing a table's days"))?;
        let prefix = format!("{table}/");
        found.extend(dirs.iter().filter_map(|d| d.strip_prefix(&prefix)).map(|day| (table, day.to_owned())));
    }
    // A snapshot older than a day the repo holds would delete the newer day's tables.
    let newest =
        found.iter().filter(|(t, d)| !super::HISTORY_TABLES.contains(t) && super::is_day(d)).map(|(_, d)| d).max();
    if let Some(newest) = newest.filter(|newest| **newest > snapshot.date) {
        let (repo, date, newest) = (repo.to_owned(), snapshot.date.clone(), newest.clone());
        return Err(PushError::Older { repo, date, newest });
    }
    let stale = super::stale_parts(found.iter().map(|(t, d)| (*t, d.as_str())), &snapshot.date);
    let earlier: std::collections::BTreeSet<String> = found
        .iter()
        .filter(|(table, day)| super::HISTORY_TABLES.contains(table) && *day != snapshot.date && super::is_day(day))
        .map(|(table, _)| (*table).to_owned())
        .collect();
    let card = snapshot.card(repo, &earlier).map_err(|e| PushError::Card(Box::new(e)))?;
    files.insert("README.md".to_owned(), card.into_bytes());
    let files = &files;
    // Ask only for the paths this snapshot may write or delete: the card, the day's parts, and the other
    // days' parts of the tables that name repos.
    let deletable: std::collections::BTreeSet<String> =
        super::day_parts(&snapshot.date).into_iter().chain(stale).collect();
    let asked: Vec<String> = std::iter::once("README.md".to_owned())
        .chain(deletable.iter().cloned())
        .chain(files.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let tree = hub.paths_info_of(target, &head, &asked).await.map_err(failed("reading the files' ids"))?;
    // Compute both ids of each file in one blocking job: the LFS oid and the git blob id.
    let all = files.clone();
    let digests = crate::blocking::run("hashing a dataset's files", move || -> HashMap<String, (String, String)> {
        all.iter().map(|(p, b)| (p.clone(), (crate::hashing::sha256_hex(b), crate::hashing::git_blob_oid(b)))).collect()
    });
    let digests = digests.await?;
    let (mut pushed, sha256) = compare(files, &digests, &tree, &deletable);
    pushed.created = created;
    if mode == Mode::DryRun || (pushed.written.is_empty() && pushed.deleted.is_empty()) {
        return Ok(pushed);
    }

    let written: Vec<(String, Vec<u8>)> = pushed.written.iter().map(|rel| (rel.clone(), files[rel].clone())).collect();
    let dir = scratch.to_owned();
    let staged = crate::blocking::run("staging a dataset's files", move || stage(&dir, &written)).await??;
    let (lfs, asked) = upload::preupload(hub, target.into(), &staged).await?;
    let (to_send, _inline) = upload::split_by_lfs(staged, &lfs);
    let (stored, sent) = upload::to_xet(hub, target.into(), &to_send, (&[], &sha256)).await?;
    let stored: Vec<(String, Stored)> = stored.into_iter().collect();
    let mut changes: Vec<Change<'_>> = stored.iter().map(|(path, stored)| Change::Lfs { path, stored }).collect();
    for rel in pushed.written.iter().filter(|rel| !lfs.contains(rel)) {
        changes.push(Change::Inline { path: rel, content: files[rel].clone() });
    }
    changes.extend(pushed.deleted.iter().map(|path| Change::Delete { path }));
    let summary = format!(
        "Snapshot of {}: {} files written, {} deleted",
        snapshot.date,
        pushed.written.len(),
        pushed.deleted.len()
    );
    let committed = match hub.commit(target.into(), &head, summary.as_str().into(), &changes).await {
        Ok(done) => done,
        Err(CommitRefused::Moved) => return Err(PushError::Moved(repo.to_owned())),
        Err(CommitRefused::Hub(e)) => return Err(failed("committing")(e)),
    };
    pushed.commit = Some(committed.commit);
    pushed.bytes_sent = asked + sent + committed.sent;
    Ok(pushed)
}

/// Decides what a push must do. `digests` gives each file's SHA-256 and git blob id. `held` is what the Hub
/// answered for the asked paths. Each of `files` is written unless `held` names the same content. Each
/// `deletable` part that the repo holds and the snapshot does not have is deleted. Only names this snapshot
/// builds are looked up. So whatever else the Hub answered, such as a path never asked for or `../x`, is
/// neither written nor deleted. Also returns the SHA-256 of each file to write.
fn compare(
    files: &BTreeMap<String, Vec<u8>>,
    digests: &HashMap<String, (String, String)>,
    held: &[crate::hub::tree::TreeFile],
    deletable: &std::collections::BTreeSet<String>,
) -> (Pushed, HashMap<String, String>) {
    let held: HashMap<&str, &crate::hub::tree::TreeFile> = held.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut pushed = Pushed::default();
    let mut sha256 = HashMap::new();
    for (path, bytes) in files {
        let (digest, blob) = digests.get(path).cloned().unwrap_or_default();
        let same = held.get(path.as_str()).is_some_and(|f| match &f.lfs {
            Some(lfs) => lfs.oid == digest,
            None => f.oid == blob,
        });
        if same {
            pushed.unchanged += 1;
        } else {
            pushed.written.push(path.clone());
            pushed.bytes_written += bytes.len() as u64;
            sha256.insert(path.clone(), digest);
        }
    }
    pushed.deleted =
        deletable.iter().filter(|p| held.contains_key(p.as_str()) && !files.contains_key(*p)).cloned().collect();
    (pushed, sha256)
}

/// Checks that a push to `repo` may go ahead, and writes nothing. It may if the repo does not exist yet, or
/// if it is public and ours. `serve` asks at start, so that it names someone else's repo before the first
/// audit.
pub async fn check_destination((hub, store): (&HubClient, &Store), repo: &str) -> Result<(), PushError> {
    let failed = |source| PushError::Hub { what: "reading the head", repo: repo.to_owned(), source: Box::new(source) };
    match hub.head_of(RepoRef::dataset(repo)).await.map_err(failed)? {
        None => Ok(()),
        Some((_, true)) => Err(PushError::Private(repo.to_owned())),
        Some((head, false)) => ensure_ours((hub, store), repo, &head, Mode::DryRun).await,
    }
}

/// Refuses `repo` at `head` unless it is ours. Its card decides first. A marked card makes it ours, and the
/// store then records it, unless in a dry run. A card without the mark makes it not ours, whatever the store
/// says: someone deleted the repo and made it again. A repo without a card is ours only if the store records
/// it. That is a repo made whose first push is not done.
async fn ensure_ours((hub, store): (&HubClient, &Store), repo: &str, head: &str, mode: Mode) -> Result<(), PushError> {
    let url = hub.resolve_url(&format!("datasets/{repo}"), head, "README.md");
    let card = match hub.get(Bucket::Resolvers, &url, &[], BodyLimit::Prefix(CARD_CAP)).await {
        Ok(fetched) => Some(fetched.body.to_vec()),
        Err(e) if e.error_code() == Some("EntryNotFound") => None,
        Err(e) => {
            return Err(PushError::Hub { what: "reading the card", repo: repo.to_owned(), source: Box::new(e) });
        }
    };
    let recorded = store.owns(OwnedKind::Dataset, repo).await?;
    match card {
        None if recorded => Ok(()),
        Some(card) if super::is_marked(&card) => {
            if !recorded && mode == Mode::Apply {
                tracing::info!(dataset = %repo, "a dataset repo marked as hubalign's, not in the store; recorded");
                store.record_owned(OwnedKind::Dataset, repo).await?;
            }
            Ok(())
        }
        _ => Err(PushError::NotOurs(repo.to_owned())),
    }
}

/// Writes `files` into `scratch`, each under its path in the repo, and returns their paths here. The snapshot
/// builds those paths from table, date and part names only.
fn stage(scratch: &Path, files: &[(String, Vec<u8>)]) -> Result<Vec<upload::BundleFile>, PushError> {
    let mut staged = Vec::with_capacity(files.len());
    for (rel, bytes) in files {
        let path = scratch.join(rel);
        let failed = |source| PushError::Stage { path: path.clone(), source };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(failed)?;
        }
        crate::safe_fs::write_atomic(&path, bytes).map_err(failed)?;
        staged.push(upload::BundleFile { rel: rel.clone(), path, size: bytes.len() as u64 });
    }
    Ok(staged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::tree::{LfsInfo, TreeFile};

    fn entry(path: &str, lfs: Option<&str>, oid: &str) -> TreeFile {
        TreeFile { path: path.into(), size: 1, oid: oid.into(), lfs: lfs.map(|o| LfsInfo { oid: o.into() }) }
    }

    #[test]
    fn only_the_snapshot_s_own_names_are_written_or_deleted_whatever_the_hub_answers() {
        let date = "2026-12-04";
        let kept = crate::dataset::part_path("repos", date, 1);
        let changed = crate::dataset::part_path("shards", date, 2);
        let gone = crate::dataset::part_path("mirrors", date, 3);
        let files: BTreeMap<String, Vec<u8>> =
            [(kept.clone(), b"a".to_vec()), (changed.clone(), b"b".to_vec()), ("README.md".to_owned(), b"c".to_vec())]
                .into_iter()
                .collect();
        let digests: HashMap<String, (String, String)> = files
            .iter()
            .map(|(p, b)| (p.clone(), (crate::hashing::sha256_hex(b), crate::hashing::git_blob_oid(b))))
            .collect();
        let held = vec![
            entry(&kept, Some(&digests[&kept].0), "x"),
            entry(&changed, Some("0".repeat(64).as_str()), "x"),
            entry(&gone, Some("1".repeat(64).as_str()), "x"),
            // The card as a small file with its git blob id.
            entry("README.md", None, &digests["README.md"].1),
            // What a hostile or careless answer may add: never touched.
            entry("../outside", None, "x"),
            entry("repos/2026-12-03/part-01.parquet", Some("2".repeat(64).as_str()), "x"),
            entry("repos/2026-12-04/part-99.parquet", Some("3".repeat(64).as_str()), "x"),
            entry("repos/2026-12-04/../../x", None, "x"),
        ];
        let (pushed, sha256) = compare(&files, &digests, &held, &crate::dataset::day_parts(date));
        assert_eq!(pushed.written, std::slice::from_ref(&changed));
        assert_eq!(pushed.deleted, [gone]);
        assert_eq!(pushed.unchanged, 2);
        assert_eq!(sha256.keys().collect::<Vec<_>>(), [&changed]);
    }
}
