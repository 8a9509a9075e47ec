//! What republishing a header-padded bundle uploads, from the simulator's counters.

use hubalign_test_support::synth::Dtype;
use hubalign_test_support::synth::{mlx_header, write_mlx_style_stream};

use std::path::PathBuf;

use super::pipeline::worker_cmd;
use crate::audit::world::{assert_ok, audit, db};
use crate::sim::world::{World, start_on};

/// A simulated Hub holding `big-org/big-q4`: a 128 MiB shard whose data starts off an 8-byte boundary while
/// every relative offset is aligned (header padding fixes it). Returns the Hub's directory and the shard size.
fn header_padded_bundle() -> (tempfile::TempDir, u64) {
    header_padded_bundle_of(32768)
}

/// [`header_padded_bundle`] with a shard of `rows` × 4 KiB.
pub(super) fn header_padded_bundle_of(rows: u64) -> (tempfile::TempDir, u64) {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("models/big-org/big-q4");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join(".hubsim.json"), r#"{"library_name":"mlx"}"#).unwrap();
    std::fs::write(repo.join("config.json"), "{}").unwrap();
    let name = (1..16)
        .map(|n| format!("model.layers.0.mlp.{}.weight", "x".repeat(n)))
        .find(|w| {
            let specs: [(&str, Dtype, &[u64]); 2] = [(w.as_str(), "U32", &[rows, 1024]), ("norm", "BF16", &[64])];
            !(8 + mlx_header(&specs, Some("mlx")).len()).is_multiple_of(8)
        })
        .unwrap();
    let specs: [(&str, Dtype, &[u64]); 2] = [(name.as_str(), "U32", &[rows, 1024]), ("norm", "BF16", &[64])];
    let mut file = std::fs::File::create(repo.join("model.safetensors")).unwrap();
    let size = write_mlx_style_stream(&mut file, &specs, Some("mlx"), 5).unwrap();
    drop(file);
    (root, size)
}

/// A header-padded republish by `repack big-org/big-q4 EXTRA…`, which must succeed: the world, its store
/// (directory and file), the bundle's size, and the bytes the simulator received for uploads.
struct Republished {
    world: World,
    _dir: tempfile::TempDir,
    db: PathBuf,
    size: u64,
    uploaded: u64,
}

fn republish(extra: &[&str]) -> Republished {
    let (root, size) = header_padded_bundle();
    let world = start_on(root, |_| {});
    let (dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let sim = &world.hub.as_ref().unwrap().sim;
    sim.counters.reset();
    let args: Vec<&str> = ["repack", "big-org/big-q4"].iter().chain(extra).copied().collect();
    let out = worker_cmd(&world, &db, &args);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let c = sim.counters.snapshot();
    // Every byte sent to the Hub: API bodies and the commit (whose inline files travel as base64) included.
    let uploaded = c.bytes_received;
    let share = uploaded as f64 / size as f64;
    eprintln!(
        "repack {extra:?} of a header-padded {size}-byte bundle uploaded {uploaded} bytes ({:.2}%)",
        share * 100.0
    );
    // On its own the uploader would find the source's chunks only from the first chunk whose hash is 0 mod
    // 1024 (41.8% of the way into this shard); the worker primes its cache with the source's chunk list, so
    // only the changed first chunk, the small files and the Xet metadata go up.
    assert!(share <= 0.01, "uploaded {:.2}% of the bundle, over the 1% target", share * 100.0);
    Republished { world, _dir: dir, db, size, uploaded }
}

#[cfg(feature = "system-tests")]
#[test]
fn a_header_padded_bundle_republishes_with_little_upload() {
    let r = republish(&[]);
    let (size, uploaded) = (r.size, r.uploaded);
    // What the worker recorded for /metrics against the simulator's count.
    let job = r
        .world
        .runtime
        .block_on(async { hubalign::store::Store::open(&r.db).await.unwrap().jobs().await.unwrap().remove(0) });
    eprintln!("the job recorded {} bytes up, {} down", job.bytes_uploaded, job.bytes_downloaded);
    assert_eq!(job.bytes_downloaded as u64, size + 2, "the shard and config.json");
    // The job counts the bodies it sends itself (preupload, commit) and Xet's own count of its uploads; it
    // does not see the repo's creation and settings (hf-hub's) or Xet's framing: 0.93x here.
    let recorded = job.bytes_uploaded as f64;
    assert!(
        recorded >= uploaded as f64 * 0.85 && recorded <= uploaded as f64,
        "recorded {recorded}, counted {uploaded}"
    );
}

#[cfg(feature = "system-tests")]
#[test]
fn a_header_padded_pull_request_uploads_little_too() {
    let r = republish(&["--pr"]);
    assert_eq!(super::pipeline::jobs(&r.world, &r.db)[0].1, "published", "the pull request is opened");
}

#[cfg(unix)]
#[test]
fn a_header_padded_shard_is_repaired_as_it_streams_and_its_source_kept_as_a_stub() {
    use std::os::unix::fs::MetadataExt;
    let (root, size) = header_padded_bundle();
    let original = root.path().join("models/big-org/big-q4");
    let world = start_on(root, |_| {});
    let (dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let work = dir.path().join("work");
    // With the Metal check (which Linux cannot run) the job waits for a runner with its files staged.
    let out = crate::support::hubalign()
        .args([
            "repack",
            "big-org/big-q4",
            "--endpoint",
            world.endpoint().as_str(),
            "--token",
            crate::sim::world::ALICE,
        ])
        .args(["--db", db.to_str().unwrap(), "--target-namespace", "alice", "--verify-device", "metal"])
        .arg("--work-dir")
        .arg(&work)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(super::pipeline::jobs(&world, &db)[0].1, "awaiting_metal_verify");
    let job = work.join("job-1");

    // Of the source, a stub: as long as the shard, with the header and the first 256 KiB on disk.
    let stub = std::fs::metadata(job.join("source/model.safetensors")).unwrap();
    assert_eq!(stub.len(), size);
    assert!(stub.blocks() * 512 < size / 8, "{} bytes allocated of {size}", stub.blocks() * 512);
    // The repaired shard was written by the download and linked into the staged bundle, not rewritten.
    let streamed = std::fs::metadata(job.join("streamed/model.safetensors")).unwrap();
    let staged = std::fs::metadata(job.join("aligned/model.safetensors")).unwrap();
    assert_eq!((streamed.dev(), streamed.ino()), (staged.dev(), staged.ino()));
    // Byte for byte what the file-based `fix` writes, with the same record.
    let reference = dir.path().join("reference");
    let fixed = crate::support::run(&["fix", original.to_str().unwrap(), "--out", reference.to_str().unwrap()]);
    assert_eq!(fixed.status.code(), Some(0));
    let shard = |d: &std::path::Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(shard(&job.join("aligned")) == shard(&reference), "the streamed repair differs from fix's");
    let manifest = |d: &std::path::Path| hubalign::manifest::Manifest::read(d).unwrap().unwrap().shards;
    let (streamed_entry, fixed_entry) = (&manifest(&job.join("aligned"))[0], &manifest(&reference)[0]);
    assert_eq!(
        (&streamed_entry.payload_sha256, streamed_entry.header_len, &streamed_entry.digests),
        (&fixed_entry.payload_sha256, fixed_entry.header_len, &fixed_entry.digests)
    );
}
