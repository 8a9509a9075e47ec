//! Renders the dataset's card. It starts with front matter the Hub reads: the licence, and one config per
//! table so that the viewer shows each. Then it says what the data is, how its figures are computed, what
//! every column holds, and a query to start from. Every figure in it counts the snapshot's own rows. Nothing
//! from a source repo is written into it.

use std::collections::BTreeSet;

use serde::Serialize;

use super::Snapshot;
use super::tables::{COLUMNS, Column};

const TEMPLATE: &str = include_str!("../../templates/dataset_card.md.j2");

/// The licence the dataset is published under.
pub const LICENSE: &str = "cc-by-4.0";

#[derive(Serialize)]
struct Table {
    name: &'static str,
    columns: &'static [Column],
    /// Whether it gets a config: the snapshot has rows of it, or the repo holds its parts of other days. A
    /// config whose files match nothing breaks the viewer and `load_dataset`. An empty Parquet file breaks
    /// `datasets`' reader. So a table with neither gets no config.
    listed: bool,
}

#[derive(Serialize)]
struct CardData<'a> {
    license: &'static str,
    repo: &'a str,
    date: &'a str,
    tables: Vec<Table>,
    /// Whether any table gets a config. An empty `configs:` is not valid front matter for the Hub.
    any_listed: bool,
    repos: usize,
    shards: usize,
    mirrors: usize,
    publishers: usize,
    affected: usize,
    gb: String,
}

/// Renders the card of `snapshot`, published as the dataset repo `repo`. `earlier` names the tables that have
/// parts of other days.
pub fn render(snapshot: &Snapshot, repo: &str, earlier: &BTreeSet<String>) -> Result<String, minijinja::Error> {
    let copied: i64 = snapshot.repos.iter().map(|r| r.misaligned_bytes).sum();
    let tables: Vec<Table> = COLUMNS
        .iter()
        .map(|&(name, columns)| {
            let rows = match name {
                "repos" => snapshot.repos.len(),
                "shards" => snapshot.shards.len(),
                "mirrors" => snapshot.mirrors.len(),
                _ => snapshot.publishers.len(),
            };
            Table { name, columns, listed: rows > 0 || earlier.contains(name) }
        })
        .collect();
    let data = CardData {
        any_listed: tables.iter().any(|t| t.listed),
        license: LICENSE,
        repo,
        date: &snapshot.date,
        tables,
        repos: snapshot.repos.len(),
        shards: snapshot.shards.len(),
        mirrors: snapshot.mirrors.len(),
        publishers: snapshot.publishers.len(),
        affected: snapshot.repos.iter().filter(|r| r.affected).count(),
        gb: format!("{:.2}", copied as f64 / 1e9),
    };
    let mut env = minijinja::Environment::new();
    env.add_template("dataset_card", TEMPLATE)?;
    env.get_template("dataset_card")?.render(minijinja::value::Serde(&data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_with_no_rows_gets_no_config_that_would_match_no_file() {
        let mut snapshot = Snapshot { date: "2026-12-04".into(), ..Snapshot::default() };
        snapshot.publishers.push(super::super::tables::PublisherRecord {
            snapshot_date: "2026-12-04".into(),
            namespace: "alice".into(),
            repos_audited: 1,
            repos_affected: 0,
            share_affected: 0.0,
            shards_aligned: 1,
            shards_header_pad: 0,
            shards_relayout: 0,
            shards_invalid: 0,
            misaligned_tensors: 0,
            misaligned_bytes: 0,
        });
        let card = render(&snapshot, "ops/audit", &BTreeSet::new()).unwrap();
        let front = card.split("---").nth(1).unwrap();
        assert!(front.contains("config_name: publishers"), "{front}");
        for table in ["repos", "shards", "mirrors"] {
            assert!(!front.contains(&format!("config_name: {table}")), "{table}: {front}");
        }
        assert_eq!(front.matches("default: true").count(), 1, "{front}");
        // Every column is still described below, whether the table has rows yet or not.
        assert!(card.contains("check_mlx_version"));
        // A table with no rows today whose parts of other days the repo holds keeps its config.
        let kept = render(&snapshot, "ops/audit", &BTreeSet::from(["mirrors".to_owned()])).unwrap();
        assert!(kept.split("---").nth(1).unwrap().contains("config_name: mirrors"));
        // With no table to list, the front matter has no `configs` key at all.
        let empty =
            render(&Snapshot { date: "2026-12-04".into(), ..Snapshot::default() }, "ops/audit", &BTreeSet::new());
        assert!(!empty.unwrap().split("---").nth(1).unwrap().contains("configs"));
    }
}
