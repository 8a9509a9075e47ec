//! Repairs a shard while it downloads, so its bytes are written once and the source is not kept.
//!
//! The writer thread of a download feeds [`StreamRepair`] every byte as it arrives. Once the length prefix
//! and the header are in, it parses them strictly and plans the layout.
//!
//! A shard that header padding fixes gets its repaired file written from then on. The new prefix goes first,
//! then the payload as it streams, past the page cache. Two digests come from the same bytes, in step on one
//! core. The source's SHA-256 is checked against the Hub's LFS oid. The payload's goes in the manifest and
//! proves every tensor.
//!
//! A shard that needs a reorder has each tensor's bytes written at its new offset as they arrive.
//! Each tensor's digest is taken beside the source's. The new file's digests are the payload's and the whole
//! file's, which the upload names. They are taken as the bytes land in the new order. Where a tensor landed
//! ahead of its place, its bytes are read back (`new_file_digest`).
//!
//! Of the source, only a stub as long as the file is kept. The header and the first [`STUB_HEAD`] bytes
//! after it are real, and the rest is a hole. No later step reads more of it: the re-layout and the card's
//! audit read its header, and the upload's deduplication reads its first chunk.
//! Any other shard is written whole: one no loader copies from, or one whose header does not parse.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[cfg(unix)]
use self::new_file_digest::NewFileDigests;
use crate::fix::StreamedRecord;
use crate::hashing::{Sha256Stream, update_both};
use crate::manifest::ManifestShard;
use crate::safetensors::direct::DirectWriter;
use crate::safetensors::header::{self, LEN_PREFIX, MAX_HEADER_LEN};
use crate::safetensors::plan::{LayoutPlan, plan};
use crate::safetensors::read::ShardHeader;
use crate::safetensors::rewrite::{Digests, ShardHashes, TEMP_SUFFIX};
use crate::safetensors::{Alignment, Method, classify};

/// The largest header held in memory while a shard streams; real MLX headers are a few MB.
/// A larger one, up to the format's 100 MB, makes the shard download whole.
/// So several transfers at once stay bounded.
pub(crate) const STREAM_HEADER_CAP: u64 = 16 << 20;

/// Real bytes a stub keeps after the header. The upload's deduplication reads a file's first 256 KiB for its
/// first content-defined chunk, which is at most 128 KiB.
pub(crate) const STUB_HEAD: u64 = 256 << 10;

/// Where and how a shard is repaired as it streams.
#[derive(Debug, Clone)]
pub struct RepairTarget {
    /// The directory repaired shards and their records go to.
    pub dir: PathBuf,
    /// The data-section alignment.
    pub alignment: Alignment,
}

/// A repaired shard, staged: persisted only once the source's digest matches the Hub's.
pub(crate) struct Repaired {
    temp: tempfile::NamedTempFile,
    entry: ManifestShard,
    hashed: Option<crate::safe_fs::FileId>,
}

/// A streamed file's end: the source's SHA-256 and how the file was written.
/// The SHA-256 must match the Hub's before anything is kept.
pub(crate) struct StreamEnd {
    /// The source's SHA-256, as it streamed.
    pub source_sha256: String,
    /// How it was written.
    pub streamed: Streamed,
}

/// How a streamed file was written.
pub(crate) enum Streamed {
    /// Header-padded while it streamed; the partial file holds the stub.
    Repaired(Box<Repaired>),
    /// Written whole into the partial file.
    Whole,
}

enum State {
    Header(Vec<u8>),
    Repairing(Box<Repairing>),
    Whole,
}

struct Repairing {
    shard: ShardHeader,
    plan: LayoutPlan,
    temp: tempfile::NamedTempFile,
    writes: Writes,
    payload_seen: u64,
    unaligned_before: u64,
}

/// How the repaired file is written, and the digest taken from the streaming source beside the source's.
enum Writes {
    /// Header padding: the payload as it comes, past the page cache; its digest is the manifest's.
    Padded { writer: DirectWriter, payload: Sha256Stream },
    /// A reorder. Each tensor's bytes go to their new offset as they come, and each tensor's digest is taken.
    /// The new file's digests are taken as its bytes land (`new_file_digest`).
    #[cfg(unix)]
    Moved { out: File, spans: crate::hashing::SpanHasher, order: Vec<usize>, new_file_digests: Box<NewFileDigests> },
}

/// The writer side of one streamed shard: every byte of the source goes through [`StreamRepair::push`].
pub(crate) struct StreamRepair {
    name: String,
    size: u64,
    target: RepairTarget,
    partial: io::BufWriter<File>,
    source: Sha256Stream,
    kept: u64,
    state: State,
    started: Instant,
}

impl StreamRepair {
    /// Starts on `partial` (empty, open for writing) for the source `name` of `size` bytes.
    pub(crate) fn new(name: &str, size: u64, target: RepairTarget, partial: File) -> StreamRepair {
        StreamRepair {
            name: name.to_owned(),
            size,
            target,
            partial: io::BufWriter::with_capacity(1 << 20, partial),
            source: Sha256Stream::default(),
            kept: 0,
            state: State::Header(Vec::new()),
            started: Instant::now(),
        }
    }

