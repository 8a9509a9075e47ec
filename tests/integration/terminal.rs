//! What a person at a terminal sees: `audit` under a real pseudo-terminal (util-linux `script`), its output
//! replayed through a terminal emulator (`vt100`), and the screen read back.

use std::process::Command;

use crate::audit::world::{audit_world, db};
use crate::sim::world::ALICE;

/// Rows and columns of the emulated terminal: enough rows that nothing scrolls away, so the screen holds the
/// whole run.
const ROWS: u16 = 4000;
const COLUMNS: u16 = 200;

/// On a terminal the audit draws its bar, with an ETA, and `-v`'s log lines go around it: on the screen, every
/// log line is whole and on a line of its own, and no line holds both the bar and a log line.
#[test]
fn on_a_terminal_log_lines_and_the_bar_never_overwrite_each_other() {
    let world = audit_world(120, |_| {});
    let (_dir, db) = db();
    let command = format!(
        "stty cols {COLUMNS} rows {ROWS}; exec {} -v audit --endpoint {} --db {} --concurrency 2",
        env!("CARGO_BIN_EXE_hubalign"),
        world.endpoint(),
        db.display()
    );
    let out = Command::new("script")
        .args(["--quiet", "--flush", "--return", "--command", &command, "/dev/null"])
        .env("HF_TOKEN", ALICE)
        .env_remove("DATABASE_URL")
        .env("TERM", "xterm-256color")
        .output()
        .expect("util-linux `script` runs the audit under a pseudo-terminal");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let raw = String::from_utf8_lossy(&out.stdout);
    assert!(raw.contains("repos, eta "), "the bar was drawn, with its ETA: {raw}");

    let mut terminal = vt100::Parser::new(ROWS, COLUMNS, 0);
    terminal.process(&out.stdout);
    let screen = terminal.screen().contents();
    let levels = [" TRACE ", " DEBUG ", "  INFO ", "  WARN ", " ERROR "];
    let logged: Vec<&str> = screen.lines().filter(|l| levels.iter().any(|level| l.contains(level))).collect();
    assert!(logged.len() > 100, "-v logs each repo: {} lines on\n{screen}", logged.len());
    for line in &logged {
        // A whole log line starts with its timestamp; nothing of the bar is left in front of it or after it.
        assert!(line.starts_with("20") && line.as_bytes().get(4) == Some(&b'-'), "a log line cut into: {line:?}");
        assert!(!line.contains("repos, eta"), "the bar and a log line share a line: {line:?}");
    }
    assert!(screen.contains("audit ended"), "the run's end: {screen}");
}
