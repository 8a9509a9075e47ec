//! Shared presentation helpers: output formats, byte counts, progress bars.

use std::io::{IsTerminal, Write};

use hubalign::untrusted;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

/// How a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Format {
    /// Aligned columns for people.
    Table,
    /// One JSON object per line.
    Json,
    /// Comma-separated values with a header line.
    Csv,
}

/// Prints each item as one JSON line.
pub(super) fn json_lines<T: Serialize>(items: impl IntoIterator<Item = T>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for item in items {
        serde_json::to_writer(&mut out, &item)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Prints flat rows as CSV (RFC 4180, by the `csv` crate). The header comes from the first row's field
/// names. Fields are quoted when they must be, and the data stays as it is: a newline stays a newline, inside
/// quotes. On a terminal, control characters are escaped, as everywhere else text from outside is shown.
pub(super) fn csv<T: Serialize>(rows: &[T]) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let on_terminal = stdout.is_terminal();
    write_csv(rows, stdout.lock(), on_terminal)
}

fn write_csv<T: Serialize, W: Write>(rows: &[T], out: W, escape: bool) -> anyhow::Result<()> {
    let mut writer = ::csv::Writer::from_writer(out);
    let shown = |s: &str| if escape { untrusted::escape_control(s).into_owned() } else { s.to_owned() };
    for (i, row) in rows.iter().enumerate() {
        let serde_json::Value::Object(fields) = serde_json::to_value(row)? else {
            anyhow::bail!("CSV needs flat rows")
        };
        if i == 0 {
            writer.write_record(fields.keys().map(|k| shown(k)))?;
        }
        writer.write_record(fields.values().map(|v| match v {
            serde_json::Value::Null => String::new(),
            serde_json::Value::String(s) => shown(s),
            other => other.to_string(),
        }))?;
    }
    writer.flush()?;
    Ok(())
}

/// Formats `n` with the noun in the matching number: `count(1, "shard", "shards")` is `1 shard`.
pub(super) fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Formats a byte count in decimal units (GB and friends), as the Hub and the seeds count them.
pub(super) fn bytes(n: u64) -> String {
    hubalign::report::human_bytes(n)
}

/// Whether progress bars may be drawn at all (not with `-q` or `HF_HUB_DISABLE_PROGRESS_BARS`).
static PROGRESS_BARS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Turns progress bars on or off for the whole run, before any is made.
pub(super) fn set_progress_bars(on: bool) {
    PROGRESS_BARS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The bar being drawn, if any: log lines are written around it (see [`LogWriter`]).
static DRAWN: std::sync::Mutex<Option<ProgressBar>> = std::sync::Mutex::new(None);

/// A progress bar on stderr, drawn only when stderr is a terminal and bars are on.
pub(super) fn progress(len: u64, template: &str) -> ProgressBar {
    let drawn = PROGRESS_BARS.load(std::sync::atomic::Ordering::Relaxed) && std::io::stderr().is_terminal();
    let target = if drawn { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let bar = ProgressBar::with_draw_target(Some(len), target);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    if drawn {
        *DRAWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(bar.clone());
    }
    bar
}

/// Writes log lines to stderr. It clears the progress bar, if one is drawn, while it writes a line, and draws
/// the bar again after it. Lines and the bar thus never overwrite each other.
#[derive(Clone, Copy, Default)]
pub(super) struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = DRAWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        match bar.filter(|b| !b.is_finished()) {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(buf)).map(|()| buf.len()),
            None => std::io::stderr().write_all(buf).map(|()| buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> LogWriter {
        LogWriter
    }
}

/// Renders rows as space-separated columns, the first row being the heading.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> =
        rows.iter().map(|r| r.iter().map(|c| untrusted::escape_control(c).into_owned()).collect()).collect();
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r.get(c).map_or(0, |s| s.chars().count())).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        // Cells were escaped before measuring, so nothing from outside reaches the terminal raw.
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

    fn csv_of(rows: &[serde_json::Value], escape: bool) -> String {
        let mut out = Vec::new();
        super::write_csv(rows, &mut out, escape).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn csv_quotes_what_must_be_and_keeps_the_data() {
        let rows = [serde_json::json!({"id": "a,b", "note": "say \"hi\"", "n": 3, "gone": null, "lines": "a\nb"})];
        let text = csv_of(&rows, false);
        assert_eq!(text, "id,note,n,gone,lines\n\"a,b\",\"say \"\"hi\"\"\",3,,\"a\nb\"\n");
        let back: Vec<csv::StringRecord> =
            csv::Reader::from_reader(text.as_bytes()).records().collect::<Result<_, _>>().unwrap();
        assert_eq!(&back[0][4], "a\nb", "a reader gets the newline back");
    }

    #[test]
    fn control_characters_are_escaped_in_tables_and_csv() {
        let t = super::table(&[vec!["id".into()], vec!["evil/\u{1b}[2J\nforged  row".into()]]);
        assert_eq!(t, "id\nevil/\\u{1b}[2J\\u{a}forged  row\n");
        let csv = csv_of(&[serde_json::json!({"id": "evil/\u{1b}[2J"})], true);
        assert_eq!(csv, "id\nevil/\\u{1b}[2J\n");
    }

    #[test]
    fn tables_align() {
        let t = super::table(&[vec!["a".into(), "bb".into()], vec!["ccc".into(), "d".into()]]);
        assert_eq!(t, "a    bb\nccc  d\n");
    }
}
