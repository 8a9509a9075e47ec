//! The mirror's model card, rendered for a real-looking 4-shard bundle and compared with a checked-in
//! snapshot (`UPDATE_SNAPSHOTS=1` rewrites it); its front matter is read by a YAML parser no one here wrote,
//! and every figure it prints is checked against the manifest it was made from.

use std::collections::BTreeMap;

use hubalign::job::payload::LocalChecks;
use hubalign::manifest::{Edited, LeftOut, Manifest, ManifestShard};
use hubalign::repack::publish::card::{BundleFiles, CardData, CardInputs, SourceCard, render};
use hubalign::safetensors::Method;

use crate::support::{python, root};

fn shard(n: u64, padding: u64, payload: u64, sha: &str, tensors: u64, before: u64) -> ManifestShard {
    ManifestShard {
        file: format!("model-0000{n}-of-00004.safetensors"),
        src_header_len: 101_233 + n,
        padding_bytes: padding,
        payload_bytes: payload,
        payload_sha256: sha.repeat(4),
        tensors,
        unaligned_after: 0,
        repack_seconds: 4.2,
        method: Method::HeaderPad,
        header_len: 101_233 + n + padding,
        unaligned_before: before,
        digests: vec!["payload_sha256".into()],
        src_file_sha256: "0".repeat(64),
        src_payload_sha256: sha.repeat(4),
        file_sha256: "1".repeat(64),
        tensor_sha256: BTreeMap::new(),
    }
}

/// The seed's bundle, as its manifest records it.
fn seed_manifest() -> Manifest {
    Manifest {
        tool: "hubalign".into(),
        tool_version: "0.1.0".into(),
        generated_utc: "2026-12-01T00:00:00Z".into(),
        source_dir: "ornith-ai/Ornith-1.5-35B-A3B-MLX-4bit@8f3c2a".into(),
        source_repo: Some("ornith-ai/Ornith-1.5-35B-A3B-MLX-4bit".into()),
        source_revision: Some("8f3c2a91d0b7e64c5a1f2e3d4c5b6a7980f1e2d3".into()),
        target_alignment: 8,
        shards: vec![
            shard(1, 6, 5_343_636_096, "ae982af457a3c4cb", 452, 371),
            shard(2, 3, 5_368_405_504, "4570d482fbc3ddb5", 448, 360),
            shard(3, 3, 5_368_256_256, "411ffa6f850b8f88", 448, 366),
            shard(4, 3, 3_428_489_600, "32a9b3e550f03bb3", 409, 324),
        ],
        skipped: Vec::new(),
        left_out: vec![
            LeftOut {
                file: "pytorch_model.bin".into(),
                bytes: 2_147_483_648,
                reason: "weights in a format this repair does not carry (pickles can run code when loaded)".into(),
            },
            LeftOut { file: "modeling_ornith.py".into(), bytes: 41_210, reason: "code: a mirror carries none".into() },
        ],
        edited: vec![Edited { file: "config.json".into(), removed: vec!["auto_map".into()] }],
    }
}

/// The seed's card, rendered from `manifest` and what the checks that run here found.
fn seed_card(manifest: &Manifest, checks: &LocalChecks) -> String {
    let mlx = serde_json::from_value(serde_json::json!({"ok": true, "device": "gpu", "mlx_version": "0.32.4", "tensors": 1757, "files": 4, "seconds": 41.7})).unwrap();
    let source = SourceCard {
        license: Some("mit".into()),
        pipeline_tag: Some("text-generation".into()),
        language: vec!["en".into()],
        tags: vec!["not-for-all-audiences".into()],
        credits: vec!["ornith-ai/Ornith-1.5-35B-A3B".into()],
        ..SourceCard::default()
    };
    let inputs = CardInputs {
        target_repo: "hubalign/Ornith-1.5-35B-A3B-MLX-4bit-aligned",
        endpoint: "https://huggingface.co",
        source,
        before_bytes: 4_731_260_928,
        checks,
        mlx,
        files: BundleFiles { license_file: Some("LICENSE".into()), chat_template: true },
    };
    render(&CardData::new(manifest, inputs)).unwrap()
}

/// The local checks' record as a job row written before the list of checks holds it: three counts.
fn counted() -> LocalChecks {
    LocalChecks { shards: 4, tensors: 1757, zero_copy: 1757, ..LocalChecks::default() }
}

