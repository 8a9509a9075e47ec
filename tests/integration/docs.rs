//! The README cannot drift from `--help`: every flag a subcommand accepts is documented there.

use crate::support::{root, run, stdout};

#[test]
fn readme_documents_every_flag() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for sub in ["scan", "fix", "sim", "audit", "report", "repack", "worker"] {
        let help = stdout(&run(&[sub, "--help"]));
        let flags: Vec<&str> = help
            .split_whitespace()
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
            .filter(|f| !["--help", "--version", "--log-json"].contains(f))
            .collect();
        assert!(flags.len() >= 2, "{sub}: no flags found in --help");
        for flag in flags {
            assert!(readme.contains(flag), "README lacks `{flag}` of `hubalign {sub}`");
        }
    }
    assert!(readme.contains("--log-json"));
}
