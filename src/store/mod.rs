//! The audit store, through sqlx: SQLite (in WAL mode) on one machine, PostgreSQL where many share it. One
//! API covers both, and the location's scheme picks the backend. Each backend's migrations
//! (`migrations/sqlite`, `migrations/postgres`) are embedded. Queries are written once, in the SQL both
//! accept: `$N` parameters, and explicit casts where PostgreSQL's types are stricter. They run on whichever
//! pool the store holds.
//!
//! Writes happen in short transactions, and never while a network call is in flight: the crawler fetches,
//! then records.

pub(crate) mod browse;
pub(crate) mod changes;
pub(crate) mod clock;
pub mod dataset;
pub mod jobs;
pub mod leases;
pub(crate) mod location;
pub mod metal;
pub mod mirrors;
pub mod notes;
mod outcomes;
pub mod owned;
pub(crate) mod pull_requests;
pub mod queries;
mod records;
pub(crate) mod transfer;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, PgPool, SqlitePool};
use thiserror::Error;

pub use self::location::{Location, LocationError};
pub use self::records::{ListingEntry, RefusedEntry, RepoOutcome, RepoState, RunKind, RunStats, ShardRow};

/// Reports a migration the store holds but `migrator` does not know: it comes from a newer release.
/// The error says so, with the fix. Any other failure stays as it is.
fn newer_schema(migrator: &sqlx::migrate::Migrator, e: sqlx::migrate::MigrateError) -> StoreError {
    match e {
        sqlx::migrate::MigrateError::VersionMissing(version) => {
            let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
            StoreError::NewerSchema { version, known }
        }
        e => StoreError::Migrate(e),
    }
}

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
    /// The store was written by a newer hubalign: it holds a migration this release does not know.
    #[error(
        "the store was written by a newer release of hubalign (its schema has migration {version}; this one \
         knows up to {known}): upgrade hubalign, or give --db another store"
    )]
    NewerSchema {
        /// The unknown migration the store holds.
        version: i64,
        /// The newest migration this release knows.
        known: i64,
    },
    /// The lock that lets one process at a time migrate a SQLite file could not be taken.
    #[error("{}: cannot lock the database for its migrations: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The database's directory could not be created.
    #[error("{}: cannot create the database directory: {source}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The database file's directory is not there. That is a mistyped path, not a place to make a new store.
    #[error("{}: no such directory for the database (create it, or check the path)", path.display())]
    NoDir {
        /// The directory.
        path: PathBuf,
    },
    /// The location is not one a store can be at.
    #[error(transparent)]
    Location(#[from] LocationError),
}

fn sql(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Sql { what, source }
}

/// Returns each repo's last entry in `items`, sorted by id. A batch made from the Hub's answers may name a
/// repo twice, and writing the entries in turn would leave the last. The sort gives every writer one order,
/// so two transactions writing overlapping repos take their locks in the same order and never deadlock.
fn last_of_each<'a, T>(items: &'a [T], id: impl Fn(&'a T) -> &'a str) -> Vec<&'a T> {
    let mut last_of: std::collections::HashMap<&str, &T> = std::collections::HashMap::with_capacity(items.len());
    for item in items {
        last_of.insert(id(item), item);
    }
    let mut unique: Vec<&T> = last_of.into_values().collect();
    unique.sort_by(|a, b| id(a).cmp(id(b)));
    unique
}

/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// One file on one machine: the embedded default.
    Sqlite,
    /// A server that many workers and replicas share.
    Postgres,
}

/// The pool of the store's backend.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the store's pool, whichever backend it is. The body is compiled once
/// per backend, so the same query text runs on either, with each driver's own types.
macro_rules! on_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match $store.pool() {
            $crate::store::Pool::Sqlite($pool) => $body,
            $crate::store::Pool::Postgres($pool) => $body,
        }
    };
}
pub(crate) use on_pool;

