//! `hubalign fix` as a user runs it: out-of-place and in-place repair, refusals, failures and interruptions.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use hubalign::hashing::sha256_hex;
use hubalign::manifest::Manifest;
use hubalign::safetensors::read::read_shard_header;
use serde_json::Value;

use crate::support::{copy_tree, fixture, hubalign, run, stdout, text};

/// Every tensor of a file: name → (dtype, shape, bytes).
fn tensors(path: &Path) -> Vec<(String, String, Vec<u64>, Vec<u8>)> {
    let shard = read_shard_header(path).unwrap();
    let bytes = std::fs::read(path).unwrap();
    let start = shard.header.data_start() as usize;
    let mut v: Vec<_> = shard
        .header
        .tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.dtype.to_string(),
                t.shape.clone(),
                bytes[start + t.begin as usize..start + t.end as usize].to_vec(),
            )
        })
        .collect();
    v.sort();
    v
}

fn scan_json(path: &Path) -> Vec<Value> {
    stdout(&run(&["scan", "--format", "json", path.to_str().unwrap()]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn shards_of(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    v.sort();
    v
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn out_dir_receives_the_whole_repaired_bundle() {
    let src = fixture("mlx_lm/sharded");
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("aligned");
    let out = run(&["fix", src.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut expected_names = file_names(&src);
    expected_names.push("MEI_ALIGN_MANIFEST.json".into());
    expected_names.sort();
    assert_eq!(file_names(&out_dir), expected_names);
    for name in ["config.json", "tokenizer.json", "model.safetensors.index.json"] {
        assert_eq!(
            std::fs::read(src.join(name)).unwrap(),
            std::fs::read(out_dir.join(name)).unwrap(),
            "{name} copied unchanged"
        );
    }
    for shard in shards_of(&src) {
        let fixed = out_dir.join(shard.file_name().unwrap());
        assert_eq!(tensors(&shard), tensors(&fixed), "{}", shard.display());
    }
    assert!(scan_json(&out_dir).iter().all(|r| r["verdict"] == "aligned"));

    let manifest = Manifest::read(&out_dir).unwrap().unwrap();
    assert_eq!(manifest.tool, "hubalign");
    assert_eq!(manifest.target_alignment, 8);
    // The fourth shard's data starts at 4 mod 8, but no loader copies any of its tensors: it is left as it
    // is (byte for byte) and listed with the shards left alone.
    assert_eq!(manifest.shards.len(), 3);
    assert_eq!(manifest.skipped.len(), 1);
    assert_eq!(manifest.skipped[0].file, "model-00004-of-00004.safetensors");
    assert!(manifest.skipped[0].reason.starts_with("aligned: no tensor needs a copy"), "{:?}", manifest.skipped);
    let last = "model-00004-of-00004.safetensors";
    assert_eq!(std::fs::read(src.join(last)).unwrap(), std::fs::read(out_dir.join(last)).unwrap());
    // The default digests are the payload's alone: it proves every tensor of a header-padded shard.
    for entry in &manifest.shards {
        let src_bytes = std::fs::read(src.join(&entry.file)).unwrap();
        assert_eq!(entry.digests, ["payload_sha256", "src_payload_sha256"]);
        assert_eq!(entry.payload_sha256, sha256_hex(&src_bytes[8 + entry.src_header_len as usize..]));
        assert!(entry.src_file_sha256.is_empty() && entry.file_sha256.is_empty() && entry.tensor_sha256.is_empty());
    }
    let all_dir = tmp.path().join("all");
    let out = run(&["fix", src.to_str().unwrap(), "--out", all_dir.to_str().unwrap(), "--digests", "all"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let all = Manifest::read(&all_dir).unwrap().unwrap();
    for (entry, minimal) in all.shards.iter().zip(&manifest.shards) {
        let src_bytes = std::fs::read(src.join(&entry.file)).unwrap();
        let new_bytes = std::fs::read(all_dir.join(&entry.file)).unwrap();
        let listed = ["payload_sha256", "src_file_sha256", "src_payload_sha256", "file_sha256", "tensor_sha256"];
        assert_eq!(entry.digests, listed);
        assert_eq!(entry.payload_sha256, minimal.payload_sha256);
        assert_eq!(entry.src_file_sha256, sha256_hex(&src_bytes));
        assert_eq!(entry.file_sha256, sha256_hex(&new_bytes));
        assert_eq!(entry.payload_bytes, src_bytes.len() as u64 - 8 - entry.src_header_len);
        assert_eq!(
            entry.header_len,
            entry.src_header_len + entry.padding_bytes,
            "header_pad and unchanged add only spaces"
        );
        assert_eq!(entry.payload_sha256, entry.src_payload_sha256);
        assert_eq!((8 + entry.header_len) % 8, 0);
        assert_eq!(entry.unaligned_after, 0);
        assert_eq!(entry.tensor_sha256.len() as u64, entry.tensors);
    }
    let methods: Vec<_> = manifest.shards.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["header_pad", "unchanged", "unchanged"]);
}

#[test]
fn in_place_fixes_a_tree_and_a_second_run_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixture("mlx"), &tmp.path().join("mlx"));
    copy_tree(&fixture("mlx_lm/q4"), &tmp.path().join("q4"));
    let before: Vec<_> = [tmp.path().join("mlx/hostile.safetensors"), tmp.path().join("q4/model.safetensors")]
        .iter()
        .map(|p| tensors(p))
        .collect();
    let out = run(&["fix", "--in-place", tmp.path().to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let bundles: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(bundles.len(), 2);
    let hostile = bundles[0]["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"].as_str().unwrap().ends_with("hostile.safetensors"))
        .unwrap();
    assert_eq!(hostile["method"], "relayout");
    assert!(scan_json(tmp.path()).iter().all(|r| r["verdict"] == "aligned"));
    let after: Vec<_> = [tmp.path().join("mlx/hostile.safetensors"), tmp.path().join("q4/model.safetensors")]
        .iter()
        .map(|p| tensors(p))
        .collect();
    assert_eq!(before, after);
    let manifest = tmp.path().join("mlx/MEI_ALIGN_MANIFEST.json");
    let first = std::fs::read(&manifest).unwrap();
    let relayout = Manifest::read(&tmp.path().join("mlx")).unwrap().unwrap();
    let entry = relayout.shards.iter().find(|s| s.file == "hostile.safetensors").unwrap();
    let fixed = std::fs::read(tmp.path().join("mlx/hostile.safetensors")).unwrap();
    assert_eq!(entry.payload_sha256, sha256_hex(&fixed[8 + entry.header_len as usize..]), "the new payload's");
    assert_eq!(entry.tensor_sha256.len(), 8, "a reorder changes the payload, so each tensor's hash is recorded");
    assert_eq!(entry.digests, ["payload_sha256", "tensor_sha256"], "and nothing else by default");

    let again = run(&["fix", "--in-place", tmp.path().to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(0));
    assert!(stdout(&again).contains("rewrote 0 shards"), "{}", stdout(&again));
    assert_eq!(std::fs::read(&manifest).unwrap(), first, "nothing new, manifest untouched");
}

#[test]
fn a_bundle_mei_already_aligned_keeps_its_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&["fix", fixture("mlx_lm/q4").to_str().unwrap(), "--out", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    // Rewrite the manifest as Mei's align_safetensors.py writes it: its fields only.
    let path = tmp.path().join("MEI_ALIGN_MANIFEST.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["tool"] = "align_safetensors.py".into();
    m.as_object_mut().unwrap().remove("tool_version");
    let mei_fields = [
        "file",
        "src_header_len",
        "padding_bytes",
        "payload_bytes",
        "payload_sha256",
        "tensors",
        "unaligned_after",
        "repack_seconds",
    ];
    for shard in m["shards"].as_array_mut().unwrap() {
        shard.as_object_mut().unwrap().retain(|k, _| mei_fields.contains(&k.as_str()));
    }
    let mei = serde_json::to_vec_pretty(&m).unwrap();
    std::fs::write(&path, &mei).unwrap();

    let again = run(&["fix", "--in-place", tmp.path().to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(std::fs::read(&path).unwrap(), mei, "Mei's record of the source is kept");
}

#[test]
fn dry_run_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixture("mlx_lm/q4"), tmp.path());
    let before = std::fs::read(tmp.path().join("model.safetensors")).unwrap();
    let out = run(&["fix", "--dry-run", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "work to do");
    assert!(stdout(&out).contains("would rewrite 1 shard,"), "{}", stdout(&out));
    assert_eq!(std::fs::read(tmp.path().join("model.safetensors")).unwrap(), before);
    assert!(!tmp.path().join("MEI_ALIGN_MANIFEST.json").exists());
}

#[test]
fn invalid_shards_are_never_touched() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("mlx/hostile.safetensors"), tmp.path().join("good.safetensors")).unwrap();
    std::fs::copy(fixture("malformed/gap.safetensors"), tmp.path().join("gap.safetensors")).unwrap();
    let gap_before = std::fs::read(tmp.path().join("gap.safetensors")).unwrap();
    let out = run(&["fix", "--in-place", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let text = stdout(&out);
    assert!(text.contains("gap.safetensors: left untouched") && text.contains("gap of 4 bytes"), "{text}");
    assert_eq!(std::fs::read(tmp.path().join("gap.safetensors")).unwrap(), gap_before);
    let manifest = Manifest::read(tmp.path()).unwrap().unwrap();
    assert_eq!(manifest.shards.len(), 1);
    assert_eq!(manifest.skipped[0].file, "gap.safetensors");
}

#[test]
fn refusals_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let no_dest = run(&["fix", fixture("mlx").to_str().unwrap()]);
    assert_eq!(no_dest.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&no_dest.stderr).contains("--out DIR, or --in-place"));
    let two = run(&[
        "fix",
        fixture("mlx").to_str().unwrap(),
        fixture("numpy").to_str().unwrap(),
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&two.stderr).contains("--out takes one bundle, but the paths hold 2"));
    std::os::unix::fs::symlink(fixture("mlx/hostile.safetensors"), tmp.path().join("link.safetensors")).unwrap();
    let link = run(&["fix", "--in-place", tmp.path().join("link.safetensors").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&link.stderr).contains("is a symbolic link"));
    let same = run(&["fix", fixture("mlx").to_str().unwrap(), "--out", fixture("mlx").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&same.stderr).contains("use --in-place"));
}

#[test]
fn page_alignment() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&[
        "fix",
        fixture("mlx/wide.safetensors").to_str().unwrap(),
        "--out",
        tmp.path().to_str().unwrap(),
        "--alignment",
        "16384",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let fixed = tmp.path().join("wide.safetensors");
    assert_eq!(read_shard_header(&fixed).unwrap().header.data_start() % 16384, 0);
    assert_eq!(tensors(&fixture("mlx/wide.safetensors")), tensors(&fixed));
}

/// A big enough shard that a kill lands mid-copy.
fn big_shard(dir: &Path) -> PathBuf {
    use hubalign_test_support::synth::Dtype;
    let path = dir.join("model.safetensors");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let specs: [(&str, Dtype, &[u64]); 3] =
        [("a.bias", "BF16", &[3]), ("b.weight", "U32", &[64 << 20]), ("c.scales", "BF16", &[5])];
    hubalign_test_support::synth::write_mlx_style_stream(&mut file, &specs, Some("mlx"), 11).unwrap();
    drop(file);
    path
}

fn temps_in(dir: &Path) -> Vec<String> {
    file_names(dir).into_iter().filter(|n| n.ends_with(".hubalign.tmp")).collect()
}

#[test]
fn a_full_disk_leaves_the_original_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = big_shard(tmp.path());
    let before = sha256_hex(&std::fs::read(&shard).unwrap());
    // RLIMIT_FSIZE makes writes past 1 MiB fail as a full disk would (SIGXFSZ ignored so write() returns EFBIG).
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f 1024; exec \"{}\" fix --in-place \"{}\"",
            env!("CARGO_BIN_EXE_hubalign"),
            shard.display()
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("model.safetensors") && text.contains("the original is untouched"), "{text}");
    assert_eq!(sha256_hex(&std::fs::read(&shard).unwrap()), before);
    assert!(temps_in(tmp.path()).is_empty(), "temporary file removed on failure");
    assert!(!tmp.path().join("MEI_ALIGN_MANIFEST.json").exists());
}

#[test]
fn a_killed_run_leaves_the_original_and_the_next_run_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = big_shard(tmp.path());
    let before = tensors(&shard);
    let original_hash = sha256_hex(&std::fs::read(&shard).unwrap());
    let mut child = hubalign()
        .args(["fix", "--in-place", shard.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while temps_in(tmp.path()).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no temporary file appeared");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no cleanup
    child.wait().unwrap();
    assert!(!temps_in(tmp.path()).is_empty(), "the kill landed mid-copy, leaving its temporary file");
    assert_eq!(sha256_hex(&std::fs::read(&shard).unwrap()), original_hash, "the original survives a kill");

    let out = run(&["fix", "--in-place", shard.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(temps_in(tmp.path()).is_empty(), "the stale temporary file was cleaned up");
    assert_eq!(tensors(&shard), before);
    assert_eq!(scan_json(&shard)[0]["verdict"], "aligned");
}

#[test]
fn a_bundle_no_loader_copies_from_is_left_alone_unless_a_data_start_is_asked_for() {
    // The bf16 model's data starts at 2 mod 8, and every tensor (all BF16) sits at an even offset.
    let src = fixture("mlx_lm/bf16");
    let shard = src.join("model.safetensors");
    let rows = scan_json(&src);
    assert_eq!(rows[0]["verdict"], "aligned", "{rows:?}");
    assert_eq!(rows[0]["data_start_aligned"], false);
    assert_eq!(rows[0]["misaligned_tensors"], 0);
    assert_eq!(run(&["scan", src.to_str().unwrap()]).status.code(), Some(0), "nothing to do: exit 0");
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&["fix", src.to_str().unwrap(), "--out", tmp.path().join("a").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(std::fs::read(tmp.path().join("a/model.safetensors")).unwrap(), std::fs::read(&shard).unwrap());
    assert!(!tmp.path().join("a/MEI_ALIGN_MANIFEST.json").exists(), "nothing was repaired");

    // Asked for data on 8 bytes (or a page), the same shard needs its header padded.
    let explicit = stdout(&run(&["scan", "--format", "json", "--alignment", "8", shard.to_str().unwrap()]));
    let row: Value = serde_json::from_str(explicit.trim()).unwrap();
    assert_eq!((row["verdict"].as_str(), row["data_start_aligned"].as_bool()), (Some("header_pad"), Some(false)));
    let out_dir = tmp.path().join("b");
    let out = run(&["fix", src.to_str().unwrap(), "--alignment", "8", "--out", out_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let manifest = Manifest::read(&out_dir).unwrap().unwrap();
    assert_eq!(manifest.shards[0].method.as_str(), "header_pad");
    assert_eq!((8 + manifest.shards[0].header_len) % 8, 0);
    assert_eq!(tensors(&shard), tensors(&out_dir.join("model.safetensors")));
}
