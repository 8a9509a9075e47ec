use super::*;

fn file(json: &str, data_len: usize) -> Vec<u8> {
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend(std::iter::repeat_n(0xAB, data_len));
    out
}

fn parse_all(bytes: &[u8]) -> Result<Header, HeaderError> {
    parse(bytes, bytes.len() as u64)
}

const TWO: &str = r#"{"__metadata__":{"format":"mlx"},"a":{"data_offsets":[4,28],"dtype":"F32","shape":[2,3]},"b":{"data_offsets":[0,4],"dtype":"U8","shape":[4]}}"#;

#[test]
fn parses_mlx_style_header_in_data_order() {
    let h = parse_all(&file(TWO, 28)).unwrap();
    assert_eq!(h.header_len, TWO.len() as u64);
    assert_eq!(h.data_start(), 8 + TWO.len() as u64);
    assert_eq!(h.writer(), Some("mlx"));
    let names: Vec<_> = h.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["b", "a"], "sorted by offsets, not key order");
    assert_eq!(h.tensors[1].dtype, Dtype::F32);
    assert_eq!(h.tensors[1].shape, [2, 3]);
}

#[test]
fn works_from_a_prefix_and_says_how_much_more_it_needs() {
    let bytes = file(TWO, 28);
    let total = bytes.len() as u64;
    let h = parse(&bytes[..8 + TWO.len()], total).unwrap();
    assert_eq!(h.file_size, total);
    assert_eq!(
        parse(&bytes[..40], total),
        Err(HeaderError::Incomplete { needed: 8 + TWO.len() as u64, available: 40 })
    );
}

#[test]
fn whitespace_padding_is_accepted_both_sides() {
    for json in [format!("{TWO}     "), format!("  \n{TWO}"), format!("{TWO}\r \t\n")] {
        let h = parse_all(&file(&json, 28)).unwrap();
        assert_eq!(h.header_len, json.len() as u64);
    }
}

#[test]
fn null_and_absent_metadata() {
    let null = r#"{"__metadata__":null,"x":{"dtype":"BOOL","shape":[],"data_offsets":[0,1]}}"#;
    assert_eq!(parse_all(&file(null, 1)).unwrap().metadata, HeaderMetadata::Null);
    let absent = r#"{"x":{"dtype":"BOOL","shape":[],"data_offsets":[0,1]}}"#;
    let h = parse_all(&file(absent, 1)).unwrap();
    assert_eq!(h.metadata, HeaderMetadata::Absent);
    assert_eq!(h.writer(), None);
}

#[test]
fn empty_header_and_zero_length_tensors() {
    assert!(parse_all(&file("{}", 0)).unwrap().tensors.is_empty());
    let json = r#"{"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    let h = parse_all(&file(json, 4)).unwrap();
    assert_eq!(h.tensors[1].name, "e");
}

#[test]
fn extra_tensor_fields_are_kept() {
    let json = r#"{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"foo":1}}"#;
    let h = parse_all(&file(json, 1)).unwrap();
    assert_eq!(h.tensors[0].extra.get("foo"), Some(&Value::from(1)));
}

#[test]
fn sub_byte_types_must_fill_bytes() {
    let ok = r#"{"x":{"dtype":"F4","shape":[6],"data_offsets":[0,3]}}"#;
    assert!(parse_all(&file(ok, 3)).is_ok());
    let bad = r#"{"x":{"dtype":"F6_E3M2","shape":[3],"data_offsets":[0,2]}}"#;
    assert_eq!(
        parse_all(&file(bad, 2)),
        Err(HeaderError::PartialByte { tensor: "x".into(), dtype: "F6_E3M2", bits: 18 })
    );
}

