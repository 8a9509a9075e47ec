//! The MLX check follows the download (`repack::checks::mlx::follow`, `verify_mlx.py --follow`): a header-padded shard is
//! judged while it is written (a reordered one tensor by tensor), and counts as checked only if the staged
//! file is the very one followed, unchanged; a follow that fails costs a check of the staged bundle, never the
//! job.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::pipeline::worker_cmd;
use super::upload_share::header_padded_bundle_of;
use crate::audit::world::db;
use crate::sim::world::{ALICE, start_on};
use crate::support::{hubalign, python, root, stdout};

/// The job's MLX record, once `repack big-org/big-q4` (one 24 MiB header-padded shard) ran with `python`.
fn repacked_record(python: Option<&Path>) -> serde_json::Value {
    repacked_record_of(header_padded_bundle_of(6144).0, "big-org/big-q4", python)
}

/// The job's MLX record, once `repack REPO` of the Hub in `root` ran with `python`.
fn repacked_record_of(root: tempfile::TempDir, repo: &str, python: Option<&Path>) -> serde_json::Value {
    let world = start_on(root, |_| {});
    let (_dir, db) = db();
    let out = match python {
        None => worker_cmd(&world, &db, &["repack", repo]),
        Some(python) => hubalign()
            .args(["repack", repo, "--endpoint", world.endpoint().as_str(), "--token", ALICE])
            .args(["--db", db.to_str().unwrap(), "--target-namespace", "alice", "--verify-device", "cpu"])
            .arg("--python")
            .arg(python)
            .output()
            .unwrap(),
    };
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    world.runtime.block_on(async {
        let job = hubalign::store::Store::open(&db).await.unwrap().jobs().await.unwrap().remove(0);
        assert_eq!(job.state.to_string(), "published", "{:?}", job.reason);
        serde_json::to_value(job.verification.unwrap().0).unwrap()
    })
}

#[test]
fn a_fresh_job_judges_its_repaired_shard_while_it_downloads() {
    let record = repacked_record(None);
    assert_eq!(record["ok"], true, "{record}");
    assert_eq!((record["files"].as_u64(), record["tensors"].as_u64()), (Some(1), Some(2)), "{record}");
    assert_eq!(record["followed"], 1, "the shard was judged as it was written, not read again: {record}");
}

#[test]
fn a_fresh_job_judges_its_reordered_shard_tensor_by_tensor_while_it_downloads() {
    // 16 U32 tensors of 512 KiB, each after a 2-byte one: written at their new offsets as they come.
    let record = repacked_record_of(super::memory::reordered_bundle(16).0, "big-org/moved-q4", None);
    assert_eq!(record["ok"], true, "{record}");
    assert_eq!((record["files"].as_u64(), record["tensors"].as_u64()), (Some(1), Some(32)), "{record}");
    assert_eq!(record["followed"], 1, "the reorder was judged as it was written, not read again: {record}");
}

#[test]
fn a_follow_that_fails_costs_a_check_of_the_staged_bundle_not_the_job() {
    let dir = tempfile::tempdir().unwrap();
    // The interpreter fails every check that follows, as one out of memory would, and runs the others.
    let wrapper = dir.path().join("python");
    let fails = r#"import json; print(json.dumps({"started": True, "mlx_version": "0.32.4"})); print(json.dumps({"ok": False, "device": "cpu", "error": "MemoryError: the follow ran out"})); raise SystemExit(1)"#;
    let sh = format!(
        "#!/bin/sh\ncase \"$*\" in *--follow*) exec '{real}' -c '{fails}' ;; esac\nexec '{real}' \"$@\"\n",
        real = python().display()
    );
    std::fs::write(&wrapper, sh).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let record = repacked_record(Some(&wrapper));
    assert_eq!(record["ok"], true, "{record}");
    assert_eq!(record["followed"], 0, "the staged bundle was checked whole: {record}");
}

/// The bundle `hubalign fix` makes of the 24 MiB header-padded shard, in `dir`/fixed.
fn fixed_bundle(dir: &Path) -> PathBuf {
    fixed_bundle_of(header_padded_bundle_of(6144).0, "big-org/big-q4", dir)
}

