//! Uploading ahead (`repack::upload::ahead`): a shard repaired as it streamed goes to the mirror's CAS while the
//! rest of the bundle still downloads.

use std::process::Stdio;
use std::time::{Duration, Instant};

use hubalign_test_support::synth::Dtype;
use hubalign_test_support::synth::{mlx_header, write_mlx_style_stream};

use super::pipeline::jobs;
use crate::audit::world::db;
use crate::sim::world::{ALICE, start_on};
use crate::support::{hubalign, python};

/// A Hub holding `big-org/two-q4`: two shards that header padding fixes, of `rows` × 4 KiB each.
fn two_shards(rows: [u64; 2]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("models/big-org/two-q4");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join(".hubsim.json"), r#"{"library_name":"mlx"}"#).unwrap();
    std::fs::write(repo.join("config.json"), "{}").unwrap();
    for (i, rows) in rows.into_iter().enumerate() {
        // A name whose length leaves the data section off an 8-byte boundary.
        let name = (1..16)
            .map(|n| format!("model.layers.{i}.mlp.{}.weight", "x".repeat(n)))
            .find(|w| {
                let specs: [(&str, Dtype, &[u64]); 1] = [(w.as_str(), "U32", &[rows, 1024])];
                !(8 + mlx_header(&specs, Some("mlx")).len()).is_multiple_of(8)
            })
            .unwrap();
        let specs: [(&str, Dtype, &[u64]); 1] = [(name.as_str(), "U32", &[rows, 1024])];
        let mut file = std::fs::File::create(repo.join(format!("model-0000{}-of-00002.safetensors", i + 1))).unwrap();
        write_mlx_style_stream(&mut file, &specs, Some("mlx"), i as u64 + 11).unwrap();
    }
    root
}

#[test]
fn a_repaired_shard_goes_up_while_the_next_one_still_downloads() {
    // A 256 KiB shard and a 12 MiB one, over a storage that sends each answer at 2 MB/s: the small one is
    // repaired in a fraction of a second, the large one takes seconds more.
    let world = start_on(two_shards([64, 3072]), |c| c.faults.storage_rate = 2_000_000);
    let (_dir, db) = db();
    // The store is created (and migrated) before the repack starts: the polling below opens it too, and two
    // processes migrating a new SQLite file at once race (noted on issue 25).
    world.runtime.block_on(async { hubalign::store::Store::open(&db).await.unwrap() });
    let endpoint = world.endpoint();
    let mut child = hubalign()
        .args(["repack", "big-org/two-q4", "--endpoint", endpoint.as_str(), "--token", ALICE])
        .args(["--db", db.to_str().unwrap(), "--target-namespace", "alice", "--verify-device", "cpu"])
        .args(["--download-connections", "2"])
        .arg("--python")
        .arg(python())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sim = &world.hub.as_ref().unwrap().sim;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut sent_while_downloading = 0;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the repack did not finish");
        // The counters first: if the job is still downloading after, they were read while it was.
        let received = sim.counters.snapshot().xet_bytes_received;
        if jobs(&world, &db).first().is_some_and(|j| j.1 == "downloading") {
            sent_while_downloading = sent_while_downloading.max(received);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert_eq!(jobs(&world, &db)[0].1, "published");
    assert!(sent_while_downloading > 0, "the CAS had bytes of the mirror before the download ended");
    assert!(log.contains("uploaded ahead") && log.contains("files=2"), "both shards went up ahead: {log}");
    // The publish step sent neither again: its own Xet upload had nothing left to send.
    let publish = log.lines().find(|l| l.contains("hubalign::repack::publish: uploaded")).unwrap_or_default();
    assert!(publish.contains("xet.bytes=0"), "{publish}");
    // One write token per upload (one per shard), which priming its deduplication reuses.
    let tokens = sim.counters.snapshot().requests.get("xet_token").copied();
    assert_eq!(tokens, Some(2), "{log}");
}

#[test]
fn a_reordered_shard_goes_up_once_kept_under_the_digest_taken_as_it_was_written() {
    // 32 MiB of U32 tensors, each after a 2-byte BF16 one: a reorder, hashed whole as it is written, over a
    // storage that sends it at 8 MB/s (four seconds).
    let (root, _size) = super::memory::reordered_bundle(64);
    let world = start_on(root, |c| c.faults.storage_rate = 8_000_000);
    let (_dir, db) = db();
    crate::audit::world::assert_ok(&crate::audit::world::audit(&world, &db, &[]));
    let out = super::pipeline::worker_command(&world, &db, &["repack", "big-org/moved-q4"]).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert_eq!(jobs(&world, &db)[0].1, "published", "{log}");
    // It went up ahead, and Xet was handed the digest taken as it was written rather than taking it again.
    let ahead = log.lines().find(|l| l.contains("uploaded ahead") && l.contains("files=")).unwrap_or_default();
    assert!(ahead.contains("files=1 sha256.named=1"), "{log}");
    // The publish step sent nothing of it again.
    let publish = log.lines().find(|l| l.contains("hubalign::repack::publish: uploaded")).unwrap_or_default();
    assert!(publish.contains("xet.bytes=0"), "{publish}");

    // The oid the mirror's commit names is the SHA-256 of the bytes it serves, and the manifest's digest.
    let mirror = crate::support::mirror("big-org/moved-q4");
    let sim = &world.hub.as_ref().unwrap().sim;
    let oid = sim.repos().get(&mirror).unwrap().head().unwrap().files["model.safetensors"].sha256.clone();
    let url = format!("{}/{mirror}/resolve/main/model.safetensors", world.endpoint());
    let served = world.runtime.block_on(async { reqwest::get(&url).await.unwrap().bytes().await.unwrap() });
    assert_eq!(oid, hubalign::hashing::sha256_hex(&served));
    let url = format!("{}/{mirror}/resolve/main/MEI_ALIGN_MANIFEST.json", world.endpoint());
    let manifest: serde_json::Value =
        world.runtime.block_on(async { reqwest::get(&url).await.unwrap().json().await.unwrap() });
    assert_eq!(manifest["shards"][0]["method"], "relayout", "{manifest}");
    assert_eq!(manifest["shards"][0]["file_sha256"], oid.as_str(), "{manifest}");
}
