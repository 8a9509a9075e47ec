//! Any bytes: the strict parser never panics; a header it accepts reads the same from a prefix, and every
//! plan made from it yields a header that parses again, holds the same tensors and is fully aligned.

#![no_main]

use hubalign::safetensors::plan::plan;
use hubalign::safetensors::{Alignment, HeaderError, Verdict, classify, header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let size = data.len() as u64;
    let parsed = header::parse(data, size);
    let Ok(h) = parsed else {
        if let Err(HeaderError::Incomplete { .. }) = parsed {
            panic!("a whole file can never be an incomplete prefix");
        }
        return;
    };
    let cut = h.data_start() as usize;
    assert_eq!(header::parse(&data[..cut], size).as_ref(), Ok(&h));
    if cut > 8 {
        assert!(matches!(header::parse(&data[..cut - 1], size), Err(HeaderError::Incomplete { .. })));
    }
    let raw = &data[8..cut];
    for target in [1, 8, 4096] {
        let Some(alignment) = Alignment::new(target) else { continue };
        let Ok(p) = plan(&h, raw, alignment) else { continue };
        let mut out = p.header_len().to_le_bytes().to_vec();
        out.extend_from_slice(&p.header);
        out.resize(out.len() + h.data_len() as usize, 0);
        let planned = header::parse(&out, out.len() as u64).expect("a planned header is valid");
        assert_eq!(classify(&planned, alignment).verdict, Verdict::Aligned);
        assert_eq!(planned.tensors.len(), h.tensors.len());
        assert_eq!(planned.metadata, h.metadata);
    }
});
