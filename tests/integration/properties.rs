//! Property tests: any valid tensor set, planned and rewritten, is aligned, strictly valid and bit-identical.

use hubalign::safetensors::plan::plan;
use hubalign::safetensors::read::read_shard_header;
use hubalign::safetensors::rewrite::{Digests, rewrite};
use hubalign::safetensors::{Alignment, Dtype, Method, Verdict, classify};
use hubalign_test_support::synth::{SynthTensor, write_mlx_style};
use proptest::prelude::*;

fn tensor_set() -> impl Strategy<Value = Vec<SynthTensor>> {
    let one = (0..Dtype::ALL.len(), prop::collection::vec(0u64..6, 0..3));
    prop::collection::vec(one, 0..12).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (d, mut shape))| {
                let dtype = Dtype::ALL[d];
                // Sub-byte types must fill whole bytes: scale the element count to a multiple of 4.
                if !dtype.bits().is_multiple_of(8) {
                    shape.push(4);
                }
                SynthTensor::filled(&format!("t{i}.{}", dtype.name().to_lowercase()), dtype.name(), &shape)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn rewrite_aligns_everything_and_keeps_every_byte(
        tensors in tensor_set(),
        meta in prop::option::of("[a-z]{0,9}"),
        align_pow in 0u32..15,
        all_digests in any::<bool>(),
    ) {
        let target = Alignment::new(1 << align_pow).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("in.safetensors");
        let dst = dir.path().join("out.safetensors");
        let original = write_mlx_style(&tensors, meta.as_deref());
        std::fs::write(&src, &original).unwrap();
        let shard = read_shard_header(&src).unwrap();
        let p = plan(&shard.header, &shard.raw_json, target).unwrap();
        let digests = if all_digests { Digests::All } else { Digests::Minimal };
        let outcome = rewrite(&src, &shard, &p, &dst, digests, &mut |_| {}).unwrap();

        let written = read_shard_header(&dst).expect("the strict parser accepts the result");
        let audit = classify(&written.header, target);
        prop_assert_eq!(audit.misaligned_tensors, 0);
        prop_assert_eq!(audit.verdict, Verdict::Aligned);
        prop_assert_eq!(written.header.data_start() % target.get(), 0);
        prop_assert_eq!(&written.header.metadata, &shard.header.metadata);
        let bytes = std::fs::read(&dst).unwrap();
        let (old_start, new_start) = (shard.header.data_start() as usize, written.header.data_start() as usize);
        for t in &tensors {
            let old = shard.header.tensors.iter().find(|x| x.name == t.name).unwrap();
            let new = written.header.tensors.iter().find(|x| x.name == t.name).unwrap();
            prop_assert_eq!((new.dtype.name(), &new.shape), (t.dtype, &t.shape));
            prop_assert_eq!(&original[old_start + old.begin as usize..old_start + old.end as usize], &t.data[..]);
            prop_assert_eq!(&bytes[new_start + new.begin as usize..new_start + new.end as usize], &t.data[..]);
        }
        if p.method != Method::Relayout {
            prop_assert_eq!(&bytes[new_start..], &original[old_start..]);
            prop_assert_eq!(Some(&outcome.hashes.new_payload_sha256), outcome.hashes.src_payload_sha256.as_ref());
        }
    }
}
