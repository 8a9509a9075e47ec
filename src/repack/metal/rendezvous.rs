//! Uses the Hub as the rendezvous between workers and macOS runners, for deployments that expose nothing to
//! the internet.
//!
//! 1. A worker commits the repaired bundle to the mirror while the mirror is still private. It records the
//!    staged commit on the job.
//! 2. A runner that reaches only the database and the Hub claims the job. It downloads that commit and
//!    checks each file against the Hub's hash. It runs the Metal check and records its verdict, naming the
//!    commit, in the database.
//! 3. Any worker, not only the one that staged the job, adds the model card on top of exactly that commit.
//!    It then makes the mirror public.
//!
//! The runner API (`hubalign worker --runner-listen`, [`crate::repack::metal::runner`]) stays the other
//! mode. There the staged files never leave the worker before the check, and the runner must reach the
//! worker.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::hub::pacing::Bucket;
use crate::hub::{BodyLimit, HubClient};
use crate::job::payload::{MlxRecord, SourceFacts, Staged};
use crate::job::{Job, JobOutcome, JobState};
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::repack::checks::Checked;
use crate::repack::error::RepackError;
use crate::repack::metal::{Fetch, Rendezvous};
use crate::repack::publish::finish::CardFacts;
use crate::repack::queue::policy::MayMirror;
use crate::repack::queue::policy::Visibility;
use crate::repack::upload::CommitError;
use crate::repack::{Repacker, download, publish, upload};
use crate::store::{Store, StoreError};

/// Where a bundle waits for the Metal check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MetalHandoff {
    /// In the worker's directory; runners fetch it over the runner API, which must be reachable.
    #[default]
    Api,
    /// In the still-private mirror on the Hub; runners need only the database and the Hub.
    Hub,
}

impl std::str::FromStr for MetalHandoff {
    type Err = crate::error_text::Unrecognized;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "api" => Ok(MetalHandoff::Api),
            "hub" => Ok(MetalHandoff::Hub),
            other => Err(crate::error_text::Unrecognized::one_of(other, ["api", "hub"])),
        }
    }
}

/// The largest manifest read back from a staged mirror.
const MANIFEST_CAP: usize = 64 << 20;

