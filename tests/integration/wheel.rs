//! The PyPI wheel, built by maturin as the release workflow builds it (`.github/workflows/release.yml`),
//! installed by pip alone into a fresh venv: its `hubalign` runs `scan` and `fix` on the fixtures, directly
//! and as `hf hubalign` through `huggingface_hub`'s extensions (`extension/hf-hubalign`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::support::{fixture, python, root, stdout, text};

/// The `bin` folder of a fresh venv of the machine's Python, holding pip and the wheel built for this
/// machine, and nothing else. Built once per run, under `target/wheel-build`.
fn installed_wheel() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let build = root().join("target/wheel-build");
        let (dist, venv) = (build.join("dist"), build.join("venv"));
        let _ = std::fs::remove_dir_all(&dist);
        let _ = std::fs::remove_dir_all(&venv);
        // The interop venv's pinned maturin. A target directory of its own keeps the suite's binary (built
        // with every feature) from being replaced by the wheel's. No debug info and no incremental state:
        // this second build of every dependency should take little disk.
        let out = Command::new(python().with_file_name("maturin"))
            .args(["build", "--locked", "--out"])
            .arg(&dist)
            .current_dir(root())
            .env("CARGO_TARGET_DIR", &build)
            .env("CARGO_PROFILE_DEV_DEBUG", "false")
            .env("CARGO_INCREMENTAL", "0")
            .output()
            .unwrap();
        assert!(out.status.success(), "maturin build: {}", text(&out));
        let wheels: Vec<PathBuf> = std::fs::read_dir(&dist).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(wheels.len(), 1, "{wheels:?}");
        let name = wheels[0].file_name().unwrap().to_string_lossy().into_owned();
        let tag = format!("hubalign-{}-py3-none-", env!("CARGO_PKG_VERSION"));
        assert!(name.starts_with(&tag) && name.ends_with(".whl"), "one wheel for any Python 3: {name}");

        let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).output().unwrap();
        assert!(made.status.success(), "{}", text(&made));
        let pip = Command::new(venv.join("bin/pip"))
            .args(["install", "--no-index", "--disable-pip-version-check", "--quiet"])
            .arg(&wheels[0])
            .output()
            .unwrap();
        assert!(pip.status.success(), "pip install: {}", text(&pip));
        assert!(venv.join("bin/hubalign").is_file(), "pip put the binary on the venv's PATH");
        WHEEL.get_or_init(|| wheels[0].clone());
        venv.join("bin")
    })
}

/// The wheel [`installed_wheel`] built.
static WHEEL: OnceLock<PathBuf> = OnceLock::new();

/// `PATH` with `first` in front.
fn path_with(first: &Path) -> String {
    format!("{}:{}", first.display(), std::env::var("PATH").unwrap_or_default())
}

/// Runs `scan` and `fix` on the q4 fixture through `hubalign` (a command line's first words): the scan
/// finds what to pad, the fix writes an aligned copy into `dir` with the other files beside it.
fn scan_and_fix(hubalign: &dyn Fn(&[&str]) -> Output, dir: &Path) {
    let q4 = fixture("mlx_lm/q4");
    let scanned = hubalign(&["scan", q4.to_str().unwrap()]);
    assert_eq!(scanned.status.code(), Some(1), "{}", text(&scanned));
    assert!(stdout(&scanned).contains("header_pad"), "{}", text(&scanned));
    let fixed = dir.join("q4-aligned");
    let fix = hubalign(&["fix", q4.to_str().unwrap(), "--out", fixed.to_str().unwrap()]);
    assert!(fix.status.success(), "{}", text(&fix));
    let rescanned = hubalign(&["scan", fixed.to_str().unwrap()]);
    assert_eq!(rescanned.status.code(), Some(0), "aligned after the fix: {}", text(&rescanned));
    assert!(fixed.join("config.json").is_file() && fixed.join("MEI_ALIGN_MANIFEST.json").is_file());
}

