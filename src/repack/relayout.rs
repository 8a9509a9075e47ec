//! The re-layout of a job, between the download and the checks. It re-lays the downloaded bundle into the
//! staged one through `fix`, and reads what the card needs from the source's files.
//! Each runs off the executor.

use std::path::Path;

use crate::bundle::discover;
use crate::fix::{Destination, FixOptions, fix};
use crate::manifest::{LeftOut, Manifest};
use crate::repack::error::{RepackError, WhatNext};
use crate::repack::{download::allow_list, publish::card};
use crate::safetensors::Alignment;

/// What the re-layout left: a staged bundle to verify and publish, or why there is nothing to do.
pub(crate) enum Relaid {
    /// The bundle is staged, with its manifest.
    Staged,
    /// Nothing to publish, and why.
    Skipped(String),
    /// Every shard is aligned already: the downloaded bundle is the result.
    AlreadyAligned,
}

/// Re-lays the downloaded bundle into `output`, linking the shards repaired as they streamed from `streamed`.
/// Removes the carried configs' pointers to code.
/// Stamps the manifest with the source repo and commit, and with what the mirror left out and edited.
pub(crate) fn stage_bundle(
    source: &Path,
    output: &Path,
    streamed: &Path,
    alignment: Alignment,
    (repo, sha): (&str, &str),
    left_out: Vec<LeftOut>,
) -> Result<Relaid, RepackError> {
    let bundles = discover(&[source.to_owned()]).map_err(|e| RepackError::permanent(e.to_string()))?;
    if bundles.len() != 1 {
        return Ok(Relaid::Skipped(format!("{} bundle directories in one repo; not repacked", bundles.len())));
    }
    // The download checked the source files' digests against the Hub's, and the uploader computes the new
    // files' own. The minimal set proves the rest.
    let options = FixOptions {
        destination: Destination::OutDir(output.to_owned()),
        alignment,
        dry_run: false,
        digests: crate::safetensors::rewrite::Digests::Minimal,
        prepared: Some(streamed.to_owned()),
    };
    let report = fix(&bundles, &options, &mut |_| {}).map_err(RepackError::caused_by)?;
    let t = &report.totals;
    if t.invalid > 0 || t.failed > 0 {
        let shards = || report.bundles.iter().flat_map(|b| &b.shards);
        let why: Vec<String> = shards().filter_map(|s| s.error.clone()).collect();
        let reason = format!("re-layout left {} invalid and {} failed shards: {}", t.invalid, t.failed, why.join("; "));
        // An invalid shard stays invalid. A failed rewrite left its original intact and may be tried again.
        // A machine at fault, such as a read-only disk, needs the operator instead.
        // A full disk is reported as such, so that the job's files are removed.
        let by_io = shards()
            .filter_map(|s| s.io_kind)
            .map(|k| RepackError::io("", std::io::Error::from(k)))
            .reduce(RepackError::join);
        return Err(match by_io {
            Some(e) if matches!(e.next, WhatNext::AskOperator { .. }) || e.next.frees_disk() => e.said_as(reason),
            _ if t.invalid > 0 => RepackError::permanent(reason),
            _ => RepackError::transient(reason),
        });
    }
    if t.rewritten == 0 {
        return Ok(Relaid::AlreadyAligned);
    }
    let mut manifest = Manifest::read(output)
        .map_err(|e| RepackError::permanent(e.to_string()))?
        .ok_or_else(|| RepackError::permanent("fix wrote no manifest"))?;
    manifest.edited = allow_list::strip_code_pointers(output).map_err(|e| match e {
        allow_list::ConfigError::Io { source, file } => RepackError::io(format_args!("{file} of the mirror"), source),
        e @ allow_list::ConfigError::NotJson { .. } => RepackError::permanent(format!("not mirrored: {e}")),
    })?;
    manifest.left_out = left_out;
    manifest.source_repo = Some(repo.to_owned());
    manifest.source_revision = Some(sha.to_owned());
    manifest.source_dir = format!("{repo}@{sha}");
    manifest.write(output).map_err(RepackError::caused_by)?;
    Ok(Relaid::Staged)
}

/// Bytes a copying loader duplicates in the source bundle.
pub(super) fn misaligned_bytes(source: &Path, alignment: Alignment) -> u64 {
    let Ok(bundles) = discover(&[source.to_owned()]) else { return 0 };
    crate::scan::scan(&bundles, alignment, &mut |_| {}).totals.misaligned_bytes
}

/// The licence the downloaded source's README names, if any.
pub(super) fn readme_license(source: &Path) -> Option<String> {
    let readme = crate::safe_fs::read_capped(&source.join("README.md"), 16 << 20).ok()?;
    card::license_of(&String::from_utf8_lossy(&readme))
}
