//! The audit of local files, as report data. The binary presents it. [`next_step`] says what a person does
//! about each affected bundle, and [`mirrors`] asks the Hub whether an aligned mirror exists.

pub mod mirrors;
pub mod next_step;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use crate::bundle::Bundle;
use crate::safetensors::read::{ReadError, read_shard_header};
use crate::safetensors::{Alignment, Verdict, classify};
use next_step::{MirrorLookup, NextStep};

/// One shard's audit. Fields other than `path`, `bundle`, `size`, `verdict` and `error` are null when the
/// file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardReport {
    /// The shard's path as found.
    pub path: String,
    /// The bundle directory.
    pub bundle: String,
    /// File size in bytes.
    pub size: u64,
    /// `N`.
    pub header_len: Option<u64>,
    /// `8 + N`.
    pub data_start: Option<u64>,
    /// `(8 + N) % 8`.
    pub data_start_mod8: Option<u64>,
    /// Whether the data starts on the target alignment. With the default target, a shard whose data starts
    /// elsewhere is still `aligned` when no tensor needs a copy.
    pub data_start_aligned: Option<bool>,
    /// Number of tensors.
    pub tensors: Option<u64>,
    /// Tensors a zero-copy loader must copy.
    pub misaligned_tensors: Option<u64>,
    /// Their bytes.
    pub misaligned_bytes: Option<u64>,
    /// What the shard needs.
    pub verdict: Verdict,
    /// Why it is invalid; null otherwise.
    pub error: Option<String>,
    /// `__metadata__.format`, naming the writer.
    pub writer: Option<String>,
    /// Bytes read to audit it.
    pub bytes_read: u64,
    /// The Hub repo its bundle was downloaded from, when it sits in a Hugging Face cache.
    pub repo_id: Option<String>,
    /// Whether an aligned mirror of that repo was looked for, and what came of it.
    pub mirror_lookup: MirrorLookup,
    /// The aligned mirror, when the Hub listed one.
    pub mirror: Option<String>,
    /// The one command that gets an aligned copy of its bundle; null when there is nothing to do.
    pub next_step: Option<String>,
}

/// One bundle's audit: the worst of its shards, and what its index says that the shards contradict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BundleReport {
    /// The bundle directory.
    pub dir: String,
    /// Number of shards.
    pub shards: u64,
    /// The worst shard verdict.
    pub verdict: Verdict,
    /// Misaligned tensors over all shards.
    pub misaligned_tensors: u64,
    /// Their bytes.
    pub misaligned_bytes: u64,
    /// Disagreements between the index and the shards.
    pub index_problems: Vec<String>,
    /// The Hub repo it was downloaded from, when it sits in a Hugging Face cache.
    pub repo_id: Option<String>,
    /// What to do about it, once [`next_step::plan`] has run.
    pub next: NextStep,
}

/// Totals over everything scanned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScanTotals {
    /// Shards scanned.
    pub shards: u64,
    /// Shards per verdict.
    pub by_verdict: BTreeMap<Verdict, u64>,
    /// Misaligned tensors.
    pub misaligned_tensors: u64,
    /// Their bytes.
    pub misaligned_bytes: u64,
    /// Bytes of all shards.
    pub total_bytes: u64,
    /// Bytes read to audit them.
    pub bytes_read: u64,
}

/// The whole scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScanReport {
    /// The data-start alignment audited against.
    pub target_alignment: Alignment,
    /// Every shard.
    pub shards: Vec<ShardReport>,
    /// Every bundle.
    pub bundles: Vec<BundleReport>,
    /// Totals.
    pub totals: ScanTotals,
}

impl ScanReport {
    /// The worst verdict found, `Aligned` when nothing was scanned.
    pub fn worst(&self) -> Verdict {
        let shards = self.shards.iter().map(|s| s.verdict);
        let index = self.bundles.iter().filter(|b| !b.index_problems.is_empty()).map(|_| Verdict::Invalid);
        shards.chain(index).max().unwrap_or(Verdict::Aligned)
    }
}

