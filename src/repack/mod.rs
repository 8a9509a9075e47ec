//! The repack worker's pipeline: download → re-lay → verify (structural, memory-mapped, MLX load) → publish
//! an `-aligned` mirror with a model card and `MEI_ALIGN_MANIFEST.json`. Each step is recorded on the job;
//! nothing is published that did not pass every required check.

pub mod ahead;
pub mod card;
pub mod carry;
pub mod download;
pub mod error;
mod finish;
pub mod lfs;
pub mod lifecycle;
pub mod metal_check;
pub mod mlx;
pub mod policy;
pub mod prime;
pub mod publish;
pub mod pull_request;
pub mod rendezvous;
pub mod room;
pub mod runner;
pub mod stream;
mod transfer;
pub mod upload;
pub mod verify;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bundle::discover;
use crate::fix::{Destination, FixOptions, fix};
use crate::hub::HubClient;
use crate::hub::info::ModelInfo;
use crate::job::payload::{LocalChecks, MlxRecord, SourceFacts, Staged};
use crate::job::{Job, JobOutcome, JobState};
use crate::manifest::Manifest;
use crate::safetensors::Alignment;
use crate::store::{Store, StoreError};

use crate::job::VerifyDevice;
pub use error::RepackError;
use rendezvous::MetalHandoff;

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct RepackOptions {
    /// Mirrors go to `{target_namespace}/{name}-aligned`.
    pub target_namespace: String,
    /// Where bundles are downloaded and repaired (one directory per job, removed when done).
    pub work_dir: PathBuf,
    /// The Python with `mlx` that runs `deploy/verify_mlx.py`.
    pub python: PathBuf,
    /// The MLX check script.
    pub mlx_script: PathBuf,
    /// Data-section alignment.
    pub alignment: Alignment,
    /// This worker's name, for leases.
    pub worker: String,
    /// How long a step may take before another worker may take the job over.
    pub lease: Duration,
    /// Propose the repair as a pull request on the source repo instead of publishing a mirror.
    pub pull_request: bool,
    /// The token's user: the author the pull-request de-duplication looks for.
    pub bot_user: String,
    /// The largest bundle a job downloads; a larger one is refused.
    pub max_bundle_bytes: u64,
    /// Connections a download may hold at once (0: [`download::DEFAULT_CONNECTIONS`]).
    pub download_connections: usize,
    /// Where private mirrors of private sources are allowed (none unless the operator says).
    pub private_mirrors: policy::PrivateMirrors,
    /// Where a bundle waits for the Metal check: in the work directory (runner API) or in the private
    /// mirror on the Hub.
    pub metal_handoff: rendezvous::MetalHandoff,
    /// How many new mirrors a day may bring.
    pub caps: crate::store::mirrors::MirrorCaps,
}

/// The largest bundle a job downloads unless told otherwise: 1 TB.
pub const DEFAULT_MAX_BUNDLE_BYTES: u64 = 1_000_000_000_000;

/// What a worker needs.
pub struct Repacker<'a> {
    /// The Hub client: trees with their hashes, downloads, the mirror and its commit.
    pub hub: &'a HubClient,
    /// The store.
    pub store: &'a Store,
    /// Options.
    pub opts: &'a RepackOptions,
}

/// Runs a disk- or CPU-bound step on a thread of its own, so that a repack never holds an executor thread
/// the pages and the audit share; a panic there fails the step, to be tried again. The work starts at once,
/// not when the result is first awaited.
fn off_executor<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<T, RepackError> + Send + 'static,
) -> impl Future<Output = Result<T, RepackError>> {
    let running = crate::blocking::run(what, work);
    async move { running.await.map_err(RepackError::caused_by)? }
}

/// What the publish step waits for from the work that runs beside it.
#[derive(Default)]
struct Beside {
    /// The MLX check's verdict, when the check runs during the upload.
    verdict: Option<tokio::sync::watch::Receiver<publish::Verdict>>,
    /// What went up ahead, once the uploads ahead have ended.
    ahead: Option<tokio::sync::oneshot::Receiver<Option<ahead::Ahead>>>,
}

