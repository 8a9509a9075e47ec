//! Repairs bundles in place or into a new directory, with the manifest. Invalid shards are never rewritten.

mod record;
mod report;
mod sidecars;

use sidecars::{copy_sidecars, remove_stale_temps};

pub use record::StreamedRecord;
pub use report::{BundleFix, FixEvent, FixReport, FixTotals, ShardFix};

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::bundle::{Bundle, is_hf_cache_blob};
use crate::io_error::PathIoError;
use crate::manifest::{Manifest, ManifestError, ManifestShard, SkippedShard, round_seconds};
use crate::safetensors::plan::{LayoutPlan, plan};
use crate::safetensors::read::{ShardHeader, read_shard_header};
use crate::safetensors::rewrite::{Digests, ShardHashes, hash_unchanged, rewrite};
use crate::safetensors::{Alignment, Method, Verdict, classify};

/// Where repaired shards go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// Replace each shard atomically where it is.
    InPlace,
    /// Write the repaired bundle into this directory under the same file names.
    OutDir(PathBuf),
}

/// How to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixOptions {
    /// Where repaired shards go.
    pub destination: Destination,
    /// Alignment for each data section.
    pub alignment: Alignment,
    /// Plan and report only; write nothing.
    pub dry_run: bool,
    /// Which digests go into the manifest.
    pub digests: Digests,
    /// A directory of shards the repack worker's download already repaired as they streamed. Each has its
    /// record ([`StreamedRecord`], written by `repack::repair`). Such a shard is linked into the output with
    /// its record. It is not rewritten from its source, which is only a stub.
    pub prepared: Option<PathBuf>,
}

/// Why a fix refused to start or had to stop.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FixError {
    /// `--out` needs exactly one bundle.
    #[error("--out takes one bundle, but the paths hold {count} (use --in-place, or fix them one at a time)")]
    OutNeedsOneBundle {
        /// Bundles found.
        count: usize,
    },
    /// `--out` names the source directory.
    #[error("{}: --out is the bundle's own directory; use --in-place to rewrite it where it is", path.display())]
    OutIsSource {
        /// The directory.
        path: PathBuf,
    },
    /// `--out` lies inside the source bundle, so the copy would copy itself.
    #[error("{}: --out is inside the bundle {}; choose a directory outside it", path.display(), source_dir.display())]
    OutInsideSource {
        /// The output directory.
        path: PathBuf,
        /// The bundle directory.
        source_dir: PathBuf,
    },
    /// In-place on a Hugging Face cache blob would break its content-hash name.
    #[error("{}: is a Hugging Face cache blob, named by its content hash; rewriting it in place would corrupt the cache (use --out DIR)", path.display())]
    CacheBlob {
        /// The shard.
        path: PathBuf,
    },
    /// In-place on a symlink would replace the link, not its target.
    #[error("{}: is a symbolic link; fix its target, or use --out DIR", path.display())]
    Symlink {
        /// The shard.
        path: PathBuf,
    },
    /// A directory or sidecar file could not be created or copied.
    #[error(transparent)]
    Io(#[from] PathIoError),
    /// The manifest could not be read or written.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

/// Repairs `bundles` as `opts` says. It checks every bundle for refusals before writing anything: cache
/// blobs, symlinks, a bad `--out`. A shard that fails mid-way is reported and leaves its original intact.
pub fn fix(bundles: &[Bundle], opts: &FixOptions, events: &mut dyn FnMut(FixEvent<'_>)) -> Result<FixReport, FixError> {
    crate::blocking::assert_off_executor("fix");
    preflight(bundles, opts)?;
    let mut planned = Vec::new();
    for bundle in bundles {
        planned.push(bundle.shards.iter().map(|p| plan_shard(p, opts.alignment)).collect::<Vec<_>>());
    }
    // Progress counts payload bytes streamed. A dry run streams none.
    let total: u64 = if opts.dry_run {
        0
    } else {
        planned.iter().flatten().filter_map(|p| p.ok.as_ref()).map(|(shard, _)| shard.header.data_len()).sum()
    };
    events(FixEvent::Total(total));
    let mut report = FixReport {
        dry_run: opts.dry_run,
        alignment: opts.alignment,
        bundles: Vec::new(),
        totals: FixTotals::default(),
    };
    for (bundle, plans) in bundles.iter().zip(planned) {
        let done = fix_bundle(bundle, plans, opts, events)?;
        for s in &done.shards {
            let t = &mut report.totals;
            t.bytes_written += s.bytes_written;
            match (s.verdict, &s.error) {
                (Verdict::Invalid, _) => t.invalid += 1,
                (_, Some(_)) => t.failed += 1,
                (Verdict::Aligned, None) => t.unchanged += 1,
                (_, None) => t.rewritten += 1,
            }
        }
        report.bundles.push(done);
    }
    Ok(report)
}

fn preflight(bundles: &[Bundle], opts: &FixOptions) -> Result<(), FixError> {
    match &opts.destination {
        Destination::OutDir(out) => {
            if bundles.len() != 1 {
                return Err(FixError::OutNeedsOneBundle { count: bundles.len() });
            }
            let same = |a: &Path, b: &Path| {
                std::fs::canonicalize(a).ok().zip(std::fs::canonicalize(b).ok()).is_some_and(|(a, b)| a == b)
            };
            if same(out, &bundles[0].dir) {
                return Err(FixError::OutIsSource { path: out.clone() });
            }
            if let Ok(source_dir) = std::fs::canonicalize(&bundles[0].dir)
                && resolve_lexically(out).starts_with(&source_dir)
            {
                return Err(FixError::OutInsideSource { path: out.clone(), source_dir });
            }
        }
        Destination::InPlace if !opts.dry_run => {
            for path in bundles.iter().flat_map(|b| &b.shards) {
                if is_hf_cache_blob(path) {
                    return Err(FixError::CacheBlob { path: path.clone() });
                }
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
                    return Err(FixError::Symlink { path: path.clone() });
                }
            }
        }
        Destination::InPlace => {}
    }
    Ok(())
}

/// `path` made absolute. Each existing prefix is canonicalized, resolving symlinks as the kernel would. The
/// components that do not exist yet are appended as written, so a directory still to be created can be
/// placed.
fn resolve_lexically(path: &Path) -> PathBuf {
    let absolute =
        if path.is_absolute() { path.to_owned() } else { std::env::current_dir().unwrap_or_default().join(path) };
    let mut out = PathBuf::new();
    for c in absolute.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => {
                out.push(other);
                if let Ok(real) = std::fs::canonicalize(&out) {
                    out = real;
                }
            }
        }
    }
    out
}