/// The bundle `hubalign fix` makes of `repo` in the Hub directory `source`, in `dir`/fixed.
fn fixed_bundle_of(source: tempfile::TempDir, repo: &str, dir: &Path) -> PathBuf {
    let fixed = dir.join("fixed");
    let out =
        hubalign().arg("fix").arg(source.path().join("models").join(repo)).arg("--out").arg(&fixed).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    fixed
}

/// `verify_mlx.py --follow` on the CPU, its stdin and stdout piped.
fn following_check() -> std::process::Child {
    Command::new(python())
        .arg(root().join("deploy/verify_mlx.py"))
        .args(["--follow", "--device", "cpu"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What the download does to the followed file after it is kept and before the bundle is staged.
#[derive(Clone, Copy, Debug)]
enum AfterKept {
    Nothing,
    /// The staged file is a copy (another inode) of the right bytes.
    Replaced,
    /// A byte is changed in place.
    Changed,
}

/// Plays the download's part against `verify_mlx.py --follow`: writes the fixed shard into a temporary file
/// at its final length, 1 MiB at a time with an event after each (flipping the payload's byte `flip` as it
/// goes, if given), keeps it, stages it, and returns the check's record.
fn follow_by_hand(flip: Option<usize>, after: AfterKept) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let fixed = fixed_bundle(dir.path());
    let bytes = std::fs::read(fixed.join("model.safetensors")).unwrap();
    let (streamed, output) = (dir.path().join("streamed"), dir.path().join("output"));
    std::fs::create_dir_all(&streamed).unwrap();
    std::fs::create_dir_all(&output).unwrap();
    let mut check = following_check();
    let mut events = check.stdin.take().unwrap();
    let mut tell = |event: serde_json::Value| writeln!(events, "{event}").unwrap();

    let temp = streamed.join(".model.safetensors.tmp");
    let file = std::fs::File::create(&temp).unwrap();
    file.set_len(bytes.len() as u64).unwrap();
    let data_start = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut announced = false;
    for (i, piece) in bytes.chunks(1 << 20).enumerate() {
        let at = i << 20;
        let mut piece = piece.to_vec();
        if let Some(flip) = flip.map(|f| data_start + f).filter(|f| (at..at + piece.len()).contains(f)) {
            piece[flip - at] ^= 0x5a;
        }
        std::os::unix::fs::FileExt::write_all_at(&file, &piece, at as u64).unwrap();
        let written = at + piece.len();
        if !announced && written >= data_start {
            announced = true;
            tell(serde_json::json!({"writing": "model.safetensors", "path": temp}));
        }
        if announced {
            tell(serde_json::json!({"written": "model.safetensors", "bytes": written}));
        }
    }
    drop(file);
    let kept = streamed.join("model.safetensors");
    std::fs::rename(&temp, &kept).unwrap();
    tell(serde_json::json!({"kept": "model.safetensors", "path": kept}));
    let staged = output.join("model.safetensors");
    match after {
        AfterKept::Nothing => std::fs::hard_link(&kept, &staged).unwrap(),
        AfterKept::Replaced => drop(std::fs::copy(&kept, &staged).unwrap()),
        AfterKept::Changed => {
            std::fs::hard_link(&kept, &staged).unwrap();
            // Later than the kept file's time, whatever the file system's clock resolution.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let file = std::fs::OpenOptions::new().write(true).open(&staged).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&file, &[bytes[data_start + 7] ^ 1], data_start as u64 + 7)
                .unwrap();
        }
    }
    staged_and_judged(check, events, &fixed, &output)
}

#[test]
fn the_script_counts_a_followed_shard_only_if_the_staged_file_is_the_one_it_judged() {
    let record = follow_by_hand(None, AfterKept::Nothing);
    assert_eq!((record["ok"].clone(), record["followed"].clone()), (true.into(), 1.into()), "{record}");

    // Another file with the same bytes passes, checked whole.
    let record = follow_by_hand(None, AfterKept::Replaced);
    assert_eq!((record["ok"].clone(), record["followed"].clone()), (true.into(), 0.into()), "{record}");

    // A byte changed after the follow read it is found by the whole check the change forces.
    let record = follow_by_hand(None, AfterKept::Changed);
    assert_eq!(record["ok"], false, "{record}");
    assert!(record["error"].as_str().unwrap().contains("the loaded payload differs"), "{record}");

    // Wrong bytes as they are written fail the follow, naming the file.
    let record = follow_by_hand(Some(3 << 20), AfterKept::Nothing);
    assert_eq!(record["ok"], false, "{record}");
    let error = record["error"].as_str().unwrap();
    assert!(error.contains("model.safetensors: the loaded payload differs"), "{record}");
}

#[test]
fn a_follow_whose_events_end_before_the_bundle_is_staged_fails() {
    let mut check = following_check();
    writeln!(check.stdin.take().unwrap(), r#"{{"writing": "model.safetensors", "path": "/nonexistent/x"}}"#).unwrap();
    let out = check.wait_with_output().unwrap();
    let record: serde_json::Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(record["ok"], false);
    assert!(record["error"].as_str().unwrap().contains("ended before the bundle was staged"), "{record}");
    assert!(!out.status.success());
}

/// Follows, by hand, a reordered shard as the download writes one: the header, then each tensor whole at its
/// offset, last tensor first (flipping a byte of the one written `flip`-th, if given), each announced as
/// placed; keeps it, stages it, and returns the check's record.
fn follow_reorder_by_hand(flip: Option<usize>) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let fixed = fixed_bundle_of(super::memory::reordered_bundle(8).0, "big-org/moved-q4", dir.path());
    let bytes = std::fs::read(fixed.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let (streamed, output) = (dir.path().join("streamed"), dir.path().join("output"));
    std::fs::create_dir_all(&streamed).unwrap();
    std::fs::create_dir_all(&output).unwrap();
    let mut check = following_check();
    let mut events = check.stdin.take().unwrap();
    let mut tell = |event: serde_json::Value| writeln!(events, "{event}").unwrap();

    let temp = streamed.join(".model.safetensors.tmp");
    let file = std::fs::File::create(&temp).unwrap();
    file.set_len(bytes.len() as u64).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &bytes[..8 + n], 0).unwrap();
    tell(serde_json::json!({"writing": "model.safetensors", "path": temp, "by": "tensor"}));
    let tensors = header.iter().filter(|(name, _)| *name != "__metadata__").rev();
    for (i, (name, info)) in tensors.enumerate() {
        let offsets = &info["data_offsets"];
        let (begin, end) =
            (8 + n + offsets[0].as_u64().unwrap() as usize, 8 + n + offsets[1].as_u64().unwrap() as usize);
        let mut piece = bytes[begin..end].to_vec();
        if flip == Some(i) {
            piece[0] ^= 0x5a;
        }
        std::os::unix::fs::FileExt::write_all_at(&file, &piece, begin as u64).unwrap();
        tell(serde_json::json!({"placed": "model.safetensors", "tensors": [name]}));
    }
    drop(file);
    let kept = streamed.join("model.safetensors");
    std::fs::rename(&temp, &kept).unwrap();
    tell(serde_json::json!({"kept": "model.safetensors", "path": kept}));
    std::fs::hard_link(&kept, output.join("model.safetensors")).unwrap();
    staged_and_judged(check, events, &fixed, &output)
}

#[test]
fn the_script_judges_a_followed_reorder_by_each_tensors_digest() {
    let record = follow_reorder_by_hand(None);
    assert_eq!((record["ok"].clone(), record["followed"].clone()), (true.into(), 1.into()), "{record}");

    // A wrong byte in a tensor as it is written fails the follow, naming the file and the tensor.
    let record = follow_reorder_by_hand(Some(3));
    assert_eq!(record["ok"], false, "{record}");
    let error = record["error"].as_str().unwrap();
    assert!(error.contains("model.safetensors: t") && error.ends_with("bytes differ from the source's"), "{record}");
}

/// Stages the manifest of `fixed` beside the shard in `output`, tells the check, and returns its record.
fn staged_and_judged(
    check: std::process::Child,
    mut events: std::process::ChildStdin,
    fixed: &Path,
    output: &Path,
) -> serde_json::Value {
    std::fs::copy(fixed.join("MEI_ALIGN_MANIFEST.json"), output.join("MEI_ALIGN_MANIFEST.json")).unwrap();
    writeln!(events, "{}", serde_json::json!({"output": output})).unwrap();
    drop(events);
    let out = check.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let record: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or("")).unwrap();
    assert_eq!(out.status.success(), record["ok"] == true, "{record}");
    record
}
