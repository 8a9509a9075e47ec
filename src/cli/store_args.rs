//! Where the audit store is: `--db PATH|URL`, else `DATABASE_URL` (`sqlite:…` or `postgres://…`), else the
//! user's data directory.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use hubalign::store::{Store, default_db_path, is_postgres_url, redact_url};

use super::UsageError;

/// The store's location.
#[derive(Args, Clone, Debug)]
pub(super) struct StoreArgs {
    /// SQLite database file, or a PostgreSQL server's `postgres://user@host/db` URL (one store that many
    /// workers and replicas share) [default: DATABASE_URL if set, else $XDG_DATA_HOME/hubalign/hubalign.db].
    #[arg(long, value_name = "PATH|URL")]
    db: Option<String>,
}

impl StoreArgs {
    /// Where a worker stages bundles unless told: beside the database (`NAME.work/`), so two stores on one
    /// machine never share staged files.
    pub(super) fn default_work_dir(&self) -> PathBuf {
        match self.db.as_deref().filter(|db| !is_postgres_url(db)) {
            Some(db) => PathBuf::from(db).with_extension("work"),
            None => default_db_path().with_extension("work"),
        }
    }

    /// Opens a store that must already exist (for reading it): a database file that is not there is a
    /// mistyped path, not an empty store to report on.
    pub(super) async fn open_existing(&self) -> anyhow::Result<Store> {
        let path = match (&self.db, std::env::var("DATABASE_URL")) {
            (Some(url), _) if is_postgres_url(url) => return self.open().await,
            (Some(path), _) => PathBuf::from(path),
            (None, Ok(_)) => return self.open().await,
            (None, Err(_)) => default_db_path(),
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

    /// Opens the store, creating it if needed, and applies migrations.
    pub(super) async fn open(&self) -> anyhow::Result<Store> {
        if let Some(db) = &self.db {
            let shown = if is_postgres_url(db) { redact_url(db) } else { db.clone() };
            return Store::open_at(db).await.with_context(|| format!("opening {shown}"));
        }
        if let Ok(url) = std::env::var("DATABASE_URL") {
            return Store::open_url(&url).await.with_context(|| format!("opening DATABASE_URL {}", redact_url(&url)));
        }
        let path = default_db_path();
        Store::open(&path).await.with_context(|| format!("opening {}", path.display()))
    }
}