struct Planned {
    path: PathBuf,
    ok: Option<(ShardHeader, LayoutPlan)>,
    error: Option<String>,
}

fn plan_shard(path: &Path, alignment: Alignment) -> Planned {
    let result = read_shard_header(path).map_err(|e| e.to_string()).and_then(|shard| {
        let p = plan(&shard.header, &shard.raw_json, alignment).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((shard, p))
    });
    match result {
        Ok(ok) => Planned { path: path.to_owned(), ok: Some(ok), error: None },
        Err(e) => Planned { path: path.to_owned(), ok: None, error: Some(e) },
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn fix_bundle(
    bundle: &Bundle,
    plans: Vec<Planned>,
    opts: &FixOptions,
    events: &mut dyn FnMut(FixEvent<'_>),
) -> Result<BundleFix, FixError> {
    let out_dir = match &opts.destination {
        Destination::InPlace => bundle.dir.clone(),
        Destination::OutDir(out) => out.clone(),
    };
    let mut result = BundleFix {
        dir: bundle.dir.display().to_string(),
        output_dir: out_dir.display().to_string(),
        shards: Vec::new(),
        copied_files: Vec::new(),
        manifest: None,
    };
    if !opts.dry_run {
        std::fs::create_dir_all(&out_dir).map_err(io_error(&out_dir, "create directory"))?;
        remove_stale_temps(&out_dir);
    }
    let previous = if opts.destination == Destination::InPlace { Manifest::read(&bundle.dir)? } else { None };
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for planned in plans {
        let (shard_fix, entry) = fix_shard(planned, &out_dir, opts, previous.as_ref(), events);
        match (&entry, &shard_fix.error) {
            // No loader copies from it, but its data does not start on 8. Leave it as it is, and list it with
            // the shards left alone. Mei's check wants every listed shard's data on 8, and skips that list.
            (Some(e), _) if e.method == Method::Unchanged && (8 + e.written_header_len()) % 8 != 0 => {
                let start = 8 + e.written_header_len();
                let reason =
                    format!("aligned: no tensor needs a copy; its data starts at byte {start} and stays there");
                skipped.push(SkippedShard { file: e.file.clone(), reason });
            }
            (Some(e), _) => entries.push(e.clone()),
            (None, Some(reason)) => {
                skipped.push(SkippedShard { file: file_name(Path::new(&shard_fix.path)), reason: reason.clone() });
            }
            (None, None) => {}
        }
        result.shards.push(shard_fix);
    }
    if opts.dry_run {
        return Ok(result);
    }
    if let Destination::OutDir(out) = &opts.destination
        && bundle.whole_dir
    {
        result.copied_files = copy_sidecars(&bundle.dir, out)?;
    }
    // Rewriting an identical record would only change its timestamp.
    let same_record = previous.as_ref().is_some_and(|m| m.shards == entries && m.skipped == skipped);
    if !entries.is_empty() && !same_record {
        let manifest = Manifest {
            tool: "hubalign".into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            generated_utc: crate::time::now_utc(),
            source_dir: std::fs::canonicalize(&bundle.dir).unwrap_or_else(|_| bundle.dir.clone()).display().to_string(),
            source_repo: previous.as_ref().and_then(|m| m.source_repo.clone()),
            source_revision: previous.as_ref().and_then(|m| m.source_revision.clone()),
            target_alignment: opts.alignment.get(),
            shards: entries,
            skipped,
            left_out: Vec::new(),
            edited: Vec::new(),
        };
        result.manifest = Some(manifest.write(&out_dir)?.display().to_string());
    }
    Ok(result)
}

fn fix_shard(
    planned: Planned,
    out_dir: &Path,
    opts: &FixOptions,
    previous: Option<&Manifest>,
    events: &mut dyn FnMut(FixEvent<'_>),
) -> (ShardFix, Option<ManifestShard>) {
    let mut fix = ShardFix {
        path: planned.path.display().to_string(),
        output: None,
        verdict: Verdict::Invalid,
        method: None,
        header_len_before: None,
        header_len_after: None,
        padding_bytes: 0,
        misaligned_tensors_before: 0,
        misaligned_bytes_before: 0,
        bytes_written: 0,
        seconds: 0.0,
        error: planned.error,
        io_kind: None,
    };
    let Some((shard, plan)) = planned.ok else {
        fix.error = fix.error.map(|e| format!("left untouched: {e}"));
        return (fix, None);
    };
    let audit = classify(&shard.header, opts.alignment);
    fix.verdict = audit.verdict;
    fix.method = Some(plan.method);
    fix.header_len_before = Some(shard.header.header_len);
    fix.header_len_after = Some(plan.header_len());
    fix.padding_bytes = plan.padding_bytes;
    fix.misaligned_tensors_before = audit.misaligned_tensors;
    fix.misaligned_bytes_before = audit.misaligned_bytes;
    if opts.dry_run {
        return (fix, None);
    }
    let name = file_name(&planned.path);
    let dst = out_dir.join(&name);
    events(FixEvent::Shard(&planned.path));
    let mut bytes = |n| events(FixEvent::Bytes(n));
    let in_place = opts.destination == Destination::InPlace;
    if in_place && plan.method == Method::Unchanged {
        // A shard an earlier run already fixed keeps the record of its true source.
        if let Some(kept) = previous
            .and_then(|m| m.shards.iter().find(|s| s.file == name && s.written_header_len() == shard.header.header_len))
        {
            return (fix, Some(kept.clone()));
        }
    }
    if let Some(dir) = &opts.prepared
        && plan.method != Method::Unchanged
    {
        match prepared_shard(dir, &planned.path, &shard, &plan, &dst) {
            Ok(Some(entry)) => {
                fix.output = Some(dst.display().to_string());
                fix.bytes_written = plan.data_start() + shard.header.data_len();
                return (fix, Some(entry));
            }
            Ok(None) => {}
            Err(e) => {
                if let PreparedError::Io { source, .. } = &e {
                    fix.io_kind = Some(source.kind());
                }
                fix.error = Some(e.to_string());
                return (fix, None);
            }
        }
    }
    let started = std::time::Instant::now();
    let outcome = if in_place && plan.method == Method::Unchanged {
        hash_unchanged(&planned.path, &shard, opts.digests, &mut bytes).map(|h| (h, 0))
    } else {
        rewrite(&planned.path, &shard, &plan, &dst, opts.digests, &mut bytes).map(|o| (o.hashes, o.bytes_written))
    };
    fix.seconds = started.elapsed().as_secs_f64();
    match outcome {
        Ok((hashes, written)) => {
            fix.output = Some(dst.display().to_string());
            fix.bytes_written = written;
            let entry = manifest_entry(name, &shard, &plan, audit.misaligned_tensors, hashes, fix.seconds);
            (fix, Some(entry))
        }
        Err(e) => {
            fix.io_kind = crate::io_error::io_kind_in(&e);
            fix.error = Some(format!("{e}; the original is untouched"));
            (fix, None)
        }
    }
}

/// Links or copies the shard as the download repaired it to `dst`, and returns its record. Returns `None`
/// when the shard was downloaded whole. A stub source, one with holes, without a matching record is an
/// error: rewriting it would write its holes.
fn prepared_shard(
    dir: &Path,
    source: &Path,
    shard: &ShardHeader,
    plan: &LayoutPlan,
    dst: &Path,
) -> Result<Option<ManifestShard>, PreparedError> {
    let name = &file_name(source);
    let consistent = StreamedRecord::read(dir, name).filter(|r| {
        r.entry.src_header_len == shard.header.header_len
            && r.entry.header_len == plan.header_len()
            && r.entry.payload_bytes == shard.header.data_len()
    });
    let Some(record) = consistent else {
        return if is_stub(source) { Err(PreparedError::StubWithoutRecord(name.clone())) } else { Ok(None) };
    };
    let from = dir.join(name);
    let io = |source| PreparedError::Io { path: dst.to_owned(), source };
    crate::safe_fs::clear_for_write(dst).map_err(io)?;
    std::fs::hard_link(&from, dst).or_else(|_| std::fs::copy(&from, dst).map(|_| ())).map_err(io)?;
    Ok(Some(record.entry))
}

/// Why a shard the download repaired could not be taken into the bundle.
#[derive(Debug, thiserror::Error)]
enum PreparedError {
    /// The source is a stub, but no record of its repair matches it.
    #[error("{0}: a stub of a shard repaired as it downloaded, without its record")]
    StubWithoutRecord(String),
    /// Linking or copying the repaired shard failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The destination.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Whether a file has holes, as a stub the download left of a streamed shard does.
fn is_stub(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).is_ok_and(|m| m.blocks().saturating_mul(512).saturating_add(1 << 20) < m.len())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

pub(crate) fn manifest_entry(
    file: String,
    shard: &ShardHeader,
    plan: &LayoutPlan,
    unaligned_before: u64,
    hashes: ShardHashes,
    seconds: f64,
) -> ManifestShard {
    let tensor_sha256: BTreeMap<String, String> =
        shard.header.tensors.iter().map(|t| t.name.clone()).zip(hashes.tensor_sha256.unwrap_or_default()).collect();
    let present = [
        ("payload_sha256", true),
        ("src_file_sha256", hashes.src_file_sha256.is_some()),
        ("src_payload_sha256", hashes.src_payload_sha256.is_some()),
        ("file_sha256", hashes.new_file_sha256.is_some()),
        ("tensor_sha256", !tensor_sha256.is_empty()),
    ];
    ManifestShard {
        digests: present.iter().filter(|(_, on)| *on).map(|(name, _)| (*name).to_owned()).collect(),
        file,
        src_header_len: shard.header.header_len,
        padding_bytes: plan.padding_bytes,
        payload_bytes: shard.header.data_len(),
        payload_sha256: hashes.new_payload_sha256,
        tensors: shard.header.tensors.len() as u64,
        unaligned_after: 0,
        repack_seconds: round_seconds(seconds),
        method: plan.method,
        header_len: plan.header_len(),
        unaligned_before,
        src_file_sha256: hashes.src_file_sha256.unwrap_or_default(),
        src_payload_sha256: hashes.src_payload_sha256.unwrap_or_default(),
        file_sha256: hashes.new_file_sha256.unwrap_or_default(),
        tensor_sha256,
    }
}

pub(super) fn io_error(path: &Path, op: &'static str) -> impl FnOnce(io::Error) -> FixError {
    let at = PathIoError::at(path, op);
    move |source| FixError::Io(at(source))
}
