use proptest::prelude::*;

use super::*;
use crate::hashing::sha256_hex;
use crate::safetensors::read::read_shard_header;
use crate::safetensors::rewrite::rewrite;
use hubalign_test_support::synth::{SynthTensor, write_mlx_style};

/// Streams `source` through a [`StreamRepair`] in pieces of the given lengths (cycled).
fn stream(source: &[u8], pieces: &[usize], dir: &Path) -> (String, Streamed, Vec<u8>) {
    let partial = dir.join("partial");
    let target = RepairTarget { dir: dir.join("repaired"), alignment: Alignment::DEFAULT };
    std::fs::create_dir_all(&target.dir).unwrap();
    let mut repair =
        StreamRepair::new("model.safetensors", source.len() as u64, target, File::create(&partial).unwrap());
    let mut at = 0;
    for len in pieces.iter().cycle() {
        if at == source.len() {
            break;
        }
        let end = (at + len.max(&1)).min(source.len());
        repair.push(&source[at..end]).unwrap();
        at = end;
    }
    let end = repair.finish().unwrap();
    (end.source_sha256, end.streamed, std::fs::read(&partial).unwrap())
}

/// What the file-based re-layout writes for `source`.
fn rewritten(source: &[u8], dir: &Path) -> Vec<u8> {
    let src = dir.join("src.safetensors");
    std::fs::write(&src, source).unwrap();
    let shard = read_shard_header(&src).unwrap();
    let p = plan(&shard.header, &shard.raw_json, Alignment::DEFAULT).unwrap();
    let dst = dir.join("out.safetensors");
    rewrite(&src, &shard, &p, &dst, Digests::Minimal, &mut |_| {}).unwrap();
    std::fs::read(dst).unwrap()
}

/// A shard whose data starts off 8 and whose tensors are all 8-byte multiples: header padding fixes it.
fn header_padded(payload: usize, name_len: usize) -> Vec<u8> {
    let tensors = vec![
        SynthTensor::filled(&"w".repeat(name_len), "U32", &[(payload / 4) as u64 * 2]),
        SynthTensor::filled("norm", "BF16", &[8]),
    ];
    write_mlx_style(&tensors, Some("mlx"))
}

/// A shard with odd-length tensors between wide ones: only a reorder aligns it.
fn reordered(payload: usize, name_len: usize) -> Vec<u8> {
    let tensors = vec![
        SynthTensor::filled(&"a".repeat(name_len), "U8", &[3]),
        SynthTensor::filled("w", "F32", &[(payload / 4) as u64 + 1]),
        SynthTensor::filled("b", "U8", &[5]),
        SynthTensor::filled("n", "BF16", &[7]),
    ];
    write_mlx_style(&tensors, Some("mlx"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_chunking_writes_what_the_file_based_fix_writes(
        payload in 1usize..(600 << 10),
        name_len in 1usize..40,
        pieces in prop::collection::vec(1usize..(300 << 10), 1..6),
        reorder in any::<bool>(),
    ) {
        let source = if reorder { reordered(payload, name_len) } else { header_padded(payload, name_len) };
        let dir = tempfile::tempdir().unwrap();
        let (sha, streamed, stub) = stream(&source, &pieces, dir.path());
        prop_assert_eq!(&sha, &sha256_hex(&source));
        let shard = crate::safetensors::header::parse(&source, source.len() as u64).unwrap();
        let raw = &source[8..shard.data_start() as usize];
        let method = plan(&shard, raw, Alignment::DEFAULT).unwrap().method;
        match streamed {
            Streamed::Repaired(repaired) => {
                prop_assert!(method != Method::Unchanged);
                let entry = repaired.entry.clone();
                repaired.keep(&dir.path().join("repaired"), &sha).unwrap();
                let written = std::fs::read(dir.path().join("repaired/model.safetensors")).unwrap();
                prop_assert_eq!(&written, &rewritten(&source, dir.path()));
                let new_start = 8 + entry.header_len as usize;
                prop_assert_eq!(&entry.payload_sha256, &sha256_hex(&written[new_start..]));
                let at = shard.data_start() as usize;
                if method == Method::Relayout {
                    for t in &shard.tensors {
                        let digest = sha256_hex(&source[at + t.begin as usize..at + t.end as usize]);
                        prop_assert_eq!(entry.tensor_sha256.get(&t.name), Some(&digest));
                    }
                    let listed = ["payload_sha256", "file_sha256", "tensor_sha256"].map(str::to_owned);
                    prop_assert_eq!(&entry.digests, &listed);
                    // The whole file's digest, the upload's LFS oid, named while the file is the one hashed.
                    prop_assert_eq!(&entry.file_sha256, &sha256_hex(&written));
                    let repaired_dir = dir.path().join("repaired");
                    let named = StreamedRecord::file_sha256(&repaired_dir, "model.safetensors");
                    prop_assert_eq!(named, Some(sha256_hex(&written)));
                } else {
                    prop_assert_eq!(&entry.payload_sha256, &sha256_hex(&source[at..]));
                    prop_assert_eq!(&entry.digests, &["payload_sha256".to_owned(), "src_payload_sha256".to_owned()]);
                    prop_assert_eq!(StreamedRecord::file_sha256(&dir.path().join("repaired"), "model.safetensors"), None);
                }
                // The stub: the source's length, its header and first bytes real, the rest zeros (a hole).
                let real = (shard.data_start() + STUB_HEAD).min(source.len() as u64) as usize;
                prop_assert_eq!(stub.len(), source.len());
                prop_assert_eq!(&stub[..real], &source[..real]);
                prop_assert!(stub[real..].iter().all(|&b| b == 0));
                let record = StreamedRecord::load(&dir.path().join("repaired"), "model.safetensors", &sha);
                prop_assert_eq!(record.map(|r| r.entry), Some(entry));
            }
            Streamed::Whole => {
                prop_assert_eq!(method, Method::Unchanged);
                prop_assert_eq!(&stub, &source);
            }
        }
    }
}

#[test]
fn shards_that_do_not_parse_are_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut broken = header_padded(4096, 3);
    broken[20] = b'#';
    let mut huge = header_padded(4096, 3);
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    for source in [broken, huge, b"short".to_vec()] {
        let (sha, streamed, whole) = stream(&source, &[7, 1000], dir.path());
        assert!(matches!(streamed, Streamed::Whole));
        assert_eq!((sha, whole), (sha256_hex(&source), source));
    }
}

#[test]
fn a_source_that_ends_early_is_an_error_and_a_record_for_another_source_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let source = header_padded(100_000, 5);
    let target = RepairTarget { dir: dir.path().to_owned(), alignment: Alignment::DEFAULT };
    let partial = File::create(dir.path().join("partial")).unwrap();
    let mut repair = StreamRepair::new("model.safetensors", source.len() as u64, target, partial);
    repair.push(&source[..source.len() - 10]).unwrap();
    assert!(repair.finish().is_err());

    let (sha, streamed, _) = stream(&source, &[4096], dir.path());
    let Streamed::Repaired(repaired) = streamed else { panic!("header-padded") };
    repaired.keep(&dir.path().join("repaired"), &sha).unwrap();
    let repaired_dir = dir.path().join("repaired");
    assert!(StreamedRecord::load(&repaired_dir, "model.safetensors", &sha).is_some());
    assert!(StreamedRecord::load(&repaired_dir, "model.safetensors", &"0".repeat(64)).is_none());
    std::fs::write(repaired_dir.join("model.safetensors"), b"cut").unwrap();
    assert!(
        StreamedRecord::load(&repaired_dir, "model.safetensors", &sha).is_none(),
        "the file is not the one recorded"
    );
}

