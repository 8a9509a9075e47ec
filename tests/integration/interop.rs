//! What `fix` writes, judged by code no one here wrote: `safetensors.safe_open`, `mlx.core.load`,
//! `mlx_lm.load`, and Mei's manifest snippet (`tests/python/check_fixed.py`).

use std::path::Path;

use crate::support::{copy_tree, fixture, run, run_python, stdout, text};

/// Fixes `rel` into a fresh directory with `extra` flags and runs the checker on the pair.
fn fix_and_check(rel: &str, extra: &[&str], mlx_lm: bool) {
    let src = fixture(rel);
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("fixed");
    let mut args = vec!["fix", src.to_str().unwrap(), "--out", out_dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0), "{rel}: {}", text(&out));
    let fixed = if src.is_dir() { out_dir.clone() } else { out_dir.join(src.file_name().unwrap()) };
    let mut check = vec!["--original", src.to_str().unwrap(), "--fixed", fixed.to_str().unwrap()];
    if mlx_lm {
        check.push("--mlx-lm");
    }
    let report = run_python("check_fixed.py", &check);
    assert!(report.contains("check_fixed: OK"), "{rel}: {report}");
    // A bundle no loader copies from (the bf16 model: data at 2 mod 8, every tensor aligned) is left alone,
    // so there is nothing for a manifest to record.
    let needed_work = run(&["scan", src.to_str().unwrap()]).status.code() == Some(1);
    if src.is_dir() {
        assert_eq!(report.contains("MEI_ALIGN_MANIFEST"), needed_work, "{rel}: the manifest snippet ran: {report}");
    }
}

#[test]
fn mlx_written_files_reordered_or_padded_load_bit_identically() {
    for rel in [
        "mlx/hostile.safetensors",
        "mlx/padfixable.safetensors",
        "mlx/nometa.safetensors",
        "mlx/wide.safetensors",
        "padded/leading.safetensors",
        "padded/trailing.safetensors",
        "numpy/aligned.safetensors",
    ] {
        fix_and_check(rel, &[], false);
    }
}

#[test]
fn page_aligned_output_loads_too() {
    fix_and_check("mlx/wide.safetensors", &["--alignment", "16384"], false);
    fix_and_check("mlx_lm/q4_oddvocab", &["--alignment", "16384"], true);
}

#[test]
fn mlx_lm_models_load_with_mlx_lm_after_fixing() {
    for variant in ["bf16", "q4", "q8", "mixed", "sharded", "q4_oddvocab"] {
        fix_and_check(&format!("mlx_lm/{variant}"), &[], true);
    }
}