/// Audits one shard from its header alone; also returns its tensor names for index checks.
pub fn scan_shard(path: &Path, bundle_dir: &Path, target: Alignment) -> (ShardReport, Vec<String>) {
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    let mut report = ShardReport {
        path: path.display().to_string(),
        bundle: bundle_dir.display().to_string(),
        size,
        header_len: None,
        data_start: None,
        data_start_mod8: None,
        data_start_aligned: None,
        tensors: None,
        misaligned_tensors: None,
        misaligned_bytes: None,
        verdict: Verdict::Invalid,
        error: None,
        writer: None,
        bytes_read: 0,
        repo_id: None,
        mirror_lookup: MirrorLookup::NotNeeded,
        mirror: None,
        next_step: None,
    };
    match read_shard_header(path) {
        Ok(shard) => {
            let a = classify(&shard.header, target);
            report.header_len = Some(a.header_len);
            report.data_start = Some(a.data_start);
            report.data_start_mod8 = Some(a.data_start_mod8);
            report.data_start_aligned = Some(a.data_start_aligned);
            report.tensors = Some(a.tensors);
            report.misaligned_tensors = Some(a.misaligned_tensors);
            report.misaligned_bytes = Some(a.misaligned_bytes);
            report.verdict = a.verdict;
            report.writer = a.writer;
            report.bytes_read = shard.bytes_read;
            (report, shard.header.tensors.into_iter().map(|t| t.name).collect())
        }
        Err(e) => {
            report.error = Some(match &e {
                ReadError::Format { source, bytes_read, .. } => {
                    report.bytes_read = *bytes_read;
                    source.to_string()
                }
                ReadError::Io { source, .. } => format!("cannot read: {source}"),
            });
            (report, Vec::new())
        }
    }
}

/// Audits every shard of every bundle; `progress` is called once per shard.
pub fn scan(bundles: &[Bundle], target: Alignment, progress: &mut dyn FnMut(&ShardReport)) -> ScanReport {
    crate::blocking::assert_off_executor("scan");
    let mut shards = Vec::new();
    let mut bundle_reports = Vec::new();
    for bundle in bundles {
        let mut names_by_file = BTreeMap::new();
        let first = shards.len();
        for path in &bundle.shards {
            let (report, names) = scan_shard(path, &bundle.dir, target);
            progress(&report);
            let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            names_by_file.insert(file, (report.verdict != Verdict::Invalid).then_some(names));
            shards.push(report);
        }
        let mine = &shards[first..];
        bundle_reports.push(BundleReport {
            dir: bundle.dir.display().to_string(),
            shards: mine.len() as u64,
            verdict: mine.iter().map(|s| s.verdict).max().unwrap_or(Verdict::Aligned),
            misaligned_tensors: mine.iter().filter_map(|s| s.misaligned_tensors).sum(),
            misaligned_bytes: mine.iter().filter_map(|s| s.misaligned_bytes).sum(),
            index_problems: index_problems(bundle, &names_by_file),
            repo_id: next_step::cached_repo(&bundle.dir).map(|c| c.repo_id),
            next: NextStep::default(),
        });
    }
    let mut totals = ScanTotals { shards: shards.len() as u64, ..ScanTotals::default() };
    for s in &shards {
        *totals.by_verdict.entry(s.verdict).or_default() += 1;
        totals.misaligned_tensors += s.misaligned_tensors.unwrap_or(0);
        totals.misaligned_bytes += s.misaligned_bytes.unwrap_or(0);
        totals.total_bytes += s.size;
        totals.bytes_read += s.bytes_read;
    }
    ScanReport { target_alignment: target, shards, bundles: bundle_reports, totals }
}

/// Checks the index against the shards, but only when the whole directory was scanned. It skips invalid
/// shards, whose own error says more.
fn index_problems(bundle: &Bundle, names_by_file: &BTreeMap<String, Option<Vec<String>>>) -> Vec<String> {
    let Some(index) = bundle.index.as_ref().filter(|_| bundle.whole_dir) else { return Vec::new() };
    let index_name = index.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut problems = Vec::new();
    let referenced: BTreeSet<&String> = index.weight_map.values().collect();
    for file in &referenced {
        if !names_by_file.contains_key(file.as_str()) {
            problems.push(format!("{index_name} names shard {file}, which is missing"));
        }
    }
    let mut stored_in = BTreeMap::new();
    for (file, names) in names_by_file {
        for name in names.iter().flatten() {
            stored_in.insert(name.as_str(), file.as_str());
        }
    }
    for (tensor, file) in &index.weight_map {
        match (stored_in.get(tensor.as_str()), names_by_file.get(file.as_str())) {
            (Some(actual), _) if *actual != file => {
                problems.push(format!("{index_name} maps {tensor} to {file}, but it is in {actual}"));
            }
            (None, Some(Some(_))) => problems.push(format!("{index_name} maps {tensor} to {file}, which lacks it")),
            _ => {}
        }
    }
    problems
}
