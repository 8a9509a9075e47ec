//! The streaming re-layout writer: bounded memory whatever the shard size, every hash in the same pass,
//! atomic replacement.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};
use thiserror::Error;

use super::classify::{Alignment, classify};
use super::header::LEN_PREFIX;
use super::plan::{LayoutPlan, Method};
use super::read::{ShardHeader, read_shard_header};
use crate::hashing::{SpanHasher, finish_hex};

/// Bytes moved per read; with the read-back buffer this bounds the writer's memory.
pub const CHUNK_BYTES: usize = 8 << 20;
/// Suffix of the temporary files the writer leaves only if it is killed.
pub const TEMP_SUFFIX: &str = ".hubalign.tmp";

/// Every hash of one shard, source and result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHashes {
    /// The source file.
    pub src_file_sha256: String,
    /// The source data section.
    pub src_payload_sha256: String,
    /// The written file (its LFS oid).
    pub new_file_sha256: String,
    /// The written data section.
    pub new_payload_sha256: String,
    /// Each tensor, in `Header::tensors` order; identical in source and result.
    pub tensor_sha256: Vec<String>,
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
    #[error("{}: {op}: {source}", path.display())]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The failure.
        #[source]
        source: io::Error,
    },
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

/// Rewrites `src` to `dst` (which may be `src` itself) following `plan`, atomically: a temporary file in
/// `dst`'s directory is written, synced, checked (header re-parsed, every tensor aligned and hash-equal to the
/// source) and only then renamed over `dst`.
pub fn rewrite(
    src: &Path,
    shard: &ShardHeader,
    plan: &LayoutPlan,
    dst: &Path,
    progress: Progress<'_>,
) -> Result<RewriteOutcome, RewriteError> {
    let started = Instant::now();
    let dir = dst.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name = dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{file_name}.{}.", std::process::id()))
        .suffix(TEMP_SUFFIX)
        .tempfile_in(dir)
        .map_err(io_error(dir, "create temporary file"))?;
    let temp_path = temp.path().to_owned();

    let header = &shard.header;
    let mut new_file = Sha256::new();
    let mut prefix = plan.header_len().to_le_bytes().to_vec();
    prefix.extend_from_slice(&plan.header);
    new_file.update(&prefix);
    let out = temp.as_file_mut();
    out.write_all(&prefix).map_err(io_error(&temp_path, "write"))?;
    if plan.method == Method::Relayout {
        out.set_len(plan.data_start() + header.data_len()).map_err(io_error(&temp_path, "allocate"))?;
    }

    let sequential = plan.keeps_payload();
    let mut sink = |offset: u64, chunk: &[u8]| -> io::Result<()> {
        if sequential {
            new_file.update(chunk);
            out.write_all(chunk)
        } else {
            write_relocated(out, plan, offset, chunk)
        }
    };
    let source = stream_source(src, shard, &mut sink, progress)?;

    let (new_file_sha256, new_payload_sha256) = if sequential {
        (finish_hex(new_file), source.src_payload_sha256.clone())
    } else {
        read_back(out, plan, &source.tensor_sha256, new_file).map_err(|e| match e {
            ReadBack::Io(source) => RewriteError::Io { path: temp_path.clone(), op: "read back", source },
            ReadBack::Mismatch(detail) => RewriteError::Verify { path: src.to_owned(), detail },
        })?
    };
    out.sync_all().map_err(io_error(&temp_path, "sync"))?;
    check_result(src, &temp_path, shard, plan)?;

    temp.persist(dst).map_err(|e| RewriteError::Io {
        path: dst.to_owned(),
        op: "rename into place",
        source: e.error,
    })?;
    // The rename is durable only once the directory entry is.
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir, "sync directory"))?;
    Ok(RewriteOutcome {
        hashes: ShardHashes { new_file_sha256, new_payload_sha256, ..source },
        bytes_written: plan.data_start() + header.data_len(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn io_error(path: &Path, op: &'static str) -> impl FnOnce(io::Error) -> RewriteError {
    let path = path.to_owned();
    move |source| RewriteError::Io { path, op, source }
}

/// Hashes a shard that needs no rewrite, giving the same record a rewrite would.
pub fn hash_unchanged(src: &Path, shard: &ShardHeader, progress: Progress<'_>) -> Result<ShardHashes, RewriteError> {
    let hashes = stream_source(src, shard, &mut |_, _| Ok(()), progress)?;
    Ok(ShardHashes {
        new_file_sha256: hashes.src_file_sha256.clone(),
        new_payload_sha256: hashes.src_payload_sha256.clone(),
        ..hashes
    })
}

/// Reads the source once, front to back, hashing the file, the payload and each tensor, and hands every chunk
/// (with its offset in the source data section) to `sink`. Only the `new_*` fields are left empty.
fn stream_source(
    src: &Path,
    shard: &ShardHeader,
    sink: &mut dyn FnMut(u64, &[u8]) -> io::Result<()>,
    progress: Progress<'_>,
) -> Result<ShardHashes, RewriteError> {
    let io_err = |op| move |source| RewriteError::Io { path: src.to_owned(), op, source };
    let header = &shard.header;
    let mut file = File::open(src).map_err(io_err("open"))?;
    let size = file.metadata().map_err(io_err("stat"))?.len();
    if size != header.file_size {
        let detail = format!("source changed size while being read ({} → {size} bytes)", header.file_size);
        return Err(RewriteError::Verify { path: src.to_owned(), detail });
    }
    let mut src_file = Sha256::new();
    src_file.update(header.header_len.to_le_bytes());
    src_file.update(&shard.raw_json);
    let mut payload = Sha256::new();
    let mut tensors = SpanHasher::new(header.tensors.iter().map(|t| t.byte_len()).collect());
    file.seek(SeekFrom::Start(header.data_start())).map_err(io_err("seek"))?;
    let mut reader = file.take(header.data_len());
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut offset = 0u64;
    loop {
        let n = read_full(&mut reader, &mut buf).map_err(io_err("read"))?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        src_file.update(chunk);
        payload.update(chunk);
        tensors.update(chunk);
        sink(offset, chunk).map_err(|source| RewriteError::Io { path: src.to_owned(), op: "write result", source })?;
        offset += n as u64;
        progress(n as u64);
    }
    let tensor_sha256 = tensors.finish().filter(|_| offset == header.data_len()).ok_or_else(|| {
        let detail = format!("source data ended after {offset} of {} bytes", header.data_len());
        RewriteError::Verify { path: src.to_owned(), detail }
    })?;
    Ok(ShardHashes {
        src_file_sha256: finish_hex(src_file),
        src_payload_sha256: finish_hex(payload),
        new_file_sha256: String::new(),
        new_payload_sha256: String::new(),
        tensor_sha256,
    })
}

/// Fills `buf` unless the reader ends first; returns the bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Writes the part of each tensor that falls in `chunk` (source data offset `offset`) at its new place.
fn write_relocated(out: &File, plan: &LayoutPlan, offset: u64, chunk: &[u8]) -> io::Result<()> {
    let end = offset + chunk.len() as u64;
    // Placements are in source order, so the overlapping ones form one run.
    let first = plan.placements.partition_point(|p| p.src_begin + p.len <= offset);
    for p in plan.placements[first..].iter().take_while(|p| p.src_begin < end) {
        let lo = p.src_begin.max(offset);
        let hi = (p.src_begin + p.len).min(end);
        if lo < hi {
            let piece = &chunk[(lo - offset) as usize..(hi - offset) as usize];
            out.write_all_at(piece, plan.data_start() + p.dst_begin + (lo - p.src_begin))?;
        }
    }
    Ok(())
}

enum ReadBack {
    Io(io::Error),
    Mismatch(String),
}

/// Re-reads a relaid result front to back: its file and payload hashes, and each tensor checked against the
/// source's hash.
fn read_back(
    out: &mut File,
    plan: &LayoutPlan,
    src_tensor_sha256: &[String],
    mut new_file: Sha256,
) -> Result<(String, String), ReadBack> {
    let mut dst_order: Vec<usize> = (0..plan.placements.len()).collect();
    dst_order.sort_by_key(|&i| plan.placements[i].dst_begin);
    let mut tensors = SpanHasher::new(dst_order.iter().map(|&i| plan.placements[i].len).collect());
    let mut payload = Sha256::new();
    let data_len: u64 = plan.placements.iter().map(|p| p.len).sum();
    out.seek(SeekFrom::Start(plan.data_start())).map_err(ReadBack::Io)?;
    let mut reader = (&*out).take(data_len);
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = read_full(&mut reader, &mut buf).map_err(ReadBack::Io)?;
        if n == 0 {
            break;
        }
        new_file.update(&buf[..n]);
        payload.update(&buf[..n]);
        tensors.update(&buf[..n]);
    }
    let digests = tensors.finish().ok_or_else(|| ReadBack::Mismatch("result is shorter than planned".into()))?;
    for (digest, &i) in digests.iter().zip(&dst_order) {
        if *digest != src_tensor_sha256[i] {
            return Err(ReadBack::Mismatch(format!("tensor #{i} differs from the source after the move")));
        }
    }
    Ok((finish_hex(new_file), finish_hex(payload)))
}

/// The written file must parse strictly, hold the same tensors, and be aligned as planned.
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