/// What the re-layout step left: a staged bundle to verify and publish, or why there is nothing to do.
enum Relaid {
    Staged,
    Skipped(String),
}

/// Where a claimed job takes up its work, read from its row: the one place that decides which way a job goes.
#[derive(Debug, PartialEq, Eq)]
enum Resume {
    /// From the start: the visibility check, then download, re-layout, checks and publish.
    Start,
    /// Back from a runner that checked the bundle staged in this work directory (or from a publish that
    /// stopped half-way): publish it with the check's record.
    PublishChecked {
        /// The MLX check's record, for the card.
        record: MlxRecord,
    },
    /// Back from a runner that checked the bundle staged on the Hub: any worker publishes that commit.
    PublishStaged {
        /// The staged commit, the local checks and the source's facts.
        staged: Staged,
        /// The runner's record, which must name the staged commit.
        record: MlxRecord,
    },
}

impl Resume {
    /// Where `job` resumes, with its staged output (if any) in `output`. A job in `publishing` without the
    /// check's record, or whose staged files are on another worker's disk, starts again: its download is
    /// verified anew and nothing unchecked is published.
    fn of(job: &Job, output: &Path) -> Resume {
        if job.state != JobState::Publishing {
            return Resume::Start;
        }
        let Some(record) = job.verification.as_ref().map(|r| r.0.clone()) else {
            tracing::info!(job.id = job.id, "publishing, but no check recorded: starting again");
            return Resume::Start;
        };
        if let Some(staged) = job.staged.as_ref().map(|s| s.0.clone()) {
            return Resume::PublishStaged { staged, record };
        }
        if output.join(crate::manifest::MANIFEST_FILE).exists() {
            return Resume::PublishChecked { record };
        }
        tracing::info!(job.id = job.id, "checked on another worker's files: starting again");
        Resume::Start
    }
}

/// The repack pipeline as what a worker loop ([`crate::worker::WorkerLoop`]) runs for each job.
pub struct RepackRunner {
    /// The Hub client.
    pub hub: std::sync::Arc<HubClient>,
    /// The store.
    pub store: Store,
    /// The worker's options (its name is the loop's).
    pub opts: RepackOptions,
}

impl crate::worker::JobRunner for RepackRunner {
    async fn run(&self, job: Job) -> Result<Option<JobState>, StoreError> {
        let repacker = Repacker { hub: &self.hub, store: &self.store, opts: &self.opts };
        repacker.run(&job).await
    }
}

