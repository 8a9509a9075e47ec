//! `hubalign dataset`: the audit as a public dataset of Parquet tables with a card.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use hubalign::dataset::Snapshot;
use hubalign::dataset::push::Mode;

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
    /// Holds only what the Hub shows anyone. That is the repos last audited public (neither private, gated
    /// nor disabled), their shards, their public mirrors, and each publisher's sums over them. Writes
    /// <table>/<date>/part-NN.parquet for the tables repos, shards, mirrors and publishers, and README.md (the
    /// dataset card), over what the directory held for that date.
    Write(WriteArgs),
    /// Publish today's snapshot to a dataset repo on the Hub: only the files that changed, in one commit.
    ///
    /// Creates the repo (public) if it does not exist, and records it as hubalign's. An existing repo must be
    /// hubalign's: recorded in the store, or with hubalign's marker in its card. Any other repo is refused.
    /// Files the repo already holds are not sent (the same LFS oid, or the same git blob for the card). Parts
    /// of the same day that the snapshot no longer has are deleted. So are the other days of the tables that
    /// name repos (repos, shards, mirrors). Earlier days of publishers are kept. A snapshot that changed
    /// nothing commits nothing.
    Push(PushArgs),
}

#[derive(Args)]
struct PushArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The dataset repo, NAMESPACE/NAME (the token must be able to write there).
    #[arg(long, value_name = "REPO")]
    repo: String,
    /// The snapshot's date, YYYY-MM-DD (default: today, UTC).
    #[arg(long, value_name = "DATE")]
    date: Option<String>,
    /// Hub endpoint [default: HF_ENDPOINT, else https://huggingface.co].
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// Hub token [default: HF_TOKEN, else the token file under HF_HOME]; never logged.
    #[arg(long, value_name = "TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the Hub and the store, and print the files the push would write and delete; change nothing.
    #[arg(long)]
    dry_run: bool,
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
    match &args.command {
        DatasetCommand::Write(args) => write(args),
        DatasetCommand::Push(args) => push(args),
    }
}

/// Returns the date asked for, or today (UTC).
fn day(date: Option<&String>) -> String {
    date.cloned().unwrap_or_else(hubalign::dataset::today)
}

/// Checks `repo`, then returns the store's snapshot of `date` (today if none) and its tables' parts. Encoding
/// is CPU work, so it runs here, not on the runtime.
fn snapshot(
    runtime: &tokio::runtime::Runtime,
    store: &StoreArgs,
    repo: &str,
    date: Option<&String>,
) -> anyhow::Result<(Snapshot, BTreeMap<String, Vec<u8>>)> {
    hubalign::untrusted::check_repo_id(repo).map_err(|e| anyhow::anyhow!("--repo {repo}: {e}"))?;
    let date = day(date);
    let snapshot = runtime.block_on(async {
        let store = store.open_existing().await?;
        anyhow::Ok(Snapshot::of(&store, &date).await?)
    })?;
    let parts = snapshot.parts()?;
    Ok((snapshot, parts))
}

fn push(args: &PushArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let (snapshot, parts) = snapshot(&runtime, &args.store, &args.repo, args.date.as_ref())?;
    let config = super::hub_config(args.endpoint.clone(), args.token.clone())?;
    let hub = hubalign::hub::HubClient::new(config, hubalign::hub::retry::RetryPolicy::default())?;
    let scratch = tempfile::tempdir().context("making a scratch directory")?;
    let mode = if args.dry_run { Mode::DryRun } else { Mode::Apply };
    let pushed = runtime.block_on(async {
        let store = args.store.open_existing().await?;
        let pushed =
            hubalign::dataset::push::push((&hub, &store), &args.repo, (&snapshot, parts), scratch.path(), mode).await?;
        anyhow::Ok(pushed)
    })?;
    if args.dry_run {
        if pushed.created {
            println!("would create {} (public)", args.repo);
        }
        for path in &pushed.written {
            println!("would write {path}");
        }
        for path in &pushed.deleted {
            println!("would delete {path}");
        }
        eprintln!(
            "{}: dry run: {} files would be written ({} bytes), {} deleted, {} unchanged",
            args.repo,
            pushed.written.len(),
            pushed.bytes_written,
            pushed.deleted.len(),
            pushed.unchanged
        );
        return Ok(Exit::Clean);
    }
    match &pushed.commit {
        None => eprintln!("{}: unchanged ({} files); nothing committed", args.repo, pushed.unchanged),
        Some(commit) => eprintln!(
            "{}: commit {commit}: {} files written ({} bytes), {} deleted, {} unchanged; {} bytes sent ({} repos, {} shards)",
            args.repo,
            pushed.written.len(),
            pushed.bytes_written,
            pushed.deleted.len(),
            pushed.unchanged,
            pushed.bytes_sent,
            snapshot.repos.len(),
            snapshot.shards.len()
        ),
    }
    Ok(Exit::Clean)
}

fn write(args: &WriteArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let (snapshot, mut files) = snapshot(&runtime, &args.store, &args.repo, args.date.as_ref())?;
    let date = &snapshot.date;
    // The tables that name repos hold the newest day only, as on the Hub.
    let found = hubalign::dataset::days_in(&args.out);
    for rel in hubalign::dataset::stale_parts(found.iter().map(|(t, d)| (*t, d.as_str())), date) {
        remove_if_there(&args.out.join(rel))?;
    }
    // A table with no rows today keeps its config while the directory holds its parts of other days.
    let earlier = hubalign::dataset::tables_with_other_days(&args.out, date);
    files.insert("README.md".to_owned(), snapshot.card(&args.repo, &earlier)?.into_bytes());
    for (rel, bytes) in &files {
        let path = args.out.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        hubalign::safe_fs::write_atomic(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    // Remove the parts of that day that the snapshot no longer has, say because a publisher's repos all went
    // private. The directory then holds this snapshot and nothing of an older one.
    for rel in hubalign::dataset::day_parts(date).into_iter().filter(|rel| !files.contains_key(rel)) {
        remove_if_there(&args.out.join(&rel))?;
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

/// Removes the file at `path`; one already gone is not an error.
fn remove_if_there(path: &std::path::Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}
