//! `hubalign scan` as a user runs it: trees, Hugging Face caches, formats, exit codes.

use std::path::Path;

use serde_json::Value;

use crate::kernel_reads::bytes_read_by_kernel;
use crate::support::{copy_tree, fixture, hubalign, run, stdout};

fn json_lines(out: &std::process::Output) -> Vec<Value> {
    stdout(out).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn json_lines_carry_the_documented_fields() {
    let out = run(&["scan", "--format", "json", fixture("mlx_lm/sharded").to_str().unwrap()]);
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 4);
    for row in &rows {
        for field in [
            "path",
            "header_len",
            "data_start",
            "data_start_mod8",
            "tensors",
            "misaligned_tensors",
            "misaligned_bytes",
            "verdict",
            "error",
            "writer",
        ] {
            assert!(row.get(field).is_some(), "{field} missing from {row}");
        }
        assert_eq!(row["writer"], "mlx");
    }
    assert_eq!(out.status.code(), Some(1), "the first shard needs padding");
}

#[test]
fn a_hugging_face_cache_is_walked_through_its_snapshot_symlinks() {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--mlx-community--tiny-q4");
    let blobs = repo.join("blobs");
    let snapshot = repo.join("snapshots/0123abcd");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123abcd").unwrap();
    // Blobs are named by content hash, without an extension.
    for (name, hash) in [("model.safetensors", "9f86d081884c7d65"), ("config.json", "60303ae22b998861")] {
        let blob = blobs.join(hash);
        std::fs::copy(fixture("mlx_lm/q4").join(name), &blob).unwrap();
        std::os::unix::fs::symlink(&blob, snapshot.join(name)).unwrap();
    }
    let scan = hubalign().args(["scan", "--format", "json"]).arg(cache.path()).env("HF_HUB_OFFLINE", "1").output();
    let out = scan.unwrap();
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 1, "one shard, seen once, via its snapshot path");
    assert_eq!(rows[0]["repo_id"], "mlx-community/tiny-q4", "named by the cache's folder");
    assert!(rows[0]["path"].as_str().unwrap().contains("snapshots/0123abcd/model.safetensors"));
    assert_eq!(rows[0]["verdict"], "header_pad");

    // In-place repair of a cache blob is refused, naming the file and the alternative.
    let fix = run(&["fix", "--in-place", snapshot.to_str().unwrap()]);
    assert_eq!(fix.status.code(), Some(4));
    let err = String::from_utf8_lossy(&fix.stderr);
    assert!(err.contains("Hugging Face cache blob") && err.contains("--out"), "{err}");
    assert_eq!(
        std::fs::read(blobs.join("9f86d081884c7d65")).unwrap(),
        std::fs::read(fixture("mlx_lm/q4/model.safetensors")).unwrap()
    );
}

#[test]
fn table_summarises_and_index_contradictions_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("sharded");
    copy_tree(&fixture("mlx_lm/sharded"), &bundle);
    std::fs::remove_file(bundle.join("model-00004-of-00004.safetensors")).unwrap();
    let out = run(&["scan", bundle.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(text.contains("3 shards in 1 bundle:"), "{text}");
    assert!(text.contains("model-00004-of-00004.safetensors, which is missing"), "{text}");
    assert_eq!(out.status.code(), Some(3), "a broken bundle counts as invalid");
}

#[cfg(feature = "system-tests")]
#[test]
fn scan_reads_headers_not_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.safetensors");
    let mut file = std::fs::File::create(&big).unwrap();
    let specs: [(&str, hubalign_test_support::synth::Dtype, &[u64]); 2] = [("a", "U8", &[3]), ("w", "F32", &[8 << 20])];
    hubalign_test_support::synth::write_mlx_style_stream(&mut file, &specs, Some("mlx"), 7).unwrap();
    let text = stdout(&run(&["scan", big.to_str().unwrap()]));
    assert!(text.contains(" of 33.55 MB.") && text.contains("Read 1"), "{text}");
    // Counted by the kernel (strace), not by the program: exactly the length prefix and the header.
    let (out, read) = bytes_read_by_kernel(&["scan", "--format", "json", big.to_str().unwrap()], "big.safetensors");
    let rows = json_lines(&out);
    let minimum = 8 + rows[0]["header_len"].as_u64().unwrap();
    assert_eq!(read.values().sum::<u64>(), minimum, "{read:?}");
    assert_eq!(rows[0]["bytes_read"].as_u64(), Some(minimum), "and the report says so");
    assert_eq!(rows[0]["verdict"], "relayout");
}

#[cfg(feature = "system-tests")]
#[test]
fn reported_reads_match_the_kernel_for_broken_shards_too() {
    let dir = fixture("malformed");
    let (out, read) = bytes_read_by_kernel(&["scan", "--format", "json", dir.to_str().unwrap()], ".safetensors");
    let rows = json_lines(&out);
    assert_eq!(rows.len(), read.len(), "every malformed fixture is opened and read: {read:?}");
    for row in &rows {
        assert_eq!(row["verdict"], "invalid");
        let path = row["path"].as_str().unwrap();
        assert_eq!(row["bytes_read"].as_u64(), read.get(path).copied(), "{path}");
    }
}

#[test]
fn bad_arguments_are_usage_errors() {
    assert_eq!(run(&["scan"]).status.code(), Some(2));
    assert_eq!(run(&["scan", "--alignment", "12", "."]).status.code(), Some(2));
    let missing = run(&["scan", "/nonexistent/path"]);
    assert_eq!(missing.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/path"));
    assert!(Path::new(env!("CARGO_BIN_EXE_hubalign")).exists());
}
