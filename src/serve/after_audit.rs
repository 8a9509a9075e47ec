//! Runs what follows each audit on the replica that ran it. It runs in a task of its own, so the scheduler
//! never waits for the Hub's writes. It pushes the public dataset (`--publish-dataset`). Then it keeps the
//! mirrors' Collections in step (`--collections`) and posts the notes on sources (`--note-sources`).
//!
//! An audit that ends while a pass runs wakes one more pass after it. Wakes are not queued beyond one, so a
//! burst of audits costs at most two passes. Encoding the tables is CPU work, so it runs on a blocking
//! thread. A part that fails is logged and leaves the others alone. The next audit tries again.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{Notify, watch};

use super::Shared;
use crate::dataset::push::{PushError, Pushed};
use crate::dataset::{DatasetError, Snapshot};
use crate::findable::{FindablePolicy, collections, notes};

/// What the pass after each audit publishes; nothing by default.
#[derive(Debug, Clone, Default)]
pub struct AfterAuditConfig {
    /// The dataset repo the audit's public results go to.
    pub dataset: Option<String>,
    /// The collections and notes to keep.
    pub findable: Option<FindablePolicy>,
    /// Where the dataset's files are staged for upload.
    pub scratch: PathBuf,
}

impl AfterAuditConfig {
    /// Whether there is anything to publish.
    pub fn any(&self) -> bool {
        self.dataset.is_some() || self.findable.is_some()
    }
}

/// Runs a pass each time `wake` is notified, until `stop`.
pub(super) async fn run(
    shared: Arc<Shared>,
    config: AfterAuditConfig,
    wake: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = wake.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        pass(&shared, &config).await;
    }
}

/// Runs one pass: the dataset, then the collections, then the notes.
#[tracing::instrument(skip_all)]
async fn pass(shared: &Shared, config: &AfterAuditConfig) {
    if let Some(repo) = &config.dataset {
        match push_dataset(shared, repo, &config.scratch).await {
            Ok(pushed) => match &pushed.commit {
                None => {
                    tracing::info!(dataset = %repo, unchanged = pushed.unchanged, "dataset unchanged; nothing committed");
                }
                Some(commit) => tracing::info!(
                    dataset = %repo, commit = %commit, files = pushed.written.len(), deleted = pushed.deleted.len(),
                    bytes = pushed.bytes_sent, "dataset published"
                ),
            },
            Err(e) => {
                tracing::warn!(dataset = %repo, error = %crate::error_text::with_causes(&e), "publishing the dataset failed; the next audit tries again");
            }
        }
    }
    let Some(findable) = &config.findable else { return };
    if findable.collections {
        match collections::sync(&shared.hub, &shared.store, &findable.owner, collections::Mode::Apply).await {
            Ok(done) => tracing::info!(
                created = done.created,
                added = done.added,
                removed = done.removed,
                refused = done.refused.len(),
                failed = done.failed.len(),
                "collections kept"
            ),
            Err(e) => tracing::warn!(error = %e, "keeping the collections failed; the next audit tries again"),
        }
    }
    if let Some(policy) = &findable.notes {
        match notes::post(&shared.hub, &shared.store, policy).await {
            Ok(done) => tracing::info!(
                posted = done.posted.len(),
                found = done.found,
                declined = done.declined.len(),
                failed = done.failed.len(),
                "notes on sources"
            ),
            Err(e) => tracing::warn!(error = %e, "posting notes on sources failed; the next audit tries again"),
        }
    }
}

/// Why the dataset was not pushed.
#[derive(Debug, thiserror::Error)]
enum PublishError {
    /// The snapshot could not be read or encoded.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The push failed.
    #[error(transparent)]
    Push(#[from] PushError),
    /// The encoding's thread failed.
    #[error(transparent)]
    Blocking(#[from] crate::blocking::BlockingError),
    /// The staging directory could not be made.
    #[error("making the staging directory {path}: {source}")]
    Scratch {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Pushes today's snapshot to `repo`.
async fn push_dataset(shared: &Shared, repo: &str, scratch: &std::path::Path) -> Result<Pushed, PublishError> {
    let snapshot = Snapshot::of(&shared.store, &crate::dataset::today()).await?;
    let owned = snapshot.clone();
    let parts = crate::blocking::run("encoding the dataset", move || owned.parts()).await??;
    let dir = scratch.to_owned();
    let made = crate::blocking::run("making the dataset's staging directory", move || {
        std::fs::create_dir_all(&dir)?;
        tempfile::tempdir_in(&dir)
    });
    let staging = made.await?.map_err(|source| PublishError::Scratch { path: scratch.to_owned(), source })?;
    let pushed = crate::dataset::push::push(
        (&shared.hub, &shared.store),
        repo,
        (&snapshot, parts),
        staging.path(),
        crate::dataset::push::Mode::Apply,
    )
    .await;
    // Removing the staged files is disk work too. Its failure does not undo the push.
    if let Err(e) = crate::blocking::run("removing the dataset's staged files", move || drop(staging)).await {
        tracing::warn!(error = %e, "removing the dataset's staged files failed");
    }
    Ok(pushed?)
}
