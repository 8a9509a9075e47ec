//! Steps every publish path shares: write the card, count the bytes sent, set the visibility, record the
//! mirror. The paths publish a bundle checked here, one checked by a runner in this work directory, or one
//! checked by a runner on the Hub. `--pr` mode uses none of these steps: its commit goes to the source,
//! which has a visibility of its own.

use std::path::{Path, PathBuf};

use crate::hub::info::ModelInfo;
use crate::job::payload::{LocalChecks, MlxRecord, SourceFacts};
use crate::job::{Job, JobOutcome};
use crate::manifest::Manifest;
use crate::repack::error::RepackError;
use crate::repack::queue::policy::Visibility;
use crate::repack::{Repacker, publish, publish::card};

/// What a card is written from, beside the mirror's name.
pub(crate) struct CardFacts<'a> {
    /// The Hub's answer for the source, when it gave one.
    pub info: Option<&'a ModelInfo>,
    /// What the source's files said.
    pub source: SourceFacts,
    /// The mirror's manifest.
    pub manifest: &'a Manifest,
    /// The local checks' counts.
    pub checks: &'a LocalChecks,
    /// The MLX check's record.
    pub record: MlxRecord,
}

impl Repacker<'_> {
    /// Writes the model card of the mirror `target` into `dir` as `README.md`, and returns its path.
    pub(crate) fn write_card(&self, dir: &Path, target: &str, facts: CardFacts<'_>) -> Result<PathBuf, RepackError> {
        let mut source = facts.info.map(card::SourceCard::from_info).unwrap_or_default();
        if source.license.is_none() {
            source.license = facts.source.license;
        }
        let inputs = card::CardInputs {
            target_repo: target,
            endpoint: self.hub.endpoint(),
            source,
            before_bytes: facts.source.before_bytes,
            checks: facts.checks,
            mlx: facts.record,
            files: card::BundleFiles {
                license_file: facts.source.license_file.clone(),
                chat_template: facts.source.chat_template,
            },
        };
        let text = card::render(&card::CardData::new(facts.manifest, inputs))
            .map_err(|e| RepackError::permanent(format!("the card: {e}")))?;
        // The card is written aside and renamed over the old one. So a card rewritten after the MLX check
        // never shows the upload, which reads the old one, a half-written file. Aside means beside the
        // bundle, not in it, where the upload's listing would count it as a file of the mirror.
        let path = dir.join("README.md");
        let aside = dir.parent().unwrap_or(dir);
        crate::safe_fs::write_atomic_via(aside, &path, text.as_bytes())
            .map_err(|e| RepackError::io(path.display(), e))?;
        Ok(path)
    }

    /// Counts `bytes` sent for `job`. A failure to count is logged, and the job goes on.
    pub(crate) async fn count_uploaded(&self, job: &Job, bytes: u64) {
        if let Err(e) = self.store.add_job_bytes(job.id, 0, bytes).await {
            tracing::warn!(job.id = job.id, error = %e, "recording uploaded bytes failed");
        }
    }

    /// Counts what `published` sent for `job`, and gives the commit the mirror now holds.
    pub(crate) async fn landed(&self, job: &Job, published: publish::Published) -> String {
        match published {
            publish::Published::Committed { commit, bytes_uploaded } => {
                self.count_uploaded(job, bytes_uploaded).await;
                commit
            }
            publish::Published::AlreadyThere(commit) => commit,
        }
    }

    /// Ends a publish once `target` holds the repair of `job`'s source, named `named` in its manifest.
    /// Counts the bytes sent, gives the mirror `visibility`, records it, and marks the job published.
    pub(crate) async fn finish_publish(
        &self,
        job: &Job,
        (target, named): (String, &str),
        visibility: Visibility,
        published: publish::Published,
    ) -> Result<JobOutcome, RepackError> {
        publish::set_visibility(self.hub, &target, visibility, &published).await?;
        if let publish::Published::Committed { commit, bytes_uploaded } = &published {
            tracing::info!(repo.id = %job.repo_id, target = %target, commit = %commit, bytes = bytes_uploaded, "published");
        }
        let commit = self.landed(job, published).await;
        if let Err(e) = self.store.mirror_published(&target, named, visibility == Visibility::Private).await {
            tracing::warn!(job.id = job.id, error = %e, "recording the mirror's visibility failed");
        }
        Ok(JobOutcome::Published { target, commit })
    }
}
