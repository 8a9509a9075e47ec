use super::*;
use crate::hashing::sha256_hex;
use crate::safetensors::Method;
use crate::safetensors::plan::plan;
use crate::safetensors::{Verdict, header};
use hubalign_test_support::synth::{SynthTensor, write_mlx_style};

fn tensors_of(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let h = header::parse(bytes, bytes.len() as u64).unwrap();
    let start = h.data_start() as usize;
    let mut v: Vec<_> = h
        .tensors
        .iter()
        .map(|t| (t.name.clone(), bytes[start + t.begin as usize..start + t.end as usize].to_vec()))
        .collect();
    v.sort();
    v
}

fn run(
    tensors: &[SynthTensor],
    target: u64,
    in_place: bool,
    digests: Digests,
) -> (Vec<u8>, Vec<u8>, RewriteOutcome, LayoutPlan) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("model.safetensors");
    let original = write_mlx_style(tensors, Some("mlx"));
    std::fs::write(&src, &original).unwrap();
    let shard = read_shard_header(&src).unwrap();
    let p = plan(&shard.header, &shard.raw_json, Alignment::new(target).unwrap()).unwrap();
    let dst = if in_place { src.clone() } else { dir.path().join("out.safetensors") };
    let mut seen = 0;
    let outcome = rewrite(&src, &shard, &p, &dst, digests, &mut |n| seen += n).unwrap();
    assert_eq!(seen, shard.header.data_len());
    let written = std::fs::read(&dst).unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(std::result::Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(TEMP_SUFFIX))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind");
    (original, written, outcome, p)
}

fn hostile() -> Vec<SynthTensor> {
    vec![
        SynthTensor::filled("a", "U8", &[3]),
        SynthTensor::filled("b", "F32", &[5]),
        SynthTensor::filled("c", "U8", &[10]),
        SynthTensor::filled("d", "F16", &[7]),
        SynthTensor::filled("e", "U8", &[1]),
        SynthTensor::filled("f", "I64", &[3]),
        SynthTensor::filled("g", "U8", &[6]),
        SynthTensor::filled("h", "BF16", &[0, 4]),
    ]
}

#[test]
fn relayout_moves_tensors_and_keeps_their_bytes() {
    let (original, written, outcome, p) = run(&hostile(), 8, false, Digests::All);
    assert_eq!(p.method, Method::Relayout);
    assert_eq!(tensors_of(&original), tensors_of(&written));
    let h = header::parse(&written, written.len() as u64).unwrap();
    assert_eq!(classify(&h, Alignment::DEFAULT).verdict, Verdict::Aligned);
    assert_eq!(outcome.hashes, expected(&original, &written, Digests::All, Method::Relayout));
    assert_eq!(outcome.bytes_written, written.len() as u64);
}

/// Computes every digest a digest set promises, here from whole files.
fn expected(original: &[u8], written: &[u8], digests: Digests, method: Method) -> ShardHashes {
    let all = digests == Digests::All;
    let src_h = header::parse(original, original.len() as u64).unwrap();
    let new_h = header::parse(written, written.len() as u64).unwrap();
    let src_payload = sha256_hex(&original[src_h.data_start() as usize..]);
    let at = src_h.data_start() as usize;
    let tensors = src_h.tensors.iter().map(|t| sha256_hex(&original[at + t.begin as usize..at + t.end as usize]));
    ShardHashes {
        src_file_sha256: all.then(|| sha256_hex(original)),
        src_payload_sha256: (all || method != Method::Relayout).then_some(src_payload),
        new_file_sha256: all.then(|| sha256_hex(written)),
        new_payload_sha256: sha256_hex(&written[new_h.data_start() as usize..]),
        tensor_sha256: (all || method == Method::Relayout).then(|| tensors.collect()),
    }
}

#[test]
fn each_digest_set_computes_what_it_promises_and_nothing_else() {
    let padded_only = vec![SynthTensor::filled("w", "U32", &[6]), SynthTensor::filled("b", "U8", &[3])];
    for tensors in [hostile(), padded_only] {
        for digests in [Digests::Minimal, Digests::All] {
            let (original, written, outcome, p) = run(&tensors, 8, false, digests);
            assert_eq!(outcome.hashes, expected(&original, &written, digests, p.method), "{:?} {digests:?}", p.method);
            assert_eq!(tensors_of(&original), tensors_of(&written), "{:?} {digests:?}", p.method);
        }
    }
}

#[test]
fn header_pad_in_place_changes_only_the_header() {
    let t: Vec<_> = (1..9)
        .map(|n| vec![SynthTensor::filled(&"w".repeat(n), "F32", &[6]), SynthTensor::filled("x", "U32", &[2])])
        .find(|t| {
            let b = write_mlx_style(t, Some("mlx"));
            !header::parse(&b, b.len() as u64).unwrap().data_start().is_multiple_of(4)
        })
        .unwrap();
    let (original, written, outcome, p) = run(&t, 8, true, Digests::Minimal);
    assert_eq!(p.method, Method::HeaderPad);
    let (src_start, dst_start) = (original.len() - 32, written.len() - 32);
    assert_eq!(original[src_start..], written[dst_start..], "payload byte for byte");
    assert_eq!(outcome.hashes.src_payload_sha256.as_ref(), Some(&outcome.hashes.new_payload_sha256));
    assert_eq!(dst_start % 8, 0);
}

#[test]
fn page_alignment_relayout() {
    let (original, written, _, p) = run(&hostile(), 16384, false, Digests::Minimal);
    assert_eq!(p.data_start() % 16384, 0);
    assert_eq!(tensors_of(&original), tensors_of(&written));
}

#[test]
fn a_failed_write_leaves_the_destination_alone() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("model.safetensors");
    std::fs::write(&src, write_mlx_style(&hostile(), None)).unwrap();
    let shard = read_shard_header(&src).unwrap();
    let p = plan(&shard.header, &shard.raw_json, Alignment::DEFAULT).unwrap();
    let missing_dir = dir.path().join("nope/out.safetensors");
    let err = rewrite(&src, &shard, &p, &missing_dir, Digests::Minimal, &mut |_| {}).unwrap_err();
    assert!(matches!(&err, RewriteError::Io(e) if e.op == "create temporary file"), "{err}");
    // A source that changed since its header was read is refused, not half-copied.
    std::fs::write(&src, b"short").unwrap();
    let err = rewrite(&src, &shard, &p, &src, Digests::Minimal, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("changed size"), "{err}");
    assert_eq!(std::fs::read(&src).unwrap(), b"short");
}

#[cfg(unix)]
#[test]
fn the_result_keeps_the_source_mode() {
    use std::os::unix::fs::PermissionsExt;
    let padded_only = vec![SynthTensor::filled("w", "U32", &[6]), SynthTensor::filled("b", "U8", &[3])];
    for (tensors, in_place) in
        [(hostile(), false), (hostile(), true), (padded_only.clone(), false), (padded_only, true)]
    {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("model.safetensors");
        std::fs::write(&src, write_mlx_style(&tensors, Some("mlx"))).unwrap();
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o640)).unwrap();
        let shard = read_shard_header(&src).unwrap();
        let p = plan(&shard.header, &shard.raw_json, Alignment::DEFAULT).unwrap();
        let dst = if in_place { src.clone() } else { dir.path().join("out.safetensors") };
        rewrite(&src, &shard, &p, &dst, Digests::Minimal, &mut |_| {}).unwrap();
        let mode = std::fs::metadata(&dst).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640, "{:?}, in place: {in_place}", p.method);
    }
}
