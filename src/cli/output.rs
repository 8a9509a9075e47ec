//! Shared presentation helpers: output formats, byte counts, progress bars.

use std::io::{IsTerminal, Write};

use hubalign::gate;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

/// How a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// One JSON object per line.
    Json,
    /// Comma-separated values with a header line.
    Csv,
}

/// Prints each item as one JSON line.
pub fn json_lines<T: Serialize>(items: impl IntoIterator<Item = T>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for item in items {
        serde_json::to_writer(&mut out, &item)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Prints flat rows as CSV: a header from the first row's field names, values quoted when they must be.
pub fn csv<T: Serialize>(rows: &[T]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let mut header_done = false;
    for row in rows {
        let serde_json::Value::Object(fields) = serde_json::to_value(row)? else {
            anyhow::bail!("CSV needs flat rows")
        };
        if !header_done {
            writeln!(out, "{}", fields.keys().map(|k| csv_field(k)).collect::<Vec<_>>().join(","))?;
            header_done = true;
        }
        let cells: Vec<String> = fields
            .values()
            .map(|v| match v {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => csv_field(s),
                other => csv_field(&other.to_string()),
            })
            .collect();
        writeln!(out, "{}", cells.join(","))?;
    }
    Ok(())
}

fn csv_field(s: &str) -> String {
    // Control characters are escaped like everywhere else text from outside is shown; a row stays one line.
    let s = gate::escape_control(s).into_owned();
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s }
}

/// `n` and the noun in the number it takes: `count(1, "shard", "shards")` is `1 shard`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Decimal gigabytes and friends, as the Hub and the seeds count them.
pub fn bytes(n: u64) -> String {
    hubalign::report::human_bytes(n)
}

/// A progress bar on stderr, drawn only when stderr is a terminal.
pub fn progress(len: u64, template: &str) -> ProgressBar {
    let target =
        if std::io::stderr().is_terminal() { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let bar = ProgressBar::with_draw_target(Some(len), target);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Renders rows as space-separated columns, the first row being the heading.
pub fn table(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> =
        rows.iter().map(|r| r.iter().map(|c| gate::escape_control(c).into_owned()).collect()).collect();
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r.get(c).map_or(0, |s| s.chars().count())).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        // Cells were escaped before measuring, below; nothing from outside reaches the terminal raw.
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_counts() {
        assert_eq!(super::bytes(999), "999 B");
        assert_eq!(super::bytes(59_300_000_000), "59.30 GB");
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(super::count(1, "shard", "shards"), "1 shard");
        assert_eq!(super::count(0, "shard", "shards"), "0 shards");
        assert_eq!(super::count(2, "entry", "entries"), "2 entries");
    }

    #[test]
    fn csv_quoting() {
        assert_eq!(super::csv_field("plain"), "plain");
        assert_eq!(super::csv_field("a,b"), "\"a,b\"");
        assert_eq!(super::csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn control_characters_are_escaped_in_tables_and_csv() {
        let t = super::table(&[vec!["id".into()], vec!["evil/\u{1b}[2J\nforged  row".into()]]);
        assert_eq!(t, "id\nevil/\\u{1b}[2J\\u{a}forged  row\n");
        assert_eq!(super::csv_field("a\nb"), "a\\u{a}b");
    }

    #[test]
    fn tables_align() {
        let t = super::table(&[vec!["a".into(), "bb".into()], vec!["ccc".into(), "d".into()]]);
        assert_eq!(t, "a    bb\nccc  d\n");
    }
}
