//! The dataset's card: front matter the Hub reads (licence, one config per table so the viewer shows each),
//! then what the data is, how its figures are computed, every column, and a query to start from. Every figure
//! in it is a count of the snapshot's own rows; nothing from a source repo is written into it.

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
}

#[derive(Serialize)]
struct CardData<'a> {
    license: &'static str,
    repo: &'a str,
    date: &'a str,
    tables: Vec<Table>,
    repos: usize,
    shards: usize,
    mirrors: usize,
    publishers: usize,
    affected: usize,
    gb: String,
}

/// The card of `snapshot`, published as the dataset repo `repo`.
pub fn render(snapshot: &Snapshot, repo: &str) -> Result<String, minijinja::Error> {
    let copied: i64 = snapshot.repos.iter().map(|r| r.misaligned_bytes).sum();
    let data = CardData {
        license: LICENSE,
        repo,
        date: &snapshot.date,
        tables: COLUMNS.iter().map(|&(name, columns)| Table { name, columns }).collect(),
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
