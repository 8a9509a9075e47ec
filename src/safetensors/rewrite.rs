//! Rewrites a shard with a new layout in one stream. Memory stays bounded whatever the shard size. Every hash
//! is taken in the same pass, and the result replaces the destination atomically.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use thiserror::Error;

use super::classify::{Alignment, classify};
use super::direct::DirectWriter;
use super::header::LEN_PREFIX;
use super::plan::LayoutPlan;
use super::pump::{Digest, PumpError, Writer, pump};
use super::read::{ShardHeader, read_shard_header};
use crate::hashing::SpanHasher;
use crate::io_error::PathIoError;

/// Suffix of the temporary files the writer leaves only if it is killed.
pub const TEMP_SUFFIX: &str = ".hubalign.tmp";

/// Which digests a rewrite computes. Each one serves a check someone runs, and each is computed in the pass
/// that already reads the bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Digests {
    /// Takes the smallest set that proves the result bit-identical. A header-padded or unchanged shard keeps
    /// its payload and every tensor's offset in it. So the payload's digest proves every tensor. A reordered
    /// shard gets each tensor's digest, checked against the source's, and its new payload's.
    #[default]
    Minimal,
    /// Also takes the source file's, the source payload's, the new file's and each tensor's, whatever the
    /// method. The Hub's LFS oid is checked against the source file's digest. The new file's digest is the
    /// mirror's LFS oid.
    All,
}

/// The hashes of one shard, source and result; `None` where the digest set did not ask for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHashes {
    /// The source file.
    pub src_file_sha256: Option<String>,
    /// The source data section. It equals the written one when the payload is kept.
    pub src_payload_sha256: Option<String>,
    /// The written file (its LFS oid).
    pub new_file_sha256: Option<String>,
    /// The written data section.
    pub new_payload_sha256: String,
    /// Each tensor, in `Header::tensors` order; identical in source and result.
    pub tensor_sha256: Option<Vec<String>>,
}

/// What a rewrite did.
#[derive(Debug, Clone)]
pub struct RewriteOutcome {
    /// The hashes.
    pub hashes: ShardHashes,
    /// Size of the written file.
    pub bytes_written: u64,
    /// Wall time.
    pub seconds: f64,
}

/// Why a rewrite failed; the destination is untouched in every case.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RewriteError {
    /// Reading the source or writing the result failed (disk full, permissions, …).
    #[error(transparent)]
    Io(#[from] PathIoError),
    /// The result did not check out; nothing was replaced.
    #[error("{}: verification of the rewritten file failed: {detail}", path.display())]
    Verify {
        /// The source shard.
        path: PathBuf,
        /// What differed.
        detail: String,
    },
}

/// Progress callback: called with the number of payload bytes just processed.
pub type Progress<'a> = &'a mut dyn FnMut(u64);

