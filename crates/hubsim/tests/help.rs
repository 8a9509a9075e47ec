//! The simulator's README cannot drift from `hubsim --help`: every flag is documented there.

use std::process::Command;

#[test]
fn the_readme_documents_every_flag() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hubsim")).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let flags: Vec<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
        .filter(|f| !["--help", "--version"].contains(f))
        .collect();
    assert!(flags.len() > 10, "no flags found in --help: {help}");
    for flag in flags {
        assert!(readme.contains(flag), "crates/hubsim/README.md lacks `{flag}`");
    }
}

#[test]
fn a_missing_root_is_a_usage_error_naming_the_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_hubsim")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--root"));
}
