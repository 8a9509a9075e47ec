//! `huggingface_hub` (the official Python client, with `hf_xet`) against the simulator.

use std::path::Path;
use std::process::Command;

use super::world::{ALICE, BOB, CAROL, World, rate_limited, standard};
use crate::support::{fixture, python, root, run};

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
        .env("SIM_MLX_IDS", super::world::MLX_IDS)
        .env_remove("HF_HUB_OFFLINE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = crate::support::text(&out);
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
    assert!(c.requests.get("xet_token").is_some_and(|n| *n > 0), "downloads went through Xet: {:?}", c.requests);
    assert!(c.requests.get("cas").is_some_and(|n| *n > 0), "{:?}", c.requests);
}

#[test]
fn uploads_through_xet_by_default() {
    let world = standard();
    let bundle = tempfile::tempdir().unwrap();
    fresh_bundle("mlx_lm/q4", bundle.path());
    run_checks(&world, &["upload_xet"], &[("SIM_UPLOAD_XET", bundle.path().to_str().unwrap())]);
    let c = world.counters();
    assert_eq!(c.lfs_bytes_received, 0, "no Git LFS traffic when hf_xet is installed");
    assert!(!c.requests.contains_key("lfs"), "{:?}", c.requests);
    let shard = std::fs::metadata(bundle.path().join("model.safetensors")).unwrap().len();
    assert!(c.xet_bytes_received > 0, "{c:?}");
    assert!(c.xet_bytes_received < 2 * shard, "{c:?}");
}

#[test]
fn a_header_padded_shard_uploads_little_more_than_its_header() {
    use hubalign_test_support::synth::Dtype;
    // A 128 MiB MLX-layout shard on the simulated Hub (ingested into Xet), and its repaired copy to upload.
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("models/mlx-community/big-q4");
    std::fs::create_dir_all(&source).unwrap();
    let specs: [(&str, Dtype, &[u64]); 3] =
        [("a.scales", "BF16", &[64, 8]), ("b.weight", "U32", &[32768, 1024]), ("c.biases", "BF16", &[64, 8])];
    let mut file = std::fs::File::create(source.join("model.safetensors")).unwrap();
    hubalign_test_support::synth::write_mlx_style_stream(&mut file, &specs, Some("mlx"), 3).unwrap();
    std::fs::write(source.join(".hubsim.json"), r#"{"library_name":"mlx"}"#).unwrap();
    let bundle = tempfile::tempdir().unwrap();
    let out = run(&["fix", source.to_str().unwrap(), "--out", bundle.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    std::fs::remove_file(bundle.path().join(".hubsim.json")).ok();
    let world = super::world::start_on(root, |_| {});
    run_checks(&world, &["upload_xet"], &[("SIM_UPLOAD_XET", bundle.path().to_str().unwrap())]);
    let c = world.counters();
    let size = std::fs::metadata(bundle.path().join("model.safetensors")).unwrap().len();
    let share = c.xet_bytes_received as f64 / size as f64;
    eprintln!(
        "xet upload of a header-padded {size}-byte shard: {} bytes ({:.2}%)",
        c.xet_bytes_received,
        share * 100.0
    );
    // hf_xet asks the CAS about the file's first chunk and about chunks whose hash is 0 mod 1024 (about one
    // per 64 MiB); the padded header changes the first, so the chunks before the first eligible one are sent.
    // In this shard that is 11.9%; in a multi-GiB shard it is a much smaller share.
    assert!(share < 0.25, "deduplication against the source: sent {:.1}% of the shard", share * 100.0);
}

#[test]
fn uploads_through_git_lfs_when_xet_is_disabled() {
    let root = tempfile::tempdir().unwrap();
    super::world::populate(root.path());
    // Small parts, so the fixture's shard goes up in several (the multipart transfer).
    let world = super::world::start_on(root, |c| c.lfs_part_size = 16 * 1024);
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
    assert!(c.requests["lfs"] > 8, "the shard went up in parts: {:?}", c.requests);
}

#[test]
fn create_commit_opens_a_pull_request() {
    let world = standard();
    run_checks(&world, &["pull_request"], &[]);
}

#[test]
fn commits_and_refs_are_listed_as_the_hub_lists_them() {
    let world = standard();
    run_checks(&world, &["history"], &[]);
}

#[test]
fn a_repo_on_disk_gets_its_card_metadata_from_its_readme() {
    let root = tempfile::tempdir().unwrap();
    // No sidecar says what the library is: the README's front matter does, as on the Hub.
    super::world::bundle(root.path(), "cardco/tiny-card", "mlx_lm/q4", r#"{"downloads":100}"#);
    let card = "---\nlibrary_name: mlx\nlicense: apache-2.0\npipeline_tag: text-generation\nlanguage: [en]\n\
                base_model: org/base\ntags:\n  - mlx\n---\n# tiny\n";
    std::fs::write(root.path().join("models/cardco/tiny-card/README.md"), card).unwrap();
    let world = super::world::start_on(root, |_| {});
    run_checks(&world, &["card_from_disk"], &[]);
}

#[test]
fn the_client_waits_out_429s_and_finishes() {
    let world = rate_limited(3, 2);
    run_checks(&world, &["rate_limited"], &[("SIM_EXPECT_COUNT", "7")]);
    assert!(world.counters().rate_limited >= 1, "the quota was hit");
}
