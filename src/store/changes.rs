//! Tells whether any connection of any process committed to the store since the last look. A page built
//! from the whole store (the overview) is then rebuilt only when something it reads may have changed.

use sqlx::{ConnectOptions, Connection, SqliteConnection};
use tokio::sync::Mutex;

use super::{Pool, Store, StoreError, sql};

/// A connection of its own that only reads SQLite's `data_version`. The value changes exactly when another
/// connection commits, and the pool's connections all count as "other" to this one.
#[derive(Debug)]
pub(crate) struct Changes {
    store: Store,
    watcher: Mutex<Option<SqliteConnection>>,
}

impl Changes {
    /// Watches `store`; the connection is opened at the first look.
    pub(crate) fn new(store: Store) -> Changes {
        Changes { store, watcher: Mutex::new(None) }
    }

    /// Returns a value that differs from the previous one whenever something was committed in between.
    /// Returns `None` when the store cannot tell: for PostgreSQL, or an in-memory database, whose connections
    /// are not watched this way.
    pub(crate) async fn version(&self) -> Result<Option<i64>, StoreError> {
        let Pool::Sqlite(pool) = &self.store.pool else { return Ok(None) };
        if self.store.in_memory {
            return Ok(None);
        }
        let mut watcher = self.watcher.lock().await;
        if watcher.is_none() {
            let options = pool.connect_options();
            *watcher = Some(options.connect().await.map_err(sql("open the change watcher"))?);
        }
        let Some(conn) = watcher.as_mut() else { return Ok(None) };
        match sqlx::query_scalar::<_, i64>("PRAGMA data_version").fetch_one(&mut *conn).await {
            Ok(version) => Ok(Some(version)),
            Err(e) => {
                // A broken connection is opened again at the next look; meanwhile the caller reads afresh.
                if let Some(conn) = watcher.take() {
                    let _ = conn.close().await;
                }
                Err(sql("read data_version")(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_commit_by_another_connection_changes_the_version_and_reads_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a.db")).await.unwrap();
        let changes = Changes::new(store.clone());
        let first = changes.version().await.unwrap().unwrap();
        store.totals().await.unwrap();
        assert_eq!(changes.version().await.unwrap(), Some(first), "a read changes nothing");
        let run = store.start_run("http://hub.test", "mlx", None).await.unwrap();
        let second = changes.version().await.unwrap().unwrap();
        assert_ne!(second, first, "run {run} was committed");
        assert_eq!(changes.version().await.unwrap(), Some(second));
    }

    #[tokio::test]
    async fn an_in_memory_store_cannot_tell() {
        let store = Store::open_at("sqlite::memory:").await.unwrap();
        assert_eq!(Changes::new(store).version().await.unwrap(), None);
    }
}