impl Repacker<'_> {
    /// Runs a claimed job to its end (or to the Metal handoff) and records the outcome. `None` if the worker
    /// lost the job meanwhile (its lease ran out and another worker took it over, whose outcome stands).
    pub async fn run(&self, job: &Job) -> Result<Option<JobState>, StoreError> {
        let dir = self.opts.work_dir.join(format!("job-{}", job.id));
        let mut out_of_space = false;
        let outcome = match self.steps(job, &dir).await {
            Ok(outcome) => outcome,
            Err(e) => {
                let reason = e.reason();
                if let Some(until) = e.deferred_until {
                    tracing::info!(repo.id = %job.repo_id, job.id = job.id, reason = %reason, "deferred");
                    JobOutcome::Deferred { reason, until }
                } else {
                    tracing::warn!(repo.id = %job.repo_id, job.id = job.id, reason = %reason, kind = e.kind.as_str(), "repack failed");
                    out_of_space = e.out_of_space;
                    JobOutcome::Failed { reason, kind: e.kind }
                }
            }
        };
        let Some(state) = self.store.finish_job(job.id, &self.opts.worker, &outcome).await? else {
            // The files may be the new holder's now (two workers of one service share a work directory).
            tracing::warn!(repo.id = %job.repo_id, job.id = job.id, "the job was taken over; its outcome is not recorded");
            return Ok(None);
        };
        // A job that ended without a mirror leaves none: an empty repo it created goes, and its name with it.
        if matches!(state, JobState::Failed | JobState::Skipped) && !self.opts.pull_request {
            publish::abandon(self.hub, self.store, &job.repo_id).await;
        }
        // A job waiting for the Metal check keeps its staged files for the runner and the publish after it
        // (unless they wait on the Hub); one that will be tried again keeps its downloads, unless the disk ran
        // out of space for them: the next job gets the space back.
        let staged_here = state == JobState::AwaitingMetalVerify && self.opts.metal_handoff == MetalHandoff::Api;
        if !staged_here && (state != JobState::Queued || out_of_space) {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(Some(state))
    }

    /// How the source may be mirrored now, from the Hub's answer (`Err` inside says why it may not be), with
    /// that answer.
    async fn visibility(
        &self,
        job: &Job,
    ) -> Result<(Result<policy::Visibility, &'static str>, Option<ModelInfo>), RepackError> {
        let info = self.hub.model_info(&job.repo_id).await;
        let verdict = policy::visibility_now(
            &job.repo_id,
            info.as_ref(),
            &self.opts.target_namespace,
            &self.opts.private_mirrors,
        )?;
        Ok((verdict, info.ok()))
    }

    async fn step(&self, job: &Job, state: JobState) -> Result<(), RepackError> {
        // The crash tests kill a worker between a step's work and the record of the next step; debug builds
        // can be told to linger there so that the kill lands in that window every time.
        #[cfg(debug_assertions)]
        if let Some(ms) = std::env::var("HUBALIGN_DEBUG_STEP_PAUSE_MS").ok().and_then(|v| v.parse().ok()) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let rss = crate::blocking::peak_rss().unwrap_or(0);
        tracing::info!(job.id = job.id, repo.id = %job.repo_id, step = state.as_str(), rss.peak_bytes = rss, "step");
        match self.store.advance_job(job.id, &self.opts.worker, state, self.opts.lease).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(RepackError::transient("the lease was lost to another worker")),
            Err(e) => Err(RepackError::transient(e.to_string())),
        }
    }

    async fn steps(&self, job: &Job, dir: &std::path::Path) -> Result<JobOutcome, RepackError> {
        if let Err(e) =
            crate::gate::check_repo_id(&job.repo_id).and_then(|()| crate::gate::check_revision(&job.source_sha))
        {
            return Err(RepackError::permanent(format!("refusing the job: {e}")));
        }
        let (source, output) = (dir.join("source"), dir.join("aligned"));
        match Resume::of(job, &output) {
            Resume::PublishStaged { staged, record } => return self.publish_from_hub(job, staged, record).await,
            Resume::PublishChecked { record } => {
                // The checks ran in the worker that staged the bundle, but this one has not seen the files.
                let staged = output.clone();
                let checked = off_executor("the local checks", move || local_checks(&staged)).await?;
                return self.publish_staged(job, &source, &output, record, checked, Beside::default()).await;
            }
            Resume::Start => {}
        }
        // Nothing that may not be mirrored is even downloaded; publishing checks again.
        let mut private = None;
        if !self.opts.pull_request {
            match self.visibility(job).await? {
                (Err(reason), _) => return Ok(JobOutcome::Skipped { reason: reason.into() }),
                (Ok(visibility), _) => private = Some(visibility == policy::Visibility::Private),
            }
            // The mirror's name is taken before the download, so that a day's cap of new mirrors holds the
            // job back before it spends any bandwidth.
            let (namespace, caps) = (&self.opts.target_namespace, &self.opts.caps);
            let private = private == Some(true);
            publish::choose_mirror(self.hub, self.store, &job.repo_id, namespace, (private, caps)).await?;
        }
        // A bundle that waits for the Metal runner is published by whichever worker takes it back: nothing
        // goes up ahead for it.
        if job.verify_device == VerifyDevice::Metal && !cfg!(all(target_os = "macos", target_arch = "aarch64")) {
            private = None;
        }
        // Shards that header padding fixes are repaired as they stream: written once, and never read again
        // by this worker (the bundle keeps a stub of each). A mirror's go to its CAS as each is done.
        let streamed = dir.join("streamed");
        let (ready_tx, ready) = tokio::sync::mpsc::unbounded_channel();
        let (ahead_tx, ahead) = tokio::sync::oneshot::channel();
        let uploads = async {
            let sent = match private {
                Some(private) => self.upload_ahead(job, private, (&source, &streamed), ready).await,
                None => None,
            };
            let _ = ahead_tx.send(sent);
        };
        let ready = private.is_some().then_some(ready_tx);
        let ahead = private.is_some().then_some(ahead);
        let (outcome, ()) = tokio::join!(self.download_to_publish(job, dir, ready, ahead), uploads);
        outcome
    }

    /// Everything after the visibility check: download, re-lay, verify, publish; `ready` is told of each
    /// shard repaired as it streamed, and `ahead` brings what went up ahead of the publish step.
    async fn download_to_publish(
        &self,
        job: &Job,
        dir: &std::path::Path,
        ready: Option<tokio::sync::mpsc::UnboundedSender<String>>,
        ahead: Option<tokio::sync::oneshot::Receiver<Option<ahead::Ahead>>>,
    ) -> Result<JobOutcome, RepackError> {
        let (source, output, streamed) = (dir.join("source"), dir.join("aligned"), dir.join("streamed"));
        // An earlier attempt's verified downloads are kept (the download resumes); its output is not.
        let _ = std::fs::remove_dir_all(&output);

        self.step(job, JobState::Downloading).await?;
        let repair = Some(stream::RepairTarget { dir: streamed.clone(), alignment: self.opts.alignment });
        let layout = download::Layout {
            source: source.clone(),
            partial: dir.join("partial"),
            repair,
            connections: self.opts.download_connections,
            ready,
            carry_only: true,
        };
        let fetched =
            download::download(self.hub, &job.repo_id, &job.source_sha, &layout, self.opts.max_bundle_bytes).await;
        // The uploads ahead end once the download has told them of its last shard.
        drop(layout);
        let bytes = fetched.as_ref().map_or_else(download::DownloadError::bytes, |done| done.bytes);
        if let Err(e) = self.store.add_job_bytes(job.id, bytes, 0).await {
            tracing::warn!(job.id = job.id, error = %e, "recording downloaded bytes failed");
        }
        let fetched = fetched.map_err(|e| match e {
            download::DownloadError::Refused(reason) => RepackError::permanent(format!("download refused: {reason}")),
            download::DownloadError::Failed { error, .. } => error,
        })?;
        if !fetched.tree.iter().any(|f| f.path.ends_with(".safetensors")) {
            return Ok(JobOutcome::Skipped { reason: "no safetensors files at this commit".into() });
        }

        self.step(job, JobState::Relaying).await?;
        let (src, out, alignment) = (source.clone(), output.clone(), self.opts.alignment);
        let (repo, sha) = (job.repo_id.clone(), job.source_sha.clone());
        let left_out = fetched.left_out;
        let relaid =
            off_executor("the re-layout", move || relay(&src, &out, &streamed, alignment, (&repo, &sha), left_out));
        if let Relaid::Skipped(reason) = relaid.await? {
            return Ok(JobOutcome::Skipped { reason });
        }

        self.step(job, JobState::Verifying).await?;
        let staged = output.clone();
        let checked = off_executor("the local checks", move || local_checks(&staged)).await?;
        let device = job.verify_device;
        if device == VerifyDevice::Metal && !cfg!(all(target_os = "macos", target_arch = "aarch64")) {
            if self.opts.metal_handoff == MetalHandoff::Hub {
                return self.stage_on_hub(job, &source, &output, checked).await;
            }
            return Ok(JobOutcome::AwaitMetal { staged: None });
        }
        let mlx_device = if device == VerifyDevice::Metal { "gpu" } else { "cpu" };
        let interpreter = (self.opts.python.clone(), self.opts.mlx_script.clone());
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let tell = |mlx_version: Option<String>| drop(started_tx.send(mlx_version));
        let running = mlx::run_off_executor(interpreter, output.clone(), mlx_device, tell);
        let check = async { running.await.map_err(|e| RepackError::permanent(format!("MLX load check: {e}"))) };
        tokio::pin!(check);
        // A pull request is proposed after the check (its upload is not held back); a mirror is published
        // while it runs, once it has said which MLX it runs, for the card.
        let started = if self.opts.pull_request { None } else { started.await.ok() };
        let Some(started) = started else {
            let record = check.await?;
            let _ = self.store.set_job_verification(job.id, &record).await;
            return self.publish_staged(job, &source, &output, record, checked, Beside { verdict: None, ahead }).await;
        };
        let card_record = MlxRecord::announced(mlx_device, started);
        let (verdict_tx, verdict) = tokio::sync::watch::channel(publish::Verdict::Pending);
        let judged = async {
            let result = check.await;
            let verdict = match &result {
                Ok(record) if record.mlx_version == card_record.mlx_version => publish::Verdict::Passed,
                Ok(_) => publish::Verdict::Failed("the check ran another MLX version than it announced".to_owned()),
                Err(e) => publish::Verdict::Failed(e.reason()),
            };
            verdict_tx.send_replace(verdict);
            if let Ok(record) = &result {
                let _ = self.store.set_job_verification(job.id, record).await;
            }
            result
        };
        let beside = Beside { verdict: Some(verdict), ahead };
        let publishing = self.publish_staged(job, &source, &output, card_record.clone(), checked, beside);
        let (judged, published) = tokio::join!(judged, publishing);
        // The check's failure is the reason, whatever the publish made of it (it committed nothing).
        judged?;
        published
    }

    /// Sends each shard named on `ready` to the mirror's CAS as it comes (see [`ahead`]), the mirror chosen
    /// and created at the first one. Any failure only leaves the work to the publish step.
    async fn upload_ahead(
        &self,
        job: &Job,
        private: bool,
        (source, repaired): (&std::path::Path, &std::path::Path),
        mut ready: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) -> Option<ahead::Ahead> {
        // Nothing is created for a bundle with no shard to send ahead.
        let first = ready.recv().await?;
        let namespace = &self.opts.target_namespace;
        let chosen =
            publish::choose_mirror(self.hub, self.store, &job.repo_id, namespace, (private, &self.opts.caps)).await;
        let chosen =
            chosen.inspect_err(|e| tracing::warn!(repo.id = %job.repo_id, error = %e, "no upload ahead")).ok()?;
        let mirror = publish::Mirror {
            hub: self.hub,
            target: &chosen.target,
            source: &job.repo_id,
            moved_from: chosen.moved_from.as_deref(),
            sources: &[],
            verdict: None,
            ahead: None,
        };
        match publish::ready_for_uploads(&mirror, &job.source_sha).await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!(repo.id = %chosen.target, error = %e, "no upload ahead");
                return None;
            }
        }
        let uploader = ahead::Uploader { hub: self.hub, target: &chosen.target, repaired, source };
        Some(uploader.run(first, ready).await)
    }

    /// Publishes a verified, staged bundle, with a card written from the manifest, the local checks' counts
    /// and the MLX record.
    async fn publish_staged(
        &self,
        job: &Job,
        source: &std::path::Path,
        output: &std::path::Path,
        record: MlxRecord,
        (manifest, checks): (Manifest, LocalChecks),
        Beside { verdict, ahead }: Beside,
    ) -> Result<JobOutcome, RepackError> {
        self.step(job, JobState::Publishing).await?;
        // The source shards whose chunks the padded ones share, for the upload's deduplication.
        let sources: Vec<std::path::PathBuf> = manifest.shards.iter().map(|s| source.join(&s.file)).collect();
        if self.opts.pull_request {
            let target = pull_request::Target {
                repo: &job.repo_id,
                head: &job.source_sha,
                bot: &self.opts.bot_user,
                sources: &sources,
            };
            let proposal = pull_request::propose(self.hub, &target, output).await?;
            return Ok(match proposal {
                pull_request::Proposal::Opened { num, commit } => {
                    tracing::info!(repo.id = %job.repo_id, pr = num, "pull request opened");
                    let target = format!("{}/discussions/{num}", job.repo_id);
                    JobOutcome::Proposed { num: i64::try_from(num).unwrap_or(i64::MAX), commit, target }
                }
                pull_request::Proposal::Declined(reason) => JobOutcome::Skipped { reason },
            });
        }
        // The source may have turned private, gated, disabled or gone since the audit.
        let (visibility, info) = match self.visibility(job).await? {
            (Ok(v), info) => (v, info),
            (Err(reason), _) => return Ok(JobOutcome::Skipped { reason: reason.into() }),
        };
        let private = visibility == policy::Visibility::Private;
        let chosen = publish::choose_mirror(
            self.hub,
            self.store,
            &job.repo_id,
            &self.opts.target_namespace,
            (private, &self.opts.caps),
        )
        .await?;
        let target = chosen.target.clone();
        let _ = self.store.set_job_target(job.id, &target).await;
        let before_bytes = self.before_bytes(source).await?;
        let facts = finish::CardFacts {
            info: info.as_ref(),
            source: SourceFacts { license: readme_license(source), before_bytes },
            manifest: &manifest,
            checks: &checks,
            record,
        };
        self.write_card(output, &target, facts)?;
        let ahead = match ahead {
            Some(sent) => sent.await.ok().flatten(),
            None => None,
        };
        if let Some(sent) = &ahead {
            tracing::info!(repo.id = %target, files = sent.files.len(), xet.bytes = sent.bytes, "uploaded ahead");
            self.count_uploaded(job, sent.bytes).await;
        }
        let mirror = publish::Mirror {
            hub: self.hub,
            target: &target,
            source: &job.repo_id,
            moved_from: chosen.moved_from.as_deref(),
            sources: &sources,
            verdict,
            ahead: ahead.as_ref(),
        };
        let published = publish::publish(&mirror, output, &job.source_sha).await?;
        self.finish_publish(job, (target, &job.repo_id), visibility, published).await
    }
}

