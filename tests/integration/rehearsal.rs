//! The Hub-scale rehearsal at CI size: `bench/rehearsal.py --ci` runs the whole service (two `serve`
//! replicas, a third with `--no-scheduler`, four workers, PostgreSQL) against a synthetic population under
//! quotas and faults, kills and restarts, a database restart and a full disk, and checks its invariants at
//! the end. It needs root (or sudo) for the small tmpfs that fills, and Debian's PostgreSQL, both of which
//! `tests/run.sh` provides.

use std::process::Command;

use crate::support::{hubalign_bin, python, root};

#[test]
fn the_ci_size_rehearsal_keeps_every_invariant_through_kills_restarts_and_a_full_disk() {
    // The simulator's binary, built beside this test's `hubalign` with the same profile (another package's
    // binary is not a dependency of this test, so it may be missing or stale).
    let bin_dir = std::path::PathBuf::from(hubalign_bin());
    let bin_dir = bin_dir.parent().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "--locked", "-p", "hubsim", "--bin", "hubsim"]);
    if bin_dir.ends_with("release") {
        build.arg("--release");
    }
    assert!(build.status().unwrap().success(), "building hubsim failed");
    assert!(bin_dir.join("hubsim").exists(), "{} has no hubsim", bin_dir.display());
    let report = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new(python())
        .arg(root().join("bench/rehearsal.py"))
        .args(["--ci", "--bin-dir"])
        .arg(bin_dir)
        .arg("--python")
        .arg(python())
        .arg("--report")
        .arg(report.path())
        .output()
        .unwrap();
    let text = crate::support::text(&out);
    assert!(out.status.success(), "the rehearsal failed:\n{text}");
    let figures: serde_json::Value = serde_json::from_slice(&std::fs::read(report.path()).unwrap()).unwrap();
    assert_eq!(figures["failures"], serde_json::json!([]), "{text}");
    // It did what it says: the population served, pushes made, kills survived, mirrors published.
    assert!(figures["population"]["repos"].as_u64().unwrap() >= 3000, "{text}");
    assert!(figures["pushes"].as_u64().unwrap() > 0, "{text}");
    assert!(figures["kill_rounds"].as_u64().unwrap() >= 2, "{text}");
    assert!(figures["jobs"]["published"].as_u64().unwrap() > 0, "{text}");
    assert!(!figures["failovers_seconds"].as_array().unwrap().is_empty(), "{text}");
    assert!(figures["jobs_held_by_the_full_disk"].as_u64().unwrap() >= 1, "the full disk met a job: {text}");
    // The spared processes were never restarted, and the killed ones were.
    let restarts = &figures["restarts"];
    for spared in ["hubsim", "serve-2", "worker-3"] {
        assert_eq!(restarts[spared], 0, "{spared} was restarted: {text}");
    }
    assert!(restarts["serve-0"].as_u64().unwrap() + restarts["serve-1"].as_u64().unwrap() >= 2, "{text}");
}
