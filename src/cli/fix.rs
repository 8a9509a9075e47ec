//! `hubalign fix`: repair shards in place or into a new directory.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use hubalign::bundle::discover;
use hubalign::fix::{Destination, FixEvent, FixOptions, FixReport, fix};
use hubalign::safetensors::Alignment;
use hubalign::safetensors::rewrite::Digests;
use hubalign::untrusted;

use super::output::{Format, bytes, count, csv, json_lines, progress, table};
use super::{Exit, UsageError};

#[derive(Args)]
pub(super) struct FixArgs {
    /// Files or bundle directories (with --in-place, also trees of bundles).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Write the repaired bundle into DIR under the same file names, copying every other file.
    #[arg(long, value_name = "DIR", conflicts_with = "in_place")]
    out: Option<PathBuf>,
    /// Replace each shard where it is (refused for Hugging Face cache blobs and symlinks).
    #[arg(long)]
    in_place: bool,
    /// Put every repaired data section on this many bytes (a power of two up to 16384; 16384 page-aligns for
    /// Apple silicon), and repair shards whose data starts elsewhere. Without it, shards no loader copies from
    /// are left alone and repairs pad to 8.
    #[arg(long, value_name = "BYTES")]
    alignment: Option<Alignment>,
    /// Say what would be done; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Which SHA-256 digests the manifest records. `minimal` records what proves the result bit-identical,
    /// each digest computed in the one pass that reads the bytes. For a header-padded shard, that is the
    /// payload's digest, which proves every tensor. For a reordered shard, it is each tensor's and the new
    /// payload's. `all` also records the source file's, the source payload's, the new file's and every
    /// tensor's. Each shard's `digests` field lists its own.
    #[arg(long, value_enum, default_value = "minimal")]
    digests: DigestsArg,
    /// `table` for people; `json` prints one object per bundle per line; `csv` one row per shard.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

/// The values of `--digests`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum DigestsArg {
    Minimal,
    All,
}

pub(super) fn run(args: &FixArgs) -> anyhow::Result<Exit> {
    let destination = match (&args.out, args.in_place) {
        (Some(out), _) => Destination::OutDir(out.clone()),
        (None, true) => Destination::InPlace,
        (None, false) if args.dry_run => Destination::InPlace,
        (None, false) => {
            let why = "say where the repaired shards go: --out DIR, or --in-place (or preview with --dry-run)";
            return Err(UsageError(why.into()).into());
        }
    };
    let bundles = discover(&args.paths).context("finding shards")?;
    let digests = match args.digests {
        DigestsArg::Minimal => Digests::Minimal,
        DigestsArg::All => Digests::All,
    };
    let opts = FixOptions {
        destination,
        alignment: args.alignment.unwrap_or_default(),
        dry_run: args.dry_run,
        digests,
        prepared: None,
    };
    let bar = progress(0, "{spinner} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {wide_msg}");
    let report = fix(&bundles, &opts, &mut |event| match event {
        FixEvent::Total(n) => bar.set_length(n),
        FixEvent::Shard(path) => bar.set_message(untrusted::escape_control(&path.display().to_string()).into_owned()),
        FixEvent::Bytes(n) => bar.inc(n),
    })?;
    bar.finish_and_clear();
    match args.format {
        Format::Json => json_lines(&report.bundles)?,
        Format::Csv => csv(&report.bundles.iter().flat_map(|b| b.shards.clone()).collect::<Vec<_>>())?,
        Format::Table => print!("{}", render(&report)),
    }
    let t = &report.totals;
    Ok(if t.failed > 0 {
        Exit::Failure
    } else if t.invalid > 0 {
        Exit::Invalid
    } else if report.dry_run && t.rewritten > 0 {
        Exit::Misaligned
    } else {
        Exit::Clean
    })
}

fn render(report: &FixReport) -> String {
    let esc = hubalign::untrusted::escape_control;
    let mut rows = vec![
        ["shard", "verdict", "method", "padding", "misaligned before", "written", "result"].map(String::from).to_vec(),
    ];
    for s in report.bundles.iter().flat_map(|b| &b.shards) {
        let result = match (&s.error, &s.output) {
            (Some(_), _) => "see below".to_owned(),
            (None, Some(out)) => out.clone(),
            (None, None) => "(dry run)".to_owned(),
        };
        rows.push(vec![
            s.path.clone(),
            s.verdict.to_string(),
            s.method.map_or("-".into(), |m| m.as_str().to_owned()),
            s.padding_bytes.to_string(),
            format!("{} ({})", s.misaligned_tensors_before, bytes(s.misaligned_bytes_before)),
            bytes(s.bytes_written),
            result,
        ]);
    }
    let mut out = table(&rows);
    for s in report.bundles.iter().flat_map(|b| &b.shards) {
        if let Some(e) = &s.error {
            out.push_str(&format!("{}: {}\n", esc(&s.path), esc(e)));
        }
    }
    for b in &report.bundles {
        if let Some(m) = &b.manifest {
            out.push_str(&format!("manifest: {}\n", esc(m)));
        }
        if !b.copied_files.is_empty() {
            out.push_str(&format!("copied into {}: {}\n", esc(&b.output_dir), esc(&b.copied_files.join(", "))));
        }
    }
    let t = &report.totals;
    let verb = if report.dry_run { "would rewrite" } else { "rewrote" };
    out.push_str(&format!(
        "\n{verb} {}, {} already aligned, {} invalid left alone, {} failed; wrote {}.\n",
        count(t.rewritten, "shard", "shards"),
        t.unchanged,
        t.invalid,
        t.failed,
        bytes(t.bytes_written)
    ));
    out
}