impl Repacker<'_> {
    /// Commits the verified bundle in `output` to the mirror, kept private, and hands the job to the runners
    /// with the staged commit. If the source may no longer be mirrored, skips the job and stages nothing.
    pub(crate) async fn stage_on_hub(
        &self,
        job: &Job,
        source: &Path,
        output: &Path,
        Checked { manifest, local: checks }: Checked,
    ) -> Result<JobOutcome, RepackError> {
        let visibility = match self.source_now(job).await? {
            MayMirror::Yes { visibility, .. } => visibility,
            MayMirror::No(reason) => return Ok(JobOutcome::Skipped { reason: reason.into() }),
        };
        let (repo, namespace) = (&job.repo_id, &self.opts.target_namespace);
        let chosen = publish::choose_mirror(
            self.hub,
            self.store,
            repo,
            namespace,
            (visibility == Visibility::Private, &self.opts.caps),
        )
        .await?;
        let target = chosen.target.clone();
        let _ = self.store.set_job_target(job.id, &target).await;
        let sources: Vec<std::path::PathBuf> = manifest.shards.iter().map(|s| source.join(&s.file)).collect();
        let mirror = publish::Mirror {
            hub: self.hub,
            target: &target,
            source: repo,
            moved_from: chosen.moved_from.as_deref(),
            sources: &sources,
            verdict: None,
            ahead: None,
        };
        let published = publish::publish(&mirror, output, &job.source_sha).await?;
        // Kept private until the check has passed and the card is on top.
        publish::set_visibility(self.hub, &target, Visibility::Private, &published).await?;
        let commit = self.landed(job, published).await;
        tracing::info!(repo.id = %repo, target = %target, commit = %commit, "staged on the Hub for the Metal check");
        // Whichever worker publishes writes the card later, away from these files.
        // So what the card reads of them is recorded now.
        let files = crate::repack::publish::card::BundleFiles::of(output);
        let facts = SourceFacts {
            license: crate::repack::relayout::readme_license(source),
            before_bytes: self.before_bytes(source).await?,
            license_file: files.license_file,
            chat_template: files.chat_template,
        };
        Ok(JobOutcome::AwaitMetal { staged: Some(Staged { commit, checks, source: facts }) })
    }

    /// The source's former name that its mirror's manifest may still give, after a followed rename.
    async fn former_name(&self, job: &Job) -> Result<Option<String>, RepackError> {
        let row = self.store.mirror_of(&job.repo_id).await.map_err(|e| RepackError::transient(e.to_string()))?;
        Ok(row.and_then(|m| m.moved_from))
    }

    /// Publishes a bundle a runner checked on the Hub. The runner's record must name the staged commit.
    /// The card goes on top of that commit, and the mirror turns public if its source still is.
    pub(crate) async fn publish_from_hub(
        &self,
        job: &Job,
        staged: Staged,
        record: MlxRecord,
    ) -> Result<JobOutcome, RepackError> {
        self.step(job, JobState::Publishing, None).await?;
        if record.staged_commit.as_deref() != Some(staged.commit.as_str()) {
            return Err(RepackError::permanent(format!(
                "the Metal check's record names commit {}, not the staged {}",
                crate::untrusted::quote(record.staged_commit.as_deref().unwrap_or("none")),
                staged.commit
            )));
        }
        let target = job.target_repo.clone().ok_or_else(|| RepackError::permanent("no mirror recorded"))?;
        crate::untrusted::check_repo_id(&target).map_err(|e| RepackError::permanent(e.to_string()))?;
        let (visibility, info) = match self.source_now(job).await? {
            MayMirror::Yes { visibility, info } => (visibility, info),
            // The mirror stays private, as staged.
            MayMirror::No(reason) => return Ok(JobOutcome::Skipped { reason: reason.into() }),
        };
        let former = self.former_name(job).await?;
        let manifest = staged_manifest(self.hub, &target, &staged.commit, job, former.as_deref()).await?;
        let dir = self.opts.work_dir.join(format!("job-{}", job.id)).join("card");
        std::fs::create_dir_all(&dir).map_err(|e| RepackError::io(dir.display(), e))?;
        let facts = CardFacts {
            info: Some(&*info),
            source: staged.source.clone(),
            manifest: &manifest,
            checks: &staged.checks,
            record,
        };
        let card_path = self.write_card(&dir, &target, facts)?;
        let head = publish::head(self.hub, &target).await?;
        let published = if head == staged.commit {
            let card = [upload::LocalFile { rel: "README.md".to_owned(), path: card_path }];
            let summary = format!("Model card: the Metal check passed for source commit {}", job.source_sha);
            match upload::commit(self.hub, target.as_str().into(), &staged.commit, summary.as_str().into(), &[], &card)
                .await
            {
                Ok(made) => publish::Published::Committed { commit: made.commit, bytes_uploaded: made.sent },
                Err(CommitError::Moved) => {
                    return Err(RepackError::transient(format!("{target} moved during the commit")));
                }
                Err(CommitError::Failed(e)) => return Err(e),
            }
        } else {
            // The head is past the staged commit.
            // Only an earlier attempt's card on top of this source's repair is taken.
            match publish::holder(self.hub, &target).await? {
                publish::Holder::Source { repo, revision: Some(rev) }
                    if names_source(&repo, &job.repo_id, former.as_deref()) && rev == job.source_sha =>
                {
                    publish::Published::AlreadyThere(head)
                }
                _ => {
                    return Err(RepackError::permanent(format!("{target} changed since it was staged; not published")));
                }
            }
        };
        let named = manifest.source_repo.as_deref().unwrap_or(&job.repo_id);
        self.finish_publish(job, (target.clone(), named), visibility, published).await
    }
}

/// Reads the manifest at the staged commit. It must name this job's source repo and commit; the repo may be
/// its `former` name.
async fn staged_manifest(
    hub: &HubClient,
    target: &str,
    commit: &str,
    job: &Job,
    former: Option<&str>,
) -> Result<Manifest, RepackError> {
    let url = hub.resolve_url(target, commit, MANIFEST_FILE);
    let fetched = hub.get(Bucket::Resolvers, &url, &[], BodyLimit::Whole(MANIFEST_CAP)).await;
    let fetched = fetched.map_err(|e| RepackError::hub(format_args!("{target}@{commit}: {MANIFEST_FILE}"), e))?;
    let manifest: Manifest = serde_json::from_slice(&fetched.body)
        .map_err(|e| RepackError::permanent(format!("{target}@{commit}: {MANIFEST_FILE}: {e}")))?;
    for_job(&manifest, (&job.repo_id, &job.source_sha), former).map_err(|e| RepackError::permanent(e.to_string()))?;
    Ok(manifest)
}

/// Whether `repo` names the source `current`: by its name now, or by the `former` one its mirror's manifest
/// still gives. A rename followed while a job was staged leaves a manifest with the source's name back then.
fn names_source(repo: &str, current: &str, former: Option<&str>) -> bool {
    repo == current || Some(repo) == former
}

/// A staged manifest that is the repair of another repo or commit than its job's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the staged manifest is the repair of {staged}, not of {job}")]
struct OtherSource {
    /// What the manifest names, `repo@sha`, quoted.
    staged: String,
    /// The job's `repo@sha`.
    job: String,
}

/// Whether a staged manifest is the repair of a job's source commit, `(repo, sha)`.
fn for_job(manifest: &Manifest, (current, sha): (&str, &str), former: Option<&str>) -> Result<(), OtherSource> {
    let (repo, rev) = (manifest.source_repo.as_deref(), manifest.source_revision.as_deref());
    if repo.is_some_and(|r| names_source(r, current, former)) && rev == Some(sha) {
        return Ok(());
    }
    let quoted = |s: Option<&str>| crate::untrusted::quote(s.unwrap_or("?"));
    Err(OtherSource { staged: format!("{}@{}", quoted(repo), quoted(rev)), job: format!("{current}@{sha}") })
}

