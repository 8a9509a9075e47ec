//! Moves a store between backends (`hubalign store export | import`). Every recorded row goes out as JSON
//! Lines, in an order that satisfies the foreign keys. A one-machine SQLite store can thus become the shared
//! PostgreSQL one.
//!
//! The sums (`repo_sums`, `namespace_sums`, `job_sums`) are not exported. On SQLite, the importing store's
//! triggers rebuild them from the rows, as for every other write. On PostgreSQL, the import pauses those
//! triggers and computes the sums once at the end.

use std::io::{BufRead, Write};

use futures_util::TryStreamExt;
use serde_json::{Map, Value};
use sqlx::Row;
use thiserror::Error;

use super::{Store, StoreError, on_pool, sql};

/// What a column holds, as both backends store it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Text,
    /// 0/1 on SQLite, BOOLEAN on PostgreSQL; `true`/`false` in the export.
    Flag,
    /// A JSON document: TEXT on SQLite, JSONB on PostgreSQL, and its text in the export (as version 1 has it).
    Document,
}

use Kind::{Document, Flag, Int, Text};

/// A table that is exported: its name, its key (the export's order) and its columns.
struct Table {
    name: &'static str,
    order_by: &'static str,
    columns: &'static [(&'static str, Kind)],
    /// Whether `id` comes from a sequence. An import moves PostgreSQL's sequence past the imported ids.
    serial: bool,
}

/// The tables whose triggers keep the sums. An import on PostgreSQL pauses these triggers.
const SUMMED: [&str; 4] = ["repos", "shards", "repo_sums", "jobs"];

/// The sums of an import, computed once from its rows, as the triggers would keep them row by row.
const REBUILD_SUMS: [&str; 3] = [
    "INSERT INTO repo_sums SELECT * FROM repo_sums_live",
    "INSERT INTO namespace_sums (namespace, repos_audited, repos_affected, shards_aligned, shards_header_pad,
        shards_relayout, shards_invalid, misaligned_tensors, misaligned_bytes)
     SELECT namespace, COUNT(*), SUM(CASE WHEN misaligned_bytes > 0 THEN 1 ELSE 0 END), SUM(shards_aligned),
        SUM(shards_header_pad), SUM(shards_relayout), SUM(shards_invalid), SUM(misaligned_tensors), SUM(misaligned_bytes)
     FROM repo_sums GROUP BY namespace",
    "INSERT INTO job_sums (state, stripe, jobs, bytes_downloaded, bytes_uploaded, needing_operator)
     SELECT state, CAST(id % 8 AS INTEGER), COUNT(*), SUM(bytes_downloaded), SUM(bytes_uploaded),
        SUM(CASE WHEN failure_kind = 'needs_operator' THEN 1 ELSE 0 END)
     FROM jobs GROUP BY state, id % 8",
];

