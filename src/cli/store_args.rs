//! Where the audit store is: `--db PATH|URL`, else `DATABASE_URL` (a path, `sqlite:PATH` or
//! `postgres://…`), else the user's data directory. A location is checked before anything is opened. An
//! unknown scheme, or a file in a directory that is not there, is the caller's mistake (exit 2). It never
//! makes a new store somewhere nobody looks.

use std::path::PathBuf;

use clap::Args;
use hubalign::store::{Location, Store, StoreError, default_db_path};

use super::UsageError;

/// The store's location.
#[derive(Args, Clone, Debug)]
pub(super) struct StoreArgs {
    /// SQLite database file (a path, or sqlite:PATH), or a PostgreSQL server's `postgres://user@host/db` URL.
    /// Many workers and replicas can share a server's store. The file's directory must exist [default:
    /// DATABASE_URL if set, else $XDG_DATA_HOME/hubalign/hubalign.db].
    #[arg(long, value_name = "PATH|URL")]
    db: Option<Location>,
}

impl StoreArgs {
    /// Returns where the store is: `--db`, else `DATABASE_URL`; `None` for the default file.
    pub(super) fn location(&self) -> anyhow::Result<Option<Location>> {
        if let Some(db) = &self.db {
            return Ok(Some(db.clone()));
        }
        match std::env::var("DATABASE_URL") {
            Ok(url) => url.parse().map(Some).map_err(|e| UsageError(format!("DATABASE_URL: {e}")).into()),
            Err(_) => Ok(None),
        }
    }

    /// Returns the store's location for display, without a server's password.
    pub(super) fn shown(&self) -> String {
        match self.location() {
            Ok(Some(location)) => location.to_string(),
            _ => default_db_path().display().to_string(),
        }
    }

    /// Returns where a worker stages bundles unless told. For a database file, that is beside it
    /// (`NAME.work/`), so two stores on one machine never share staged files. For a server's store, it is
    /// beside the default file.
    pub(super) fn default_work_dir(&self) -> anyhow::Result<PathBuf> {
        Ok(match self.location()? {
            Some(Location::Sqlite(db)) => db.with_extension("work"),
            _ => default_db_path().with_extension("work"),
        })
    }

    /// Opens a store that must already exist, for reading it. A missing database file is a mistyped path,
    /// not an empty store to report on.
    pub(super) async fn open_existing(&self) -> anyhow::Result<Store> {
        let path = match self.location()? {
            Some(Location::Sqlite(path)) => path,
            Some(_) => return self.open().await,
            None => default_db_path(),
        };
        if !path.exists() {
            let why = format!(
                "{}: no such database (`hubalign audit --db {}` creates one; or check --db)",
                path.display(),
                path.display()
            );
            return Err(UsageError(why).into());
        }
        self.open().await
    }

    /// Opens the store, creating the database file if needed (and, for the default file only, its
    /// directory), and applies migrations.
    pub(super) async fn open(&self) -> anyhow::Result<Store> {
        let (opened, shown) = match self.location()? {
            Some(location) => (Store::open_location(&location).await, location.to_string()),
            None => (Store::open_default().await, default_db_path().display().to_string()),
        };
        opened.map_err(|e| match e {
            StoreError::NoDir { .. } | StoreError::Location(_) => UsageError(e.to_string()).into(),
            e => anyhow::Error::new(e).context(format!("opening {shown}")),
        })
    }
}