    /// Takes the next bytes of the source.
    pub(crate) fn push(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.state {
            State::Header(head) => {
                self.source.update(data);
                head.extend_from_slice(data);
                let head = std::mem::take(head);
                self.after_head(head)
            }
            State::Whole => {
                self.source.update(data);
                self.partial.write_all(data)
            }
            State::Repairing(r) => {
                r.take(data, Some(&mut self.source))?;
                let data_start = r.shard.header.data_start();
                let keep = stub_part(self.kept, data_start, data);
                self.partial.write_all(keep)?;
                self.kept += keep.len() as u64;
                Ok(())
            }
        }
    }

    /// Given the bytes so far, all hashed already, waits for more or decides how the shard is written.
    fn after_head(&mut self, head: Vec<u8>) -> io::Result<()> {
        let Some(prefix) = head.get(..LEN_PREFIX as usize) else {
            self.state = State::Header(head);
            return Ok(());
        };
        let n = u64::from_le_bytes(prefix.try_into().unwrap_or_default());
        let end = LEN_PREFIX.saturating_add(n);
        if n > MAX_HEADER_LEN.min(STREAM_HEADER_CAP) || end > self.size {
            return self.whole(&head);
        }
        if (head.len() as u64) < end {
            self.state = State::Header(head);
            return Ok(());
        }
        match self.plan_repair(&head[..end as usize]) {
            Some(mut r) => {
                let rest = &head[end as usize..];
                // The source's digest has these bytes already.
                r.take(rest, None)?;
                let keep = &head[..(end + STUB_HEAD).min(head.len() as u64) as usize];
                self.partial.write_all(keep)?;
                self.kept = keep.len() as u64;
                self.state = State::Repairing(Box::new(r));
                Ok(())
            }
            None => self.whole(&head),
        }
    }

    fn whole(&mut self, head: &[u8]) -> io::Result<()> {
        self.state = State::Whole;
        self.partial.write_all(head)
    }

    /// Plans the repair of a shard whose header is `prefix`, when header padding or a reorder fixes it.
    fn plan_repair(&self, prefix: &[u8]) -> Option<Repairing> {
        let parsed = header::parse(prefix, self.size).ok()?;
        let raw_json = prefix[LEN_PREFIX as usize..].to_vec();
        let planned = plan(&parsed, &raw_json, self.target.alignment).ok()?;
        if !matches!(planned.method, Method::HeaderPad | Method::Relayout)
            || (cfg!(not(unix)) && planned.method == Method::Relayout)
        {
            return None;
        }
        let unaligned_before = classify(&parsed, self.target.alignment).misaligned_tensors;
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{}.", self.name))
            .suffix(TEMP_SUFFIX)
            .tempfile_in(&self.target.dir)
            .ok()?;
        let new_prefix = planned.prefix();
        let writes = if planned.keeps_payload() {
            let mut writer = DirectWriter::new(temp.path(), temp.reopen().ok()?, true);
            writer.write(&new_prefix).ok()?;
            Writes::Padded { writer, payload: Sha256Stream::default() }
        } else {
            moved(&temp, &new_prefix, &parsed, &planned)?
        };
        let shard = ShardHeader { header: parsed, raw_json, bytes_read: prefix.len() as u64 };
        Some(Repairing { shard, plan: planned, temp, writes, payload_seen: 0, unaligned_before })
    }

    /// Ends the stream. A stub is extended to the source's length, as a hole.
    pub(crate) fn finish(mut self) -> io::Result<StreamEnd> {
        let state = std::mem::replace(&mut self.state, State::Whole);
        let streamed = match state {
            State::Header(head) => {
                self.partial.write_all(&head)?;
                Streamed::Whole
            }
            State::Whole => Streamed::Whole,
            State::Repairing(r) => {
                let Repairing { shard, plan, temp, writes, payload_seen, unaligned_before } = *r;
                if payload_seen != shard.header.data_len() {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the source ended early"));
                }
                let hashes = writes.finish(&plan)?;
                temp.as_file().sync_all()?;
                // Records the file its whole digest was taken from, if one was.
                // The upload names that digest only while the file is still this one.
                let hashed = hashes.new_file_sha256.as_ref().and_then(|_| crate::safe_fs::FileId::of(temp.path()));
                let seconds = self.started.elapsed().as_secs_f64();
                let entry =
                    crate::fix::manifest_entry(self.name.clone(), &shard, &plan, unaligned_before, hashes, seconds);
                debug_assert_eq!(Digests::default(), Digests::Minimal, "the streamed record is the minimal set");
                Streamed::Repaired(Box::new(Repaired { temp, entry, hashed }))
            }
        };
        let file = self.partial.into_inner().map_err(io::IntoInnerError::into_error)?;
        if matches!(streamed, Streamed::Repaired(_)) {
            file.set_len(self.size)?;
        }
        Ok(StreamEnd { source_sha256: self.source.finish_hex(), streamed })
    }
}

