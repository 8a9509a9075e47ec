//! Shared helpers: the binary, the fixtures, the pinned Python interop environment.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/fixtures/<rel>`.
pub(crate) fn fixture(rel: &str) -> PathBuf {
    root().join("tests/fixtures").join(rel)
}

/// The `hubalign` binary under test: this build's, or another named by `HUBALIGN_TEST_BIN` (to show that a
/// regression test fails on an older build).
pub(crate) fn hubalign_bin() -> std::ffi::OsString {
    std::env::var_os("HUBALIGN_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_hubalign").into())
}

/// A command running [`hubalign_bin`].
pub(crate) fn hubalign() -> Command {
    // Each run gets an empty Xet shard cache of its own, in the build tree rather than the user's home, so no
    // run deduplicates against what an earlier one cached (simulators reuse ports, and the cache is per port).
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut cmd = Command::new(hubalign_bin());
    cmd.env_remove("RUST_LOG");
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    cmd.env("HF_XET_CACHE", root().join(format!("target/test-xet-cache/{}-{run}", std::process::id())));
    // Logs of the binary under test, when debugging a test: DEBUG_CHILD_LOG=hubalign=info cargo test …
    if let Ok(filter) = std::env::var("DEBUG_CHILD_LOG") {
        cmd.env("RUST_LOG", filter);
    }
    cmd
}

/// Runs `hubalign args…` and returns its output.
pub(crate) fn run(args: &[&str]) -> Output {
    hubalign().args(args).output().expect("hubalign runs")
}

/// stdout as text.
pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stdout then stderr, as text.
pub(crate) fn text(out: &Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

/// Copies a fixture file or directory tree into `dst`.
pub(crate) fn copy_tree(src: &Path, dst: &Path) {
    if src.is_dir() {
        std::fs::create_dir_all(dst).unwrap();
        for entry in std::fs::read_dir(src).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &dst.join(entry.file_name()));
        }
    } else {
        std::fs::copy(src, dst).unwrap();
    }
}

/// Whether this build runs tier 2 of the tests (the feature `system-tests`), which may use what
/// `tests/run.sh` installs.
pub(crate) fn tier_two() -> bool {
    cfg!(feature = "system-tests")
}

/// The interpreter of the pinned interop venv, created on first use by `tests/python/setup-venv.sh`
/// (idempotent and locked, so parallel tests and `.ci/run` share one install). Never skipped: if it cannot be
/// set up, the test fails saying why.
pub(crate) fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    assert!(tier_two(), "this test needs the venv: mark it #[cfg(feature = \"system-tests\")]");
    PYTHON.get_or_init(|| {
        let script = root().join("tests/python/setup-venv.sh");
        let status = Command::new("bash").arg(&script).status().expect("bash runs");
        assert!(status.success(), "{} failed: the interop tests need its venv", script.display());
        let python = root().join("target/py-venv/bin/python");
        assert!(python.exists(), "{} missing after setup", python.display());
        python
    })
}

/// Runs a Python script of `tests/python` with the venv, offline; panics with its output unless it succeeds.
pub(crate) fn run_python(script: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(root().join("tests/python").join(script))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .output()
        .expect("python runs");
    let text = text(&out);
    assert!(out.status.success(), "{script} {args:?} failed:\n{text}");
    text
}

/// The mirror name the worker gives `source` in the test worlds' target namespace, `alice`.
pub(crate) fn mirror(source: &str) -> String {
    hubalign::repack::publish::mirror_name(source, "alice")
}

/// An interpreter that is the real one for the probe of the checks at start (its home, beside the probe
/// bundle, says `hubalign-preflight-`), and for a job's check says `said` (a script for `python -c`).
pub(crate) fn python_for_jobs(dir: &Path, said: &str) -> PathBuf {
    python_for_jobs_as(&dir.join("python-for-jobs"), &format!("-c '{said}'"))
}

/// An interpreter that is the real one for the probe of the checks at start, and for a job's check runs
/// `script` with the check's arguments.
pub(crate) fn python_for_jobs_running(dir: &Path, script: &Path) -> PathBuf {
    python_for_jobs_as(&dir.join("python"), &format!("'{}' \"$@\"", script.display()))
}

/// Writes at `path` an interpreter that is the real one for the probe of the checks at start, and for a
/// job's check runs the real one with `job_args` (shell words).
fn python_for_jobs_as(path: &Path, job_args: &str) -> PathBuf {
    let script = format!(
        "#!/bin/sh\ncase \"$HOME\" in\n  *hubalign-preflight-*) exec '{real}' \"$@\" ;;\nesac\nexec '{real}' {job_args}\n",
        real = python().display()
    );
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.to_owned()
}

/// MLX found the bundle wrong: the check started, then failed.
pub(crate) const CHECK_FAILS: &str = "import json; print(json.dumps({\"started\": True, \"mlx_version\": \"0.0\"})); \
    print(json.dumps({\"ok\": False, \"device\": \"cpu\", \"error\": \"ValueError: differs\"})); raise SystemExit(1)";
