//! Takes the digests of a reordered shard's new file as its bytes land in the new order.
//!
//! The new file is written tensor by tensor in the source's order, each at its new offset.
//! The new layout puts the widest tensors first, in the source's order among themselves.
//! So most pieces land right where the new file's digests have reached. They are hashed from the bytes
//! just written, with no second look.
//! A tensor may land ahead of that point, such as a narrow one the source holds between wide ones.
//! It is hashed once every tensor up to and including it has arrived. Then the stretch it is in is read
//! back from the page cache it was written to.
//! Both digests are taken in step: the payload's, for the manifest, and the whole file's, the LFS oid the
//! upload names. So the download's end leaves only what was ahead of its place to read.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::hashing::{Sha256Stream, update_both};
use crate::safetensors::plan::LayoutPlan;

/// Final bytes gathered before they are read back: reads of a few MB, not one per network read.
const STRETCH: u64 = 8 << 20;
/// Bytes read back at a time.
const READ: usize = 1 << 20;

/// Both digests of the new file, as far as its bytes in the new order have landed.
pub(super) struct NewFileDigests {
    /// Tensor indices in the new file's order.
    by_dst: Vec<usize>,
    /// How many of `by_dst` are final: every byte of them written.
    finals: usize,
    /// The new payload's length.
    len: u64,
    /// Payload bytes hashed so far, in the new order.
    hashed: u64,
    file: Sha256Stream,
    payload: Sha256Stream,
    buf: Vec<u8>,
    /// Payload bytes read back: those of tensors that landed ahead of their place.
    read_back: u64,
}

/// The SHA-256 digests of a reordered shard's new file.
pub(super) struct NewFileSha256 {
    /// Of the whole file: the LFS oid the upload names.
    pub(super) file: String,
    /// Of its payload: the manifest's.
    pub(super) payload: String,
}

impl NewFileDigests {
    /// Starts on the new file `plan` lays out. Its `prefix`, `N` and the header, is written already, and
    /// the file's digest takes it first.
    pub(super) fn new(plan: &LayoutPlan, prefix: &[u8]) -> NewFileDigests {
        let mut by_dst: Vec<usize> = (0..plan.placements.len()).collect();
        by_dst.sort_by_key(|&i| plan.placements[i].dst_begin);
        let file = Sha256Stream::with_prefix(prefix);
        let len = plan.placements.iter().map(|p| p.len).sum();
        let payload = Sha256Stream::default();
        NewFileDigests { by_dst, finals: 0, len, hashed: 0, file, payload, buf: Vec::new(), read_back: 0 }
    }

    /// Takes `bytes`, just written at payload offset `at`, and hashes them now if they come next in the new
    /// file. First it reads back what lies between: whole tensors that landed ahead of their place.
    pub(super) fn landed(&mut self, out: &File, plan: &LayoutPlan, at: u64, bytes: &[u8]) -> io::Result<()> {
        if at > self.hashed && self.ready(plan) >= at {
            self.read_to(out, plan.data_start(), at)?;
        }
        if at == self.hashed {
            update_both(&mut self.file, bytes, &mut self.payload, bytes);
            self.hashed += bytes.len() as u64;
        }
        Ok(())
    }

    /// Where the new file's final bytes end: the start of the first tensor, in its order, not yet whole.
    fn ready(&self, plan: &LayoutPlan) -> u64 {
        self.by_dst.get(self.finals).map_or(self.len, |&i| plan.placements[i].dst_begin)
    }

    /// Notes that the source's payload is in up to byte `arrived`.
    /// Once a stretch of `out` has become final, reads it back and hashes it.
    pub(super) fn after(&mut self, out: &File, plan: &LayoutPlan, arrived: u64) -> io::Result<()> {
        let placements = &plan.placements;
        while let Some(&i) = self.by_dst.get(self.finals)
            && placements[i].src_begin + placements[i].len <= arrived
        {
            self.finals += 1;
        }
        let ready = self.ready(plan);
        if ready.saturating_sub(self.hashed) >= STRETCH {
            self.read_to(out, plan.data_start(), ready)?;
        }
        Ok(())
    }

    /// Reads back and hashes the rest, once the whole payload has arrived.
    /// Returns the whole file's digest and the payload's.
    pub(super) fn finish(mut self, out: &File, plan: &LayoutPlan) -> io::Result<NewFileSha256> {
        self.read_to(out, plan.data_start(), self.len)?;
        Ok(NewFileSha256 { file: self.file.finish_hex(), payload: self.payload.finish_hex() })
    }