/// The recorded tables, parents before children.
const TABLES: &[Table] = &[
    Table {
        name: "audit_runs",
        order_by: "id",
        serial: true,
        columns: &[
            ("id", Int),
            ("started_at", Text),
            ("finished_at", Text),
            ("status", Text),
            ("endpoint", Text),
            ("query", Text),
            ("repos_listed", Int),
            ("repos_probed", Int),
            ("shards_probed", Int),
            ("api_requests", Int),
            ("resolver_requests", Int),
            ("bytes_read", Int),
            ("rate_limited", Int),
            ("retries", Int),
            ("errors", Int),
            ("error", Text),
            ("invalid_listings", Int),
            ("repos_affected_after", Int),
            ("bytes_duplicated_after", Int),
            ("started_by", Text),
            ("kind", Text),
            ("requested_at", Text),
        ],
    },
    Table {
        name: "repos",
        order_by: "id",
        serial: false,
        columns: &[
            ("id", Text),
            ("namespace", Text),
            ("listed_sha", Text),
            ("audited_sha", Text),
            ("last_modified", Text),
            ("private", Flag),
            ("gated", Flag),
            ("disabled", Flag),
            ("state", Text),
            ("last_listed_run", Int),
            ("last_audited_run", Int),
            ("last_audited_at", Text),
            ("last_error", Text),
            ("was_affected", Int),
            ("downloads", Int),
            ("likes", Int),
        ],
    },
    Table {
        name: "shards",
        order_by: "repo_id, path",
        serial: false,
        columns: &[
            ("repo_id", Text),
            ("path", Text),
            ("sha", Text),
            ("size", Int),
            ("header_len", Int),
            ("data_start", Int),
            ("data_start_mod8", Int),
            ("tensors", Int),
            ("misaligned_tensors", Int),
            ("misaligned_bytes", Int),
            ("verdict", Text),
            ("writer", Text),
            ("error", Text),
        ],
    },
    Table {
        name: "repo_history",
        order_by: "id",
        serial: true,
        columns: &[
            ("id", Int),
            ("repo_id", Text),
            ("run_id", Int),
            ("at", Text),
            ("sha", Text),
            ("state", Text),
            ("affected", Flag),
            ("misaligned_bytes", Int),
        ],
    },
    Table {
        name: "jobs",
        order_by: "id",
        serial: true,
        columns: &[
            ("id", Int),
            ("repo_id", Text),
            ("source_sha", Text),
            ("state", Text),
            ("reason", Text),
            ("failure_kind", Text),
            ("target_repo", Text),
            ("published_commit", Text),
            ("verify_device", Text),
            ("verification", Document),
            ("staged", Document),
            ("progress", Document),
            ("attempts", Int),
            ("max_attempts", Int),
            ("lease_owner", Text),
            ("lease_expires_at", Int),
            ("not_before", Int),
            ("misaligned_bytes", Int),
            ("created_at", Text),
            ("updated_at", Text),
            ("bytes_downloaded", Int),
            ("bytes_uploaded", Int),
            ("finished_at", Text),
            ("pr_num", Int),
            ("pr_status", Text),
        ],
    },
    Table {
        name: "job_events",
        order_by: "id",
        serial: true,
        columns: &[("id", Int), ("job_id", Int), ("at", Text), ("state", Text), ("detail", Text)],
    },
    Table {
        name: "mirrors",
        order_by: "target_repo",
        serial: false,
        columns: &[
            ("target_repo", Text),
            ("source_repo", Text),
            ("created_at", Text),
            ("private", Flag),
            ("hidden_reason", Text),
            ("hidden_at", Text),
            ("moved_from", Text),
        ],
    },
    Table {
        name: "source_notes",
        order_by: "source_repo",
        serial: false,
        columns: &[
            ("source_repo", Text),
            ("namespace", Text),
            ("mirror_repo", Text),
            ("num", Int),
            ("posted_at", Text),
            ("checked_at", Text),
            ("declined", Flag),
        ],
    },
    Table {
        name: "hub_objects",
        order_by: "kind, object_id",
        serial: false,
        columns: &[("kind", Text), ("object_id", Text), ("recorded_at", Text)],
    },
];

/// The export's first line names its format, so an import can refuse anything else.
const FORMAT: &str = "hubalign-store";
const VERSION: u64 = 1;

/// Why an export or import failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TransferError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing the export or reading the import failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The import's line `line` is not what an export writes.
    #[error("line {line}: {reason}")]
    Malformed {
        /// 1-based.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The importing store already holds records.
    #[error("the store already holds {rows} rows in {table}; import into an empty store")]
    NotEmpty {
        /// The first table found non-empty.
        table: &'static str,
        rows: i64,
    },
}

/// The longest line an import reads. A row is a few kB, and the MLX check's record is its largest field. A
/// longer line is thus not an export's, and is refused before it fills memory.
const LINE_CAP: u64 = 16 << 20;

/// Why an import's line could not be read.
#[derive(Debug, Error)]
enum LineError {
    /// Longer than [`LINE_CAP`].
    #[error("a line longer than {} MiB", LINE_CAP >> 20)]
    TooLong,
    /// Not UTF-8.
    #[error(transparent)]
    NotUtf8(std::string::FromUtf8Error),
    /// The input failed.
    #[error(transparent)]
    Io(std::io::Error),
}

/// Returns `input`'s lines, each read only up to [`LINE_CAP`] bytes. A longer line, or one that is not UTF-8,
/// is an error and ends the lines.
fn bounded_lines(input: &mut (dyn BufRead + Send)) -> impl Iterator<Item = Result<String, LineError>> + '_ {
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let mut line = Vec::new();
        let read = std::io::Read::take(&mut *input, LINE_CAP + 1).read_until(b'\n', &mut line);
        let line = match read {
            Ok(0) => return None,
            Ok(_) if line.len() as u64 > LINE_CAP => Err(LineError::TooLong),
            Ok(_) => String::from_utf8(line).map_err(LineError::NotUtf8),
            Err(e) => Err(LineError::Io(e)),
        };
        failed = line.is_err();
        Some(line.map(|l| l.trim_end_matches(['\n', '\r']).to_owned()))
    })
}

