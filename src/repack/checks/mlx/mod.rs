//! Runs `deploy/verify_mlx.py`. MLX itself loads the output and judges every byte by the manifest's digests,
//! which the re-layout took from the source. It does not read the source again.
//!
//! The check is bounded. It holds about one tensor per shard it checks at once (see the script).
//! This worker's available memory decides how many shards that is. Its address space is capped on Linux.
//! It is killed once it outlives a deadline that grows with the bytes it reads.

pub(crate) mod ahead;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::job::payload::MlxRecord;

/// Longest line read from the check's output (its record names at most a few errors).
const MAX_LINE: u64 = 1 << 20;

/// Why the MLX check did not pass.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MlxCheckError {
    /// The interpreter could not be started or waited for: the operator's setting, not the bundle.
    #[error("cannot run {python} {script}: {source}")]
    CannotRun {
        /// The interpreter.
        python: String,
        /// The check script.
        script: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It ran longer than its deadline and was killed.
    #[error("the check outlived its deadline of {seconds} s for {bytes} and was killed")]
    Deadline {
        /// The deadline.
        seconds: u64,
        /// What it was reading, said for people.
        bytes: String,
    },
    /// It ended before MLX was imported: the interpreter lacks a working MLX or mlx-lm, whatever the bundle.
    #[error("{python} cannot import mlx and mlx_lm: {stderr}")]
    NoMlx {
        /// The interpreter.
        python: String,
        /// What it said on stderr.
        stderr: String,
    },
    /// It ended without printing its record, after MLX was imported.
    #[error("no result from {script}: {stderr}")]
    NoResult {
        /// The check script.
        script: String,
        /// What it said on stderr.
        stderr: String,
    },
    /// MLX loaded the bundle and found it wrong (its record's `error`).
    #[error("{0}")]
    Failed(String),
    /// The job no longer wanted the check: it ended before its bundle was staged, or dropped the record.
    /// The interpreter was killed.
    #[error("the job no longer wanted the check")]
    Abandoned,
    /// The thread it ran on could not be started, or panicked.
    #[error(transparent)]
    Thread(#[from] crate::blocking::BlockingError),
}

impl MlxCheckError {
    /// Whether the worker's configuration failed rather than the bundle: the interpreter cannot run, or
    /// cannot import MLX. Such a failure says nothing of the job.
    pub(crate) fn is_configuration(&self) -> bool {
        matches!(self, MlxCheckError::CannotRun { .. } | MlxCheckError::NoMlx { .. })
    }
}

/// The line the script prints once MLX is imported, before it loads anything.
#[derive(serde::Deserialize)]
struct StartLine {
    started: bool,
    mlx_version: Option<String>,
}

/// The interpreter that runs the MLX check, and the check's script (`deploy/verify_mlx.py`).
#[derive(Debug, Clone)]
pub(crate) struct Interpreter {
    /// A Python with `mlx` and `mlx-lm`.
    pub python: PathBuf,
    /// The check's script.
    pub script: PathBuf,
}

/// An MLX check whose interpreter starts before its bundle is staged.
/// The interpreter imports MLX and mlx-lm (about a second) while the bundle downloads, or earlier.
/// It learns where the bundle is, and reads it, only at [`MlxCheck::go`].
/// Dropped before that, or with its record after, it has its interpreter killed.
/// The check runs on a low-priority thread of its own, because it blocks for minutes.
pub(crate) struct MlxCheck {
    /// Tells the check's thread where the staged bundle is.
    go: std::sync::mpsc::Sender<PathBuf>,
    /// What the check does once told.
    going: Going,
}

/// A check told to read its bundle.
pub(crate) struct Going {
    /// The MLX version the check announced once MLX was imported; dropped if it never did.
    pub started: tokio::sync::oneshot::Receiver<Option<String>>,
    /// The check's record, or why it failed. Dropping it kills the interpreter.
    pub record: std::pin::Pin<Box<dyn Future<Output = Result<MlxRecord, MlxCheckError>> + Send>>,
}

/// Resolves once a check has ended: its interpreter gone and its home removed.
pub(crate) struct Ended(tokio::sync::oneshot::Receiver<()>);

impl Ended {
    /// Waits until the check has ended.
    pub(crate) async fn wait(self) {
        let _ = self.0.await;
    }
}

impl MlxCheck {
    /// Starts the interpreter for a check on `device`. Its empty home goes in `home_in`, and goes with it.
    pub(crate) fn start(interpreter: Interpreter, device: &str, home_in: &Path) -> MlxCheck {
        MlxCheck::start_watched(interpreter, device, home_in).0
    }

    /// [`MlxCheck::start`], and what resolves once the check has ended, whoever holds it by then.
    pub(crate) fn start_watched(
        Interpreter { python, script }: Interpreter,
        device: &str,
        home_in: &Path,
    ) -> (MlxCheck, Ended) {
        let (device, home_in) = (device.to_owned(), home_in.to_owned());
        let (ended_tx, ended) = tokio::sync::oneshot::channel();
        let (go, told) = std::sync::mpsc::channel();
        // Nothing is sent on `wanted`: the record's future holds its sender, and dropping it disconnects.
        let (wanted, still_wanted) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let running = crate::blocking::run("the MLX check", move || {
            // Dropped once `run_check` has returned, and so once its home is gone.
            let _ended = ended_tx;
            crate::blocking::assert_off_executor("the MLX check");
            // The limits depend on the staged shards, so they are set once the bundle is there.
            let staged = || {
                let output: PathBuf = told.recv().ok()?;
                Some(Go { limits: Limits::for_bundle(&output, available_memory()), output })
            };
            let wanted = || !matches!(still_wanted.try_recv(), Err(std::sync::mpsc::TryRecvError::Disconnected));
            let tell = |version| drop(started_tx.send(version));
            run_check(&python, &script, (&device, &home_in), staged, wanted, tell)
        });
        let record = Box::pin(async move {
            let _wanted = wanted;
            running.await?
        });
        (MlxCheck { go, going: Going { started, record } }, Ended(ended))
    }

    /// Lets the check read the bundle now staged in `output`.
    pub(crate) fn go(self, output: PathBuf) -> Going {
        // The thread has ended only if the check could not start; its record says why.
        let _ = self.go.send(output);
        self.going
    }

    /// Ends the check unread. Returns once its interpreter is gone and its home removed, so that the job's
    /// directory can go.
    pub(crate) async fn abandon(self) {
        let MlxCheck { go, going } = self;
        drop(go);
        let _ = going.record.await;
    }
}

/// Checks the bundle staged in `output` on `device` at once, on a low-priority thread of its own.
/// The checks at start, the Hub rendezvous and the macOS runner run the check this way.
pub(crate) fn run_off_executor(
    interpreter: Interpreter,
    output: PathBuf,
    device: &str,
) -> impl Future<Output = Result<MlxRecord, MlxCheckError>> + use<> {
    // The check's home goes beside the bundle, so that whoever removes the bundle's directory removes it too.
    let home_in = output.parent().unwrap_or(&output).to_owned();
    MlxCheck::start(interpreter, device, &home_in).go(output).record
}

/// Variables of the worker's environment the MLX check inherits: what finds and runs Python and MLX, and
/// nothing else (`HOME` is one of its own).
const INHERITED: [&str; 11] = [
    "PATH",
    "USER",
    "LANG",
    "LANGUAGE",
    "TMPDIR",
    "TZ",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONDONTWRITEBYTECODE",
    "LD_LIBRARY_PATH",
    "DYLD_LIBRARY_PATH",
];

/// Builds the MLX check's environment from the worker's own. The check loads weights a stranger pushed, so
/// it gets none of the worker's secrets (`HF_TOKEN`, `HUBALIGN_*_TOKEN`, `DATABASE_URL`, a cloud's keys, …).
/// It keeps only [`INHERITED`], the locale (`LC_*`) and MLX's own settings (`MLX_*`).
/// It turns the Hub's offline switches on, so that nothing the check loads reaches the network.
fn check_environment(
    parent: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: Vec<_> = parent
        .filter(|(name, _)| {
            name.to_str().is_some_and(|n| INHERITED.contains(&n) || n.starts_with("LC_") || n.starts_with("MLX_"))
        })
        .collect();
    for name in ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"] {
        env.push((name.into(), "1".into()));
    }
    env
}