impl Repairing {
    /// Hashes the next payload bytes, beside `source` unless it has them already.
    /// Writes them where they go.
    fn take(&mut self, data: &[u8], source: Option<&mut Sha256Stream>) -> io::Result<()> {
        let at = self.payload_seen;
        self.payload_seen += data.len() as u64;
        match &mut self.writes {
            Writes::Padded { writer, payload } => {
                match source {
                    Some(source) => update_both(source, data, payload, data),
                    None => payload.update(data),
                }
                writer.write(data)
            }
            #[cfg(unix)]
            Writes::Moved { out, spans, order, new_file_digests } => {
                use std::os::unix::fs::FileExt;
                match source {
                    Some(source) => spans.update_with(data, source),
                    None => spans.update(data),
                }
                let start = self.plan.data_start();
                let placements = &self.plan.placements;
                // The tensors `data` overlaps, in source order (they tile the payload).
                let first = order.partition_point(|&i| placements[i].src_begin + placements[i].len <= at);
                let end = at + data.len() as u64;
                for &i in order[first..].iter().take_while(|&&i| placements[i].src_begin < end) {
                    let p = &placements[i];
                    let (from, to) = (p.src_begin.max(at), (p.src_begin + p.len).min(end));
                    let piece = &data[(from - at) as usize..(to - at) as usize];
                    let dst = p.dst_begin + (from - p.src_begin);
                    out.write_all_at(piece, start + dst)?;
                    new_file_digests.landed(out, &self.plan, dst, piece)?;
                }
                new_file_digests.after(out, &self.plan, end)
            }
        }
    }
}

impl Writes {
    /// Ends the writes, and returns the digests the record carries.
    fn finish(self, plan: &LayoutPlan) -> io::Result<ShardHashes> {
        match self {
            Writes::Padded { writer, payload } => {
                writer.finish()?;
                let payload = payload.finish_hex();
                Ok(ShardHashes {
                    src_file_sha256: None,
                    src_payload_sha256: Some(payload.clone()),
                    new_file_sha256: None,
                    new_payload_sha256: payload,
                    tensor_sha256: None,
                })
            }
            #[cfg(unix)]
            Writes::Moved { out, spans, new_file_digests, .. } => {
                let tensors = spans.finish().ok_or_else(|| io::Error::other("a tensor ended early"))?;
                let digests = new_file_digests.finish(&out, plan)?;
                Ok(ShardHashes {
                    src_file_sha256: None,
                    src_payload_sha256: None,
                    new_file_sha256: Some(digests.file),
                    new_payload_sha256: digests.payload,
                    tensor_sha256: Some(tensors),
                })
            }
        }
    }
}

/// Sets up the writes of a reorder into `temp`: the new prefix first, then the tensors at their offsets.
#[cfg(unix)]
fn moved(
    temp: &tempfile::NamedTempFile,
    prefix: &[u8],
    header: &crate::safetensors::Header,
    plan: &LayoutPlan,
) -> Option<Writes> {
    let mut out = temp.reopen().ok()?;
    out.write_all(prefix).ok()?;
    let len = plan.data_start().checked_add(header.data_len())?;
    out.set_len(len).ok()?;
    let spans = crate::hashing::SpanHasher::new(
        header.tensors.iter().map(crate::safetensors::header::TensorInfo::byte_len).collect(),
    );
    let mut order: Vec<usize> = (0..plan.placements.len()).collect();
    order.sort_by_key(|&i| plan.placements[i].src_begin);
    let new_file_digests = Box::new(NewFileDigests::new(plan, prefix));
    Some(Writes::Moved { out, spans, order, new_file_digests })
}

#[cfg(not(unix))]
fn moved(_: &tempfile::NamedTempFile, _: &[u8], _: &crate::safetensors::Header, _: &LayoutPlan) -> Option<Writes> {
    None
}

impl Repaired {
    /// Puts the repaired shard and its record in place, once the source matched the Hub's `lfs_oid`.
    pub(crate) fn keep(self, dir: &Path, lfs_oid: &str) -> io::Result<()> {
        let record = StreamedRecord { lfs_oid: lfs_oid.to_owned(), entry: self.entry, hashed: self.hashed };
        let file = record.entry.file.clone();
        crate::safe_fs::clear_for_write(&dir.join(&file))?;
        self.temp.persist(dir.join(&file)).map_err(|e| e.error)?;
        let json = serde_json::to_vec(&record).map_err(io::Error::other)?;
        let path = StreamedRecord::path(dir, &file);
        crate::safe_fs::clear_for_write(&path)?;
        crate::safe_fs::write_atomic(&path, &json)?;
        Ok(())
    }
}

/// The part of `data` that a stub still keeps: everything up to [`STUB_HEAD`] bytes past the data start.
/// `data` is the source from byte `kept` on, in the payload.
fn stub_part(kept: u64, data_start: u64, data: &[u8]) -> &[u8] {
    let limit = data_start.saturating_add(STUB_HEAD);
    let room = limit.saturating_sub(kept);
    &data[..(room.min(data.len() as u64)) as usize]
}

#[cfg(unix)]
mod new_file_digest;
#[cfg(test)]
mod tests;
