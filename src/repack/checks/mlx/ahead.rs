//! An MLX check started before its job is claimed.
//!
//! `hubalign repack` starts one during the checks at start, beside the probe's, so that the two imports of
//! MLX run at once. Its job then downloads without an import beside it.
//! The worker loop starts none: it may wait hours for its first job, and the interpreter would hold its
//! memory all that time.

use std::path::Path;
use std::sync::Mutex;

use super::{Ended, Interpreter, MlxCheck};

/// At most one MLX check whose interpreter started before its job was claimed, on one device.
/// The first job that runs its check on that device here takes it.
/// Like every check, it reads one bundle: nothing before its job's.
pub struct CheckAhead {
    /// The device it checks on: `cpu` or `gpu`.
    device: &'static str,
    /// The check, until a job takes it.
    check: Mutex<Option<MlxCheck>>,
    /// Resolves once the check has ended, whether or not a job took it.
    ended: Mutex<Option<Ended>>,
}

impl CheckAhead {
    /// No check started ahead: every job starts its own.
    pub const fn none() -> CheckAhead {
        CheckAhead { device: "cpu", check: Mutex::new(None), ended: Mutex::new(None) }
    }

    /// Starts the interpreter of `script` under `python` for a check on `device` (`cpu` or `gpu`).
    /// Its empty home goes in `work_dir`, since no job's directory exists yet.
    pub fn start(python: &Path, script: &Path, device: &'static str, work_dir: &Path) -> CheckAhead {
        let interpreter = Interpreter { python: python.to_owned(), script: script.to_owned() };
        let (check, ended) = MlxCheck::start_watched(interpreter, device, work_dir);
        CheckAhead { device, check: Mutex::new(Some(check)), ended: Mutex::new(Some(ended)) }
    }

    /// Takes the check for a job that checks on `device`, if one is waiting for that device.
    pub(crate) fn take(&self, device: &str) -> Option<MlxCheck> {
        let mut check = self.check.lock().ok()?;
        if device != self.device {
            return None;
        }
        check.take()
    }

    /// Ends the check, unless a job took it and still holds it. Returns once its interpreter is gone and its
    /// home removed. Call it after the job: a job stopped mid-check drops the check, whose interpreter is
    /// then killed.
    pub async fn end(&self) {
        // Dropping a check nobody took kills its interpreter unread.
        drop(self.check.lock().ok().and_then(|mut c| c.take()));
        let ended = self.ended.lock().ok().and_then(|mut e| e.take());
        if let Some(ended) = ended {
            ended.wait().await;
        }
    }
}