/// Makes this process non-dumpable, once, before its first check. The check runs as the same user, so it
/// could otherwise read the worker's `/proc/PID/environ` or ptrace it. A non-dumpable process's proc files
/// are owned by root, which closes both to the check.
/// This works on Linux only; elsewhere the emptied environment is the whole defence.
fn seal_this_process() {
    static SEALED: std::sync::Once = std::sync::Once::new();
    SEALED.call_once(|| {
        #[cfg(target_os = "linux")]
        if let Err(e) = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable) {
            tracing::warn!(error = %e, "could not make the worker non-dumpable: the MLX check may read its environment");
        }
    });
}

/// Starts the check's interpreter on `device` (`cpu` or `gpu`), with an empty home made in `home_in`.
/// Once `staged` says where the bundle is and within which limits, lets the check read it.
/// After that, tells `on_start` the MLX version the script announced once MLX was imported.
/// Returns the check's record, or why it failed.
/// If `staged` returns `None`, or `wanted` turns false, the interpreter is killed and the check abandoned.
fn run_check(
    python: &Path,
    script: &Path,
    (device, home_in): (&str, &Path),
    staged: impl FnOnce() -> Option<Go>,
    wanted: impl Fn() -> bool,
    on_start: impl FnOnce(Option<String>),
) -> Result<MlxRecord, MlxCheckError> {
    let cannot = |source: std::io::Error| MlxCheckError::CannotRun {
        python: python.display().to_string(),
        script: script.display().to_string(),
        source,
    };
    seal_this_process();
    // The check gets an empty home of its own, removed with it, because the worker's home may hold a token
    // file. A check a job started has it in the job's directory, so the job's end removes it even if the
    // worker is killed mid-check.
    let home = tempfile::Builder::new().prefix("hubalign-check-home").tempdir_in(home_in).map_err(cannot)?;
    let mut command = Command::new(python);
    command.env_clear().envs(check_environment(std::env::vars_os())).env("HOME", home.path()).arg(script);
    // The script imports MLX, then waits on stdin for the bundle and its limits.
    command.args(["--device", device, "--wait"]).stdin(Stdio::piped());
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(cannot)?;
    // stderr is drained beside stdout, so that neither pipe fills while the other is read.
    let stderr = child.stderr.take().map(|e| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = e.take(MAX_LINE).read_to_string(&mut text);
            text
        })
    });
    // stdout is read on a thread of its own. This thread can then kill a check that outlives its deadline,
    // even while the check prints nothing.
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().map(|stdout| {
        std::thread::spawn(move || {
            let mut last = String::new();
            let mut lines = BufReader::new(stdout.take(16 * MAX_LINE));
            let mut line = String::new();
            while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
                if let Ok(started) = serde_json::from_str::<StartLine>(&line)
                    && started.started
                {
                    let _ = started_tx.send(started.mlx_version);
                }
                last = std::mem::take(&mut line);
            }
            last
        })
    });
    let Some(go) = staged() else {
        end(&mut child);
        return Err(MlxCheckError::Abandoned);
    };
    let Some(line) = go.line() else {
        end(&mut child);
        let why = format!("the bundle's path is not UTF-8: {}", go.output.display());
        return Err(cannot(std::io::Error::new(std::io::ErrorKind::InvalidInput, why)));
    };
    let limits = go.limits;
    // A check that ended before it read its line is judged by what it printed, below.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{line}");
    }
    let deadline = Instant::now() + limits.deadline;
    let mut on_start = Some(on_start);
    let mut started = false;
    let status = loop {
        if let Ok(version) = started_rx.try_recv() {
            started = true;
            if let Some(tell) = on_start.take() {
                tell(version);
            }
        }
        if let Some(status) = child.try_wait().map_err(cannot)? {
            break status;
        }
        let stop = if !wanted() {
            Some(MlxCheckError::Abandoned)
        } else if Instant::now() >= deadline {
            let (seconds, bytes) = (limits.deadline.as_secs(), crate::report::human_bytes(limits.bytes));
            Some(MlxCheckError::Deadline { seconds, bytes })
        } else {
            None
        };
        if let Some(stop) = stop {
            end(&mut child);
            return Err(stop);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The reader is joined first, so a `started` line it read just before the process died is in the channel.
    // A check that died after MLX was imported is then never taken for a missing MLX.
    let last = stdout.and_then(|t| t.join().ok()).unwrap_or_default();
    if let Ok(version) = started_rx.try_recv() {
        started = true;
        if let Some(tell) = on_start.take() {
            tell(version);
        }
    }
    let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let record: MlxRecord = serde_json::from_str(last.trim()).map_err(|_| {
        let stderr = last_lines(&stderr, 3);
        if started {
            MlxCheckError::NoResult { script: script.display().to_string(), stderr }
        } else {
            MlxCheckError::NoMlx { python: python.display().to_string(), stderr }
        }
    })?;
    // The script's own record when MLX failed to import (it catches the error and reports it).
    if !started && !record.ok {
        let said = record.error.clone().unwrap_or_else(|| "failed".to_owned());
        return Err(MlxCheckError::NoMlx { python: python.display().to_string(), stderr: said });
    }
    if status.success() && record.ok {
        Ok(record)
    } else {
        Err(MlxCheckError::Failed(record.error.unwrap_or_else(|| "failed".to_owned())))
    }
}

/// Kills the check's interpreter and waits for it, so that no process is left behind.
fn end(child: &mut std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `n` non-blank lines of `text`, joined: a traceback's end says what went wrong.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// What one check may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Shards checked at once.
    pub jobs: usize,
    /// The process's address-space cap, in bytes.
    pub address_space: u64,
    /// How long it may run.
    pub deadline: Duration,
    /// Bytes of shards it reads.
    pub bytes: u64,
}

/// Most shards checked at once, whatever the memory. Two let the reads and the hashing overlap; more gain
/// nothing on the cores a worker has.
const MAX_JOBS: usize = 2;
/// What the interpreter and MLX map before any shard: about 0.9 GB measured with `mlx[cpu]` 0.32, doubled.
const BASE_ADDRESS_SPACE: u64 = 2 << 30;
/// The buffers MLX may keep for reuse (the script's `CACHE_LIMIT`).
const MLX_CACHE: u64 = 256 << 20;
/// The deadline's fixed part (an import of MLX not done by the go, mlx-lm's load) and the slowest read rate it
/// allows. The deadline starts at the go.
const DEADLINE_BASE: Duration = Duration::from_secs(300);
const SLOWEST_BYTES_PER_SEC: u64 = 20_000_000;

impl Limits {
    /// Sets the limits for the bundle in `dir`, given `available` bytes of free memory (`None` when unknown).
    /// Each shard checked at once holds its largest tensor, twice while it is hashed, and MLX's cache.
    pub(crate) fn for_bundle(dir: &Path, available: Option<u64>) -> Limits {
        let (mut largest, mut bytes) = (0u64, 0u64);
        for shard in crate::repack::upload::files_of(dir) {
            if !shard.rel.ends_with(crate::bundle::SHARD_SUFFIX) {
                continue;
            }
            bytes = bytes.saturating_add(shard.size);
            if let Ok(h) = crate::safetensors::read::read_shard_header(&shard.path) {
                largest = h
                    .header
                    .tensors
                    .iter()
                    .map(crate::safetensors::header::TensorInfo::byte_len)
                    .fold(largest, u64::max);
            }
        }
        let per_job = largest.saturating_mul(2).saturating_add(MLX_CACHE);
        let fits = available.map_or(1, |a| usize::try_from(a / 2 / per_job.max(1)).unwrap_or(MAX_JOBS));
        let jobs = fits.clamp(1, MAX_JOBS);
        let address_space = BASE_ADDRESS_SPACE.saturating_add(per_job.saturating_mul(jobs as u64));
        let deadline = DEADLINE_BASE + Duration::from_secs(bytes / SLOWEST_BYTES_PER_SEC);
        Limits { jobs, address_space, deadline, bytes }
    }

    /// The address-space cap the script sets, 0 for none. Only Linux enforces it for what MLX maps; macOS's
    /// Metal maps far more than it touches.
    fn address_space_for_script(&self) -> u64 {
        if cfg!(target_os = "linux") { self.address_space } else { 0 }
    }
}

/// What a check reads once told: the staged bundle, and the limits set from it.
struct Go {
    /// The staged bundle's directory.
    output: PathBuf,
    /// What the check may take.
    limits: Limits,
}

impl Go {
    /// The line the script reads on stdin: the bundle's directory, how many shards it checks at once, and its
    /// address-space cap. `None` if the directory's path is not UTF-8, which JSON cannot carry.
    fn line(&self) -> Option<serde_json::Value> {
        let output = self.output.to_str()?;
        let (jobs, cap) = (self.limits.jobs, self.limits.address_space_for_script());
        Some(serde_json::json!({ "output": output, "jobs": jobs, "max_address_space": cap }))
    }
}

/// Memory this machine has available now (`MemAvailable` of `/proc/meminfo`), if it says.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = text.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?.trim().strip_suffix("kB")?.trim();
    kib.parse::<u64>().ok()?.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubalign_test_support::synth::{SynthTensor, write_mlx_style};

    #[test]
    fn the_memory_decides_how_many_shards_are_checked_at_once_and_the_bytes_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let big = SynthTensor::filled("w", "F32", &[1024, 1024]);
        std::fs::write(dir.path().join("model.safetensors"), write_mlx_style(&[big], None)).unwrap();
        let per_job = 2 * (4 << 20) + MLX_CACHE;
        let tight = Limits::for_bundle(dir.path(), Some(per_job));
        assert_eq!(tight.jobs, 1, "{tight:?}");
        let roomy = Limits::for_bundle(dir.path(), Some(100 * per_job));
        assert_eq!(roomy.jobs, MAX_JOBS);
        assert_eq!(roomy.address_space, BASE_ADDRESS_SPACE + 2 * per_job);
        assert_eq!(Limits::for_bundle(dir.path(), None).jobs, 1, "unknown memory: one at a time");
        assert!(tight.bytes > 4 << 20 && tight.deadline >= DEADLINE_BASE, "{tight:?}");
    }

    /// The check runs code over a stranger's files. The worker's tokens and database URL stay behind.
    /// What runs Python and MLX goes with the check, and the Hub is off.
    #[cfg(feature = "system-tests")] // needs python3
    #[test]
    fn the_check_gets_no_secret_of_the_worker() {
        let parent = [
            ("PATH", "/usr/bin"),
            ("PYTHONPATH", "/opt/py"),
            ("LC_ALL", "C.UTF-8"),
            ("MLX_SAFETENSORS_MMAP", "1"),
            ("HF_TOKEN", "hf_secret"),
            ("HUBALIGN_ADMIN_TOKEN", "admin"),
            ("HUBALIGN_RUNNER_TOKEN", "runner"),
            ("DATABASE_URL", "postgres://u:p@db/h"),
            ("AWS_SECRET_ACCESS_KEY", "k"),
            ("HF_HUB_OFFLINE", "0"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let env: Vec<(String, String)> = check_environment(parent.into_iter())
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "PATH",
                "PYTHONPATH",
                "LC_ALL",
                "MLX_SAFETENSORS_MMAP",
                "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE",
                "HF_HUB_DISABLE_TELEMETRY"
            ]
        );
        assert!(
            env.iter().all(|(k, v)| !k.starts_with("HF_HUB_OFFLINE") || v == "1"),
            "offline, whatever the worker's"
        );

        // And the child process sees just that.
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("env.py");
        let seen = dir.path().join("seen.json");
        std::fs::write(
            &script,
            format!(
                "import json, os\nopen({:?}, 'w').write(json.dumps(dict(os.environ)))\n",
                seen.display().to_string()
            ),
        )
        .unwrap();
        // The interpreter itself, not a launcher (pyenv's shim sets variables of its own).
        let real = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
        let python = String::from_utf8(real.stdout).unwrap();
        let go = || Some(go_now(dir.path()));
        let _ = run_check(Path::new(python.trim()), &script, ("cpu", dir.path()), go, || true, |_| {});
        let seen: std::collections::BTreeMap<String, String> =
            serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
        assert_eq!(seen.get("HF_HUB_OFFLINE").map(String::as_str), Some("1"));
        let home = seen.get("HOME").map(String::as_str).unwrap_or_default();
        assert!(home.contains("hubalign-check-home") && !Path::new(home).exists(), "a home of its own, gone: {home}");
        assert_eq!(Path::new(home).parent(), Some(dir.path()), "where it was told, the job's directory");
        #[cfg(target_os = "linux")]
        assert_eq!(
            rustix::process::dumpable_behavior().unwrap(),
            rustix::process::DumpableBehavior::NotDumpable,
            "the worker's /proc/PID/environ is closed to the check"
        );
        let given: Vec<String> =
            check_environment(std::env::vars_os()).into_iter().filter_map(|(k, _)| k.into_string().ok()).collect();
        // Python may set LC_CTYPE itself (its C locale coercion).
        let leaked: Vec<&String> =
            seen.keys().filter(|k| !given.contains(k) && !["LC_CTYPE", "HOME"].contains(&k.as_str())).collect();
        assert!(leaked.is_empty(), "inherited beyond the list: {leaked:?}");
    }

    #[cfg(feature = "system-tests")] // needs python3
    #[test]
    fn a_check_that_outlives_its_deadline_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("hang.py");
        std::fs::write(
            &script,
            "import time\nprint('{\"started\": true, \"mlx_version\": \"x\"}', flush=True)\ntime.sleep(600)\n",
        )
        .unwrap();
        // The deadline is minutes long; a check here runs on a bundle of no bytes, so it is the fixed part.
        let go = go_now(dir.path());
        assert_eq!(go.limits.deadline, DEADLINE_BASE);
        let short = Go { limits: Limits { deadline: Duration::from_millis(500), ..go.limits }, ..go };
        let started = Instant::now();
        let mut told = None;
        let result =
            run_check(Path::new("python3"), &script, ("cpu", dir.path()), || Some(short), || true, |s| told = Some(s));
        assert!(result.unwrap_err().to_string().contains("deadline"));
        assert_eq!(told, Some(Some("x".to_owned())), "the start was told");
        assert!(started.elapsed() < Duration::from_secs(30), "killed, not waited for");
    }

    /// A stand-in that writes its pid to `dir/pid` and says it started. It then writes what it reads on
    /// stdin to `dir/read` and sleeps, as a long check would.
    #[cfg(feature = "system-tests")]
    fn waits_for_its_limits(dir: &Path) -> PathBuf {
        let script = dir.join("wait.py");
        let body = format!(
            "import os, sys, time\nopen({pid:?}, 'w').write(str(os.getpid()))\n\
             print('{{\"started\": true, \"mlx_version\": \"x\"}}', flush=True)\n\
             line = sys.stdin.readline()\nopen({read:?}, 'w').write(line)\ntime.sleep(600)\n",
            pid = dir.join("pid").display().to_string(),
            read = dir.join("read").display().to_string(),
        );
        std::fs::write(&script, body).unwrap();
        script
    }

    /// The stand-in's process id, once it has written it.
    #[cfg(feature = "system-tests")]
    fn pid_of_stand_in(dir: &Path) -> rustix::process::Pid {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pid = std::fs::read_to_string(dir.join("pid")).ok().and_then(|p| p.parse::<i32>().ok());
            if let Some(pid) = pid.and_then(rustix::process::Pid::from_raw) {
                return pid;
            }
            assert!(Instant::now() < deadline, "the stand-in never started");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether process `pid` still exists (a zombie counts: its parent has not waited for it).
    #[cfg(feature = "system-tests")]
    fn exists(pid: rustix::process::Pid) -> bool {
        rustix::process::test_kill_process(pid).is_ok()
    }

    /// The check of the bundle in `dir` with the limits set from it, as a job's go gives it.
    #[cfg(feature = "system-tests")]
    fn go_now(dir: &Path) -> Go {
        Go { output: dir.to_owned(), limits: Limits::for_bundle(dir, None) }
    }

    /// The check starts before its bundle is staged, and learns where it is and its limits only once it is.
    #[cfg(feature = "system-tests")] // needs python3
    #[test]
    fn the_check_gets_its_bundle_and_limits_once_the_bundle_is_staged() {
        let dir = tempfile::tempdir().unwrap();
        let script = waits_for_its_limits(dir.path());
        let limits = Limits { deadline: Duration::from_secs(2), ..Limits::for_bundle(dir.path(), None) };
        let output = dir.path().join("aligned");
        let mut read_before = true;
        let staged = || {
            pid_of_stand_in(dir.path());
            std::thread::sleep(Duration::from_millis(200));
            read_before = dir.path().join("read").exists();
            Some(Go { output: output.clone(), limits })
        };
        let _ = run_check(Path::new("python3"), &script, ("cpu", dir.path()), staged, || true, |_| {});
        assert!(!read_before, "it read nothing before the bundle was staged");
        let said: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("read")).unwrap()).unwrap();
        let expected = serde_json::json!({
            "output": output.to_str().unwrap(), "jobs": limits.jobs, "max_address_space": limits.address_space_for_script()
        });
        assert_eq!(said, expected);
    }

    /// A job that ends before its bundle is staged abandons the check: the interpreter is gone, unread,
    /// with its home, once `abandon` returns.
    #[cfg(feature = "system-tests")] // needs python3
    #[test]
    fn an_abandoned_check_is_killed_unread_before_the_job_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let interpreter = Interpreter { python: "python3".into(), script: waits_for_its_limits(dir.path()) };
        let check = MlxCheck::start(interpreter, "cpu", dir.path());
        let pid = pid_of_stand_in(dir.path());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(check.abandon());
        assert!(!exists(pid), "killed and waited for");
        // Closing its stdin would have let it read an empty line and write it; it was killed first.
        assert!(!dir.path().join("read").exists(), "killed, not let go on");
        let homes = std::fs::read_dir(dir.path()).unwrap().filter_map(Result::ok);
        assert!(!homes.into_iter().any(|e| e.file_name().to_string_lossy().starts_with("hubalign-check-home")));
    }

    /// A job that drops the check's record, as a job stopped mid-check does, has the interpreter killed.
    #[cfg(feature = "system-tests")] // needs python3
    #[test]
    fn a_check_whose_record_is_dropped_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let interpreter = Interpreter { python: "python3".into(), script: waits_for_its_limits(dir.path()) };
        let going = MlxCheck::start(interpreter, "cpu", dir.path()).go(dir.path().join("output"));
        let pid = pid_of_stand_in(dir.path());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !dir.path().join("read").exists() {
            assert!(Instant::now() < deadline, "the go never reached the stand-in");
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(going);
        while exists(pid) {
            assert!(Instant::now() < deadline, "the check outlived its record");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Only a failure before MLX is imported, and so before the bundle is read, is the worker's
    /// configuration. A bundle cannot make its own failure a hold. A hold spends nothing, so it would hold
    /// the worker each time the job is claimed.
    #[cfg(feature = "system-tests")] // needs python3
    #[test]
    fn only_a_failure_before_mlx_is_imported_is_the_configurations() {
        let dir = tempfile::tempdir().unwrap();
        let run = |name: &str, body: &str| {
            let script = dir.path().join(name);
            std::fs::write(&script, body).unwrap();
            run_check(Path::new("python3"), &script, ("cpu", dir.path()), || Some(go_now(dir.path())), || true, |_| {})
        };
        let started = "print('{\"started\": true, \"mlx_version\": \"x\"}', flush=True)\n";
        let no_mlx = "print('{\"ok\": false, \"device\": \"cpu\", \"error\": \"ModuleNotFoundError: mlx\"}')\n";
        let cases = [
            ("silent.py", "import sys\nsys.exit(1)\n".to_owned(), true),
            ("no_mlx.py", no_mlx.to_owned(), true),
            ("crashed.py", format!("{started}import os\nos._exit(9)\n"), false),
            (
                "wrong.py",
                format!("{started}print('{{\"ok\": false, \"device\": \"cpu\", \"error\": \"differs\"}}')\n"),
                false,
            ),
        ];
        for (name, body, configuration) in cases {
            let failed = run(name, &body).unwrap_err();
            assert_eq!(failed.is_configuration(), configuration, "{name}: {failed}");
        }
        let missing = run_check(
            Path::new("/nonexistent/python3"),
            Path::new("x.py"),
            ("cpu", dir.path()),
            || Some(go_now(dir.path())),
            || true,
            |_| {},
        );
        assert!(missing.unwrap_err().is_configuration());
    }
}
