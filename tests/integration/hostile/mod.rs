//! Attacks from a Hub that lies, from repos anyone can push, from local files that are not what they seem
//! and from clients that never finish a request. Each must cost hubalign at most bounded time and memory:
//! never a panic, never a file outside its directories, never a public copy of something not public.

#[cfg(feature = "system-tests")]
mod carried;
mod hub;
mod local;
#[cfg(feature = "system-tests")]
mod names;
mod ownership;
pub(crate) mod proxy;
#[cfg(feature = "system-tests")]
mod publish;
#[cfg(feature = "system-tests")]
mod service;
#[cfg(feature = "system-tests")]
mod volume;

use std::path::Path;
use std::process::{Command, Stdio};

use crate::sim::world::{World, bundle, start_on};

/// The hostile world: a public affected repo; a private org repo, a manually gated repo and a disabled repo
/// the token can all read; a private repo of the token's own namespace; two publishers' repos of one name.
pub(crate) fn hostile_world() -> World {
    let root = tempfile::tempdir().unwrap();
    let mlx = r#"{"library_name":"mlx","license":"mit","downloads":1000}"#;
    bundle(root.path(), "mlx-community/tiny-q4", "mlx_lm/q4", mlx);
    bundle(
        root.path(),
        "alice-org/private-q4",
        "mlx_lm/q4",
        r#"{"library_name":"mlx","private":true,"downloads":1000}"#,
    );
    bundle(
        root.path(),
        "alice/own-private-q4",
        "mlx_lm/q4",
        r#"{"library_name":"mlx","private":true,"downloads":1000}"#,
    );
    bundle(
        root.path(),
        "gatedco/gated-q4",
        "mlx_lm/q4",
        r#"{"library_name":"mlx","gated":"manual","grantedUsers":["alice"],"downloads":1000}"#,
    );
    bundle(
        root.path(),
        "old-org/disabled-q4",
        "mlx_lm/q4",
        r#"{"library_name":"mlx","disabled":true,"downloads":1000}"#,
    );
    bundle(root.path(), "pubco/public-4bit", "mlx_lm/q4", mlx);
    bundle(root.path(), "otherco/public-4bit", "mlx_lm/q4", mlx);
    start_on(root, |c| c.page_size = 3)
}

/// What a child process did, with its peak resident memory.
pub(crate) struct Measured {
    /// Exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// stdout and stderr, as text.
    pub output: String,
    /// Peak resident set size, in bytes.
    pub max_rss: u64,
}

/// Reports a command's peak RSS from the kernel. The command runs under a small Python parent: Linux's
/// `ru_maxrss` carries over from the process a child was forked from, so measured straight from this test
/// process it would be this process's size, not the command's. A command still running after three minutes
/// is killed (exit 124): a regression fails the test instead of hanging it.
const MEASURE: &str = r"
import resource, subprocess, sys
try:
    code = subprocess.run(sys.argv[1:], timeout=180).returncode
except subprocess.TimeoutExpired:
    code = 124
sys.stderr.write('\nmax_rss_kib=%d\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(code if code >= 0 else 128 - code)
";

/// Runs `cmd` to its end and reads its peak memory from the kernel.
pub(crate) fn run_measured(cmd: &mut Command) -> Measured {
    assert!(crate::support::tier_two(), "this test needs python3: mark it #[cfg(feature = \"system-tests\")]");
    let mut wrapped = Command::new("python3");
    wrapped.args(["-c", MEASURE]).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    let out = wrapped.stdin(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let (err, rss) = err.rsplit_once("\nmax_rss_kib=").expect("the wrapper reports the peak");
    let max_rss = rss.trim().parse::<u64>().unwrap() * 1024;
    let output = format!("{}{err}", String::from_utf8_lossy(&out.stdout));
    Measured { code: out.status.code(), output, max_rss }
}

/// Every file under `dir` whose name starts with `prefix`.
pub(crate) fn files_named(dir: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            found.push(path.clone());
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(files_named(&path, prefix));
        }
    }
    found
}