#[test]
fn every_reference_dtype_is_accepted() {
    for d in Dtype::ALL {
        let json = format!(r#"{{"x":{{"dtype":"{d}","shape":[8],"data_offsets":[0,{}]}}}}"#, d.bits());
        let h = parse_all(&file(&json, d.bits() as usize)).unwrap();
        assert_eq!(h.tensors[0].dtype, d);
    }
}

fn err(json: &str, data_len: usize) -> HeaderError {
    parse_all(&file(json, data_len)).unwrap_err()
}

#[test]
fn length_prefix_rules() {
    assert_eq!(parse(&[1, 2, 3], 3), Err(HeaderError::TooSmall { file_size: 3 }));
    let mut huge = 100_000_001u64.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert_eq!(parse_all(&huge), Err(HeaderError::TooLarge { header_len: 100_000_001 }));
    let mut beyond = 50u64.to_le_bytes().to_vec();
    beyond.extend_from_slice(b"{}");
    assert_eq!(parse_all(&beyond), Err(HeaderError::BeyondFile { header_len: 50, file_size: 10 }));
}

#[test]
fn the_cap_itself_is_accepted_by_the_length_check() {
    let mut exact = 100_000_000u64.to_le_bytes().to_vec();
    exact.extend_from_slice(b"{}");
    assert_eq!(read_header_len(&exact, 200_000_000), Ok(100_000_000), "the reference accepts N == 100,000,000");
}

#[test]
fn json_rules() {
    assert!(matches!(err("{,}", 0), HeaderError::Json { .. }));
    assert!(matches!(err("{\"x\":", 0), HeaderError::TensorEntry { .. }));
    assert!(matches!(err("[1,2]", 0), HeaderError::Json { .. }));
    assert!(matches!(err("{}\0\0", 0), HeaderError::Json { .. }), "NUL padding is rejected");
    let mut bad_utf8 = 3u64.to_le_bytes().to_vec();
    bad_utf8.extend_from_slice(&[b'{', 0xFF, b'}']);
    assert_eq!(parse_all(&bad_utf8), Err(HeaderError::NotUtf8 { valid_up_to: 1 }));
}

#[test]
fn entry_rules_name_the_tensor() {
    let unknown = r#"{"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}"#;
    assert_eq!(err(unknown, 16), HeaderError::UnknownDtype { tensor: "w".into(), dtype: "F128".into() });
    let three = r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}"#;
    assert!(matches!(err(three, 1), HeaderError::TensorEntry { tensor, .. } if tensor == "w"));
    let negative = r#"{"w":{"dtype":"U8","shape":[-3],"data_offsets":[0,1]}}"#;
    assert!(matches!(err(negative, 1), HeaderError::TensorEntry { tensor, .. } if tensor == "w"));
    let missing = r#"{"w":{"dtype":"U8","data_offsets":[0,1]}}"#;
    assert!(matches!(err(missing, 1), HeaderError::TensorEntry { tensor, .. } if tensor == "w"));
}

#[test]
fn metadata_rules() {
    let numeric = r#"{"__metadata__":{"x":1}}"#;
    assert!(matches!(err(numeric, 0), HeaderError::Metadata { .. }));
    let list = r#"{"__metadata__":[]}"#;
    assert!(matches!(err(list, 0), HeaderError::Metadata { .. }));
}

#[test]
fn duplicate_keys_are_refused() {
    let dup =
        r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
    assert_eq!(err(dup, 2), HeaderError::DuplicateKey { key: "a".into() });
}

#[test]
fn offset_walk_rules() {
    let gap =
        r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}"#;
    assert_eq!(err(gap, 4), HeaderError::Gap { tensor: "b".into(), expected: 1, begin: 3 });
    let leading_gap = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}"#;
    assert_eq!(err(leading_gap, 3), HeaderError::Gap { tensor: "a".into(), expected: 0, begin: 2 });
    let overlap =
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#;
    assert_eq!(err(overlap, 3), HeaderError::Overlap { tensor: "b".into(), expected: 2, begin: 1 });
    let reversed = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[2,0]}}"#;
    assert!(matches!(err(reversed, 0), HeaderError::ReversedOffsets { .. }));
    let mismatch = r#"{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}"#;
    assert_eq!(err(mismatch, 20), HeaderError::SpanMismatch { tensor: "a".into(), expected: 24, actual: 20 });
    let overflow = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#;
    assert!(matches!(err(overflow, 4), HeaderError::ShapeOverflow { .. }));
}

#[test]
fn data_must_be_covered_exactly() {
    let one = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
    assert_eq!(err(one, 2), HeaderError::Truncated { indexed: 4, present: 2 });
    assert_eq!(err(one, 9), HeaderError::TrailingBytes { indexed: 4, present: 9 });
}