#[test]
fn the_wheel_installs_into_a_bare_venv_and_runs_scan_and_fix() {
    let bin = installed_wheel();
    let run =
        |args: &[&str]| Command::new(bin.join("hubalign")).args(args).env("HF_HUB_OFFLINE", "1").output().unwrap();
    let version = run(&["--version"]);
    assert_eq!(stdout(&version).trim(), format!("hubalign {}", env!("CARGO_PKG_VERSION")), "{}", text(&version));
    let dir = tempfile::tempdir().unwrap();
    scan_and_fix(&run, dir.path());
}

/// A tool installer: its command in the interop venv, its arguments before the wheel, its environment.
struct Installer {
    tool: &'static str,
    args: &'static [&'static str],
    env: Vec<(&'static str, PathBuf)>,
}

#[test]
fn uv_tool_install_and_pipx_install_put_it_on_the_path() {
    installed_wheel();
    let wheel = WHEEL.get().unwrap();
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin");
    // Each installer, offline, with its folders in the test's own home.
    let installs = [
        Installer {
            tool: "uv",
            args: &["tool", "install", "--offline"],
            env: vec![("UV_TOOL_DIR", home.path().join("uv-tools")), ("UV_CACHE_DIR", home.path().join("uv-cache"))],
        },
        Installer {
            tool: "pipx",
            args: &["install"],
            env: vec![("PIPX_HOME", home.path().join("pipx")), ("PIP_NO_INDEX", "1".into())],
        },
    ];
    for Installer { tool, args, env } in installs {
        let _ = std::fs::remove_dir_all(&bin);
        let mut command = Command::new(python().with_file_name(tool));
        command.args(args).arg(wheel).env("HOME", home.path());
        command.env("UV_TOOL_BIN_DIR", &bin).env("PIPX_BIN_DIR", &bin).envs(env);
        let out = command.output().unwrap();
        assert!(out.status.success(), "{tool} install: {}", text(&out));
        let version = Command::new(bin.join("hubalign")).arg("--version").output().unwrap();
        assert_eq!(
            stdout(&version).trim(),
            format!("hubalign {}", env!("CARGO_PKG_VERSION")),
            "{tool}: {}",
            text(&version)
        );
        let q4 = fixture("mlx_lm/q4");
        let scanned =
            Command::new(bin.join("hubalign")).arg("scan").arg(&q4).env("HF_HUB_OFFLINE", "1").output().unwrap();
        assert_eq!(scanned.status.code(), Some(1), "{tool}: {}", text(&scanned));
    }
}

#[test]
fn hf_installs_the_extension_and_runs_hubalign_through_it() {
    let bin = installed_wheel();
    let home = tempfile::tempdir().unwrap();
    let hf = python().with_file_name("hf");
    let hf_env = |command: &mut Command| {
        command.env("HOME", home.path()).env("HF_HOME", home.path().join("hf")).env("HF_HUB_DISABLE_UPDATE_CHECK", "1");
    };

    // `hf extensions install`, with GitHub's answers served from extension/hf-hubalign.
    let mut install = Command::new(python());
    install.arg(root().join("tests/python/hf_extension_install.py")).arg(root().join("extension/hf-hubalign"));
    install.arg("hubalign-project/hf-hubalign");
    hf_env(&mut install);
    let installed = install.output().unwrap();
    assert!(installed.status.success(), "hf extensions install: {}", text(&installed));
    let manifest = home.path().join(".local/share/hf/extensions/hf-hubalign/manifest.json");
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    assert_eq!(manifest["type"], "binary", "a script extension: {manifest}");

    let through_hf = |args: &[&str]| {
        let mut command = Command::new(&hf);
        command.arg("hubalign").args(args).env("PATH", path_with(bin)).env("HF_HUB_OFFLINE", "1");
        hf_env(&mut command);
        command.output().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    scan_and_fix(&through_hf, dir.path());

    // Without the binary on the PATH, the extension says what to install.
    let mut bare = Command::new(&hf);
    bare.args(["hubalign", "scan", "."]).env("PATH", "/usr/bin:/bin");
    hf_env(&mut bare);
    let bare = bare.output().unwrap();
    assert_eq!(bare.status.code(), Some(127), "{}", text(&bare));
    assert!(text(&bare).contains("pip install hubalign"), "{}", text(&bare));
}
