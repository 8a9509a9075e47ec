//! `huggingface_hub` (the official Python client, with `hf_xet`) against the simulator.

use std::path::Path;
use std::process::Command;

use super::world::{ALICE, BOB, CAROL, World, rate_limited, standard};
use crate::support::{fixture, python, root, run};

/// Every public MLX repo of the standard world: what `list_models(filter="mlx")` must find.
pub const MLX_IDS: &str = "gemma-org/gated-q4,lmstudio/tiny-mixed,lmstudio/tiny-q8,mlx-community/tiny-bf16,mlx-community/tiny-q4,mlx-community/tiny-sharded,old-org/disabled-q4";

fn run_checks(world: &World, checks: &[&str], env: &[(&str, &str)]) -> String {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(python());
    cmd.arg(root().join("tests/python/hub_client_check.py"))
        .args(checks)
        .env("HF_ENDPOINT", world.endpoint())
        .env("HF_TOKEN", ALICE)
        .env("HF_HOME", home.path())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env("SIM_FIXTURES", root().join("tests/fixtures"))
        .env("SIM_ALICE", ALICE)
        .env("SIM_BOB", BOB)
        .env("SIM_CAROL", CAROL)
        .env("SIM_MLX_IDS", MLX_IDS)
        .env_remove("HF_HUB_OFFLINE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "hub_client_check {checks:?} failed:\n{text}");
    for check in checks {
        assert!(text.contains(&format!("ok {check}\n")), "{check} did not report ok:\n{text}");
    }
    text
}

/// A bundle with bytes the simulator has never seen: `fix` output of a fixture.
fn fresh_bundle(rel: &str, into: &Path) {
    let out = run(&["fix", fixture(rel).to_str().unwrap(), "--out", into.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn reads_listing_info_tree_metadata_downloads_and_errors() {
    let world = standard();
    run_checks(&world, &["list", "info", "tree", "safetensors", "download", "errors"], &[]);
    let c = world.counters();
    assert!(c.requests["models_list"] >= 4, "several pages: {:?}", c.requests);
}

#[test]
fn uploads_through_git_lfs_when_xet_is_disabled() {
    let world = standard();
    let bundle = tempfile::tempdir().unwrap();
    fresh_bundle("mlx_lm/q8", bundle.path());
    run_checks(
        &world,
        &["upload_lfs"],
        &[("HF_HUB_DISABLE_XET", "1"), ("SIM_UPLOAD_LFS", bundle.path().to_str().unwrap())],
    );
    let c = world.counters();
    let shard = std::fs::metadata(bundle.path().join("model.safetensors")).unwrap().len();
    assert!(c.lfs_bytes_received >= shard, "{c:?}");
    assert_eq!(c.xet_bytes_received, 0);
}

#[test]
fn create_commit_opens_a_pull_request() {
    let world = standard();
    run_checks(&world, &["pull_request"], &[]);
}

#[test]
fn the_client_waits_out_429s_and_finishes() {
    let world = rate_limited(3, 2);
    run_checks(&world, &["rate_limited"], &[("SIM_EXPECT_COUNT", "7")]);
    assert!(world.counters().rate_limited >= 1, "the quota was hit");
}