/// Rows written per table, in export order.
pub(crate) type Counts = Vec<(&'static str, u64)>;

impl Store {
    /// Writes every recorded row to `out` as JSON Lines. A header line comes first, then one
    /// `{"table": …, "row": {…}}` per row. Parent tables come first, and rows come in key order.
    pub async fn export(&self, out: &mut (dyn Write + Send)) -> Result<Counts, TransferError> {
        let header = serde_json::json!({ "format": FORMAT, "version": VERSION, "from": self.backend() });
        writeln!(out, "{header}")?;
        let mut counts = Vec::new();
        for table in TABLES {
            let columns: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
            let query = format!("SELECT {} FROM {} ORDER BY {}", columns.join(", "), table.name, table.order_by);
            // Stream the rows: write each as it arrives, so a store of millions of shards needs no more memory
            // than one row.
            let written: u64 = on_pool!(self, |pool| {
                // Names from TABLES above, never from input.
                let mut rows = sqlx::query(sqlx::AssertSqlSafe(query)).fetch(pool);
                let mut written = 0u64;
                while let Some(row) = rows.try_next().await.map_err(sql("export"))? {
                    let mut object = Map::new();
                    for (i, (column, kind)) in table.columns.iter().enumerate() {
                        let value = match kind {
                            Int => row.try_get::<Option<i64>, _>(i).map(Value::from),
                            Text => row.try_get::<Option<String>, _>(i).map(Value::from),
                            Flag => row.try_get::<Option<bool>, _>(i).map(Value::from),
                            // Sort the keys: PostgreSQL's JSONB keeps its own order, and an export must not
                            // depend on the backend it came from.
                            Document => row.try_get::<Option<sqlx::types::Json<Value>>, _>(i).map(|d| {
                                d.map(|mut d| {
                                    d.0.sort_all_objects();
                                    d.0.to_string()
                                })
                                .into()
                            }),
                        };
                        object.insert((*column).to_owned(), value.map_err(sql("export"))?);
                    }
                    writeln!(out, "{}", serde_json::json!({ "table": table.name, "row": object }))?;
                    written += 1;
                }
                written
            });
            counts.push((table.name, written));
        }
        out.flush()?;
        Ok(counts)
    }

    /// Reads an export into this store, which must hold no records. It runs in one transaction, so either all
    /// of it goes in or, on any error, nothing.
    pub async fn import(&self, input: &mut (dyn BufRead + Send)) -> Result<Counts, TransferError> {
        for table in TABLES {
            let count = format!("SELECT COUNT(*) FROM {}", table.name);
            let rows: i64 = on_pool!(self, |pool| sqlx::query_scalar(sqlx::AssertSqlSafe(count))
                .fetch_one(pool)
                .await
                .map_err(sql("count rows")))?;
            if rows > 0 {
                return Err(TransferError::NotEmpty { table: table.name, rows });
            }
        }
        let malformed = |line: usize, reason: String| TransferError::Malformed { line: line + 1, reason };
        let mut lines =
            bounded_lines(input).enumerate().map(|(n, line)| (n, line.map_err(|e| malformed(n, e.to_string()))));
        let (_, first) = lines.next().ok_or_else(|| malformed(0, "empty input".into()))?;
        let header: Value = serde_json::from_str(&first?).map_err(|e| malformed(0, e.to_string()))?;
        if header["format"] != FORMAT || header["version"] != VERSION {
            return Err(malformed(0, format!("not a {FORMAT} export of version {VERSION}: {header}")));
        }
        let mut counts: Counts = TABLES.iter().map(|t| (t.name, 0)).collect();
        let postgres = self.backend() == super::Backend::Postgres;
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin import"))?;
            if postgres {
                // Triggers would rewrite the sums once per imported row. Each rewrite adds one more version of
                // the same few rows within one transaction, so the import turns quadratic; see BENCHMARKS.md.
                // Compute the sums once at the end instead.
                for table in SUMMED {
                    let disable = format!("ALTER TABLE {table} DISABLE TRIGGER USER");
                    sqlx::query(sqlx::AssertSqlSafe(disable)).execute(&mut *tx).await.map_err(sql("pause the sums"))?;
                }
            }
            for (n, line) in lines {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                let entry: Value = serde_json::from_str(&line).map_err(|e| malformed(n, e.to_string()))?;
                let name = entry["table"].as_str().unwrap_or_default();
                let index = TABLES.iter().position(|t| t.name == name);
                let index = index.ok_or_else(|| malformed(n, format!("unknown table {:?}", entry["table"])))?;
                let table = &TABLES[index];
                let row = entry["row"].as_object().ok_or_else(|| malformed(n, "no row object".into()))?;
                let marks: Vec<String> = (1..=table.columns.len()).map(|i| format!("${i}")).collect();
                let columns: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
                let insert =
                    format!("INSERT INTO {} ({}) VALUES ({})", table.name, columns.join(", "), marks.join(", "));
                let mut query = sqlx::query(sqlx::AssertSqlSafe(insert));
                for (column, kind) in table.columns {
                    let value = row.get(*column).unwrap_or(&Value::Null);
                    let wrong = || malformed(n, format!("{name}.{column}: {value} is not {kind:?}"));
                    query = match (kind, value) {
                        (Int, Value::Null) => query.bind(None::<i64>),
                        (Int, v) => query.bind(Some(v.as_i64().ok_or_else(wrong)?)),
                        (Text, Value::Null) => query.bind(None::<String>),
                        (Text, v) => query.bind(Some(v.as_str().ok_or_else(wrong)?.to_owned())),
                        (Flag, Value::Null) => query.bind(None::<bool>),
                        (Flag, v) => query.bind(Some(v.as_bool().ok_or_else(wrong)?)),
                        (Document, Value::Null) => query.bind(None::<sqlx::types::Json<Value>>),
                        (Document, v) => {
                            let text = v.as_str().ok_or_else(wrong)?;
                            let document: Value = serde_json::from_str(text).map_err(|_| wrong())?;
                            query.bind(Some(sqlx::types::Json(document)))
                        }
                    };
                }
                query.execute(&mut *tx).await.map_err(|e| malformed(n, format!("{name}: {e}")))?;
                counts[index].1 += 1;
            }
            if postgres {
                for rebuild in REBUILD_SUMS {
                    sqlx::query(rebuild).execute(&mut *tx).await.map_err(sql("rebuild the sums"))?;
                }
                for table in SUMMED {
                    let enable = format!("ALTER TABLE {table} ENABLE TRIGGER USER");
                    sqlx::query(sqlx::AssertSqlSafe(enable)).execute(&mut *tx).await.map_err(sql("keep the sums"))?;
                }
                for table in TABLES.iter().filter(|t| t.serial) {
                    let name = table.name;
                    // The next id after the imported ones (the sequence never went past 1 here).
                    let advance = format!(
                        "SELECT setval(pg_get_serial_sequence('{name}', 'id'), COALESCE((SELECT MAX(id) FROM {name}), 0) + 1, false)"
                    );
                    sqlx::query(sqlx::AssertSqlSafe(advance)).execute(&mut *tx).await.map_err(sql("advance ids"))?;
                }
            }
            tx.commit().await.map_err(sql("commit import"))?;
        });
        if let super::Pool::Postgres(pool) = self.pool() {
            // Refresh the planner's statistics and the visibility maps of the tables just filled, before the
            // store is used. A deep page can then be read from an index alone.
            sqlx::query("VACUUM (ANALYZE)").execute(pool).await.map_err(sql("vacuum and analyze"))?;
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Backend;
    use crate::store::both::stores;

    /// A store with a bit of everything: two runs, repos in several states, shards, history, jobs with
    /// events, a mirror made private, and text that JSON must escape.
    #[cfg(feature = "system-tests")]
    async fn fill(store: &Store) {
        use crate::job::JobOutcome;
        use crate::store::{ListingEntry, RepoOutcome, RepoState, RunStats, ShardRow};
        let run = store.start_run("http://hub.test", "mlx \"quoted\"\n", Some("replica-1")).await.unwrap();
        let private = ListingEntry { private: true, ..ListingEntry::public("ns/b", "1") };
        let listed = [ListingEntry::public("ns/a", "1"), private, ListingEntry::public("other/c", "2")];
        store.record_listing(run, &listed, false).await.unwrap();
        for (id, bad) in [("ns/a", 3), ("ns/b", 0)] {
            let shard = ShardRow {
                repo: id.into(),
                path: "model.safetensors".into(),
                sha: "1".into(),
                size: 5_000_000_000,
                header_len: Some(1234),
                data_start: Some(1242),
                data_start_mod8: Some(2),
                tensors: Some(7),
                misaligned_tensors: Some(bad),
                misaligned_bytes: Some(bad * 1_000_000_000),
                verdict: if bad > 0 { "header_pad" } else { "aligned" }.into(),
                error: None,
                writer: Some("mlx".into()),
            };
            let outcome =
                RepoOutcome { id: id.into(), sha: "1".into(), state: RepoState::Ok, shards: vec![shard], error: None };
            store.record_repo(run, &outcome).await.unwrap();
        }
        let gone = RepoOutcome {
            id: "other/c".into(),
            sha: "2".into(),
            state: RepoState::Error,
            shards: vec![],
            error: Some("ünïcode\twith a tab".into()),
        };
        store.record_repo(run, &gone).await.unwrap();
        store.finish_run(run, "finished", &RunStats { repos_listed: 3, ..RunStats::default() }, None).await.unwrap();
        let job = store.job_for("ns/a", "1", crate::job::VerifyDevice::Cpu).await.unwrap();
        store.claim_job("w", std::time::Duration::from_secs(60), Some(job.id)).await.unwrap();
        let record = r#"{"ok": true, "device": "cpu", "mlx_version": "0.29.1", "seconds": 1.5, "tensors": 7}"#;
        store.set_job_verification(job.id, &serde_json::from_str(record).unwrap()).await.unwrap();
        let published = JobOutcome::Published { target: "me/a-aligned".into(), commit: "c0ffee".into() };
        store.finish_job(job.id, "w", &published).await.unwrap();
        store.claim_mirror("me/a-aligned", "ns/a", false).await.unwrap();
        store.hide_mirror("me/a-aligned", "the source went private").await.unwrap();
        store.record_note("ns/a", "me/a-aligned", 7).await.unwrap();
        store.decline_note("ns/a").await.unwrap();
        store.record_owned(crate::store::owned::OwnedKind::Dataset, "me/audit").await.unwrap();
        let waiting = store.job_for("ns/b", "1", crate::job::VerifyDevice::Metal).await.unwrap();
        store.claim_job("w", std::time::Duration::from_secs(60), Some(waiting.id)).await.unwrap();
        let staged = crate::job::payload::Staged {
            commit: "5eed".into(),
            checks: crate::job::payload::LocalChecks { shards: 1, tensors: 2, zero_copy: 2, ..Default::default() },
            source: crate::job::payload::SourceFacts {
                license: Some("mit".into()),
                before_bytes: 9,
                ..Default::default()
            },
        };
        store.finish_job(waiting.id, "w", &JobOutcome::AwaitMetal { staged: Some(staged) }).await.unwrap();
        store.start_run("http://hub.test", "mlx", None).await.unwrap();
    }

    async fn exported(store: &Store) -> Vec<String> {
        let mut out = Vec::new();
        store.export(&mut out).await.unwrap();
        // The header names the backend it came from; the rows must be the same.
        String::from_utf8(out).unwrap().lines().skip(1).map(str::to_owned).collect()
    }

    /// SQLite → PostgreSQL → SQLite gives back the same rows, and the importing store's sums and reports
    /// equal the original's.
    #[cfg(feature = "system-tests")]
    #[tokio::test]
    async fn an_export_imports_into_the_other_backend_row_for_row() {
        let [sqlite, postgres] = <[_; 2]>::try_from(stores().await).ok().unwrap();
        let (sqlite, postgres) = (&sqlite.store, &postgres.store);
        fill(sqlite).await;
        let original = exported(sqlite).await;
        assert!(original.iter().any(|l| l.contains("\"table\":\"mirrors\"")), "every table has rows");
        assert!(original.iter().any(|l| l.contains("\"table\":\"source_notes\"")), "a namespace's no is kept");
        assert!(original.iter().any(|l| l.contains("\"table\":\"hub_objects\"")), "what the service made is kept");
        assert!(original.iter().any(|l| l.contains(r#"\"commit\":\"5eed\""#)), "with the jobs' payloads");
        let mut export = Vec::new();
        sqlite.export(&mut export).await.unwrap();
        let counts = postgres.import(&mut export.as_slice()).await.unwrap();
        assert_eq!(counts.iter().map(|c| c.1).sum::<u64>() as usize, original.len());
        assert_eq!(exported(postgres).await, original);
        assert_eq!(postgres.totals().await.unwrap(), sqlite.totals().await.unwrap());
        // The sums computed at the end of the import equal what the triggers keep, and the triggers run again.
        crate::store::queries::tests::assert_sums_match(postgres, "after the import").await;
        crate::store::jobs::tests::assert_job_sums_match(postgres, "after the import").await;
        assert_eq!(postgres.job_counts().await.unwrap(), sqlite.job_counts().await.unwrap());
        let job = postgres.jobs().await.unwrap()[0].id;
        postgres.add_job_bytes(job, 3, 4).await.unwrap();
        crate::store::jobs::tests::assert_job_sums_match(postgres, "after a write that follows the import").await;
        let (a, b) = (crate::report::by_publisher(postgres).await, crate::report::by_publisher(sqlite).await);
        assert_eq!(a.unwrap(), b.unwrap());
        // New rows continue after the imported ids.
        let next = postgres.start_run("http://hub.test", "mlx", None).await.unwrap();
        assert_eq!(next, 3);
        // And back: into a fresh SQLite store.
        let dir = tempfile::tempdir().unwrap();
        let again = Store::open(&dir.path().join("back.db")).await.unwrap();
        let mut export = Vec::new();
        postgres.export(&mut export).await.unwrap();
        again.import(&mut export.as_slice()).await.unwrap();
        assert_eq!(exported(&again).await, exported(postgres).await);
        // A store that holds records refuses an import, and a failed import leaves nothing.
        let refused = again.import(&mut export.as_slice()).await.unwrap_err();
        assert!(matches!(refused, TransferError::NotEmpty { table: "audit_runs", .. }), "{refused}");
        let empty = Store::open(&dir.path().join("empty.db")).await.unwrap();
        let mut broken = export.clone();
        broken.extend_from_slice(b"{\"table\": \"repos\", \"row\": {\"id\": 5}}\n");
        let failed = empty.import(&mut broken.as_slice()).await.unwrap_err();
        assert!(failed.to_string().contains("repos.id"), "{failed}");
        assert!(exported(&empty).await.is_empty(), "all or nothing");
    }

    /// An endless line (no newline, ever) is refused at the cap, not read into memory until it runs out.
    #[tokio::test]
    async fn an_endless_line_is_refused_at_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).await.unwrap();
        let header = format!("{{\"format\": \"{FORMAT}\", \"version\": {VERSION}}}\n");
        let endless = std::io::Read::chain(header.as_bytes(), std::io::repeat(b'a'));
        let refused = store.import(&mut std::io::BufReader::new(endless)).await.unwrap_err();
        assert!(refused.to_string().contains("line 2: a line longer than 16 MiB"), "{refused}");
        assert!(exported(&store).await.is_empty());
    }

    /// The columns listed here are every column of each table, on both backends: an export loses nothing.
    #[tokio::test]
    async fn the_exported_columns_are_the_tables_columns() {
        for test in stores().await {
            let store = &test.store;
            for table in TABLES {
                let query = match store.backend() {
                    Backend::Sqlite => format!("SELECT name FROM pragma_table_info('{}') ORDER BY name", table.name),
                    Backend::Postgres => format!(
                        "SELECT CAST(column_name AS TEXT) FROM information_schema.columns WHERE table_name = '{}' ORDER BY 1",
                        table.name
                    ),
                };
                let mut actual: Vec<String> = on_pool!(store, |pool| sqlx::query_scalar(sqlx::AssertSqlSafe(query))
                    .fetch_all(pool)
                    .await
                    .unwrap());
                let mut listed: Vec<String> = table.columns.iter().map(|(c, _)| (*c).to_owned()).collect();
                actual.sort();
                listed.sort();
                assert_eq!(listed, actual, "{} on {:?}", table.name, store.backend());
            }
        }
    }
}
