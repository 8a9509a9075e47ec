use super::*;
use crate::safetensors::header;
use hubalign_test_support::synth::{SynthTensor, write_mlx_style};

fn parsed(t: &[SynthTensor]) -> (Header, Vec<u8>) {
    let bytes = write_mlx_style(t, Some("mlx"));
    let h = header::parse(&bytes, bytes.len() as u64).unwrap();
    let raw = bytes[8..h.data_start() as usize].to_vec();
    (h, raw)
}

#[test]
fn aligned_files_are_left_alone() {
    // Use only byte-wide tensors, and a name long enough to put the data start on 8.
    let (h, raw) = (0..8)
        .map(|n| parsed(&[SynthTensor::filled(&"u".repeat(n + 1), "U8", &[3])]))
        .find(|(h, _)| h.data_start() % 8 == 0)
        .unwrap();
    let p = plan(&h, &raw, Alignment::DEFAULT).unwrap();
    assert_eq!(p.method, Method::Unchanged);
    assert_eq!(p.header, raw);
}

#[test]
fn header_pad_appends_spaces_only() {
    let (h, raw) = (1..9)
        .map(|n| parsed(&[SynthTensor::filled(&"w".repeat(n), "F32", &[2])]))
        .find(|(h, _)| h.data_start() % 4 != 0)
        .unwrap();
    let p = plan(&h, &raw, Alignment::DEFAULT).unwrap();
    assert_eq!(p.method, Method::HeaderPad);
    assert_eq!(&p.header[..raw.len()], &raw[..]);
    assert!(p.header[raw.len()..].iter().all(|&b| b == b' '));
    assert_eq!(p.data_start() % 8, 0);
    assert_eq!(p.padding_bytes, p.header_len() - raw.len() as u64);
    assert!(p.padding_bytes < 8);
    assert!(p.keeps_payload());
}

#[test]
fn relayout_orders_widest_first_stably_and_keeps_everything_else() {
    let t = [
        SynthTensor::filled("a", "U8", &[3]),
        SynthTensor::filled("b", "F32", &[5]),
        SynthTensor::filled("c", "BF16", &[7]),
        SynthTensor::filled("d", "I64", &[3]),
        SynthTensor::filled("e", "F32", &[1]),
    ];
    let (h, raw) = parsed(&t);
    let p = plan(&h, &raw, Alignment::DEFAULT).unwrap();
    assert_eq!(p.method, Method::Relayout);
    let by_dst: Vec<&str> = {
        let mut v: Vec<_> = h.tensors.iter().zip(&p.placements).collect();
        v.sort_by_key(|(_, pl)| pl.dst_begin);
        v.into_iter().map(|(t, _)| t.name.as_str()).collect()
    };
    assert_eq!(by_dst, ["d", "b", "e", "c", "a"]);
    let data_len: u64 = p.placements.iter().map(|pl| pl.len).sum();
    let mut new_file = (p.header_len()).to_le_bytes().to_vec();
    new_file.extend_from_slice(&p.header);
    new_file.resize(new_file.len() + data_len as usize, 0);
    let nh = header::parse(&new_file, new_file.len() as u64).unwrap();
    assert_eq!(nh.metadata, h.metadata);
    assert_eq!(classify(&nh, Alignment::DEFAULT).verdict, Verdict::Aligned);
    for t in &h.tensors {
        let n = nh.tensors.iter().find(|n| n.name == t.name).unwrap();
        assert_eq!((n.dtype, &n.shape, n.byte_len()), (t.dtype, &t.shape, t.byte_len()));
    }
}

#[test]
fn page_alignment_and_narrow_targets() {
    let t = [SynthTensor::filled("a", "U8", &[3]), SynthTensor::filled("b", "F64", &[2])];
    let (h, raw) = parsed(&t);
    let page = plan(&h, &raw, Alignment::new(16384).unwrap()).unwrap();
    assert_eq!(page.data_start() % 16384, 0);
    let narrow = plan(&h, &raw, Alignment::new(2).unwrap()).unwrap();
    assert_eq!(narrow.data_alignment, 8, "an F64 needs 8 whatever the target");
    assert_eq!(narrow.data_start() % 8, 0);
}

#[test]
fn padding_never_reaches_the_mlx_limit() {
    assert_eq!(
        pad(vec![b'{'; 99_999_995], 8).map(|(_, p)| p),
        Err(PlanError::HeaderTooLarge { header_len: 100_000_000 })
    );
    assert!(pad(vec![b'{'; 99_999_984], 8).is_ok());
}
