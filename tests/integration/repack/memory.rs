//! What a worker holds while it repacks: a reordered shard goes up without the worker keeping it.

use std::io::Read as _;
use std::process::Stdio;
use std::time::Duration;

use hubalign_test_support::synth::{Dtype, write_mlx_style_stream};

use super::pipeline::{jobs, worker_command};
use crate::audit::world::{assert_ok, audit, db};
use crate::sim::world::start_on;

const MIB: u64 = 1 << 20;

/// The process's own resident memory (`RssAnon`), in bytes, while it lives.
fn anonymous_memory(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = status.lines().find_map(|l| l.strip_prefix("RssAnon:"))?.trim().strip_suffix("kB")?.trim();
    kib.parse::<u64>().ok().map(|k| k * 1024)
}

/// A simulated Hub holding `big-org/moved-q4`: one shard of `pairs` U32 tensors of 512 KiB, each after a
/// 2-byte BF16 one, so that no header padding aligns them all and the shard is reordered. Returns the Hub's
/// directory and the shard's size.
pub(super) fn reordered_bundle(pairs: usize) -> (tempfile::TempDir, u64) {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("models/big-org/moved-q4");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join(".hubsim.json"), r#"{"library_name":"mlx"}"#).unwrap();
    std::fs::write(repo.join("config.json"), "{}").unwrap();
    let tensors: Vec<(String, Dtype, [u64; 1])> = (0..2 * pairs)
        .map(|i| if i % 2 == 0 { (format!("t{i:03}"), "BF16", [1]) } else { (format!("t{i:03}"), "U32", [128 << 10]) })
        .collect();
    let specs: Vec<(&str, Dtype, &[u64])> =
        tensors.iter().map(|(name, dtype, shape)| (name.as_str(), *dtype, &shape[..])).collect();
    let mut file = std::fs::File::create(repo.join("model.safetensors")).unwrap();
    let size = write_mlx_style_stream(&mut file, &specs, Some("mlx"), 17).unwrap();
    drop(file);
    (root, size)
}

#[test]
fn a_reordered_shard_goes_up_without_the_worker_holding_it_in_memory() {
    // 192 MiB in U32 tensors of 512 KiB, each after a 2-byte BF16 one: no header padding aligns them all, so
    // the shard is reordered, and every tensor's start is new to the CAS there, the chunk spanning it one
    // Xet keeps until its xorb is cut. Read into Xet's own 8 MB buffers, each such chunk kept its whole
    // buffer: the worker held the shard.
    let (root, size) = reordered_bundle(384);
    assert!(size > 192 * MIB);

    let world = start_on(root, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut worker = worker_command(&world, &db, &["repack", "big-org/moved-q4"])
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let mut peak = 0;
    while worker.try_wait().unwrap().is_none() {
        peak = peak.max(anonymous_memory(worker.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut stderr = String::new();
    log.reopen().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(worker.wait().unwrap().success(), "{stderr}");
    assert_eq!(jobs(&world, &db)[0].1, "published", "{stderr}");
    // A reorder, not a header padding: the chunk at each tensor's start went up (a padded shard sends almost
    // nothing but its header).
    let sent = world.hub.as_ref().unwrap().sim.counters.snapshot().bytes_received;
    assert!(sent > size / 8, "{sent} bytes sent for a {size}-byte shard");
    // Sent ahead, once kept, under the digest taken as it was written.
    assert!(stderr.contains("files=1 sha256.named=1"), "{stderr}");
    // Measured: about 60 MiB of the worker's own; holding the shard took it past 250 MiB.
    eprintln!("the worker's own memory peaked at {} MiB for a {} MiB reorder", peak >> 20, size >> 20);
    assert!(peak > 0, "the worker's memory was read");
    assert!(peak < 128 * MIB, "the worker held {} MiB of its own for a {} MiB shard", peak >> 20, size >> 20);
}
