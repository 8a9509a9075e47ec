//! The README cannot drift from `--help`: every flag a subcommand accepts is documented there.

use crate::support::{root, run, stdout};

#[test]
fn readme_documents_every_flag() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let subs = ["scan", "fix", "sim", "audit", "report", "repack", "worker", "verify-runner", "serve", "demo"];
    for sub in subs.iter().map(|s| vec![*s]).chain([
        vec!["store", "export"],
        vec!["store", "import"],
        vec!["store", "migrate"],
        vec!["webhook", "create"],
        vec!["webhook", "list"],
        vec!["webhook", "delete"],
    ]) {
        let sub = sub.join(" ");
        let args: Vec<&str> = sub.split(' ').chain(["--help"]).collect();
        let help = stdout(&run(&args));
        let flags: Vec<&str> = help
            .split_whitespace()
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
            .filter(|f| !["--help", "--version", "--log-json"].contains(f))
            .collect();
        assert!(!flags.is_empty(), "{sub}: no flags found in --help");
        for flag in flags {
            assert!(readme.contains(flag), "README lacks `{flag}` of `hubalign {sub}`");
        }
    }
    assert!(readme.contains("--log-json"));
}

#[test]
fn the_metal_runner_workflow_is_valid_yaml_that_runs_the_runner_on_apple_silicon() {
    let check = "import sys, yaml; w = yaml.safe_load(open(sys.argv[1])); job = w['jobs']['verify']; \
                 assert job['runs-on'] == 'macos-14', job; \
                 runs = ' '.join(s.get('run', '') for s in job['steps']); \
                 assert 'hubalign verify-runner' in runs and '--device gpu' in runs, runs; \
                 assert 'HUBALIGN_RUNNER_TOKEN' in str(job['steps']), 'the token comes from a secret'; \
                 assert '--db' in runs and 'secrets.HUBALIGN_DATABASE_URL' in str(job['steps']), 'the Hub mode'";
    let out = std::process::Command::new(crate::support::python())
        .args(["-c", check])
        .arg(root().join("deploy/metal-verify.yml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
