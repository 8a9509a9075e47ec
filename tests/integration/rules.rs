//! Rules the project keeps, held here rather than by memory: the library's modules name one another in one
//! direction only, no error is a bare `String`, every dependency comes from the workspace, and commit
//! messages take one form.

use std::path::{Path, PathBuf};

use crate::support::{python, root};

/// The library's module graph, at the top level and one level down, as `docs/module_graph.py` prints it.
#[cfg(feature = "system-tests")]
#[test]
fn the_library_has_no_module_cycles() {
    for depth in ["1", "2"] {
        let out = std::process::Command::new(python())
            .arg(root().join("docs/module_graph.py"))
            .arg(root().join("src"))
            .args(["--depth", depth])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let said = text.lines().find(|l| l.starts_with("cycles: ")).unwrap_or("no count");
        assert_eq!(said, "cycles: 0", "depth {depth}:\n{text}");
    }
}

/// Every `.rs` file under `dir`, in its subfolders too.
pub(crate) fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
        if entry.is_dir() {
            out.extend(sources(&entry));
        } else if entry.extension().is_some_and(|e| e == "rs") {
            out.push(entry);
        }
    }
    out
}

/// Errors are typed (`thiserror`), so a caller can tell them apart: no `Result<_, String>`, no
/// `type Err = String`, in the library, the binary or the simulator (tests aside).
#[test]
fn no_error_is_a_bare_string() {
    let mut found = Vec::new();
    for dir in ["src", "crates/hubsim/src"] {
        for file in sources(&root().join(dir)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = text.split("\nmod tests {").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                let line = line.split("//").next().unwrap_or_default();
                let bare = line.contains(", String>") && line.contains("Result<")
                    || line.contains("type Err = String")
                    || line.contains("type Error = String");
                if bare {
                    found.push(format!("{}:{}: {}", file.strip_prefix(root()).unwrap().display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "errors as bare strings:\n{}", found.join("\n"));
}

/// The `commit-msg` hook (`.githooks/commit-msg`, CONTRIBUTING.md) takes `area: what changed` in at most 72
/// characters with a blank second line, and refuses the rest, saying why.
#[test]
fn the_commit_message_hook_takes_the_form_and_refuses_the_rest() {
    let hook = root().join(".githooks/commit-msg");
    let check = |message: &str| {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), message).unwrap();
        let out = std::process::Command::new("bash").arg(&hook).arg(file.path()).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for good in [
        "store: stamp leases on the store's clock\n\nWhy, and the figures.\n",
        "findable, dataset: write only into what the service made\n",
        "Merge branch 'x'\n",
    ] {
        assert_eq!(check(good), (true, String::new()), "{good}");
    }
    let long = format!("repack: {}\n", "x".repeat(70));
    for (bad, why) in [
        (long.as_str(), "at most 72"),
        ("Fixed the thing\n", "'area: '"),
        ("repack: Fix the thing\n", "lower-case verb"),
        ("repack: fix the thing.\n", "full stop"),
        ("repack: fix the thing\nbody without a blank line\n", "not blank"),
    ] {
        let (passed, said) = check(bad);
        assert!(!passed && said.contains(why), "{bad:?}: {said}");
    }
}

/// Every commit since the hook came in has the form it checks.
#[test]
fn every_commit_since_the_hook_has_the_form() {
    let hook = root().join(".githooks/commit-msg");
    let log = std::process::Command::new("git")
        .args(["log", "--format=%H", "--", ".githooks/commit-msg"])
        .current_dir(root())
        .output()
        .unwrap();
    // A copy of the tree without its history (a release tarball) has nothing to check.
    let Some(first) = String::from_utf8_lossy(&log.stdout).lines().last().map(str::to_owned) else { return };
    let messages = std::process::Command::new("git")
        .args(["log", "--format=%B%x00", &format!("{first}^..HEAD")])
        .current_dir(root())
        .output()
        .unwrap();
    for message in String::from_utf8_lossy(&messages.stdout).split('\0').map(str::trim).filter(|m| !m.is_empty()) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), format!("{message}\n")).unwrap();
        let out = std::process::Command::new("bash").arg(&hook).arg(file.path()).output().unwrap();
        assert!(out.status.success(), "{message}\n{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Every dependency of every crate of the workspace comes through `[workspace.dependencies]`: each version is
/// chosen in one place, and the crates cannot drift apart. (`fuzz/` is a workspace of its own.)
#[test]
fn every_dependency_comes_from_the_workspace() {
    for manifest in ["Cargo.toml", "bench/Cargo.toml", "crates/hubsim/Cargo.toml", "crates/test-support/Cargo.toml"] {
        let doc: toml::Table = std::fs::read_to_string(root().join(manifest)).unwrap().parse().unwrap();
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(deps) = doc.get(section).and_then(toml::Value::as_table) else { continue };
            for (name, spec) in deps {
                let from_workspace = spec.get("workspace").and_then(toml::Value::as_bool) == Some(true);
                assert!(from_workspace, "{manifest}: [{section}] {name} does not say `workspace = true`");
            }
        }
    }
}
