//! The command reference (`docs/COMMANDS.md`) cannot drift from `--help`: every flag a subcommand accepts is
//! documented there, and the README keeps to the quick start and the concepts.

use crate::support::{root, run, stdout};

#[test]
fn the_command_reference_documents_every_flag() {
    let readme = std::fs::read_to_string(root().join("docs/COMMANDS.md")).unwrap();
    let subs = [
        "scan",
        "pull",
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

#[test]
fn the_metal_runner_workflow_is_valid_yaml_that_runs_the_runner_on_apple_silicon() {
    let text = std::fs::read_to_string(root().join("deploy/metal-verify.yml")).unwrap();
    let workflow: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
    let job = &workflow["jobs"]["verify"];
    assert_eq!(job["runs-on"], "macos-14", "{job}");
    let steps = job["steps"].as_array().unwrap();
    let runs = steps.iter().filter_map(|s| s["run"].as_str()).collect::<Vec<_>>().join(" ");
    assert!(runs.contains("hubalign verify-runner") && runs.contains("--verify-device metal"), "{runs}");
    let said = job["steps"].to_string();
    assert!(said.contains("HUBALIGN_RUNNER_TOKEN"), "the token comes from a secret");
    assert!(runs.contains("--db") && said.contains("secrets.HUBALIGN_DATABASE_URL"), "the Hub mode");
    assert_eq!(workflow["permissions"], serde_json::json!({"contents": "read"}), "least privilege");
    let uses: Vec<&str> = steps.iter().filter_map(|s| s["uses"].as_str()).collect();
    assert!(!uses.is_empty() && uses.iter().all(|u| pinned(u)), "{uses:?}");
    let checkout = steps.iter().find(|s| s["uses"].as_str().is_some_and(|u| u.starts_with("actions/checkout@")));
    assert_eq!(checkout.unwrap()["with"]["persist-credentials"], false, "no credentials kept");
    assert!(runs.contains("cargo build --release --locked"), "{runs}");
}

/// Every action is pinned to a full commit: `owner/name@` and 40 lowercase hex digits.
fn pinned(uses: &str) -> bool {
    uses.rsplit_once('@').is_some_and(|(action, sha)| {
        action.split('/').count() == 2 && sha.len() == 40 && sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

#[test]
fn the_release_workflow_builds_every_platforms_wheel_and_publishes_without_a_stored_token() {
    let text = std::fs::read_to_string(root().join(".github/workflows/release.yml")).unwrap();
    let workflow: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(workflow["permissions"], serde_json::json!({}), "nothing by default");
    let wheels = &workflow["jobs"]["wheels"];
    assert_eq!(wheels["permissions"], serde_json::json!({"contents": "read"}), "{wheels}");
    let targets: Vec<&str> = wheels["strategy"]["matrix"]["platform"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["target"].as_str())
        .collect();
    for target in [
        "aarch64-apple-darwin",
        "x86_64-unknown-linux-gnu",
        "aarch64-unknown-linux-gnu",
        "x86_64-unknown-linux-musl",
        "aarch64-unknown-linux-musl",
    ] {
        assert!(targets.contains(&target), "{target} missing from {targets:?}");
    }
    let publish = &workflow["jobs"]["publish"];
    assert_eq!(publish["permissions"], serde_json::json!({"id-token": "write"}), "trusted publishing");
    assert_eq!(publish["needs"], "wheels");
    assert!(!text.contains("secrets."), "no stored token: PyPI trusts the workflow itself");
    let mut uses = Vec::new();
    for job in workflow["jobs"].as_object().unwrap().values() {
        let steps = job["steps"].as_array().unwrap();
        uses.extend(steps.iter().filter_map(|s| s["uses"].as_str()));
        for checkout in steps.iter().filter(|s| s["uses"].as_str().is_some_and(|u| u.starts_with("actions/checkout@")))
        {
            assert_eq!(checkout["with"]["persist-credentials"], false, "no credentials kept");
        }
    }
    assert!(uses.iter().any(|u| u.starts_with("PyO3/maturin-action@")), "{uses:?}");
    assert!(uses.iter().all(|u| pinned(u)), "{uses:?}");
}