/// The licence the downloaded source's README names, if any.
fn readme_license(source: &Path) -> Option<String> {
    let readme = crate::safe_fs::read_capped(&source.join("README.md"), 16 << 20).ok()?;
    card::license_of(&String::from_utf8_lossy(&readme))
}

impl Repacker<'_> {
    /// Bytes a copying loader duplicates in the downloaded source, off the executor.
    async fn before_bytes(&self, source: &Path) -> Result<u64, RepackError> {
        let (src, alignment) = (source.to_owned(), self.opts.alignment);
        off_executor("the source's audit", move || Ok(misaligned_bytes(&src, alignment))).await
    }
}

/// Re-lays the downloaded bundle into `output` (linking the shards repaired as they streamed, from
/// `streamed`), removes the carried configs' pointers to code, and stamps the manifest with the source repo
/// and commit and what the mirror left out and edited.
fn relay(
    source: &Path,
    output: &Path,
    streamed: &Path,
    alignment: Alignment,
    (repo, sha): (&str, &str),
    left_out: Vec<carry::LeftOut>,
) -> Result<Relaid, RepackError> {
    let bundles = discover(&[source.to_owned()]).map_err(|e| RepackError::permanent(e.to_string()))?;
    if bundles.len() != 1 {
        return Ok(Relaid::Skipped(format!("{} bundle directories in one repo; not repacked", bundles.len())));
    }
    // The source files' digests were checked against the Hub's as they downloaded, and the uploader computes
    // the new files' own: the minimal set proves the rest.
    let options = FixOptions {
        destination: Destination::OutDir(output.to_owned()),
        alignment,
        dry_run: false,
        digests: crate::safetensors::rewrite::Digests::Minimal,
        prepared: Some(streamed.to_owned()),
    };
    let report = fix(&bundles, &options, &mut |_| {}).map_err(RepackError::caused_by)?;
    let t = &report.totals;
    if t.invalid > 0 || t.failed > 0 {
        let shards = || report.bundles.iter().flat_map(|b| &b.shards);
        let why: Vec<String> = shards().filter_map(|s| s.error.clone()).collect();
        let reason = format!("re-layout left {} invalid and {} failed shards: {}", t.invalid, t.failed, why.join("; "));
        // An invalid shard stays invalid; a rewrite that failed left its original intact and may be tried
        // again, unless the machine is at fault (a read-only disk), which only the operator can mend. A full
        // disk is said so, for the job's files to be removed.
        let by_io = shards()
            .filter_map(|s| s.io_kind)
            .map(|k| RepackError::io("", std::io::Error::from(k)))
            .reduce(RepackError::join);
        return Err(match by_io {
            Some(e) if e.kind == error::FailureKind::NeedsOperator || e.out_of_space => e.said_as(reason),
            _ if t.invalid > 0 => RepackError::permanent(reason),
            _ => RepackError::transient(reason),
        });
    }
    if t.rewritten == 0 {
        return Ok(Relaid::Skipped("every shard is already aligned".into()));
    }
    let mut manifest = Manifest::read(output)
        .map_err(|e| RepackError::permanent(e.to_string()))?
        .ok_or_else(|| RepackError::permanent("fix wrote no manifest"))?;
    manifest.edited = carry::strip_code_pointers(output).map_err(|e| match e {
        carry::ConfigError::Io { source, file } => RepackError::io(format_args!("{file} of the mirror"), source),
        e @ carry::ConfigError::NotJson { .. } => RepackError::permanent(format!("not mirrored: {e}")),
    })?;
    manifest.left_out = left_out;
    manifest.source_repo = Some(repo.to_owned());
    manifest.source_revision = Some(sha.to_owned());
    manifest.source_dir = format!("{repo}@{sha}");
    manifest.write(output).map_err(RepackError::caused_by)?;
    Ok(Relaid::Staged)
}

