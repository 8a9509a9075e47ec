//! The command reference (`docs/COMMANDS.md`) cannot drift from `--help`: every flag a subcommand accepts is
//! documented there, and the README keeps to the quick start and the concepts.

use crate::support::{root, run, stdout};

#[test]
fn the_command_reference_documents_every_flag() {
    let readme = std::fs::read_to_string(root().join("docs/COMMANDS.md")).unwrap();
    let subs = [
        "scan",
        "fix",
        "audit",
        "report",
        "repack",
        "worker",
        "verify-runner",
        "serve",
        "doctor",
        "healthcheck",
        "findable",
    ];
    // `demo` is built only with its feature, which tier 2 (`tests/run.sh`) turns on.
    let demo = cfg!(feature = "demo").then(|| vec!["demo"]);
    for sub in subs.iter().map(|s| vec![*s]).chain(demo).chain([
        vec!["store", "export"],
        vec!["store", "import"],
        vec!["store", "migrate"],
        vec!["webhook", "create"],
        vec!["webhook", "list"],
        vec!["webhook", "delete"],
        vec!["jobs", "list"],
        vec!["jobs", "retry"],
        vec!["dataset", "write"],
        vec!["dataset", "push"],
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
            assert!(readme.contains(flag), "docs/COMMANDS.md lacks `{flag}` of `hubalign {sub}`");
        }
    }
    assert!(readme.contains("--log-json"));
}

#[test]
fn the_readme_starts_with_the_two_commands_and_links_every_document_it_names() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let first_block: Vec<&str> = readme.split("```").nth(1).unwrap().lines().skip(1).collect();
    assert!(first_block[0].starts_with("cargo run --features demo -- demo"), "{first_block:?}");
    assert!(first_block[1].starts_with("bash tests/run.sh"), "{first_block:?}");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.trim_end().ends_with("bash tests/run.sh"), "`.ci/run` runs the README's test command last");
    for doc in ["docs/COMMANDS.md", "docs/ARCHITECTURE.md", "crates/hubsim/README.md", "SECURITY.md", "BENCHMARKS.md"] {
        assert!(readme.contains(&format!("]({doc})")), "the README does not link {doc}");
        assert!(root().join(doc).is_file(), "{doc} is linked from the README but missing");
    }
    let screenshots: Vec<&str> =
        readme.split("](docs/screenshots/").skip(1).filter_map(|rest| rest.split(')').next()).collect();
    assert!(screenshots.len() >= 4, "the README shows the dashboard: {screenshots:?}");
    for png in screenshots {
        let bytes = std::fs::read(root().join("docs/screenshots").join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is a PNG");
    }
}

#[cfg(feature = "system-tests")]
#[test]
fn the_metal_runner_workflow_is_valid_yaml_that_runs_the_runner_on_apple_silicon() {
    let check = "import sys, yaml; w = yaml.safe_load(open(sys.argv[1])); job = w['jobs']['verify']; \
                 assert job['runs-on'] == 'macos-14', job; \
                 runs = ' '.join(s.get('run', '') for s in job['steps']); \
                 assert 'hubalign verify-runner' in runs and '--verify-device metal' in runs, runs; \
                 assert 'HUBALIGN_RUNNER_TOKEN' in str(job['steps']), 'the token comes from a secret'; \
                 assert '--db' in runs and 'secrets.HUBALIGN_DATABASE_URL' in str(job['steps']), 'the Hub mode'; \
                 assert w['permissions'] == {'contents': 'read'}, 'least privilege'; \
                 import re; uses = [s['uses'] for s in job['steps'] if 'uses' in s]; \
                 assert uses and all(re.fullmatch(r'[\\w.-]+/[\\w.-]+@[0-9a-f]{40}', u) for u in uses), uses; \
                 co = [s for s in job['steps'] if s.get('uses', '').startswith('actions/checkout@')][0]; \
                 assert co['with']['persist-credentials'] is False, 'no credentials kept'; \
                 assert 'cargo build --release --locked' in runs, runs";
    let out = std::process::Command::new(crate::support::python())
        .args(["-c", check])
        .arg(root().join("deploy/metal-verify.yml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