/// Holds the audits, the jobs and the mirrors, in SQLite or PostgreSQL.
/// Clones share one connection pool.
#[derive(Debug, Clone)]
pub struct Store {
    pool: Pool,
    /// Whether the database lives in memory. Its connections then share one cache, which `data_version` does
    /// not watch.
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
    /// Opens (creating if needed) the database file at `path`, whose directory must exist, and applies
    /// pending migrations.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            return Err(StoreError::NoDir { path: dir.to_owned() });
        }
        Store::connect(SqliteConnectOptions::new().filename(path), false).await
    }

    /// Opens the database at the default path ([`default_db_path`]), creating its directory if needed. This
    /// is the one place that makes a store's directory rather than expecting it.
    pub async fn open_default() -> Result<Store, StoreError> {
        let path = default_db_path();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir { path: dir.to_owned(), source })?;
        }
        Store::open(&path).await
    }

    /// Opens `location` as [`Location`] reads it: a SQLite file's path or `sqlite:` URL, a PostgreSQL
    /// server's `postgres://` URL, or `sqlite::memory:`. Any other scheme is refused.
    pub async fn open_at(location: &str) -> Result<Store, StoreError> {
        Store::open_location(&location.parse()?).await
    }

    /// Opens a parsed location.
    pub async fn open_location(location: &Location) -> Result<Store, StoreError> {
        match location {
            Location::Sqlite(path) => Store::open(path).await,
            Location::Memory => {
                Store::connect(SqliteConnectOptions::from_str("sqlite::memory:").map_err(sql("parse URL"))?, true).await
            }
            Location::Postgres(url) => {
                Store::connect_postgres(PgConnectOptions::from_str(url).map_err(sql("parse URL"))?).await
            }
        }
    }

    async fn connect_postgres(options: PgConnectOptions) -> Result<Store, StoreError> {
        let options = options.application_name("hubalign");
        // Open one connection first. A wrong host, port, user or database then fails at once with the
        // server's reason, not as "timed out" after the pool's 30 s of retries.
        sqlx::Connection::close(options.connect().await.map_err(sql("connect"))?).await.map_err(sql("connect"))?;
        let pool = PgPoolOptions::new()
            .max_connections(POSTGRES_CONNECTIONS)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(sql("open"))?;
        let migrator = sqlx::migrate!("./migrations/postgres");
        migrator.run(&pool).await.map_err(|e| newer_schema(&migrator, e))?;
        Ok(Store { pool: Pool::Postgres(pool), in_memory: false })
    }

    async fn connect(options: SqliteConnectOptions, in_memory: bool) -> Result<Store, StoreError> {
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(30));
        // Turning a new file to WAL takes a lock that SQLite's busy handler does not wait for. Openers racing on
        // a new file get "database is locked" at once. The switch takes milliseconds, so retry the open for a
        // while, on that error only.
        let mut tries = 0u32;
        let pool = loop {
            let opened = SqlitePoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options.clone())
                .await;
            match opened {
                Err(e) if is_busy(&e) && tries < OPEN_BUSY_TRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(tries.min(10)))).await;
                }
                opened => break opened.map_err(sql("open"))?,
            }
        };
        // sqlx locks PostgreSQL's migrations (an advisory lock) but not SQLite's. Two processes opening one new
        // file at once would both apply its first migration, and one would fail. So a file's pending
        // migrations run under an exclusive lock of a file beside it, held until they are done. The second
        // opener then finds nothing left to apply.
        let migrator = sqlx::migrate!("./migrations/sqlite");
        let _migrating = if in_memory || !pending(&migrator, &pool).await {
            None
        } else {
            migration_lock(options.get_filename()).await?
        };
        migrator.run(&pool).await.map_err(|e| newer_schema(&migrator, e))?;
        Ok(Store { pool: Pool::Sqlite(pool), in_memory })
    }

    /// Returns the pool, for queries elsewhere in the crate (through [`on_pool!`]).
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Returns how a transaction that writes begins. SQLite's takes the write lock at once. A deferred one
    /// that reads first fails with "database is locked" when another connection wrote meanwhile, whatever the
    /// busy timeout. PostgreSQL locks rows as they are written.
    pub(crate) fn begin_write(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "BEGIN IMMEDIATE",
            Pool::Postgres(_) => "BEGIN",
        }
    }

    /// Returns how a read-only transaction that must see one snapshot begins. SQLite's deferred transaction
    /// keeps the snapshot its first read takes (WAL). PostgreSQL's default, read committed, gives each
    /// statement its own snapshot.
    pub(crate) fn begin_snapshot(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "BEGIN",
            Pool::Postgres(_) => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        }
    }

    /// Returns which database this store runs on.
    pub fn backend(&self) -> Backend {
        match self.pool {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
        }
    }
}

/// Whether `migrator` has a migration the database at `pool` has not applied. A database without the
/// migrations' table has them all to apply.
async fn pending(migrator: &sqlx::migrate::Migrator, pool: &SqlitePool) -> bool {
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
        .fetch_all(pool)
        .await
        .unwrap_or_default();
    migrator.iter().any(|m| !applied.contains(&m.version))
}

