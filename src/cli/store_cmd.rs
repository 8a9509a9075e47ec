//! `hubalign store export | import`: writes and reads a store's records as JSON Lines. Use it to move from
//! SQLite to PostgreSQL or back, and to compare two stores row for row.

use std::io::{BufReader, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::Exit;
use super::store_args::StoreArgs;

#[derive(Args)]
pub(super) struct StoreCmdArgs {
    #[command(subcommand)]
    action: StoreAction,
}

#[derive(Subcommand)]
enum StoreAction {
    /// Write every recorded row (runs, repos, shards, history, jobs and their events, mirrors) as JSON Lines.
    ///
    /// The first line names the format; then one `{"table": …, "row": {…}}` per row, parents before children,
    /// rows in key order. The per-repo and per-namespace sums are not written: an import rebuilds them.
    Export {
        #[command(flatten)]
        store: StoreArgs,
        /// Write here instead of to stdout. The file appears whole or not at all: a temporary file is renamed
        /// at the end.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Create the store or bring its tables up to date, as every command does when it opens the store, and
    /// exit. Use it as a deployment's migration step, before its services start.
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Read an export into an empty store, in one transaction: all of it or, on any error, nothing.
    ///
    /// To move a one-machine store to PostgreSQL, run `hubalign store export --db OLD.db --out store.jsonl`,
    /// then `hubalign store import --db postgres://… store.jsonl`. No worker or service may run on OLD.db
    /// meanwhile.
    Import {
        #[command(flatten)]
        store: StoreArgs,
        /// The export to read.
        #[arg(value_name = "FILE")]
        input: PathBuf,
    },
}

pub(super) fn run(args: &StoreCmdArgs) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let counts = runtime.block_on(async {
        match &args.action {
            StoreAction::Export { store, out: Some(path) } => {
                let store = store.open_existing().await?;
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
                let mut file = tempfile::NamedTempFile::new_in(dir)
                    .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
                let counts = {
                    let mut writer = std::io::BufWriter::new(file.as_file_mut());
                    let counts =
                        store.export(&mut writer).await.with_context(|| format!("exporting to {}", path.display()))?;
                    writer.flush().with_context(|| format!("writing {}", path.display()))?;
                    counts
                };
                file.persist(path).with_context(|| format!("renaming the export to {}", path.display()))?;
                anyhow::Ok(counts)
            }
            StoreAction::Export { store, out: None } => {
                let store = store.open_existing().await?;
                let mut stdout = std::io::BufWriter::new(std::io::stdout());
                Ok(store.export(&mut stdout).await.context("exporting to stdout")?)
            }
            StoreAction::Migrate { store } => {
                let store = store.open().await?;
                eprintln!("the {:?} store is up to date", store.backend());
                Ok(Vec::new())
            }
            StoreAction::Import { store, input } => {
                let file = std::fs::File::open(input).with_context(|| format!("opening {}", input.display()))?;
                let store = store.open().await?;
                let mut reader = BufReader::new(file);
                Ok(store.import(&mut reader).await.with_context(|| format!("importing {}", input.display()))?)
            }
        }
    })?;
    if !counts.is_empty() {
        let summary: Vec<String> = counts.iter().map(|(table, rows)| format!("{table} {rows}")).collect();
        eprintln!("rows: {}", summary.join(", "));
    }
    Ok(Exit::Clean)
}