    fn read_to(&mut self, out: &File, data_start: u64, to: u64) -> io::Result<()> {
        self.buf.resize(READ, 0);
        while self.hashed < to {
            let n = usize::try_from(to - self.hashed).map_or(READ, |left| left.min(READ));
            let piece = &mut self.buf[..n];
            out.read_exact_at(piece, data_start + self.hashed)?;
            update_both(&mut self.file, piece, &mut self.payload, piece);
            self.hashed += n as u64;
            self.read_back += n as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::sha256_hex;
    use crate::safetensors::Alignment;
    use crate::safetensors::plan::plan;
    use crate::safetensors::read::read_shard_header;
    use crate::safetensors::rewrite::{Digests, rewrite};
    use hubalign_test_support::synth::{SynthTensor, write_mlx_style};

    /// A shard of `tensors` as MLX writes it, fixed by the file-based re-layout. It holds the plan, the
    /// source's payload, the new file's bytes, and the new file open for reading.
    struct Laid {
        plan: LayoutPlan,
        payload: Vec<u8>,
        written: Vec<u8>,
        out: File,
    }

    fn lay_out(dir: &std::path::Path, tensors: &[SynthTensor]) -> Laid {
        let src = dir.join("src.safetensors");
        let source = write_mlx_style(tensors, Some("mlx"));
        std::fs::write(&src, &source).unwrap();
        let shard = read_shard_header(&src).unwrap();
        let laid = plan(&shard.header, &shard.raw_json, Alignment::DEFAULT).unwrap();
        let new = dir.join("new.safetensors");
        rewrite(&src, &shard, &laid, &new, Digests::Minimal, &mut |_| {}).unwrap();
        let payload = source[shard.header.data_start() as usize..].to_vec();
        Laid { plan: laid, payload, written: std::fs::read(&new).unwrap(), out: File::open(&new).unwrap() }
    }

    /// Both digests `digests` ends with are the new file's and its payload's.
    fn ends_right(digests: NewFileDigests, laid: &Laid) {
        let sha256 = digests.finish(&laid.out, &laid.plan).unwrap();
        assert_eq!(sha256.file, sha256_hex(&laid.written));
        assert_eq!(sha256.payload, sha256_hex(&laid.written[laid.plan.data_start() as usize..]));
    }

    #[test]
    fn what_is_final_is_read_back_while_the_rest_still_downloads() {
        let dir = tempfile::tempdir().unwrap();
        // A byte, 16 MiB of F32, five bytes, seven BF16: the F32 goes first in the new file.
        let wide = (16 << 20) / 4 + 1;
        let tensors = vec![
            SynthTensor::filled("a", "U8", &[3]),
            SynthTensor::filled("w", "F32", &[wide]),
            SynthTensor::filled("b", "U8", &[5]),
            SynthTensor::filled("n", "BF16", &[7]),
        ];
        let laid = lay_out(dir.path(), &tensors);

        let w_end = 3 + wide * 4;
        let mut behind = NewFileDigests::new(&laid.plan, &laid.plan.prefix());
        behind.after(&laid.out, &laid.plan, w_end - 1).unwrap();
        assert_eq!(behind.hashed, 0, "the F32 is not all in");
        behind.after(&laid.out, &laid.plan, w_end).unwrap();
        assert_eq!(behind.hashed, wide * 4, "the F32 is final, and read back before the rest arrives");
        ends_right(behind, &laid);
    }

    /// Feeds `behind` the source's payload as the writer does: one network read per tensor, split at 1 MiB.
    /// Each piece lands where the plan puts it, and then `behind` learns how far the payload has arrived.
    fn stream_through(behind: &mut NewFileDigests, laid: &Laid) {
        let (out, payload) = (&laid.out, &laid.payload);
        let laid = &laid.plan;
        let mut order: Vec<_> = laid.placements.iter().collect();
        order.sort_by_key(|p| p.src_begin);
        for p in order {
            for from in (p.src_begin..p.src_begin + p.len).step_by(1 << 20) {
                let to = (from + (1 << 20)).min(p.src_begin + p.len);
                let piece = &payload[from as usize..to as usize];
                behind.landed(out, laid, p.dst_begin + (from - p.src_begin), piece).unwrap();
                behind.after(out, laid, to).unwrap();
            }
        }
    }

    #[test]
    fn bytes_landing_in_order_are_hashed_as_written_and_only_those_ahead_of_their_place_are_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let wide = (12 << 20) / 4 + 1;
        // New order: w1, w2 (F32), n0, n (BF16), a, b (U8). n0 lands ahead of its place.
        // It is read back once w2 is in, just before n. a and b are read back at the end.
        let tensors = vec![
            SynthTensor::filled("a", "U8", &[3]),
            SynthTensor::filled("w1", "F32", &[wide]),
            SynthTensor::filled("n0", "BF16", &[7]),
            SynthTensor::filled("b", "U8", &[5]),
            SynthTensor::filled("w2", "F32", &[wide]),
            SynthTensor::filled("n", "BF16", &[9]),
        ];
        let laid = lay_out(dir.path(), &tensors);

        let mut behind = NewFileDigests::new(&laid.plan, &laid.plan.prefix());
        stream_through(&mut behind, &laid);
        assert_eq!(behind.read_back, 14, "only n0 is read back before the end");
        let left = behind.len - behind.hashed;
        assert_eq!(left, 3 + 5, "a and b are all that is left for the end");
        ends_right(behind, &laid);
    }
}