/// Takes the exclusive lock on `<database>-migrate`, beside the database's real path with links resolved.
/// It creates the lock file if need be and leaves it for the next opener. It waits on a blocking thread
/// while another process migrates. The lock goes with the returned file. Returns `None` when no file is
/// behind the database. Also returns `None`, with a warning, when the lock file is missing and this user
/// cannot create it. The migrations then run as sqlx runs them.
async fn migration_lock(database: &Path) -> Result<Option<std::fs::File>, StoreError> {
    let Ok(database) = std::fs::canonicalize(database) else { return Ok(None) };
    let mut name = database.into_os_string();
    name.push("-migrate");
    let path = PathBuf::from(name);
    let locking = path.clone();
    let taken = tokio::task::spawn_blocking(move || {
        // A lock needs no write access: a lock file another user created is opened for reading.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&locking)
            .or_else(|_| std::fs::File::open(&locking))?;
        file.lock()?;
        Ok(file)
    })
    .await
    .unwrap_or_else(|joined| Err(std::io::Error::other(joined)));
    match taken {
        Ok(file) => Ok(Some(file)),
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(path = %path.display(), "cannot create the migrations' lock file; migrating without it");
            Ok(None)
        }
        Err(source) => Err(StoreError::Lock { path, source }),
    }
}

/// How often opening a SQLite file is tried while another opener holds it busy, about 9 s in all.
const OPEN_BUSY_TRIES: u32 = 50;

/// Whether SQLite said the database is busy or locked.
fn is_busy(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("5" | "6")))
}

/// Connections each process keeps to a PostgreSQL server. That is enough for the pages, the scheduler and a
/// few workers at once, and few enough that dozens of processes fit a default server's 100.
const POSTGRES_CONNECTIONS: u32 = 8;

/// Returns `url` with its password masked, for messages and logs.
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => "(an unparsable database URL)".to_owned(),
    }
}

/// For the store's own tests: one fresh store on each backend of the tier.
#[cfg(test)]
pub(crate) mod both {
    use super::Store;

    /// A store under test and what keeps it alive.
    pub(crate) struct TestStore {
        pub(crate) store: Store,
        _dir: tempfile::TempDir,
    }

    /// Returns a SQLite store, and with `system-tests` (tier 2) a database of its own on the process's scratch
    /// PostgreSQL server. A tier-2 run on a machine without PostgreSQL fails here rather than test one
    /// backend silently.
    pub(crate) async fn stores() -> Vec<TestStore> {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = Store::open(&dir.path().join("t.db")).await.unwrap();
        #[cfg_attr(not(feature = "system-tests"), allow(unused_mut))]
        let mut stores = vec![TestStore { store: sqlite, _dir: dir }];
        #[cfg(feature = "system-tests")]
        {
            use hubalign_test_support::scratch::ScratchPostgres;
            let url = ScratchPostgres::shared().and_then(ScratchPostgres::database).unwrap();
            let postgres = Store::open_at(&url).await.unwrap();
            stores.push(TestStore { store: postgres, _dir: tempfile::tempdir().unwrap() });
        }
        stores
    }
}

#[cfg(test)]
mod tests {
    use super::Store;

    /// Processes that open one new SQLite file at once apply every migration once between them. None fails
    /// on a column another added. Two `serve` replicas started together do this, or a worker and a status
    /// page.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn stores_opened_at_once_on_a_new_file_migrate_it_once() {
        for round in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("new.db");
            let opening: Vec<_> = (0..8)
                .map(|_| {
                    let path = path.clone();
                    tokio::spawn(async move { Store::open(&path).await })
                })
                .collect();
            for opened in opening {
                let store = opened.await.unwrap();
                assert!(store.is_ok(), "round {round}: {:?}", store.err());
            }
        }
    }

    /// A store with nothing to migrate takes no lock, since it may be on a disk or behind a lock file this
    /// user cannot write. A store reached through a link locks the file itself.
    #[tokio::test]
    async fn only_a_store_with_migrations_to_apply_is_locked_and_by_its_real_path() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.db");
        let link = dir.path().join("link.db");
        std::fs::write(&real, b"").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        drop(Store::open(&link).await.unwrap());
        let lock = dir.path().join("real.db-migrate");
        assert!(lock.exists() && !dir.path().join("link.db-migrate").exists());
        std::fs::remove_file(&lock).unwrap();
        drop(Store::open(&real).await.unwrap());
        assert!(!lock.exists(), "nothing to migrate, nothing locked");
    }
}
