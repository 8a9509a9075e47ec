//! The repack steps, in order. [`Resume`] picks the step a job starts at.
//! Each step first records on the job's row its state and what the previous step left for it ([`Progress`]).
//!
//! 1. **may it be mirrored**: checks the Hub's answer and the operator's policy, takes the mirror's name,
//!    and applies the day's caps.
//! 2. **download** (`downloading`): fetches the tree at the audited commit and checks each file against the
//!    Hub's hash. It repairs shards as they stream and sends them up ahead.
//! 3. **re-layout** (`relaying`, from [`Progress::Downloaded`]): stages the bundle and its manifest.
//! 4. **checks** (`verifying`, from [`Progress::Relaid`]): runs the structural and memory-mapped checks.
//!    Then it runs the MLX load check here, or hands the job to the Metal runner.
//! 5. **publish** (`publishing`): commits the mirror and its card on the parent it was checked against.
//!    In `--pr` mode it opens a pull request on the source instead. A mirror turns public only once every
//!    check passed.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::job::payload::{MlxRecord, Progress, SourceFacts};
use crate::job::{Job, JobOutcome, JobState, VerifyDevice};
use crate::manifest::LeftOut;
use crate::repack::checks::{self, Checked};
use crate::repack::metal::rendezvous::MetalHandoff;
use crate::repack::relayout::{self, Relaid, readme_license};
use crate::repack::resume::{self, OUTPUT, PARTIAL, Resume, SOURCE, STREAMED};
use crate::repack::{
    RepackError, Repacker, checks::mlx, download, off_executor, publish, publish::finish, queue::policy, upload::ahead,
};
use crate::repack::{publish::pull_request, repair};

/// A job's directory and its parts.
#[derive(Debug, Clone)]
pub(super) struct Work {
    /// The job's directory.
    pub dir: PathBuf,
    /// The download (shards repaired as they streamed keep a stub here).
    pub source: PathBuf,
    /// Shards repaired as they streamed.
    pub streamed: PathBuf,
    /// The staged bundle.
    pub output: PathBuf,
}

impl Work {
    /// The parts of the job directory `dir`.
    pub(super) fn at(dir: &Path) -> Work {
        Work { dir: dir.to_owned(), source: dir.join(SOURCE), streamed: dir.join(STREAMED), output: dir.join(OUTPUT) }
    }
}

/// A step's end. `Continue` carries what the next step needs. `Break` carries the job's outcome when there is
/// nothing more to do: the job was skipped, or handed to the Metal runner.
type StepEnd<T> = ControlFlow<JobOutcome, T>;

/// Where a job's MLX check runs: `gpu` (Metal) or `cpu`.
fn mlx_device(job: &Job) -> &'static str {
    if job.verify_device == VerifyDevice::Metal { "gpu" } else { "cpu" }
}

/// Whether this worker hands the MLX check of a job to the Metal runner (it cannot run Metal itself).
fn hands_to_metal(job: &Job) -> bool {
    job.verify_device == VerifyDevice::Metal && !cfg!(all(target_os = "macos", target_arch = "aarch64"))
}

