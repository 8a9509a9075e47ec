//! Where the audit store is: `--db PATH`, else `DATABASE_URL` (`sqlite:…`), else the user's data directory.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use hubalign::store::{Store, default_db_path};

/// The store's location.
#[derive(Args, Clone, Debug)]
pub struct StoreArgs {
    /// SQLite database file [default: $XDG_DATA_HOME/hubalign/hubalign.db, or DATABASE_URL if set].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
}

impl StoreArgs {
    /// Where a worker stages bundles unless told: beside the database (`NAME.work/`), so two stores on one
    /// machine never share staged files.
    pub fn default_work_dir(&self) -> PathBuf {
        match &self.db {
            Some(db) => db.with_extension("work"),
            None => default_db_path().with_extension("work"),
        }
    }

    /// Opens the store, applying migrations.
    pub async fn open(&self) -> anyhow::Result<Store> {
        if let Some(path) = &self.db {
            return Store::open(path).await.with_context(|| format!("opening {}", path.display()));
        }
        if let Ok(url) = std::env::var("DATABASE_URL") {
            return Store::open_url(&url).await.with_context(|| format!("opening DATABASE_URL {url}"));
        }
        let path = default_db_path();
        Store::open(&path).await.with_context(|| format!("opening {}", path.display()))
    }
}
