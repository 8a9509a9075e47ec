//! `hubalign scan`: audit local shards from their headers, and say what to do about each affected bundle.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use hubalign::bundle::discover;
use hubalign::hub::config::env_flag;
use hubalign::safetensors::{Alignment, Verdict};
use hubalign::scan::next_step::{self, MirrorAnswers, MirrorLookup};
use hubalign::scan::{ScanReport, mirrors, scan};
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
    /// Look for aligned mirrors under this namespace (repeatable; the first that has one wins). An affected
    /// model from a Hugging Face cache costs one Hub request; with HF_HUB_OFFLINE=1 none is made.
    #[arg(long = "mirrors", value_name = "NAMESPACE", default_value = next_step::DEFAULT_MIRRORS)]
    mirrors: Vec<String>,
    /// Hub endpoint for the mirror lookup [default: HF_ENDPOINT, else https://huggingface.co].
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
}

pub(super) fn run(args: &ScanArgs) -> anyhow::Result<Exit> {
    for ns in &args.mirrors {
        untrusted::check_namespace(ns).map_err(|e| super::UsageError(format!("--mirrors {ns:?}: {e}")))?;
    }
    let bundles = discover(&args.paths).context("finding shards")?;
    let count = bundles.iter().map(|b| b.shards.len() as u64).sum();
    let bar = progress(count, "{spinner} scanning {pos}/{len} shards {wide_msg}");
    let report = scan(&bundles, args.alignment.unwrap_or_default(), &mut |shard| {
        bar.set_message(untrusted::escape_control(&shard.path).into_owned());
        bar.inc(1);
    });
    bar.finish_and_clear();
    let mut report = report;
    let answers = look_up_mirrors(&report, args)?;
    next_step::plan(&mut report, &answers);
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

/// Asks the Hub for the mirrors of the affected cached models. Asks nothing under `HF_HUB_OFFLINE`.
fn look_up_mirrors(report: &ScanReport, args: &ScanArgs) -> anyhow::Result<MirrorAnswers> {
    let sources = next_step::sources_to_look_up(report);
    if sources.is_empty() {
        return Ok(MirrorAnswers::Asked(Default::default()));
    }
    if env_flag("HF_HUB_OFFLINE") {
        return Ok(MirrorAnswers::Offline);
    }
    let config = super::hub_config(args.endpoint.clone(), None)?;
    // A lookup is a hint beside the scan: one quick retry, not the service's patience.
    let retry = hubalign::hub::retry::RetryPolicy { max_attempts: 2, ..Default::default() };
    let hub = hubalign::hub::HubClient::new(config, retry)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    Ok(MirrorAnswers::Asked(runtime.block_on(mirrors::look_up(&hub, &sources, &args.mirrors))))
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
    out.push_str(&next_steps(report));
    out
}

/// Says what to do about each affected bundle: the mirror to download, or the repair to run and how to load
/// it.
fn next_steps(report: &ScanReport) -> String {
    let esc = hubalign::untrusted::escape_control;
    let mut out = String::new();
    for b in report.bundles.iter().filter(|b| b.next.command.is_some()) {
        let next = &b.next;
        let name = b.repo_id.as_deref().unwrap_or(&b.dir);
        let why = match next.mirror_lookup {
            MirrorLookup::Found => "an aligned mirror exists. Download it".to_owned(),
            MirrorLookup::NotFound => "no aligned mirror yet. Repair a copy outside the cache".to_owned(),
            MirrorLookup::Offline => {
                "HF_HUB_OFFLINE is set, so no mirror was looked for. Repair a copy outside the cache".to_owned()
            }
            MirrorLookup::Failed => format!(
                "the mirror lookup failed ({}). Repair a copy outside the cache",
                next.lookup_error.as_deref().unwrap_or("no answer")
            ),
            MirrorLookup::NoSource | MirrorLookup::NotNeeded => "repair a copy (or use --in-place)".to_owned(),
        };
        out.push_str(&format!("\n{}: {}:\n", esc(name), esc(&why)));
        out.push_str(&format!("  {}\n", esc(next.command.as_deref().unwrap_or_default())));
        if let Some(dir) = &next.repaired_into {
            let quoted = shlex::try_quote(dir).map_or_else(|_| dir.clone(), std::borrow::Cow::into_owned);
            out.push_str(&format!(
                "  then load it from there: mlx_lm.load({}) or mlx_lm.generate --model {}\n",
                hubalign::untrusted::python_string(dir),
                esc(&quoted)
            ));
        }
    }
    out
}
