//! The audit store: SQLite through sqlx, in WAL mode, with the migrations in `migrations/` embedded.
//!
//! Writes happen in short transactions, and never while a network call is in flight: the crawler fetches,
//! then records.

pub mod changes;
pub mod jobs;
pub mod mirrors;
pub mod queries;
mod records;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use thiserror::Error;

pub use self::records::{RepoOutcome, RepoState, RunStats, ShardRow};

/// Why the store failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be opened or queried.
    #[error("store {what}: {source}")]
    Sql {
        /// What was being done.
        what: &'static str,
        /// The failure.
        #[source]
        source: sqlx::Error,
    },
    /// A migration could not be applied.
    #[error("store migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The database's directory could not be created.
    #[error("{}: cannot create the database directory: {source}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

fn sql(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Sql { what, source }
}

/// The store.
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
    /// Whether the database lives in memory (its connections share one cache, which `data_version` does
    /// not watch).
    in_memory: bool,
}

/// Where the database lives unless `--db` or `DATABASE_URL` say otherwise:
/// `$XDG_DATA_HOME/hubalign/hubalign.db`, else `~/.local/share/hubalign/hubalign.db`.
pub fn default_db_path() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data.join("hubalign").join("hubalign.db")
}

impl Store {
    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir { path: dir.to_owned(), source })?;
        }
        Store::connect(SqliteConnectOptions::new().filename(path), false).await
    }

    /// Opens a `sqlite:` URL (`sqlite::memory:` for tests).
    pub async fn open_url(url: &str) -> Result<Store, StoreError> {
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        Store::connect(SqliteConnectOptions::from_str(url).map_err(sql("parse URL"))?, in_memory).await
    }

    async fn connect(options: SqliteConnectOptions, in_memory: bool) -> Result<Store, StoreError> {
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(sql("open"))?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Store { pool, in_memory })
    }

    /// The pool, for queries elsewhere in the crate.
    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}