/// The store and the Hub as a runner's [`Rendezvous`], for a runner that needs no inbound connection.
/// It claims through the store and downloads the staged commit from the Hub.
pub struct HubRunner<'a> {
    /// The shared store (PostgreSQL, or the SQLite file of a one-machine deployment).
    pub store: &'a Store,
    /// The Hub, with a token that may read the target namespace's private repos.
    pub hub: &'a HubClient,
    /// This runner's name in the jobs' history.
    pub name: &'a str,
    /// How long a check may take before another runner may take the job.
    pub lease: Duration,
    /// The largest bundle downloaded.
    pub max_bytes: u64,
}

/// A job claimed through the store, with what its fetch needs.
pub struct HubClaim {
    job: Job,
    /// The mirror and the staged commit, when recorded.
    staged: Option<(String, Staged)>,
    /// The source's former name that the staged manifest may still give, after a followed rename.
    former: Option<String>,
}

/// Why a runner's pass stopped before recording a verdict: the job's lease lapses and it is claimed again.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The download from the Hub.
    #[error("downloading {target}@{commit}: {error}")]
    Download {
        /// The mirror.
        target: String,
        /// The staged commit.
        commit: String,
        /// Why.
        error: download::DownloadError,
    },
}

impl Rendezvous for HubRunner<'_> {
    type Claimed = HubClaim;
    type Error = RunnerError;

    fn job_id(claimed: &HubClaim) -> i64 {
        claimed.job.id
    }

    async fn claim(&self) -> Result<Option<HubClaim>, RunnerError> {
        let Some(job) = self.store.claim_metal_job(self.name, self.lease, true).await? else { return Ok(None) };
        let staged = job.target_repo.clone().zip(job.staged.clone().map(|s| s.0));
        let former = self.store.mirror_of(&job.repo_id).await?.and_then(|m| m.moved_from);
        Ok(Some(HubClaim { job, staged, former }))
    }

    /// Downloads the staged commit and checks each file against the Hub's hash.
    /// The commit's manifest must be the repair of the job's source commit.
    async fn fetch(&self, claimed: &HubClaim, dir: &Path) -> Result<PathBuf, Fetch<RunnerError>> {
        let Some((target, staged)) = &claimed.staged else {
            return Err(Fetch::Failed("no staged commit recorded".into()));
        };
        let layout = download::Layout {
            source: dir.join("aligned"),
            partial: dir.join("partial"),
            repair: None,
            connections: 0,
            ready: None,
            carry_only: false,
            room_for_relayout: false,
        };
        let downloaded = download::download(self.hub, target, &staged.commit, &layout, self.max_bytes).await;
        downloaded.map_err(|error| {
            let (target, commit) = (target.clone(), staged.commit.clone());
            Fetch::Unknown(RunnerError::Download { target, commit, error })
        })?;
        let manifest = Manifest::read(&layout.source).map_err(|e| Fetch::Failed(e.to_string()))?;
        let manifest = manifest.ok_or_else(|| Fetch::Failed(format!("no {MANIFEST_FILE} at the staged commit")))?;
        let job = &claimed.job;
        let former = claimed.former.as_deref();
        for_job(&manifest, (&job.repo_id, &job.source_sha), former).map_err(|e| Fetch::Failed(e.to_string()))?;
        Ok(layout.source)
    }

    /// Records the verdict, naming the staged commit it judged.
    async fn record(&self, claimed: HubClaim, mut record: MlxRecord) -> Result<bool, RunnerError> {
        record.staged_commit = claimed.staged.map(|(_, staged)| staged.commit);
        Ok(self.store.metal_result(claimed.job.id, self.name, &record).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_of(repo: &str, rev: &str) -> Manifest {
        let json = serde_json::json!({"tool": "hubalign", "generated_utc": "2026-12-02T00:00:00Z", "source_dir": "d",
            "source_repo": repo, "source_revision": rev, "target_alignment": 8, "shards": []});
        serde_json::from_value(json).unwrap()
    }

    /// A job staged under a source's old name is still recognised once its rename was followed.
    /// The mirror records the name its manifest gives. A manifest of another repo or commit is refused.
    #[test]
    fn a_staged_manifest_names_the_jobs_source_now_or_as_it_was() {
        let job = ("ns/new", "abc");
        assert_eq!(for_job(&manifest_of("ns/new", "abc"), job, None), Ok(()));
        assert_eq!(for_job(&manifest_of("ns/old", "abc"), job, Some("ns/old")), Ok(()));
        let refused = for_job(&manifest_of("ns/old", "abc"), job, None).unwrap_err().to_string();
        assert!(refused.contains("ns/old") && refused.contains("ns/new@abc"), "{refused}");
        assert!(for_job(&manifest_of("ns/other", "abc"), job, Some("ns/old")).is_err());
        assert!(for_job(&manifest_of("ns/old", "def"), job, Some("ns/old")).is_err());
    }
}