#[test]
fn the_card_reads_like_the_seed_and_every_figure_is_the_manifests() {
    let manifest = seed_manifest();
    let card = seed_card(&manifest, &counted());
    // A row written by the list of checks, by each check's name, gives the same card.
    let figures = |pairs: &[(&str, u64)]| -> serde_json::Map<String, serde_json::Value> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).into())).collect()
    };
    let listed = LocalChecks::of(BTreeMap::from([
        ("structural".to_owned(), figures(&[("shards", 4), ("tensors", 1757)])),
        ("index".to_owned(), figures(&[("entries", 1757)])),
        ("mmap".to_owned(), figures(&[("shards", 4), ("tensors", 1757), ("zero_copy", 1757)])),
    ]));
    assert_eq!(seed_card(&manifest, &listed), card, "a row of the list renders as a row of counts");

    let snapshot = root().join("tests/snapshots/model_card.md");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&snapshot, &card).unwrap();
    }
    let want = std::fs::read_to_string(&snapshot).unwrap_or_default();
    assert_eq!(card, want, "the card differs from {} (UPDATE_SNAPSHOTS=1 rewrites it)", snapshot.display());

    // Every figure is the manifest's or a check's.
    for s in &manifest.shards {
        let payload = s.payload_bytes.to_string();
        let grouped: String = payload
            .chars()
            .rev()
            .collect::<Vec<_>>()
            .chunks(3)
            .map(|c| c.iter().collect::<String>())
            .collect::<Vec<_>>()
            .join(",")
            .chars()
            .rev()
            .collect();
        assert!(
            card.contains(&format!(
                "| `{}` | header_pad | {} bytes | {grouped} | `{}…` |",
                s.file,
                s.padding_bytes,
                &s.payload_sha256[..16]
            )),
            "{}",
            s.file
        );
    }
    assert!(card.contains("| tensors a memory-mapping loader must copy | 1,421 of 1,757 | 0 |"), "{card}");
    assert!(
        card.contains("| tensors a memory-mapping loader maps in place (zero copy) | 336 of 1,757 | 1,757 of 1,757 |")
    );
    // What readers of mlx-community's cards look for: the full id as the title, where it came from and by
    // what, the model the source credits, how to install and chat, the licence's text.
    assert!(card.contains("\n# hubalign/Ornith-1.5-35B-A3B-MLX-4bit-aligned\n"), "{card}");
    assert!(card.contains("Re-laid from [ornith-ai/Ornith-1.5-35B-A3B-MLX-4bit](https://huggingface.co/ornith-ai/Ornith-1.5-35B-A3B-MLX-4bit) at commit `8f3c2a91d0b7e64c5a1f2e3d4c5b6a7980f1e2d3` by hubalign"));
    assert!(card.contains(
        "The source credits [ornith-ai/Ornith-1.5-35B-A3B](https://huggingface.co/ornith-ai/Ornith-1.5-35B-A3B)"
    ));
    assert!(
        card.contains("pip install mlx-lm")
            && card.contains("tokenizer.apply_chat_template(messages, add_generation_prompt=True)")
    );
    assert!(card.contains("`mit` ([text](https://spdx.org/licenses/MIT.html))") && card.contains("[LICENSE](LICENSE)"));
    assert!(card.contains("(MLX 0\\.32\\.4)") || card.contains("(MLX 0.32.4)"), "the check's record: {card}");
    assert!(card.contains("4.73 GB (4,731,260,928 bytes)"));
    assert!(card.contains("1,757 arrays in 4 files") && card.contains("(1,757 of 1,757 tensors)"));
    assert!(!card.contains("1 bytes") && !card.contains("base_model_relation"));
}

/// The card's front matter reads in PyYAML, as `huggingface_hub` reads it.
#[cfg(feature = "system-tests")]
#[test]
fn the_cards_front_matter_reads_as_the_hub_reads_it() {
    let card = seed_card(&seed_manifest(), &counted());
    let path = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(path.path(), &card).unwrap();
    let check = "import sys, yaml; t = open(sys.argv[1]).read(); assert t.startswith('---\\n'); \
                 m = yaml.safe_load(t.split('---')[1]); \
                 assert m['base_model'] == 'ornith-ai/Ornith-1.5-35B-A3B-MLX-4bit', m; \
                 assert m['license'] == 'mit' and m['pipeline_tag'] == 'text-generation' and m['language'] == ['en'], m; \
                 assert m['library_name'] == 'mlx', m; \
                 assert m['tags'] == ['mlx', 'safetensors', 'aligned-safetensors', 'not-for-all-audiences'], m; \
                 assert 'base_model_relation' not in m, m; print('yaml ok')";
    let out = std::process::Command::new(python()).args(["-c", check]).arg(path.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