/// The structural and memory-map checks of a staged bundle.
fn local_checks(output: &std::path::Path) -> Result<(Manifest, LocalChecks), RepackError> {
    let manifest = Manifest::read(output)
        .map_err(|e| RepackError::permanent(e.to_string()))?
        .ok_or_else(|| RepackError::permanent("no manifest in the staged bundle"))?;
    verify::structural(output, &manifest).map_err(|e| RepackError::permanent(format!("structural check: {e}")))?;
    let checks = verify::mmap(output, &manifest).map_err(|e| RepackError::permanent(format!("mmap check: {e}")))?;
    Ok((manifest, checks))
}

/// Bytes a copying loader duplicates in the source bundle.
fn misaligned_bytes(source: &std::path::Path, alignment: Alignment) -> u64 {
    let Ok(bundles) = discover(&[source.to_owned()]) else { return 0 };
    crate::scan::scan(&bundles, alignment, &mut |_| {}).totals.misaligned_bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::types::Json;

    /// Which way a claimed job goes is read from its state, its typed payloads and its staged files, and a
    /// job that cannot prove its check passed starts again instead of publishing.
    #[tokio::test]
    async fn a_job_resumes_where_its_row_says() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).await.unwrap();
        let mut job = store.job_for("ns/a", "1", VerifyDevice::Metal).await.unwrap();
        let output = dir.path().join("aligned");
        assert_eq!(Resume::of(&job, &output), Resume::Start, "queued");
        job.state = JobState::Publishing;
        assert_eq!(Resume::of(&job, &output), Resume::Start, "publishing, but no check recorded");
        let record = MlxRecord::announced("gpu", Some("0.29.1".into()));
        job.verification = Some(Json(record.clone()));
        assert_eq!(Resume::of(&job, &output), Resume::Start, "checked, but the files are on another worker");
        std::fs::create_dir_all(&output).unwrap();
        std::fs::write(output.join(crate::manifest::MANIFEST_FILE), "{}").unwrap();
        assert_eq!(Resume::of(&job, &output), Resume::PublishChecked { record: record.clone() });
        let staged = Staged {
            commit: "5eed".into(),
            checks: LocalChecks { shards: 1, tensors: 1, zero_copy: 1 },
            source: SourceFacts::default(),
        };
        job.staged = Some(Json(staged.clone()));
        assert_eq!(Resume::of(&job, &output), Resume::PublishStaged { staged, record });
    }
}