#[cfg(unix)]
#[test]
fn fix_links_a_recorded_repair_and_refuses_a_stub_without_its_record() {
    use crate::fix::{Destination, FixOptions, fix};
    let dir = tempfile::tempdir().unwrap();
    let source = (1..40).map(|n| header_padded(3 << 20, n)).find(|s| {
        let h = crate::safetensors::header::parse(s, s.len() as u64).unwrap();
        plan(&h, &s[8..h.data_start() as usize], Alignment::DEFAULT).unwrap().method == Method::HeaderPad
    });
    let source = source.unwrap();
    let (sha, streamed, stub) = stream(&source, &[1 << 20], dir.path());
    let Streamed::Repaired(repaired) = streamed else { panic!("header-padded") };
    let prepared = dir.path().join("repaired");
    repaired.keep(&prepared, &sha).unwrap();
    // The bundle holds the stub, written as the download leaves it: header and head real, the rest a hole.
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    let real = stub.iter().rposition(|&b| b != 0).unwrap() + 1;
    let file = File::create(bundle.join("model.safetensors")).unwrap();
    (&file).write_all(&stub[..real]).unwrap();
    file.set_len(stub.len() as u64).unwrap();
    let run = |prepared: &Path, out: &str| {
        let opts = FixOptions {
            destination: Destination::OutDir(dir.path().join(out)),
            alignment: Alignment::DEFAULT,
            dry_run: false,
            digests: Digests::Minimal,
            prepared: Some(prepared.to_owned()),
        };
        let bundles = crate::bundle::discover(std::slice::from_ref(&bundle)).unwrap();
        fix(&bundles, &opts, &mut |_| {}).unwrap()
    };
    let report = run(&prepared, "out");
    assert_eq!(report.totals.rewritten, 1);
    let written = std::fs::read(dir.path().join("out/model.safetensors")).unwrap();
    assert_eq!(written, std::fs::read(prepared.join("model.safetensors")).unwrap());
    // Without the record, the stub's holes are never taken for the shard's payload.
    let report = run(&dir.path().join("nothing-here"), "out2");
    let error = report.bundles[0].shards[0].error.clone().unwrap_or_default();
    assert!(error.contains("without its record"), "{error}");
    assert!(!dir.path().join("out2/model.safetensors").exists());
}

#[test]
fn a_reordered_shards_whole_digest_is_named_only_while_the_file_is_the_one_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let source = reordered(200_000, 4);
    let (sha, streamed, _) = stream(&source, &[65_536], dir.path());
    let Streamed::Repaired(repaired) = streamed else { panic!("reordered") };
    let repaired_dir = dir.path().join("repaired");
    repaired.keep(&repaired_dir, &sha).unwrap();
    let path = repaired_dir.join("model.safetensors");
    let written = std::fs::read(&path).unwrap();
    assert_eq!(StreamedRecord::file_sha256(&repaired_dir, "model.safetensors"), Some(sha256_hex(&written)));
    // Staged by a hard link elsewhere, then renamed: still the very file.
    std::fs::hard_link(&path, dir.path().join("staged")).unwrap();
    assert!(StreamedRecord::file_sha256(&repaired_dir, "model.safetensors").is_some());
    // A later write of the same bytes in place, like a corrupting one, leaves the digest unnamed.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().write_all(&written[..8]).unwrap();
    assert_eq!(StreamedRecord::file_sha256(&repaired_dir, "model.safetensors"), None);
    // Nor is a new file renamed over it, with the same bytes.
    std::fs::write(repaired_dir.join("new"), &written).unwrap();
    std::fs::rename(repaired_dir.join("new"), &path).unwrap();
    assert_eq!(StreamedRecord::file_sha256(&repaired_dir, "model.safetensors"), None);
}
