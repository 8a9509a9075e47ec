//! The macOS runner's one pass, whichever way it meets the workers. It claims a job waiting for the Metal
//! check, fetches its staged bundle, runs the MLX check on it, and records the verdict.
//! The ways differ only in how they claim, fetch and record ([`Rendezvous`]).
//! One way goes over the runner API ([`crate::repack::metal::runner::ApiRendezvous`]).
//! The other goes over the store and the Hub ([`crate::repack::metal::rendezvous::HubRunner`]).

pub mod rendezvous;
pub mod runner;

use std::path::{Path, PathBuf};

use crate::job::payload::MlxRecord;

/// Why the staged bundle was not fetched.
#[derive(Debug)]
pub enum Fetch<E> {
    /// The bundle is not what the job says: its manifest names another source, or nothing was staged.
    /// The check fails, and this reason is recorded.
    Failed(String),
    /// The fetch did not complete, because of the network or the disk. Nothing is recorded.
    /// The lease lapses and the job is claimed again.
    Unknown(E),
}

/// Why a pass recorded no verdict.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum PassError<E> {
    /// The way failed to claim, fetch or record. The lease lapses and the job is claimed again.
    #[error("{0}")]
    Way(E),
    /// This runner's interpreter cannot run the check: it cannot start, or has no MLX.
    /// The fault is the runner's, not the bundle's, so nothing is recorded.
    /// Once the lease lapses, the job goes to a runner that can run the check.
    #[error("this runner cannot run the MLX check, so no verdict was recorded: {0}")]
    Configuration(String),
}

/// How a runner claims, fetches and records.
pub trait Rendezvous {
    /// A claimed job, as this way knows it.
    type Claimed;
    /// Why a pass stopped before recording.
    type Error;
    /// The claimed job's id.
    fn job_id(claimed: &Self::Claimed) -> i64;
    /// Claims the oldest job waiting for the check; `None` when none waits.
    fn claim(&self) -> impl Future<Output = Result<Option<Self::Claimed>, Self::Error>>;
    /// Fetches the staged bundle of `claimed`, its shards and manifest, under `dir`, the job's own directory.
    /// Checks each file as this way allows, and returns where the bundle is.
    fn fetch(&self, claimed: &Self::Claimed, dir: &Path) -> impl Future<Output = Result<PathBuf, Fetch<Self::Error>>>;
    /// Records the check's `record`. Returns `false` if this runner no longer holds the job; the verdict is
    /// then dropped.
    fn record(&self, claimed: Self::Claimed, record: MlxRecord) -> impl Future<Output = Result<bool, Self::Error>>;
}

/// How this runner runs the check.
#[derive(Debug, Clone)]
pub struct CheckSetup {
    /// Python with `mlx`.
    pub python: PathBuf,
    /// `deploy/verify_mlx.py`.
    pub script: PathBuf,
    /// `gpu` (Metal) or `cpu` (standing in for it, in tests).
    pub device: String,
    /// Where bundles are fetched (a directory per job, removed after).
    pub work: PathBuf,
}

/// Claims one job, fetches its bundle, runs the check and records the verdict. Returns the job and whether
/// it passed, or `None` when nothing waits.
#[tracing::instrument(name = "metal check", skip_all)]
pub async fn check_once<R: Rendezvous>(
    way: &R,
    setup: &CheckSetup,
) -> Result<Option<(i64, bool)>, PassError<R::Error>> {
    let Some(claimed) = way.claim().await.map_err(PassError::Way)? else { return Ok(None) };
    let id = R::job_id(&claimed);
    let dir = setup.work.join(format!("runner-job-{id}"));
    let fetched = way.fetch(&claimed, &dir).await;
    let record = match fetched {
        Ok(bundle) => {
            let interpreter =
                crate::repack::checks::mlx::Interpreter { python: setup.python.clone(), script: setup.script.clone() };
            match crate::repack::checks::mlx::run_off_executor(interpreter, bundle, &setup.device).await {
                Ok(record) => record,
                Err(e) if e.is_configuration() => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(PassError::Configuration(e.to_string()));
                }
                Err(e) => MlxRecord::failed(&setup.device, e.to_string()),
            }
        }
        Err(Fetch::Failed(reason)) => MlxRecord::failed(&setup.device, reason),
        Err(Fetch::Unknown(e)) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(PassError::Way(e));
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    let passed = record.ok;
    if !way.record(claimed, record).await.map_err(PassError::Way)? {
        tracing::warn!(job.id = id, "the job was taken over; the verdict is not recorded");
    }
    Ok(Some((id, passed)))
}