/// Rewrites `src` to `dst` following `plan`, atomically. `dst` may be `src` itself. It writes and syncs a
/// temporary file in `dst`'s directory, then checks it, then renames it over `dst`. The check re-parses the
/// header: every tensor is aligned, with the same names, dtypes, shapes and metadata. It takes the digests
/// `digests` asks for from the source as it reads it (see [`Digests`]). It never reads the result back to
/// hash it.
pub fn rewrite(
    src: &Path,
    shard: &ShardHeader,
    plan: &LayoutPlan,
    dst: &Path,
    digests: Digests,
    progress: Progress<'_>,
) -> Result<RewriteOutcome, RewriteError> {
    let all = digests == Digests::All;
    let started = Instant::now();
    let dir = dst.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name = dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{file_name}.{}.", std::process::id()))
        .suffix(TEMP_SUFFIX)
        .tempfile_in(dir)
        .map_err(io_error(dir, "create temporary file"))?;
    let temp_path = temp.path().to_owned();
    // Temporary files are private (0600). The result keeps the source's mode, so an in-place fix does not
    // lock everyone else out of a shared model directory.
    let source_mode = std::fs::metadata(src).map_err(io_error(src, "stat"))?.permissions();
    temp.as_file().set_permissions(source_mode).map_err(io_error(&temp_path, "set permissions"))?;

    let header = &shard.header;
    let prefix = plan.prefix();
    let out = temp.as_file_mut();

    let hashes = if plan.keeps_payload() {
        // The result is the new prefix followed by the unchanged payload. We write the very buffers the
        // hashing reads, past the page cache (see `direct`).
        let buffered = out.try_clone().map_err(io_error(&temp_path, "reopen"))?;
        let mut writer = DirectWriter::new(&temp_path, buffered, true);
        writer.write(&prefix).map_err(io_error(&temp_path, "write"))?;
        let want = Want { file: all, tensors: all, payload: true, new_file: all.then_some(prefix.as_slice()) };
        let (source, new_file) =
            stream_source(src, shard, want, Some((&temp_path, &mut |chunk| writer.write(chunk))), progress)?;
        writer.finish().map_err(io_error(&temp_path, "write"))?;
        let payload = source.payload.unwrap_or_default();
        ShardHashes {
            src_file_sha256: source.file,
            src_payload_sha256: Some(payload.clone()),
            new_file_sha256: new_file,
            new_payload_sha256: payload,
            tensor_sha256: source.tensors,
        }
    } else if !all {
        let buffered = out.try_clone().map_err(io_error(&temp_path, "reopen"))?;
        relay_direct(src, shard, plan, &prefix, (&temp_path, DirectWriter::new(&temp_path, buffered, true)), progress)?
    } else {
        out.write_all(&prefix).map_err(io_error(&temp_path, "write"))?;
        // The kernel copies the bytes in the new order with copy_file_range, on a thread of its own. It takes
        // about half the CPU of read + write. This thread reads the source front to back for each tensor's
        // digest. Another thread reads it in the new order for the new payload's digest. So the result is
        // never read back.
        let moves = plan_moves(shard, plan);
        let copy_from = crate::safe_fs::open_regular(src).map_err(io_error(src, "open"))?;
        let copy_to = out.try_clone().map_err(io_error(&temp_path, "reopen"))?;
        let new_prefix = all.then_some(prefix.as_slice());
        let (source, (new_file, new_payload)) = std::thread::scope(|scope| {
            let copier = scope.spawn(|| copy_moves(copy_from, copy_to, &moves));
            let planned = scope.spawn(|| hash_planned(src, &moves, new_prefix));
            let want = Want { file: all, tensors: true, payload: all, new_file: None };
            let hashed = stream_source(src, shard, want, None, progress);
            let copied = copier.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            let planned = planned.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            let (source, _) = hashed?;
            copied.map_err(io_error(&temp_path, "write"))?;
            Ok::<_, RewriteError>((source, planned?))
        })?;
        ShardHashes {
            src_file_sha256: source.file,
            src_payload_sha256: source.payload,
            new_file_sha256: new_file,
            new_payload_sha256: new_payload,
            tensor_sha256: source.tensors,
        }
    };
    out.sync_all().map_err(io_error(&temp_path, "sync"))?;
    check_result(src, &temp_path, shard, plan)?;

    temp.persist(dst).map_err(|e| io_error(dst, "rename into place")(e.error))?;
    // The rename is durable only once the directory entry is.
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir, "sync directory"))?;
    Ok(RewriteOutcome {
        hashes,
        bytes_written: plan.data_start() + header.data_len(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn io_error(path: &Path, op: &'static str) -> impl FnOnce(io::Error) -> RewriteError {
    let at = PathIoError::at(path, op);
    move |source| RewriteError::Io(at(source))
}

/// Hashes a shard that needs no rewrite, giving the same record a rewrite would.
pub fn hash_unchanged(
    src: &Path,
    shard: &ShardHeader,
    digests: Digests,
    progress: Progress<'_>,
) -> Result<ShardHashes, RewriteError> {
    let all = digests == Digests::All;
    let want = Want { file: all, tensors: all, payload: true, new_file: None };
    let (source, _) = stream_source(src, shard, want, None, progress)?;
    let payload = source.payload.unwrap_or_default();
    Ok(ShardHashes {
        src_file_sha256: source.file.clone(),
        src_payload_sha256: Some(payload.clone()),
        new_file_sha256: source.file,
        new_payload_sha256: payload,
        tensor_sha256: source.tensors,
    })
}

/// The digests of one pass over a source.
struct Want<'a> {
    /// The whole file.
    file: bool,
    /// Each tensor.
    tensors: bool,
    /// The data section.
    payload: bool,
    /// The new file, whose prefix is given; its payload is the source's.
    new_file: Option<&'a [u8]>,
}

/// What one pass over a source computed, as [`Want`] asked.
struct SourceHashes {
    file: Option<String>,
    payload: Option<String>,
    tensors: Option<Vec<String>>,
}

/// Opens the source, which must still be the size its header was read at.
fn open_unchanged(src: &Path, shard: &ShardHeader) -> Result<File, RewriteError> {
    let file = crate::safe_fs::open_regular(src).map_err(io_error(src, "open"))?;
    let size = file.metadata().map_err(io_error(src, "stat"))?.len();
    if size != shard.header.file_size {
        let detail = format!("source changed size while being read ({} → {size} bytes)", shard.header.file_size);
        return Err(RewriteError::Verify { path: src.to_owned(), detail });
    }
    Ok(file)
}

/// Reads the source once, front to back, and computes the digests `want` asks for. [`pump`] spreads the
/// hashing over the cores. When `writer` is given, it also gets the payload and writes it to the file named
/// with it. Returns the source's digests and the new file's.
fn stream_source(
    src: &Path,
    shard: &ShardHeader,
    want: Want<'_>,
    writer: Option<(&Path, Writer<'_>)>,
    progress: Progress<'_>,
) -> Result<(SourceHashes, Option<String>), RewriteError> {
    let header = &shard.header;
    let mut file = open_unchanged(src, shard)?;
    let mut digests = DigestList::default();
    // In this order, two lanes pair the file with the payload and the tensors with the new file.
    let file_at = want.file.then(|| {
        let mut src_prefix = header.header_len.to_le_bytes().to_vec();
        src_prefix.extend_from_slice(&shard.raw_json);
        digests.add(Digest::whole_with_prefix(&src_prefix))
    });
    let tensors_at = want.tensors.then(|| {
        digests.add(Digest::Spans(SpanHasher::new(
            header.tensors.iter().map(super::header::TensorInfo::byte_len).collect(),
        )))
    });
    let payload_at = want.payload.then(|| digests.add(Digest::whole_with_prefix(b"")));
    let new_file_at = want.new_file.map(|prefix| digests.add(Digest::whole_with_prefix(prefix)));
    file.seek(SeekFrom::Start(header.data_start())).map_err(io_error(src, "seek"))?;
    let mut done = digests.pump(src, &mut file, header.data_len(), writer, progress)?;
    let hashes = SourceHashes {
        file: done.whole(file_at),
        tensors: done.take(tensors_at).and_then(Digest::into_spans),
        payload: done.whole(payload_at),
    };
    Ok((hashes, done.whole(new_file_at)))
}

/// Digests for one pump, each added at a known place.
#[derive(Default)]
struct DigestList(Vec<Digest>);

impl DigestList {
    fn add(&mut self, digest: Digest) -> usize {
        self.0.push(digest);
        self.0.len() - 1
    }

    /// Feeds `len` bytes of `reader`, read from `src`, to every digest and to `writer` when given. The path
    /// given with `writer` names the file it writes. Fails if the reader ends early.
    fn pump(
        self,
        src: &Path,
        reader: &mut dyn Read,
        len: u64,
        writer: Option<(&Path, Writer<'_>)>,
        progress: Progress<'_>,
    ) -> Result<Finished, RewriteError> {
        let (written, writer) = writer.unzip();
        let (done, read) = pump(reader, len, self.0, writer, progress).map_err(|e| match e {
            PumpError::Read(source) => io_error(src, "read")(source),
            PumpError::Write(source) => io_error(written.unwrap_or(src), "write")(source),
        })?;
        if read != len {
            let detail = format!("source data ended after {read} of {len} bytes");
            return Err(RewriteError::Verify { path: src.to_owned(), detail });
        }
        Ok(Finished(done.into_iter().map(Some).collect()))
    }
}

/// Holds the digests of a [`DigestList`] after its pump. Each one is taken once, by its index.
struct Finished(Vec<Option<Digest>>);

impl Finished {
    fn take(&mut self, at: Option<usize>) -> Option<Digest> {
        at.and_then(|i| self.0.get_mut(i)?.take())
    }

    fn whole(&mut self, at: Option<usize>) -> Option<String> {
        self.take(at).and_then(Digest::into_whole_hex)
    }
}

/// Re-lays a reordered shard with the default digests in one read of the source, in the new order. Each chunk
/// goes to the tensor digests and to the new payload's digest, one core each. It also goes straight to the
/// disk, past the page cache. Per-tensor digests do not depend on the order they are taken in. The bytes
/// hashed are the very bytes written. Why: the copy_file_range path reads the source twice beside the
/// kernel's copy. This path reads it once, which saves a read of every byte and the copy: CPU hashing needs.
fn relay_direct(
    src: &Path,
    shard: &ShardHeader,
    plan: &LayoutPlan,
    prefix: &[u8],
    (temp_path, mut writer): (&Path, DirectWriter),
    progress: Progress<'_>,
) -> Result<ShardHashes, RewriteError> {
    let order = destination_order(plan);
    let moves = moves_in(&order, shard, plan);
    let file = open_unchanged(src, shard)?;
    let mut digests = DigestList::default();
    let lens = order.iter().map(|&i| plan.placements[i].len).collect();
    let tensors_at = Some(digests.add(Digest::Spans(SpanHasher::new(lens))));
    let payload_at = Some(digests.add(Digest::whole_with_prefix(b"")));
    writer.write(prefix).map_err(io_error(temp_path, "write"))?;
    let data_len = shard.header.data_len();
    let mut reader = PlannedOrder { file, moves: &moves, next: 0, left: 0 };
    let mut done =
        digests.pump(src, &mut reader, data_len, Some((temp_path, &mut |chunk| writer.write(chunk))), progress)?;
    writer.finish().map_err(io_error(temp_path, "write"))?;
    let tensor_sha256 = done.take(tensors_at).and_then(Digest::into_spans).map(|in_new_order| {
        let mut by_tensor = vec![String::new(); in_new_order.len()];
        for (digest, &tensor) in in_new_order.into_iter().zip(&order) {
            by_tensor[tensor] = digest;
        }
        by_tensor
    });
    Ok(ShardHashes {
        src_file_sha256: None,
        src_payload_sha256: None,
        new_file_sha256: None,
        new_payload_sha256: done.whole(payload_at).unwrap_or_default(),
        tensor_sha256,
    })
}

/// Tensor indices (`Header::tensors` order) in the order the plan places them.
fn destination_order(plan: &LayoutPlan) -> Vec<usize> {
    let mut order: Vec<usize> = (0..plan.placements.len()).collect();
    order.sort_by_key(|&i| plan.placements[i].dst_begin);
    order
}

/// One tensor's bytes to copy: from a file offset of the source to one of the new file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Move {
    /// Where the bytes start in the source.
    from: u64,
    /// Where they go in the new file.
    to: u64,
    /// How many.
    len: u64,
}

/// The moves, one per tensor, in destination order so the result grows front to back with no holes.
fn plan_moves(shard: &ShardHeader, plan: &LayoutPlan) -> Vec<Move> {
    moves_in(&destination_order(plan), shard, plan)
}

/// The moves of the tensors `order` lists, in that order.
fn moves_in(order: &[usize], shard: &ShardHeader, plan: &LayoutPlan) -> Vec<Move> {
    let (from, to) = (shard.header.data_start(), plan.data_start());
    let moved =
        |p: &crate::safetensors::plan::Placement| Move { from: from + p.src_begin, to: to + p.dst_begin, len: p.len };
    order.iter().map(|&i| moved(&plan.placements[i])).collect()
}

/// Bytes copied between two requests to flush the copy to disk.
const FLUSH_BYTES: u64 = 64 << 20;

/// Copies each range with `io::copy`, which Linux serves with copy_file_range between files. A thread of its
/// own flushes what has landed every 64 MiB. The flushes keep the disk busy while the copy and the hashing go
/// on. So the final fsync finds little left to write, and the copy never waits for the disk. On a 2 GiB shard,
/// flushing in line between pieces finished after 2.4–2.7 s, after the hashing. Flushing on the side
/// finished after 1.1–1.3 s, as fast as `cp` + `sync`.
fn copy_moves(mut from: File, mut to: File, moves: &[Move]) -> io::Result<()> {
    let flush_to = to.try_clone()?;
    std::thread::scope(|scope| {
        // One request waiting at most: a flush that starts later covers everything copied before it.
        let (request, requests) = std::sync::mpsc::sync_channel::<()>(1);
        let flusher = scope.spawn(move || -> io::Result<()> {
            for () in requests {
                flush_to.sync_data()?;
            }
            Ok(())
        });
        let copied = copy_ranges(&mut from, &mut to, moves, &mut || {
            let _ = request.try_send(());
        });
        drop(request);
        let flushed = flusher.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        copied.and(flushed)
    })
}

fn copy_ranges(from: &mut File, to: &mut File, moves: &[Move], flush: &mut dyn FnMut()) -> io::Result<()> {
    for &Move { from: src, to: dst, len } in moves {
        from.seek(SeekFrom::Start(src))?;
        to.seek(SeekFrom::Start(dst))?;
        let mut done = 0;
        while done < len {
            let piece = FLUSH_BYTES.min(len - done);
            let copied = io::copy(&mut (&mut *from).take(piece), to)?;
            if copied != piece {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("source ended {} bytes early", len - done - copied),
                ));
            }
            flush();
            done += piece;
        }
    }
    to.flush()
}

/// Hashes the source's tensors in the order `moves` puts them, reading the source in that order. This gives
/// the new payload's digest, and the new file's after `prefix` when given. So it hashes what the copier
/// writes without reading the result back.
fn hash_planned(src: &Path, moves: &[Move], prefix: Option<&[u8]>) -> Result<(Option<String>, String), RewriteError> {
    let file = crate::safe_fs::open_regular(src).map_err(io_error(src, "open"))?;
    let data_len: u64 = moves.iter().map(|m| m.len).sum();
    let mut digests = DigestList::default();
    let file_at = prefix.map(|p| digests.add(Digest::whole_with_prefix(p)));
    let payload_at = Some(digests.add(Digest::whole_with_prefix(b"")));
    let mut reader = PlannedOrder { file, moves, next: 0, left: 0 };
    let mut done = digests.pump(src, &mut reader, data_len, None, &mut |_| {})?;
    Ok((done.whole(file_at), done.whole(payload_at).unwrap_or_default()))
}

/// Reads the source ranges of `moves` one after another, as one stream.
struct PlannedOrder<'a> {
    file: File,
    moves: &'a [Move],
    next: usize,
    left: u64,
}