impl Repacker<'_> {
    /// Runs a claimed job's steps from where it stopped to its outcome.
    pub(super) async fn steps(&self, job: &Job, dir: &Path) -> Result<JobOutcome, RepackError> {
        if let Err(e) = crate::untrusted::check_repo_id(&job.repo_id)
            .and_then(|()| crate::untrusted::check_revision(&job.source_sha))
        {
            return Err(RepackError::permanent(format!("refusing the job: {e}")));
        }
        let work = Work::at(dir);
        let made_by = resume::made_by(self.opts.alignment);
        let resume = {
            let (job, dir, made_by) = (job.clone(), dir.to_owned(), made_by.clone());
            off_executor("reading where the job stopped", move || Ok(Resume::of(&job, &dir, made_by.as_deref())))
                .await?
        };
        let resume = match resume {
            Resume::PublishStaged { staged, record } => return self.publish_from_hub(job, staged, record).await,
            Resume::PublishChecked { record } => {
                // The checks ran in the worker that staged the bundle, but this one has not seen the files.
                let staged = work.output.clone();
                let checked = off_executor("the local checks", move || checks::run_here(&staged)).await?;
                return self.publish_staged(job, &work, record, checked, Alongside::default()).await;
            }
            resume => resume,
        };
        // Nothing that may not be mirrored is even downloaded; publishing checks again.
        let private = match self.may_mirror(job).await? {
            ControlFlow::Continue(private) => private,
            ControlFlow::Break(outcome) => return Ok(outcome),
        };
        // Shards that header padding or, on Unix, a reorder fixes are repaired as they stream. This worker writes each once and
        // never reads it again; the bundle keeps a stub of each. Each shard goes to a mirror's CAS when done.
        // Two cases skip that: the bundle waits for the Metal runner, since another worker may publish it; or
        // an earlier attempt already downloaded it.
        let Some(private) = private.filter(|_| resume == Resume::Start && !hands_to_metal(job)) else {
            return self.download_to_publish(job, &work, resume, Alongside::default()).await;
        };
        let (kept_tx, kept) = tokio::sync::mpsc::unbounded_channel();
        let (ahead_tx, ahead) = tokio::sync::oneshot::channel();
        let uploads = async {
            let _ = ahead_tx.send(self.upload_ahead(job, private, &work, kept).await);
        };
        let alongside = Alongside { kept: Some(kept_tx), ahead: Some(ahead), verdict: None };
        let (outcome, ()) = tokio::join!(self.download_to_publish(job, &work, resume, alongside), uploads);
        outcome
    }

    /// Decides whether the source may be mirrored now, and takes the mirror's name if so.
    /// Returns `Continue` with whether the mirror is private, or `None` in `--pr` mode, which publishes no
    /// mirror. Returns `Break` with the skip otherwise.
    async fn may_mirror(&self, job: &Job) -> Result<StepEnd<Option<bool>>, RepackError> {
        if self.opts.pull_request {
            return Ok(ControlFlow::Continue(None));
        }
        let private = match self.source_now(job).await? {
            policy::MayMirror::No(reason) => {
                return Ok(ControlFlow::Break(JobOutcome::Skipped { reason: reason.into() }));
            }
            policy::MayMirror::Yes { visibility, .. } => visibility == policy::Visibility::Private,
        };
        // The mirror's name is taken before the download, so that a day's cap of new mirrors holds the job
        // back before it spends any bandwidth.
        let (namespace, caps) = (&self.opts.target_namespace, &self.opts.caps);
        publish::choose_mirror(self.hub, self.store, &job.repo_id, namespace, (private, caps)).await?;
        Ok(ControlFlow::Continue(Some(private)))
    }

    /// Runs every step after the visibility check, from where `resume` says: download, re-layout, checks,
    /// publish. `alongside` holds the work that runs beside them.
    async fn download_to_publish(
        &self,
        job: &Job,
        work: &Work,
        resume: Resume,
        mut alongside: Alongside,
    ) -> Result<JobOutcome, RepackError> {
        // The check's interpreter imports MLX while the bundle is staged. A job the Metal runner checks starts
        // none here.
        let check = if hands_to_metal(job) { None } else { Some(self.mlx_check(job, work).await?) };
        // The download holds the only sender: the uploads ahead end once it is done.
        let checked = match self.stage(job, work, resume, alongside.kept.take()).await {
            Ok(ControlFlow::Continue(checked)) => checked,
            Ok(ControlFlow::Break(outcome)) => {
                abandon(check).await;
                return Ok(outcome);
            }
            Err(e) => {
                abandon(check).await;
                return Err(e);
            }
        };
        match check {
            Some(check) => self.check_and_publish(job, work, checked, check, alongside).await,
            None => self.hand_to_metal(job, work, checked).await,
        }
    }

    /// The job's MLX check: the one started ahead for its device if there is one, else one started now.
    async fn mlx_check(&self, job: &Job, work: &Work) -> Result<mlx::MlxCheck, RepackError> {
        if let Some(check) = self.check_ahead.take(mlx_device(job)) {
            return Ok(check);
        }
        // Its home goes in the job's directory, which must exist first.
        let dir = work.dir.clone();
        off_executor("making the job's directory", move || {
            std::fs::create_dir_all(&dir).map_err(|e| RepackError::io(dir.display(), e))
        })
        .await?;
        Ok(mlx::MlxCheck::start(self.mlx_interpreter(), mlx_device(job), &work.dir))
    }

    /// Downloads, re-lays and checks the bundle here, from where `resume` says. Returns `Continue` with what
    /// the local checks found, or `Break` with the job's outcome when there is nothing to publish.
    async fn stage(
        &self,
        job: &Job,
        work: &Work,
        resume: Resume,
        kept: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<StepEnd<Checked>, RepackError> {
        let relaid = match resume {
            Resume::Check => ControlFlow::Continue(()),
            Resume::Relayout { left_out } => self.relayout(job, work, left_out).await?,
            _ => match self.download(job, work, kept).await? {
                ControlFlow::Continue(left_out) => self.relayout(job, work, left_out).await?,
                ControlFlow::Break(outcome) => ControlFlow::Break(outcome),
            },
        };
        if let ControlFlow::Break(outcome) = relaid {
            return Ok(ControlFlow::Break(outcome));
        }
        Ok(ControlFlow::Continue(self.check_locally(job, work).await?))
    }

    /// The download step. It downloads the files the mirror carries into `work.source`, and repaired shards
    /// into `work.streamed`. It names each shard kept on `kept`, for the uploads ahead.
    /// Returns `Continue` with the files the mirror leaves out.
    async fn download(
        &self,
        job: &Job,
        work: &Work,
        kept: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<StepEnd<Vec<LeftOut>>, RepackError> {
        // An earlier attempt's verified downloads are kept (the download resumes); its output is not.
        crate::repack::remove_off_executor(work.output.clone()).await;
        self.step(job, JobState::Downloading, None).await?;
        let repair = Some(repair::RepairTarget { dir: work.streamed.clone(), alignment: self.opts.alignment });
        let layout = download::Layout {
            source: work.source.clone(),
            partial: work.dir.join(PARTIAL),
            repair,
            connections: self.opts.download_connections,
            ready: kept,
            carry_only: true,
            room_for_relayout: true,
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
            return Ok(ControlFlow::Break(JobOutcome::Skipped {
                reason: "no safetensors files at this commit".into(),
            }));
        }
        Ok(ControlFlow::Continue(fetched.left_out))
    }

    /// The re-layout step. It stages the download in `work` as a bundle in `work.output`.
    /// Returns `Break` with the reason when there is nothing to publish.
    async fn relayout(&self, job: &Job, work: &Work, left_out: Vec<LeftOut>) -> Result<StepEnd<()>, RepackError> {
        let files = self.snapshot(work, resume::DOWNLOADED).await?;
        let progress = files.map(|files| Progress::Downloaded { left_out: left_out.clone(), files });
        self.step(job, JobState::Relaying, progress.as_ref()).await?;
        let (src, out, streamed, alignment) =
            (work.source.clone(), work.output.clone(), work.streamed.clone(), self.opts.alignment);
        let (repo, sha) = (job.repo_id.clone(), job.source_sha.clone());
        // A re-layout that stopped half-way left an output no one may trust.
        let relaid = off_executor("the re-layout", move || {
            let _ = std::fs::remove_dir_all(&out);
            relayout::stage_bundle(&src, &out, &streamed, alignment, (&repo, &sha), left_out)
        });
        Ok(match relaid.await? {
            Relaid::Staged => ControlFlow::Continue(()),
            Relaid::Skipped(reason) => ControlFlow::Break(JobOutcome::Skipped { reason }),
            Relaid::AlreadyAligned => {
                ControlFlow::Break(JobOutcome::Skipped { reason: "every shard is already aligned".into() })
            }
        })
    }

    /// The local checks' step. It checks the staged bundle in `work.output`.
    /// Returns its manifest and what the checks that run here found.
    async fn check_locally(&self, job: &Job, work: &Work) -> Result<Checked, RepackError> {
        let progress = self.snapshot(work, resume::RELAID).await?.map(|files| Progress::Relaid { files });
        self.step(job, JobState::Verifying, progress.as_ref()).await?;
        let staged = work.output.clone();
        off_executor("the local checks", move || checks::run_here(&staged)).await
    }

    /// Snapshots `parts` of the job's directory for the next step's record.
    /// Returns `None` when no later attempt could take them up.
    async fn snapshot(
        &self,
        work: &Work,
        parts: &'static [&'static str],
    ) -> Result<Option<crate::job::payload::WorkFiles>, RepackError> {
        let Some(made_by) = resume::made_by(self.opts.alignment) else { return Ok(None) };
        let dir = work.dir.clone();
        off_executor("recording the job's files", move || Ok(resume::snapshot(&dir, (parts, &made_by)))).await
    }

    /// Hands the staged bundle's MLX check to the Metal runner, over the Hub or the runner API.
    async fn hand_to_metal(&self, job: &Job, work: &Work, checked: Checked) -> Result<JobOutcome, RepackError> {
        if self.opts.metal_handoff == MetalHandoff::Hub {
            return self.stage_on_hub(job, &work.source, &work.output, checked).await;
        }
        Ok(JobOutcome::AwaitMetal { staged: None })
    }

    /// Lets `check` read the staged bundle, then publishes.
    /// A mirror uploads while the check runs, and turns public only once the check passed.
    /// A pull request is proposed after the check.
    async fn check_and_publish(
        &self,
        job: &Job,
        work: &Work,
        checked: Checked,
        check: mlx::MlxCheck,
        alongside: Alongside,
    ) -> Result<JobOutcome, RepackError> {
        let mlx_device = mlx_device(job);
        let mlx::Going { started, record } = check.go(work.output.clone());
        let check = async { record.await.map_err(check_failed) };
        tokio::pin!(check);
        // A mirror is published while the check runs, once it has said which MLX it runs, for the card.
        let started = if self.opts.pull_request { None } else { started.await.ok() };
        let Some(started) = started else {
            let record = check.await?;
            let _ = self.store.set_job_verification(job.id, &record).await;
            return self.publish_staged(job, work, record, checked, alongside).await;
        };
        let card_record = MlxRecord::announced(mlx_device, started);
        let (verdict_tx, verdict) = tokio::sync::watch::channel(publish::Verdict::Pending);
        let judged = async {
            let result = check.await;
            let verdict = match &result {
                Ok(record) if record.mlx_version == card_record.mlx_version => {
                    publish::Verdict::Passed(Box::new(record.clone()))
                }
                Ok(_) => publish::Verdict::Failed("the check ran another MLX version than it announced".to_owned()),
                Err(e) => publish::Verdict::Failed(e.reason()),
            };
            verdict_tx.send_replace(verdict);
            if let Ok(record) = &result {
                let _ = self.store.set_job_verification(job.id, record).await;
            }
            result
        };
        let alongside = Alongside { verdict: Some(verdict), ..alongside };
        let publishing = self.publish_staged(job, work, card_record.clone(), checked, alongside);
        let (judged, published) = tokio::join!(judged, publishing);
        // The check's failure is the reason, whatever the publish made of it (it committed nothing).
        judged?;
        published
    }

    /// Sends each shard named on `kept` to the mirror's CAS as it comes (see [`ahead`]).
    /// The mirror is chosen and created at the first shard.
    /// Any failure only leaves the work to the publish step.
    async fn upload_ahead(
        &self,
        job: &Job,
        private: bool,
        work: &Work,
        mut kept: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) -> Option<ahead::Ahead> {
        // Nothing is created for a bundle with no shard to send ahead.
        // The first shard kept creates the mirror.
        // A download that then fails leaves the mirror behind; a job that fails for good abandons it.
        let first = kept.recv().await?;
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
        let uploader =
            ahead::Uploader { hub: self.hub, target: &chosen.target, repaired: &work.streamed, source: &work.source };
        Some(uploader.run(first, kept).await)
    }

    /// The publish step. It uploads a verified, staged bundle with a card written from the manifest, the
    /// local checks' counts and the MLX record. In `--pr` mode it opens a pull request on the source instead.
    async fn publish_staged(
        &self,
        job: &Job,
        work: &Work,
        record: MlxRecord,
        Checked { manifest, local: checks }: Checked,
        Alongside { verdict, ahead, .. }: Alongside,
    ) -> Result<JobOutcome, RepackError> {
        self.step(job, JobState::Publishing, None).await?;
        // The source shards whose chunks the padded ones share, for the upload's deduplication.
        let sources: Vec<PathBuf> = manifest.shards.iter().map(|s| work.source.join(&s.file)).collect();
        if self.opts.pull_request {
            return self.propose(job, &work.output, &sources).await;
        }
        // The source may have turned private, gated, disabled or gone since the audit.
        let (visibility, info) = match self.source_now(job).await? {
            policy::MayMirror::Yes { visibility, info } => (visibility, info),
            policy::MayMirror::No(reason) => return Ok(JobOutcome::Skipped { reason: reason.into() }),
        };
        let private = visibility == policy::Visibility::Private;
        let (namespace, caps) = (&self.opts.target_namespace, &self.opts.caps);
        let chosen = publish::choose_mirror(self.hub, self.store, &job.repo_id, namespace, (private, caps)).await?;
        let target = chosen.target.clone();
        let _ = self.store.set_job_target(job.id, &target).await;
        let before_bytes = self.before_bytes(&work.source).await?;
        let source = {
            let files = crate::repack::publish::card::BundleFiles::of(&work.output);
            SourceFacts {
                license: readme_license(&work.source),
                before_bytes,
                license_file: files.license_file,
                chat_template: files.chat_template,
            }
        };
        let facts = |record| finish::CardFacts {
            info: Some(&*info),
            source: source.clone(),
            manifest: &manifest,
            checks: &checks,
            record,
        };
        self.write_card(&work.output, &target, facts(record))?;
        // While the check runs beside the upload, the card names only the device and the announced MLX.
        // Once the check passes, the card is rewritten with the whole record before any commit.
        let (verdict, card_rewritten) = match verdict {
            Some(checked) => {
                let (to_publish, verdict_after_card) = tokio::sync::watch::channel(publish::Verdict::Pending);
                let rewrite = |record: MlxRecord| self.write_card(&work.output, &target, facts(record));
                (Some(verdict_after_card), Some(card_after_check(checked, to_publish, rewrite)))
            }
            None => (None, None),
        };
        let ahead = match ahead {
            Some(sent) => sent.await.ok().flatten(),
            None => None,
        };
        if let Some(sent) = &ahead {
            let (files, named) = (sent.files.len(), sent.named);
            tracing::info!(repo.id = %target, files, sha256.named = named, xet.bytes = sent.bytes, "uploaded ahead");
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
        let publishing = publish::publish(&mirror, &work.output, &job.source_sha);
        let published = match card_rewritten {
            Some(rewriting) => {
                let (rewritten, published) = tokio::join!(rewriting, publishing);
                rewritten?;
                published?
            }
            None => publishing.await?,
        };
        self.finish_publish(job, (target.clone(), &job.repo_id), visibility, published).await
    }

    /// Publishes in `--pr` mode: proposes the staged bundle as a pull request on the source.
    async fn propose(&self, job: &Job, output: &Path, sources: &[PathBuf]) -> Result<JobOutcome, RepackError> {
        let target =
            pull_request::Target { repo: &job.repo_id, head: &job.source_sha, bot: &self.opts.bot_user, sources };
        Ok(match pull_request::propose(self.hub, &target, output).await? {
            pull_request::Proposal::Opened { num, commit } => {
                tracing::info!(repo.id = %job.repo_id, pr = num, "pull request opened");
                let target = format!("{}/discussions/{num}", job.repo_id);
                JobOutcome::Proposed { num: i64::try_from(num).unwrap_or(i64::MAX), commit, target }
            }
            pull_request::Proposal::Declined(reason) => JobOutcome::Skipped { reason },
        })
    }
}

/// Holds the ends of the work that runs alongside a job's steps: the uploads ahead, and the MLX check beside
/// the upload. Each end is `None` when that work does not run for this job.
#[derive(Default)]
struct Alongside {
    /// Where the download names each shard it keeps, for the uploads ahead. Dropped when the download ends.
    kept: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// What went up ahead, once the uploads ahead have ended.
    ahead: Option<tokio::sync::oneshot::Receiver<Option<ahead::Ahead>>>,
    /// The MLX check's verdict, when the check runs during the upload.
    verdict: Option<tokio::sync::watch::Receiver<publish::Verdict>>,
}

/// Ends the MLX check unread, if one was started. Its interpreter and home go before the job's files do.
async fn abandon(check: Option<mlx::MlxCheck>) {
    if let Some(check) = check {
        check.abandon().await;
    }
}

/// Passes the MLX check's verdict on to the publish once the card holds the check's whole record.
/// If the card cannot be written after a pass, nothing is committed. The job then fails with the card's own
/// error and its kind, which the caller reports before the publish's.
async fn card_after_check(
    mut checked: tokio::sync::watch::Receiver<publish::Verdict>,
    to_publish: tokio::sync::watch::Sender<publish::Verdict>,
    rewrite: impl FnOnce(MlxRecord) -> Result<PathBuf, RepackError>,
) -> Result<(), RepackError> {
    let decided = checked.wait_for(|v| *v != publish::Verdict::Pending).await.ok().map(|v| v.clone());
    let (passed_on, rewritten) = match decided {
        Some(publish::Verdict::Passed(record)) => match rewrite((*record).clone()) {
            Ok(_) => (publish::Verdict::Passed(record), Ok(())),
            Err(e) => (publish::Verdict::Failed(format!("writing the card with the check's record: {e}")), Err(e)),
        },
        Some(other) => (other, Ok(())),
        None => (publish::Verdict::Failed("the MLX check gave no verdict".to_owned()), Ok(())),
    };
    to_publish.send_replace(passed_on);
    rewritten
}

/// Maps a failed MLX check to the job's error.
/// An interpreter that cannot run or import MLX is a configuration fault: the job is held, never spent.
/// Anything MLX found in the bundle fails the job for good.
fn check_failed(e: mlx::MlxCheckError) -> RepackError {
    if e.is_configuration() {
        RepackError::configuration(format!(
            "MLX load check: {e} (give --python, or HUBALIGN_PYTHON, an interpreter with mlx; `hubalign doctor` checks it)"
        ))
    } else {
        RepackError::permanent(format!("MLX load check: {e}"))
    }
}