// The pass's test runs a stand-in check through python3: tier 2.
#[cfg(all(test, feature = "system-tests"))]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// A way with one job waiting, whose fetch goes as told, and which keeps what is recorded.
    struct OneJob {
        fetch: RefCell<Option<Result<(), Fetch<String>>>>,
        recorded: RefCell<Vec<MlxRecord>>,
    }

    impl Rendezvous for OneJob {
        type Claimed = i64;
        type Error = String;
        fn job_id(claimed: &i64) -> i64 {
            *claimed
        }
        async fn claim(&self) -> Result<Option<i64>, String> {
            Ok(self.fetch.borrow().is_some().then_some(7))
        }
        async fn fetch(&self, _: &i64, dir: &Path) -> Result<PathBuf, Fetch<String>> {
            std::fs::create_dir_all(dir).unwrap();
            self.fetch.borrow_mut().take().unwrap().map(|()| dir.to_owned())
        }
        async fn record(&self, _: i64, record: MlxRecord) -> Result<bool, String> {
            self.recorded.borrow_mut().push(record);
            Ok(true)
        }
    }

    fn way(fetch: Result<(), Fetch<String>>) -> OneJob {
        OneJob { fetch: RefCell::new(Some(fetch)), recorded: RefCell::new(Vec::new()) }
    }

    /// A bundle that is not the job's is a failed check, recorded with its reason.
    /// A fetch that did not complete records nothing, and the lease lapses.
    /// The script's record judges a fetched bundle. The job's directory is gone after each case.
    #[cfg(feature = "system-tests")] // needs python3
    #[tokio::test]
    async fn a_pass_records_what_the_fetch_and_the_check_decided() {
        let work = tempfile::tempdir().unwrap();
        let script = work.path().join("check.py");
        std::fs::write(&script, "print('{\"ok\": true, \"device\": \"cpu\", \"tensors\": 3}')\n").unwrap();
        let setup = CheckSetup { python: "python3".into(), script, device: "cpu".into(), work: work.path().to_owned() };
        let job_dir = work.path().join("runner-job-7");

        let other = way(Err(Fetch::Failed("the staged manifest is the repair of another source".into())));
        assert_eq!(check_once(&other, &setup).await, Ok(Some((7, false))));
        let recorded = other.recorded.into_inner();
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].error.as_deref(), Some("the staged manifest is the repair of another source"));
        assert!(!job_dir.exists());

        let cut = way(Err(Fetch::Unknown("connection reset".into())));
        assert_eq!(check_once(&cut, &setup).await, Err(PassError::Way("connection reset".to_owned())));
        assert!(cut.recorded.into_inner().is_empty(), "nothing recorded");
        assert!(!job_dir.exists());

        let fetched = way(Ok(()));
        assert_eq!(check_once(&fetched, &setup).await, Ok(Some((7, true))));
        assert_eq!(fetched.recorded.into_inner()[0].tensors, Some(3), "the script's record");
        assert!(!job_dir.exists());
        assert_eq!(check_once(&fetched_none(), &setup).await, Ok(None), "nothing waits");

        // An interpreter that is not there is this runner's fault: no verdict is recorded.
        let broken = CheckSetup { python: work.path().join("no-such-python"), ..setup.clone() };
        let fetched = way(Ok(()));
        assert!(
            matches!(check_once(&fetched, &broken).await, Err(PassError::Configuration(why)) if why.contains("no-such-python"))
        );
        assert!(fetched.recorded.into_inner().is_empty(), "nothing recorded");
        assert!(!job_dir.exists());
    }

    fn fetched_none() -> OneJob {
        OneJob { fetch: RefCell::new(None), recorded: RefCell::new(Vec::new()) }
    }
}
