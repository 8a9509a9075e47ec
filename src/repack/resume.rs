//! Decides where a claimed job takes up its work, from its row and its directory.
//! This is the one place that decides which way a job goes.
//!
//! Each step's end records the job's next state and what the step left ([`Progress`]): the download's files,
//! then the staged bundle. A later attempt may find the job's directory exactly as recorded. That means the
//! same files, inodes, lengths and modification times, the same boot, and the same build and alignment.
//! Then it takes up the work from there, without fetching or re-laying again; anything else starts again.
//! Only the work that made the files is skipped. The structural, memory-map and MLX checks still run on the
//! staged bundle before anything is published.

use std::path::Path;
use std::time::UNIX_EPOCH;

use crate::job::payload::{MlxRecord, Progress, Staged, WorkFile, WorkFiles};
use crate::job::{Job, JobState};
use crate::manifest::LeftOut;
use crate::safetensors::Alignment;

/// The job directory's subdirectory that holds the download.
pub(super) const SOURCE: &str = "source";
/// The job directory's subdirectory that holds partial transfers.
pub(super) const PARTIAL: &str = "partial";
/// The job directory's subdirectory that holds shards repaired as they streamed.
pub(super) const STREAMED: &str = "streamed";
/// The job directory's subdirectory that holds the staged (re-laid) bundle.
pub(super) const OUTPUT: &str = "aligned";

/// Where a claimed job takes up its work.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Resume {
    /// From the start: the visibility check, then download, re-layout, checks and publish.
    Start,
    /// From the re-layout: the download is in the job's directory as it left it.
    Relayout {
        /// The source's files the mirror leaves out, for its manifest.
        left_out: Vec<LeftOut>,
    },
    /// From the checks: the staged bundle is in the job's directory as the re-layout left it.
    Check,
    /// Publishes the staged bundle with the check's record. The job comes back from a runner that checked the
    /// bundle in this work directory, or from a publish that stopped half-way.
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
    /// Decides where `job` resumes, with its files (if any) in `dir`, for a worker whose files are `made_by`
    /// (see [`made_by`]). Some jobs in `publishing` start again: those without the check's record, and those
    /// whose staged files are on another worker's disk. Their download is then verified anew, and nothing
    /// unchecked is published. It reads the directory, so call it off the executor.
    pub(super) fn of(job: &Job, dir: &Path, made_by: Option<&str>) -> Resume {
        if job.state == JobState::Publishing {
            return Resume::publishing(job, dir);
        }
        let Some(progress) = job.progress.as_ref().map(|p| &p.0) else { return Resume::Start };
        let (Some(files), Some(made_by)) = (progress.files(), made_by) else { return Resume::Start };
        if !holds(files, dir, (parts(progress), made_by)) {
            tracing::info!(job.id = job.id, "the job's files are not as its last step left them: starting again");
            return Resume::Start;
        }
        match progress {
            Progress::Downloaded { left_out, .. } => Resume::Relayout { left_out: left_out.clone() },
            Progress::Relaid { .. } => Resume::Check,
            Progress::Unknown => Resume::Start,
        }
    }

    /// Where a job in `publishing` resumes.
    fn publishing(job: &Job, dir: &Path) -> Resume {
        let Some(record) = job.verification.as_ref().map(|r| r.0.clone()) else {
            tracing::info!(job.id = job.id, "publishing, but no check recorded: starting again");
            return Resume::Start;
        };
        if let Some(staged) = job.staged.as_ref().map(|s| s.0.clone()) {
            return Resume::PublishStaged { staged, record };
        }
        if dir.join(OUTPUT).join(crate::manifest::MANIFEST_FILE).exists() {
            return Resume::PublishChecked { record };
        }
        tracing::info!(job.id = job.id, "checked on another worker's files: starting again");
        Resume::Start
    }
}

/// The parts of the job's directory the download's record covers: what the re-layout reads.
pub(super) const DOWNLOADED: &[&str] = &[SOURCE, STREAMED];
/// The parts of the job's directory the re-layout's record covers: what the checks and the publish read.
pub(super) const RELAID: &[&str] = &[SOURCE, STREAMED, OUTPUT];

/// The parts of the job's directory a step's record covers.
fn parts(progress: &Progress) -> &'static [&'static str] {
    match progress {
        Progress::Downloaded { .. } => DOWNLOADED,
        Progress::Relaid { .. } => RELAID,
        Progress::Unknown => &[],
    }
}

