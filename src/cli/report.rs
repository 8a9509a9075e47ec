//! `hubalign report`: what the audit store knows, by publisher, by writer, per repo, or per shard.

use anyhow::Context;
use clap::{ArgGroup, Args};
use hubalign::report;
use serde::Serialize;

use super::Exit;
use super::output::{Format, bytes, csv, json_lines, table};
use super::store_args::StoreArgs;

#[derive(Args)]
#[command(group(ArgGroup::new("view").args(["by_publisher", "by_writer", "repo", "affected", "shards"])))]
pub(super) struct ReportArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Create the database (empty, with its tables) if it does not exist, instead of refusing the path.
    #[arg(long)]
    create_db: bool,
    /// Per namespace: repos audited and affected, shards by verdict, GB a copying loader duplicates (the
    /// default).
    #[arg(long)]
    by_publisher: bool,
    /// Per writer (`__metadata__.format`).
    #[arg(long)]
    by_writer: bool,
    /// One repo's shards.
    #[arg(long, value_name = "ID")]
    repo: Option<String>,
    /// Affected repos, most duplicated bytes first: what the repack worker takes.
    #[arg(long)]
    affected: bool,
    /// Every shard in the store.
    #[arg(long)]
    shards: bool,
    /// With --affected: only repos duplicating at least this many GB.
    #[arg(long, default_value_t = 0.0, value_name = "GB")]
    min_gb: f64,
    /// `table` for people; `json` prints one object per row per line; `csv` has a header line.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

fn emit<T: Serialize>(format: Format, rows: &[T], render: impl FnOnce(&[T]) -> String) -> anyhow::Result<()> {
    match format {
        Format::Json => json_lines(rows),
        Format::Csv => csv(rows),
        Format::Table => {
            print!("{}", render(rows));
            Ok(())
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

pub(super) fn run(args: &ReportArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let store = if args.create_db { args.store.open().await? } else { args.store.open_existing().await? };
        if let Some(asked) = &args.repo {
            // Any letter case names the repo, as on the Hub.
            let id = &store.repo_spelled(asked).await?.unwrap_or_else(|| asked.clone());
            let rows = report::repo(&store, id).await?;
            if rows.is_empty() {
                anyhow::bail!("{id}: no shards recorded (not audited yet, not an MLX repo, or gated)");
            }
            emit(args.format, &rows, shard_table)?;
        } else if args.shards {
            emit(args.format, &report::shards(&store).await?, shard_table)?;
        } else if args.affected {
            emit(args.format, &report::affected(&store, args.min_gb).await?, |rows| {
                let mut t = vec![["repo", "sha", "header_pad", "relayout", "invalid", "misaligned", "duplicated"].map(String::from).to_vec()];
                for r in rows {
                    t.push(vec![
                        r.repo.clone(),
                        r.sha.chars().take(12).collect(),
                        r.shards_header_pad.to_string(),
                        r.shards_relayout.to_string(),
                        r.shards_invalid.to_string(),
                        r.misaligned_tensors.to_string(),
                        bytes(r.misaligned_bytes as u64),
                    ]);
                }
                table(&t)
            })?;
        } else if args.by_writer {
            emit(args.format, &report::by_writer(&store).await?, |rows| {
                let mut t = vec![["writer", "shards", "affected", "misaligned", "duplicated"].map(String::from).to_vec()];
                for r in rows {
                    t.push(vec![
                        r.writer.clone(),
                        r.shards.to_string(),
                        r.shards_affected.to_string(),
                        r.misaligned_tensors.to_string(),
                        bytes(r.misaligned_bytes as u64),
                    ]);
                }
                table(&t)
            })?;
        } else {
            emit(args.format, &report::by_publisher(&store).await?, |rows| {
                let mut t = vec![
                    ["publisher", "repos", "affected", "share", "aligned", "header_pad", "relayout", "invalid", "misaligned", "duplicated"]
                        .map(String::from)
                        .to_vec(),
                ];
                for r in rows {
                    t.push(vec![
                        r.namespace.clone(),
                        r.repos_audited.to_string(),
                        r.repos_affected.to_string(),
                        pct(r.share_affected),
                        r.shards_aligned.to_string(),
                        r.shards_header_pad.to_string(),
                        r.shards_relayout.to_string(),
                        r.shards_invalid.to_string(),
                        r.misaligned_tensors.to_string(),
                        bytes(r.misaligned_bytes as u64),
                    ]);
                }
                let total: i64 = rows.iter().map(|r| r.misaligned_bytes).sum();
                let affected: i64 = rows.iter().map(|r| r.repos_affected).sum();
                let audited: i64 = rows.iter().map(|r| r.repos_audited).sum();
                format!(
                    "{}\n{affected} of {audited} audited repos affected; a copying mmap loader would duplicate {} in all.\n",
                    table(&t),
                    bytes(total as u64)
                )
            })?;
        }
        Ok(Exit::Clean)
    })
}

fn shard_table(rows: &[hubalign::store::ShardRow]) -> String {
    let mut t = vec![
        ["repo", "shard", "verdict", "size", "N", "start%8", "tensors", "misaligned", "duplicated", "writer"]
            .map(String::from)
            .to_vec(),
    ];
    let opt = |v: Option<i64>| v.map_or("-".into(), |v| v.to_string());
    for r in rows {
        t.push(vec![
            r.repo.clone(),
            r.path.clone(),
            r.verdict.clone(),
            bytes(r.size as u64),
            opt(r.header_len),
            opt(r.data_start_mod8),
            opt(r.tensors),
            opt(r.misaligned_tensors),
            r.misaligned_bytes.map_or("-".into(), |b| bytes(b as u64)),
            r.writer.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = table(&t);
    for r in rows.iter().filter(|r| r.error.is_some()) {
        let esc = hubalign::untrusted::escape_control;
        out.push_str(&format!(
            "invalid: {}/{}: {}\n",
            esc(&r.repo),
            esc(&r.path),
            esc(r.error.as_deref().unwrap_or_default())
        ));
    }
    out
}
