//! `hubalign scan`: audit local shards from their headers.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use hubalign::bundle::discover;
use hubalign::safetensors::{Alignment, Verdict};
use hubalign::scan::{ScanReport, scan};
use hubalign::untrusted;

use super::Exit;
use super::output::{Format, bytes, count as plural, csv, json_lines, progress, table};

#[derive(Args)]
pub(super) struct ScanArgs {
    /// Files, bundle directories, trees of bundles or Hugging Face cache directories.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// `table` for people; `json` prints one object per shard per line; `csv` one row per shard.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Require the data section to start on this many bytes (a power of two up to 16384; 16384 for
    /// page-aligned data on Apple silicon). Without it a shard is aligned when no tensor needs a copy,
    /// wherever its data starts.
    #[arg(long, value_name = "BYTES")]
    alignment: Option<Alignment>,
}

pub(super) fn run(args: &ScanArgs) -> anyhow::Result<Exit> {
    let bundles = discover(&args.paths).context("finding shards")?;
    let count = bundles.iter().map(|b| b.shards.len() as u64).sum();
    let bar = progress(count, "{spinner} scanning {pos}/{len} shards {wide_msg}");
    let report = scan(&bundles, args.alignment.unwrap_or_default(), &mut |shard| {
        bar.set_message(untrusted::escape_control(&shard.path).into_owned());
        bar.inc(1);
    });
    bar.finish_and_clear();
    match args.format {
        Format::Json => json_lines(&report.shards)?,
        Format::Csv => csv(&report.shards)?,
        Format::Table => print!("{}", render(&report)),
    }
    Ok(match report.worst() {
        Verdict::Aligned => Exit::Clean,
        Verdict::HeaderPad | Verdict::Relayout => Exit::Misaligned,
        Verdict::Invalid => Exit::Invalid,
    })
}

fn render(report: &ScanReport) -> String {
    let esc = hubalign::untrusted::escape_control;
    let mut rows = vec![
        ["shard", "verdict", "N", "start%8", "tensors", "misaligned", "copied at load", "writer"]
            .map(String::from)
            .to_vec(),
    ];
    let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    for s in &report.shards {
        rows.push(vec![
            s.path.clone(),
            s.verdict.to_string(),
            opt(s.header_len),
            opt(s.data_start_mod8),
            opt(s.tensors),
            opt(s.misaligned_tensors),
            s.misaligned_bytes.map_or("-".into(), bytes),
            s.writer.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = table(&rows);
    for s in report.shards.iter().filter(|s| s.error.is_some()) {
        out.push_str(&format!("invalid: {}: {}\n", esc(&s.path), esc(s.error.as_deref().unwrap_or_default())));
    }
    for b in &report.bundles {
        for p in &b.index_problems {
            out.push_str(&format!("index: {}: {}\n", esc(&b.dir), esc(p)));
        }
    }
    let t = &report.totals;
    let count = |v| t.by_verdict.get(&v).copied().unwrap_or(0);
    out.push_str(&format!(
        "\n{} in {}: {} aligned, {} header_pad, {} relayout, {} invalid. \
         A copying mmap loader would duplicate {} ({}). Read {} of {}.\n",
        plural(t.shards, "shard", "shards"),
        plural(report.bundles.len() as u64, "bundle", "bundles"),
        count(Verdict::Aligned),
        count(Verdict::HeaderPad),
        count(Verdict::Relayout),
        count(Verdict::Invalid),
        bytes(t.misaligned_bytes),
        plural(t.misaligned_tensors, "tensor", "tensors"),
        bytes(t.bytes_read),
        bytes(t.total_bytes),
    ));
    if count(Verdict::HeaderPad) + count(Verdict::Relayout) > 0 {
        out.push_str("Repair with: hubalign fix PATH --out DIR   (or --in-place)\n");
    }
    out
}
