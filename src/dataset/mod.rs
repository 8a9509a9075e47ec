//! Publishes the audit as a public dataset. It writes what the crawl learned as Parquet tables, with a card.
//! Anyone can query them: the Hub's dataset viewer, DuckDB over `hf://datasets/...`, or
//! `datasets.load_dataset`.
//!
//! Only what the Hub shows anyone goes in; the store's `dataset` queries pick the rows. Each table is cut by
//! snapshot date. Within a day, it is cut into [`BUCKETS`] files by the publisher's namespace:
//! `<table>/<date>/part-NN.parquet`. So a crawl that changed a few repos rewrites only the files holding
//! them.
//!
//! The tables that name repos hold the newest day only. Each snapshot deletes their other days, so a repo
//! that left the public is named nowhere after the next snapshot. Only [`HISTORY_TABLES`] keep earlier days:
//! sums per publisher, which name no repo. Why: rewriting every earlier day at each retraction would read and
//! rewrite the whole history each time. The sums keep what the history is for, trends, at no such cost. Files
//! are written the same way from the same rows, with sorted rows and fixed writer properties. So an unchanged
//! file has the same bytes and the same SHA-256 as the one already published.

pub mod card;
pub(crate) mod encode;
pub mod push;
pub(crate) mod tables;

use std::collections::BTreeMap;

use sha2::Digest as _;

use self::tables::{MirrorRecord, PublisherRecord, RepoRecord, ShardRecord};
use crate::store::{Store, StoreError};

/// Today's date (UTC) as a snapshot names it, `YYYY-MM-DD`.
pub fn today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

/// Files per table and day. A hash of the namespace spreads namespaces over this many.
pub const BUCKETS: u8 = 16;

/// The tables whose earlier days are kept: they name no repo. Every other table holds the newest day only.
pub const HISTORY_TABLES: &[&str] = &["publishers"];

/// The mark in the dataset card. By it, the service knows a dataset repo as its own when the store's record
/// is lost.
pub const MARKER: &str = "<!-- hubalign:dataset -->";

/// Lines that every card of earlier releases holds together; those cards carry no [`MARKER`]. A card with
/// both lines counts as marked, so that an upgrade keeps publishing to the repo it published to.
pub const EARLIER_CARD: [&str; 2] =
    ["pretty_name: Safetensors alignment of MLX models on the Hub", "[hubalign]: https://github.com/hubalign/hubalign"];

/// Whether `card` marks its dataset repo as the service's: [`MARKER`], or both lines of [`EARLIER_CARD`].
pub fn is_marked(card: &[u8]) -> bool {
    let holds = |needle: &str| card.windows(needle.len()).any(|w| w == needle.as_bytes());
    holds(MARKER) || EARLIER_CARD.iter().all(|line| holds(line))
}

/// Whether `date` is a day spelled `YYYY-MM-DD`, the only spelling a snapshot uses.
pub fn is_day(date: &str) -> bool {
    chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_ok_and(|d| d.format("%Y-%m-%d").to_string() == date)
}

/// Lists the parts of the repo-naming tables on days other than `date`, for each `(table, day)` a listing
/// found. A snapshot of `date` deletes them. Days not spelled `YYYY-MM-DD`, and tables kept as history, give
/// none.
pub fn stale_parts<'a>(
    found: impl IntoIterator<Item = (&'a str, &'a str)>,
    date: &str,
) -> std::collections::BTreeSet<String> {
    found
        .into_iter()
        .filter(|(table, day)| !HISTORY_TABLES.contains(table) && *day != date && is_day(day))
        .filter(|(table, _)| tables::COLUMNS.iter().any(|(t, _)| t == table))
        .flat_map(|(table, day)| (0..BUCKETS).map(move |b| part_path(table, day, b)))
        .collect()
}

