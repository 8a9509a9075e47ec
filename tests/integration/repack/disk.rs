//! A work directory on a disk too small for a repo: the repo's job fails for size before any download,
//! nothing of it stays behind, and the next repo is repacked on the same disk. The disk is a real one, a
//! 320 MiB tmpfs mounted in a mount namespace of the worker's own (`unshare`), so `statvfs` answers what a
//! small disk answers.

use std::path::Path;
use std::process::{Command, Output};

use super::pipeline::jobs;
use super::upload_share::header_padded_bundle_of;
use crate::audit::world::db;
use crate::sim::world::{ALICE, World, bundle, start_on};
use crate::support::{python, text};

/// `hubalign ARGS` with its work directory `work` a fresh 320 MiB tmpfs, mounted for that run alone; what
/// the run left in the work directory is listed in `left` before the disk goes.
fn on_small_disk(world: &World, db: &std::path::Path, (work, left): (&Path, &Path), args: &[&str]) -> Output {
    let bin = crate::support::hubalign_bin();
    let script = r#"work="$1"; left="$2"; shift 2; mount -t tmpfs -o size=320m tmpfs "$work" || exit 99
        "$@" --work-dir "$work"; rc=$?; ls -A "$work" > "$left"; exit $rc"#;
    Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"])
        .arg(work)
        .arg(left)
        .arg(bin)
        .args(args)
        .args(["--endpoint", &world.endpoint(), "--token", ALICE, "--db", db.to_str().unwrap()])
        .args(["--target-namespace", "alice", "--verify-device", "cpu"])
        .arg("--python")
        .arg(python())
        .env_remove("RUST_LOG")
        .output()
        .expect("unshare (util-linux) is needed for the small-disk test")
}

#[test]
fn a_repo_larger_than_the_disk_fails_for_size_and_the_next_one_is_repacked() {
    // 40 MiB of shard: with its re-laid copy and the 256 MiB reserve, more than the whole 320 MiB disk.
    let (root, size) = header_padded_bundle_of(10_240);
    assert_eq!(size >> 20, 40);
    bundle(root.path(), "mlx-community/tiny-q4", "mlx_lm/q4", r#"{"library_name":"mlx","downloads":1000}"#);
    let world = start_on(root, |_| {});
    let (dir, db) = db();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();

    let served = world.counters().bytes_served;
    let left = dir.path().join("left.txt");
    let out = on_small_disk(&world, &db, (&work, &left), &["repack", "big-org/big-q4"]);
    let text = text(&out);
    assert_eq!(out.status.code(), Some(4), "{text}");
    let big = jobs(&world, &db).into_iter().find(|j| j.0 == "big-org/big-q4").unwrap();
    assert_eq!(big.1, "failed", "failed for good, not held for the operator: {big:?}");
    assert!(big.2.as_deref().unwrap_or("").contains("too large for this worker"), "{big:?}");
    assert!(world.counters().bytes_served - served < 1 << 20, "decided before the download");
    let files = std::fs::read_to_string(&left).unwrap();
    assert!(!files.contains("job-"), "nothing of the job stays on the disk: {files}");

    let out = on_small_disk(&world, &db, (&work, &left), &["repack", "mlx-community/tiny-q4"]);
    let text = crate::support::text(&out);
    assert_eq!(out.status.code(), Some(0), "the next repo, on the same disk: {text}");
    let tiny = jobs(&world, &db).into_iter().find(|j| j.0 == "mlx-community/tiny-q4").unwrap();
    assert_eq!(tiny.1, "published", "{tiny:?}");
    let files = std::fs::read_to_string(&left).unwrap();
    assert!(!files.contains("job-"), "a published job's files are removed: {files}");
    // The disk went with its namespace; nothing was written to the directory under it.
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);
}