/// Names what makes a worker's files what they are: this build and the alignment it re-lays to.
/// The build is its version, and its executable's length and modification time. The executable's metadata
/// tells apart two builds with the same version number. Returns `None` when the executable cannot be read;
/// nothing is then taken up.
pub(super) fn made_by(alignment: Alignment) -> Option<String> {
    let exe = std::fs::metadata(std::env::current_exe().ok()?).ok()?;
    let modified = exe.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos();
    let version = env!("CARGO_PKG_VERSION");
    Some(format!("hubalign {version} ({} bytes, modified {modified} ns), alignment {alignment:?}", exe.len()))
}

/// Most entries a job directory's record lists. It allows the tree's cap for each of the source, the repaired
/// shards, the staged bundle and the directories themselves.
const MAX_ENTRIES: usize = 4 * crate::sources::MAX_FILES + 16;

/// Records the subdirectories `parts` of the job directory `dir` as they are now, made by `made_by`, for a
/// later attempt to compare with. A missing subdirectory counts as empty.
/// Returns `None` where no later attempt could trust the record. A system without a boot id gives `None`.
/// So do subdirectories that cannot be read or hold more entries than any job writes. So does anything but
/// regular files and directories, such as a link or a device.
pub(super) fn snapshot(dir: &Path, (parts, made_by): (&[&str], &str)) -> Option<WorkFiles> {
    let boot = boot_id()?;
    let mut files = Vec::new();
    let mut pending: Vec<(std::path::PathBuf, String)> = Vec::new();
    for part in parts {
        match std::fs::symlink_metadata(dir.join(part)) {
            Ok(meta) if meta.is_dir() => pending.push((dir.join(part), (*part).to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => return None,
        }
    }
    let mut entries = 0usize;
    while let Some((at, prefix)) = pending.pop() {
        for entry in std::fs::read_dir(&at).ok()? {
            let entry = entry.ok()?;
            entries += 1;
            if entries > MAX_ENTRIES {
                return None;
            }
            let name = entry.file_name().into_string().ok()?;
            let path = format!("{prefix}/{name}");
            let meta = std::fs::symlink_metadata(entry.path()).ok()?;
            if meta.is_dir() {
                pending.push((entry.path(), path));
            } else if meta.is_file() {
                let since_epoch = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
                let modified_ns = u64::try_from(since_epoch.as_nanos()).ok()?;
                files.push(WorkFile { path, inode: inode(&meta), len: meta.len(), modified_ns });
            } else {
                return None;
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Some(WorkFiles { boot, made_by: made_by.to_owned(), files })
}

/// A file's device and inode (none off Unix).
fn inode(meta: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        (0, 0)
    }
}

/// Whether `parts` of `dir` are still exactly as `recorded`, in this boot, made by `made_by`.
fn holds(recorded: &WorkFiles, dir: &Path, (parts, made_by): (&[&str], &str)) -> bool {
    snapshot(dir, (parts, made_by)).is_some_and(|now| now == *recorded)
}

/// The kernel's id of this boot (Linux); `None` elsewhere, where nothing is taken up across attempts.
fn boot_id() -> Option<String> {
    if cfg!(target_os = "linux") {
        let id = crate::safe_fs::read_capped(Path::new("/proc/sys/kernel/random/boot_id"), 64).ok()?;
        let id = String::from_utf8(id).ok()?.trim().to_owned();
        (!id.is_empty()).then_some(id)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::VerifyDevice;
    use crate::job::payload::{LocalChecks, SourceFacts};
    use crate::store::Store;
    use sqlx::types::Json;

    /// The build and settings the tests' files are made by.
    const BY: &str = "hubalign (test), alignment 8";

    /// A claimed job's way follows from its state, its typed payloads and its staged files.
    /// A job that cannot prove its check passed starts again instead of publishing.
    #[tokio::test]
    async fn a_job_resumes_where_its_row_says() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).await.unwrap();
        let mut job = store.job_for("ns/a", "1", VerifyDevice::Metal).await.unwrap();
        let work = dir.path().join("job");
        assert_eq!(Resume::of(&job, &work, Some(BY)), Resume::Start, "queued");
        job.state = JobState::Publishing;
        assert_eq!(Resume::of(&job, &work, Some(BY)), Resume::Start, "publishing, but no check recorded");
        let record = MlxRecord::announced("gpu", Some("0.29.1".into()));
        job.verification = Some(Json(record.clone()));
        assert_eq!(Resume::of(&job, &work, Some(BY)), Resume::Start, "checked, but the files are on another worker");
        std::fs::create_dir_all(work.join(OUTPUT)).unwrap();
        std::fs::write(work.join(OUTPUT).join(crate::manifest::MANIFEST_FILE), "{}").unwrap();
        assert_eq!(Resume::of(&job, &work, Some(BY)), Resume::PublishChecked { record: record.clone() });
        let staged = Staged {
            commit: "5eed".into(),
            checks: LocalChecks { shards: 1, tensors: 1, zero_copy: 1, ..LocalChecks::default() },
            source: SourceFacts::default(),
        };
        job.staged = Some(Json(staged.clone()));
        assert_eq!(Resume::of(&job, &work, Some(BY)), Resume::PublishStaged { staged, record });
    }

    /// A step's record is taken up only while the directory is exactly as the step left it.
    /// The job starts again after a file is written again (even to the same length), added or removed, or
    /// after another boot.
    #[tokio::test]
    async fn a_steps_record_holds_only_while_its_files_are_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).await.unwrap();
        let mut job = store.job_for("ns/a", "1", VerifyDevice::Cpu).await.unwrap();
        let work = &dir.path().join("job");
        std::fs::create_dir_all(work.join(SOURCE)).unwrap();
        std::fs::write(work.join(SOURCE).join("model.safetensors"), b"0123456789").unwrap();
        std::fs::write(work.join(SOURCE).join("config.json"), b"{}").unwrap();
        let files = snapshot(work, (DOWNLOADED, BY)).expect("a Linux machine has a boot id");
        assert_eq!(
            files.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
            ["source/config.json", "source/model.safetensors"]
        );
        let left_out = vec![LeftOut { file: "x.py".into(), bytes: 3, reason: "code".into() }];
        job.state = JobState::Relaying;
        job.progress = Some(Json(Progress::Downloaded { left_out: left_out.clone(), files: files.clone() }));
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Relayout { left_out: left_out.clone() });

        // What the next step writes is not the download's: a re-layout killed half-way is taken up again.
        std::fs::create_dir_all(work.join(OUTPUT)).unwrap();
        std::fs::write(work.join(OUTPUT).join("model.safetensors"), b"01234").unwrap();
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Relayout { left_out });

        let files = snapshot(work, (RELAID, BY)).unwrap();
        job.progress = Some(Json(Progress::Relaid { files }));
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Check);

        // The same length, written again: its time moved.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(work.join(SOURCE).join("model.safetensors"), b"9876543210").unwrap();
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Start, "a file written since");
        job.progress = Some(Json(Progress::Relaid { files: snapshot(work, (RELAID, BY)).unwrap() }));
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Check);

        std::fs::write(work.join(SOURCE).join("extra"), b"").unwrap();
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Start, "a file added since");
        std::fs::remove_file(work.join(SOURCE).join("extra")).unwrap();
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Check, "as it was again");

        let mut other_boot = snapshot(work, (RELAID, BY)).unwrap();
        other_boot.boot = "another boot".into();
        job.progress = Some(Json(Progress::Relaid { files: other_boot }));
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Start, "the machine restarted since");

        job.progress = Some(Json(Progress::Relaid { files: snapshot(work, (RELAID, BY)).unwrap() }));
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Check);
        let other_build = "hubalign (another build), alignment 8";
        assert_eq!(Resume::of(&job, work, Some(other_build)), Resume::Start, "another build or alignment");
        assert_eq!(Resume::of(&job, work, None), Resume::Start, "a build that cannot say what it is");
        // A file replaced by another of the same length and time is not the one recorded.
        let model = work.join(SOURCE).join("model.safetensors");
        let before = std::fs::metadata(&model).unwrap();
        std::fs::copy(&model, work.join("copy")).unwrap();
        std::fs::rename(work.join("copy"), &model).unwrap();
        std::fs::File::options().write(true).open(&model).unwrap().set_modified(before.modified().unwrap()).unwrap();
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Start, "a file replaced since");

        // A step a newer build recorded is nothing this one takes up, and the row still reads.
        let newer: Progress = serde_json::from_str(r#"{"step":"quantized","files":[]}"#).unwrap();
        assert_eq!(newer, Progress::Unknown);
        job.progress = Some(Json(newer));
        assert_eq!(Resume::of(&job, work, Some(BY)), Resume::Start);

        std::os::unix::fs::symlink("/etc/passwd", work.join(SOURCE).join("link")).unwrap();
        assert_eq!(snapshot(work, (&[SOURCE], BY)), None, "a link is nothing a step writes");
    }
}