impl Read for PlannedOrder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.left == 0 {
            let Some(&Move { from, len, .. }) = self.moves.get(self.next) else { return Ok(0) };
            self.file.seek(SeekFrom::Start(from))?;
            self.next += 1;
            self.left = len;
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "source ended inside a tensor"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Checks that the written file parses strictly, holds the same tensors, and is aligned as planned.
fn check_result(src: &Path, temp: &Path, shard: &ShardHeader, plan: &LayoutPlan) -> Result<(), RewriteError> {
    let verify = |detail: String| RewriteError::Verify { path: src.to_owned(), detail };
    let written = read_shard_header(temp).map_err(|e| verify(format!("re-reading the result: {e}")))?;
    let audit = classify(&written.header, Alignment::new(plan.data_alignment).unwrap_or_default());
    if audit.misaligned_tensors != 0 || written.header.data_start() % plan.data_alignment != 0 {
        return Err(verify(format!("{} tensors still misaligned", audit.misaligned_tensors)));
    }
    let key = |t: &super::TensorInfo| (t.name.clone(), t.dtype, t.shape.clone(), t.byte_len());
    let mut before: Vec<_> = shard.header.tensors.iter().map(key).collect();
    let mut after: Vec<_> = written.header.tensors.iter().map(key).collect();
    before.sort();
    after.sort();
    if before != after || written.header.metadata != shard.header.metadata {
        return Err(verify("tensor names, dtypes, shapes or metadata changed".into()));
    }
    debug_assert_eq!(written.header.data_start(), LEN_PREFIX + plan.header_len());
    Ok(())
}

#[cfg(test)]
mod tests;