#[test]
fn in_place_results_pass_the_same_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("q4_oddvocab");
    copy_tree(&fixture("mlx_lm/q4_oddvocab"), &work);
    let out = run(&["fix", "--in-place", work.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report = run_python(
        "check_fixed.py",
        &["--original", fixture("mlx_lm/q4_oddvocab").to_str().unwrap(), "--fixed", work.to_str().unwrap(), "--mlx-lm"],
    );
    assert!(report.contains("check_fixed: OK"), "{report}");
    assert!(Path::new(&work.join("MEI_ALIGN_MANIFEST.json")).exists());
}

#[test]
fn the_interop_checker_fails_when_it_should() {
    // check_fixed.py judges every `fix` output above; its self-test shows it can fail: it must pass a
    // reference re-layout written in Python, and fail flipped bytes, changed metadata or dtypes, an extra
    // shard, a changed index and a wrong manifest hash, each naming the file or tensor.
    let report = run_python("selftest_check_fixed.py", &[]);
    assert!(report.contains("selftest_check_fixed: OK"), "{report}");
}

#[test]
fn the_reference_reader_decides_which_dtypes_exist_and_judges_fix_output_in_each() {
    // One file per dtype name, MLX-packed (an odd-length U8 first); safe_open says which it accepts.
    let tmp = tempfile::tempdir().unwrap();
    let all = tmp.path().join("all");
    let verdicts: std::collections::BTreeMap<String, bool> =
        serde_json::from_str(run_python("dtype_files.py", &[all.to_str().unwrap()]).trim()).unwrap();
    let accepted: Vec<&String> = verdicts.iter().filter(|(_, ok)| **ok).map(|(d, _)| d).collect();
    assert_eq!(accepted.len(), 22, "{verdicts:?}");
    let ours: std::collections::BTreeSet<String> =
        hubalign::safetensors::Dtype::ALL.iter().map(std::string::ToString::to_string).collect();
    assert_eq!(ours, accepted.iter().map(|d| (*d).clone()).collect(), "the parser's dtypes are the reference's");

    // scan agrees with the reference on each file.
    let orig = tmp.path().join("orig");
    std::fs::create_dir_all(&orig).unwrap();
    for (dtype, ok) in &verdicts {
        let file = all.join(format!("{dtype}.safetensors"));
        let out = run(&["scan", "--format", "json", file.to_str().unwrap()]);
        let row: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        assert_eq!(row["verdict"] != "invalid", *ok, "{dtype}: {row}");
        if *ok {
            assert_ne!(row["verdict"], "aligned", "{dtype}: packed after 3 bytes, something is misaligned");
            std::fs::copy(&file, orig.join(format!("{dtype}.safetensors"))).unwrap();
        }
    }
    // fix them all, and let the reference reader (and the raw bytes) judge every output.
    let fixed = tmp.path().join("fixed");
    let out = run(&["fix", orig.to_str().unwrap(), "--out", fixed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let report =
        run_python("check_fixed.py", &["--original", orig.to_str().unwrap(), "--fixed", fixed.to_str().unwrap()]);
    assert!(report.contains("check_fixed: OK (22 files"), "{report}");
}

/// Runs the worker's MLX check (`deploy/verify_mlx.py`, CPU) on a fixed bundle; its JSON record.
fn mlx_check(dir: &Path) -> serde_json::Value {
    let out = std::process::Command::new(crate::support::python())
        .arg(crate::support::root().join("deploy/verify_mlx.py"))
        .args(["--device", "cpu", "--output"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let record: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or("")).unwrap();
    assert_eq!(out.status.success(), record["ok"] == true, "{record}");
    record
}

/// Changes the manifest record of `file` in the bundle `dir`.
fn edit_record(dir: &Path, file: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("MEI_ALIGN_MANIFEST.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(manifest["shards"].as_array_mut().unwrap().iter_mut().find(|s| s["file"] == file).unwrap());
    std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
}

/// Flips one byte of `file` at `offset` from its end.
fn flip_from_end(file: &Path, offset: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    let at = bytes.len() - offset;
    bytes[at] ^= 0x5a;
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn the_mlx_check_judges_the_loaded_output_by_the_manifests_digests_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let fixed = tmp.path().join("fixed");
    let out = run(&["fix", fixture("mlx").to_str().unwrap(), "--out", fixed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let record = mlx_check(&fixed);
    assert_eq!(
        (record["ok"].clone(), record["files"].clone(), record["tensors"].clone()),
        (true.into(), 4.into(), 30.into())
    );

    // A header-padded shard has only its payload's digest, taken from the source: one byte off fails it.
    let padded = tmp.path().join("padded");
    copy_tree(&fixed, &padded);
    flip_from_end(&padded.join("padfixable.safetensors"), 1);
    let error = mlx_check(&padded)["error"].as_str().unwrap().to_owned();
    assert!(error.contains("padfixable.safetensors: the loaded payload differs"), "{error}");

    // A reordered shard's tensors are each judged by the source's digest of it.
    let reordered = tmp.path().join("reordered");
    copy_tree(&fixed, &reordered);
    flip_from_end(&reordered.join("hostile.safetensors"), 1);
    let error = mlx_check(&reordered)["error"].as_str().unwrap().to_owned();
    assert!(error.contains("hostile.safetensors: ") && error.ends_with("bytes differ from the source's"), "{error}");

    // So is a manifest that records another digest than the source's.
    let lying = tmp.path().join("lying");
    copy_tree(&fixed, &lying);
    let mut name = String::new();
    edit_record(&lying, "hostile.safetensors", |record| {
        let digests = record["tensor_sha256"].as_object_mut().unwrap();
        name = digests.keys().next().unwrap().clone();
        digests.insert(name.clone(), "0".repeat(64).into());
    });
    let error = mlx_check(&lying)["error"].as_str().unwrap().to_owned();
    assert!(error.contains(&format!("hostile.safetensors: {name}: bytes differ")), "{error}");

    // Judged tensor by tensor, a reordered shard must still be as long as its record says.
    let longer = tmp.path().join("longer");
    copy_tree(&fixed, &longer);
    edit_record(&longer, "hostile.safetensors", |record| {
        record["payload_bytes"] = (record["payload_bytes"].as_u64().unwrap() + 1).into();
    });
    let error = mlx_check(&longer)["error"].as_str().unwrap().to_owned();
    assert!(error.contains("hostile.safetensors: the loaded payload differs"), "{error}");

    // And a shard the manifest does not list is not judged by nothing.
    std::fs::copy(fixed.join("hostile.safetensors"), fixed.join("extra.safetensors")).unwrap();
    let error = mlx_check(&fixed)["error"].as_str().unwrap().to_owned();
    assert!(error.contains("not the ones the manifest lists"), "{error}");
}

/// The worker's MLX check loads each fixed fixture model with `mlx_lm.load` at its defaults (model and
/// tokenizer, every weight evaluated), as a person loading the mirror would.
#[test]
fn the_mlx_check_loads_every_fixture_model_with_mlx_lm_at_its_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    for variant in ["bf16", "q4", "q8", "mixed", "sharded", "q4_oddvocab"] {
        let fixed = tmp.path().join(variant);
        let source = fixture(&format!("mlx_lm/{variant}"));
        // bf16 is aligned already: no mirror is made of it unless pages are asked for.
        let pages: &[&str] = if variant == "bf16" { &["--alignment", "16384"] } else { &[] };
        let out = run(&[&["fix", source.to_str().unwrap(), "--out", fixed.to_str().unwrap()], pages].concat());
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        // `fix` writes the shards and the manifest; the mirror carries the rest of the bundle beside them.
        for file in std::fs::read_dir(&source).unwrap().map(|e| e.unwrap().path()) {
            if !fixed.join(file.file_name().unwrap()).exists() {
                std::fs::copy(&file, fixed.join(file.file_name().unwrap())).unwrap();
            }
        }
        let record = mlx_check(&fixed);
        let loaded = &record["mlx_lm"];
        assert_eq!(
            (&record["ok"], &loaded["loaded"], &loaded["lazy"]),
            (&true.into(), &true.into(), &false.into()),
            "{variant}: {record}"
        );
        assert!(loaded["version"].as_str().is_some_and(|v| v.starts_with("0.")), "{record}");
    }
}

/// A model type mlx-lm does not know is said in the record, not failed (`mlx.core.load` checked every
/// tensor); a config mlx-lm cannot build from the shards fails the check, and the mirror is not published.
#[test]
fn the_mlx_check_says_what_mlx_lm_cannot_load_and_fails_what_it_loads_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let fixed = tmp.path().join("q4");
    let source = fixture("mlx_lm/q4");
    let out = run(&["fix", source.to_str().unwrap(), "--out", fixed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    for file in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(source.join(file), fixed.join(file)).unwrap();
    }
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(source.join("config.json")).unwrap()).unwrap();
    let with = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut changed = config.clone();
        edit(&mut changed);
        std::fs::write(fixed.join("config.json"), serde_json::to_vec(&changed).unwrap()).unwrap();
        mlx_check(&fixed)
    };
    let unknown = with(&|c| c["model_type"] = "not_a_model_mlx_lm_knows".into());
    assert_eq!(unknown["ok"], true, "{unknown}");
    assert_eq!(unknown["mlx_lm"]["loaded"], false, "{unknown}");
    let why = unknown["mlx_lm"]["why"].as_str().unwrap();
    assert!(why.contains("not_a_model_mlx_lm_knows not supported"), "{why}");

    let wrong = with(&|c| c["num_hidden_layers"] = (c["num_hidden_layers"].as_u64().unwrap() + 1).into());
    assert_eq!(wrong["ok"], false, "{wrong}");
    let error = wrong["error"].as_str().unwrap();
    assert!(error.contains("mlx_lm.load failed"), "{error}");
}