/// Why a snapshot could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The store could not be read.
    #[error("reading the store")]
    Store(#[from] StoreError),
    /// A table could not be encoded.
    #[error("encoding {table}")]
    Encode {
        /// The table.
        table: &'static str,
        /// Why.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// The card could not be rendered.
    #[error("rendering the dataset card")]
    Card(#[from] minijinja::Error),
    /// The snapshot's date is not a `YYYY-MM-DD` date.
    #[error("not a date (YYYY-MM-DD): {0:?}")]
    Date(String),
}

/// The public rows of the store, as of one day.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The day (`YYYY-MM-DD`).
    pub date: String,
    /// Public repos.
    pub repos: Vec<RepoRecord>,
    /// Their shards.
    pub shards: Vec<ShardRecord>,
    /// Public mirrors of them.
    pub mirrors: Vec<MirrorRecord>,
    /// Publishers' sums over them.
    pub publishers: Vec<PublisherRecord>,
}

impl Snapshot {
    /// Reads the store's public rows, dated `date` (`YYYY-MM-DD`).
    pub async fn of(store: &Store, date: &str) -> Result<Snapshot, DatasetError> {
        // Accept exactly `YYYY-MM-DD`. The date names directories and fills a column, so it takes one
        // spelling.
        if !is_day(date) {
            return Err(DatasetError::Date(date.to_owned()));
        }
        let rows = store.public_rows().await?;
        let mut repos: Vec<_> = rows.repos.into_iter().map(|r| RepoRecord::of(r, date)).collect();
        let mut shards: Vec<_> = rows.shards.into_iter().map(|s| ShardRecord::of(s, date)).collect();
        let mut mirrors: Vec<_> = rows.mirrors.into_iter().map(|m| MirrorRecord::of(m, date)).collect();
        let mut publishers: Vec<_> = rows.publishers.into_iter().map(|p| PublisherRecord::of(p, date)).collect();
        // Sort in byte order, whatever the database's collation. Then the same rows give the same bytes on
        // every backend.
        repos.sort_by(|a, b| a.repo_id.cmp(&b.repo_id));
        shards.sort_by(|a, b| (&a.repo_id, &a.file).cmp(&(&b.repo_id, &b.file)));
        mirrors.sort_by(|a, b| a.source.cmp(&b.source));
        publishers.sort_by(|a, b| a.namespace.cmp(&b.namespace));
        Ok(Snapshot { date: date.to_owned(), repos, shards, mirrors, publishers })
    }

    /// Encodes every table's parts, keyed by their path in the dataset repo. A part with no rows is not
    /// written. The card (`README.md`, [`Snapshot::card`]) is not among them. The tables it lists depend on
    /// what the destination already holds, and only the writer can see that.
    pub fn parts(&self) -> Result<BTreeMap<String, Vec<u8>>, DatasetError> {
        let mut files = BTreeMap::new();
        let date = &self.date;
        // A shard's or a mirror's namespace is its repo's. The crawl checks that ids are `namespace/name`.
        let namespace_of = |repo: &str| crate::untrusted::namespace_of(repo).to_owned();
        parts(&mut files, ("repos", date), &self.repos, |r| r.namespace.clone())?;
        parts(&mut files, ("shards", date), &self.shards, |s| namespace_of(&s.repo_id))?;
        parts(&mut files, ("mirrors", date), &self.mirrors, |m| namespace_of(&m.source))?;
        parts(&mut files, ("publishers", date), &self.publishers, |p| p.namespace.clone())?;
        Ok(files)
    }

    /// Renders the dataset card for the repo `repo`. `earlier` names the tables that have parts of other
    /// days. Each such table keeps its config even with no rows today.
    pub fn card(&self, repo: &str, earlier: &std::collections::BTreeSet<String>) -> Result<String, DatasetError> {
        Ok(card::render(self, repo, earlier)?)
    }
}

/// The `(table, day)` directories under `root`, a local copy of the dataset.
pub fn days_in(root: &std::path::Path) -> Vec<(&'static str, String)> {
    tables::COLUMNS
        .iter()
        .flat_map(|(table, _)| {
            let days = std::fs::read_dir(root.join(table)).into_iter().flatten().flatten();
            days.filter_map(|d| d.file_name().to_str().map(str::to_owned)).map(move |d| (*table, d))
        })
        .collect()
}

/// The tables of which the directory `root` holds a part of a day other than `date`.
pub fn tables_with_other_days(root: &std::path::Path, date: &str) -> std::collections::BTreeSet<String> {
    tables::COLUMNS
        .iter()
        .filter(|(table, _)| {
            let days = std::fs::read_dir(root.join(table)).into_iter().flatten().flatten();
            days.filter(|day| day.file_name().to_str() != Some(date)).any(|day| {
                let parts = std::fs::read_dir(day.path()).into_iter().flatten().flatten();
                parts.into_iter().any(|p| p.file_name().to_str().is_some_and(|n| n.ends_with(".parquet")))
            })
        })
        .map(|(table, _)| (*table).to_owned())
        .collect()
}

/// The bucket of `namespace`: the first byte of its SHA-256, modulo [`BUCKETS`]. Unlike the standard
/// library's hasher, it is the same on every machine and in every release.
pub fn bucket(namespace: &str) -> u8 {
    sha2::Sha256::digest(namespace.as_bytes())[0] % BUCKETS
}

/// The path of a table's part for one day.
pub fn part_path(table: &str, date: &str, bucket: u8) -> String {
    format!("{table}/{date}/part-{bucket:02}.parquet")
}

/// Every part a snapshot of `date` may write, by path (whether it has rows or not).
pub fn day_parts(date: &str) -> std::collections::BTreeSet<String> {
    tables::COLUMNS.iter().flat_map(|(table, _)| (0..BUCKETS).map(move |b| part_path(table, date, b))).collect()
}

/// Adds `rows` of `table` to `files`, one part per bucket that has rows, keeping their order.
fn parts<R: Clone>(
    files: &mut BTreeMap<String, Vec<u8>>,
    (table, date): (&'static str, &str),
    rows: &[R],
    namespace: impl Fn(&R) -> String,
) -> Result<(), DatasetError>
where
    for<'a> &'a [R]: parquet::record::RecordWriter<R>,
{
    let mut by_bucket: BTreeMap<u8, Vec<R>> = BTreeMap::new();
    for row in rows {
        by_bucket.entry(bucket(&namespace(row))).or_default().push(row.clone());
    }
    for (bucket, rows) in by_bucket {
        let bytes = encode::parquet(&rows).map_err(|source| DatasetError::Encode { table, source })?;
        files.insert(part_path(table, date, bucket), bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(namespaces: &[&str]) -> Snapshot {
        let publishers = namespaces
            .iter()
            .map(|ns| PublisherRecord {
                snapshot_date: "2026-12-04".into(),
                namespace: (*ns).to_owned(),
                repos_audited: 2,
                repos_affected: 1,
                share_affected: 0.5,
                shards_aligned: 1,
                shards_header_pad: 1,
                shards_relayout: 0,
                shards_invalid: 0,
                misaligned_tensors: 3,
                misaligned_bytes: 12,
            })
            .collect();
        Snapshot { date: "2026-12-04".into(), publishers, ..Snapshot::default() }
    }

    #[test]
    fn the_same_rows_give_the_same_files_and_a_changed_publisher_changes_only_its_part() {
        let namespaces = ["mlx-community", "lmstudio", "alice", "bob", "carol"];
        let before = snapshot(&namespaces).parts().unwrap();
        assert_eq!(before, snapshot(&namespaces).parts().unwrap(), "written the same way each time");
        let mut changed = snapshot(&namespaces);
        changed.publishers[1].misaligned_bytes = 13;
        let after = changed.parts().unwrap();
        let differ: Vec<&String> = before.keys().filter(|k| before[*k] != after[*k]).collect();
        let part = part_path("publishers", "2026-12-04", bucket("lmstudio"));
        assert_eq!(differ, [&part], "only lmstudio's part");
        // The card's totals count repos, which did not change.
        let none = std::collections::BTreeSet::new();
        let card = |s: &Snapshot| s.card("ops/audit", &none).unwrap();
        assert_eq!(card(&snapshot(&namespaces)), card(&changed));
    }

    #[test]
    fn a_snapshot_deletes_the_other_days_of_the_tables_that_name_repos_and_keeps_the_sums() {
        let found = [
            ("repos", "2026-12-03"),
            ("repos", "2026-12-04"),
            ("shards", "2026-12-01"),
            ("publishers", "2026-12-03"),
            ("mirrors", "../x"),
            ("mirrors", "2026-12-3"),
            ("elsewhere", "2026-12-03"),
        ];
        let stale = stale_parts(found, "2026-12-04");
        assert_eq!(stale.len(), 2 * BUCKETS as usize, "{stale:?}");
        assert!(stale.contains(&part_path("repos", "2026-12-03", 0)));
        assert!(stale.contains(&part_path("shards", "2026-12-01", 15)));
        assert!(stale.iter().all(|p| !p.starts_with("publishers/") && !p.contains("2026-12-04")));
    }

    #[test]
    fn a_card_is_marked_by_the_marker_or_by_both_lines_of_an_earlier_release_s_card() {
        let today = snapshot(&["a"]).card("ops/audit", &Default::default()).unwrap();
        assert!(is_marked(today.as_bytes()), "today's card carries the marker");
        assert!(is_marked(today.replace(MARKER, "").as_bytes()), "an earlier release's card, without it");
        assert!(is_marked(EARLIER_CARD.join("\n...\n").as_bytes()));
        assert!(!is_marked(EARLIER_CARD[0].as_bytes()), "one line of it is not enough");
        assert!(!is_marked(b"# Our model stats\n"));
    }

    #[test]
    fn buckets_are_fixed_by_the_name_alone() {
        assert_eq!(bucket("mlx-community"), sha2::Sha256::digest(b"mlx-community")[0] % BUCKETS);
        assert!(namespaces_spread(&["a", "b", "c", "d", "e", "f", "g", "h"]) > 1);
    }

    fn namespaces_spread(names: &[&str]) -> usize {
        names.iter().map(|n| bucket(n)).collect::<std::collections::BTreeSet<_>>().len()
    }

    #[test]
    fn a_snapshot_date_must_be_a_day() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = rt.block_on(Store::open(&dir.path().join("s.db"))).unwrap();
        for bad in ["2026-13-01", "yesterday", "2026-12-04/../x", "2026-1-4", " 2026-12-4", "+2026-1-04", "2026-12-4 "]
        {
            assert!(matches!(rt.block_on(Snapshot::of(&store, bad)), Err(DatasetError::Date(_))), "{bad}");
        }
    }
}
