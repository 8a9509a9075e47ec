//! `hubalign dataset`: the audit as a public dataset of Parquet tables with a card.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use hubalign::dataset::Snapshot;

use super::Exit;
use super::store_args::StoreArgs;

#[derive(Args)]
pub(super) struct DatasetArgs {
    #[command(subcommand)]
    command: DatasetCommand,
}

#[derive(Subcommand)]
enum DatasetCommand {
    /// Write today's snapshot of the public audit into a directory, as the dataset repo holds it.
    ///
    /// Only what the Hub shows anyone: repos last audited public (neither private, gated nor disabled), their
    /// shards, their public mirrors, and each publisher's sums over them. Writes
    /// <table>/<date>/part-NN.parquet for the tables repos, shards, mirrors and publishers, and README.md (the
    /// dataset card), over what the directory held for that date.
    Write(WriteArgs),
}

#[derive(Args)]
struct WriteArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The directory to write into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The snapshot's date, YYYY-MM-DD (default: today, UTC).
    #[arg(long, value_name = "DATE")]
    date: Option<String>,
    /// The dataset repo the card's examples name.
    #[arg(long, value_name = "REPO", default_value = "hubalign/mlx-alignment-audit")]
    repo: String,
}

pub(super) fn run(args: &DatasetArgs) -> anyhow::Result<Exit> {
    let DatasetCommand::Write(args) = &args.command;
    hubalign::gate::check_repo_id(&args.repo).map_err(|e| anyhow::anyhow!("--repo {}: {e}", args.repo))?;
    let date = args.date.clone().unwrap_or_else(|| chrono::Utc::now().format("%Y-%m-%d").to_string());
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let snapshot = runtime.block_on(async {
        let store = args.store.open_existing().await?;
        anyhow::Ok(Snapshot::of(&store, &date).await?)
    })?;
    let files = snapshot.files(&args.repo)?;
    for (rel, bytes) in &files {
        let path = args.out.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        hubalign::safe_fs::write_atomic(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    let bytes: usize = files.values().map(Vec::len).sum();
    eprintln!(
        "{}: {} repos, {} shards, {} mirrors, {} publishers in {} files ({bytes} bytes)",
        args.out.display(),
        snapshot.repos.len(),
        snapshot.shards.len(),
        snapshot.mirrors.len(),
        snapshot.publishers.len(),
        files.len()
    );
    Ok(Exit::Clean)
}
