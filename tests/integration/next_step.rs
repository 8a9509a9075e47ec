//! What a person who loads MLX models does: `hubalign scan` over a Hugging Face cache written by
//! `huggingface_hub` itself names, for each affected model, the aligned mirror to download when the Hub lists
//! one, else the repair to run (online and offline); `hubalign pull` fetches a model that maps either way.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::sim::world::{World, bundle, start_on};
use crate::support::{fixture, hubalign, python, stdout, text};

/// The mirrors' namespace in these tests.
const MIRRORS: &str = "aligned-org";

/// A Hub with three MLX models (one with an aligned mirror under [`MIRRORS`], one whose only "mirror" sits in
/// another namespace, one aligned already).
fn world() -> World {
    world_tuned(|_| {})
}

/// [`world`] with `tune` applied to the simulator's configuration.
fn world_tuned(tune: impl FnOnce(&mut hubsim::SimConfig)) -> World {
    let root = tempfile::tempdir().unwrap();
    let mlx = r#"{"library_name":"mlx","tags":["safetensors"],"downloads":100}"#;
    bundle(root.path(), "mlx-community/tiny-q4", "mlx_lm/q4", mlx);
    bundle(root.path(), "lmstudio/tiny-q8", "mlx_lm/q8", mlx);
    bundle(root.path(), "mlx-community/tiny-bf16", "mlx_lm/bf16", mlx);
    // A mirror holds its source repaired, with the manifest, as the worker publishes it.
    let mirrored = |source: &str, from: &str, namespace: &str| {
        let dir = root.path().join("models").join(hubalign::mirror_name::mirror_name(source, namespace));
        let fixed = hubalign().args(["fix", fixture(from).to_str().unwrap(), "--out", dir.to_str().unwrap()]).output();
        assert!(fixed.unwrap().status.success());
        std::fs::write(dir.join(".hubsim.json"), r#"{"library_name":"mlx","tags":["aligned-safetensors"]}"#).unwrap();
    };
    mirrored("mlx-community/tiny-q4", "mlx_lm/q4", MIRRORS);
    mirrored("lmstudio/tiny-q8", "mlx_lm/q8", "squatter");
    start_on(root, tune)
}

/// Downloads `repos` into the cache `cache` with `huggingface_hub`'s own `snapshot_download`.
fn download_into_cache(world: &World, cache: &Path, repos: &[&str]) {
    let script = "import sys\nfrom huggingface_hub import snapshot_download\n\
                  for repo in sys.argv[2:]:\n    snapshot_download(repo, cache_dir=sys.argv[1])\n";
    let out = std::process::Command::new(python())
        .args(["-c", script])
        .arg(cache)
        .args(repos)
        .env("HF_ENDPOINT", world.endpoint())
        .env("HF_HOME", cache.join("hf-home"))
        .env("HF_HUB_DISABLE_XET", "1")
        .env_remove("HF_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `hubalign scan CACHE ARGS` against the world, with `HF_HUB_OFFLINE=1` when `offline`.
fn scan(world: &World, cache: &Path, args: &[&str], offline: bool) -> Output {
    let mut command = hubalign();
    command.arg("scan").arg(cache).args(["--mirrors", MIRRORS]).args(args);
    command.env("HF_ENDPOINT", world.endpoint()).env("HF_HOME", cache.join("hf-home")).env_remove("HF_TOKEN");
    if offline {
        command.env("HF_HUB_OFFLINE", "1");
    } else {
        command.env_remove("HF_HUB_OFFLINE");
    }
    command.output().unwrap()
}

/// Each shard's row, by the repo it came from.
fn rows_by_repo(out: &Output) -> std::collections::BTreeMap<String, Value> {
    let rows = stdout(out).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect::<Vec<_>>();
    rows.into_iter().map(|r| (r["repo_id"].as_str().unwrap_or("(none)").to_owned(), r)).collect()
}

#[test]
fn a_scan_of_a_cache_names_the_mirror_or_the_repair_for_each_model() {
    let world = world();
    let cache = tempfile::tempdir().unwrap();
    download_into_cache(
        &world,
        cache.path(),
        &["mlx-community/tiny-q4", "lmstudio/tiny-q8", "mlx-community/tiny-bf16"],
    );
    let mirror = hubalign::mirror_name::mirror_name("mlx-community/tiny-q4", MIRRORS);

    let listed_before = world.counters().requests.get("models_list").copied().unwrap_or(0);
    let online = scan(&world, cache.path(), &[], false);
    let text = stdout(&online);
    assert_eq!(online.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "mlx-community/tiny-q4: an aligned mirror exists. Download it:\n  hf download {mirror}\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("lmstudio/tiny-q8: no aligned mirror yet. Repair a copy outside the cache:\n  hubalign fix "),
        "{text}"
    );
    assert!(
        text.contains(" --out tiny-q8-aligned\n  then load it from there: mlx_lm.load(\"tiny-q8-aligned\")"),
        "{text}"
    );
    assert!(!text.contains("squatter"), "only the namespaces asked: {text}");
    assert!(!text.contains("tiny-bf16:"), "nothing to do for an aligned model: {text}");
    let listed = world.counters().requests.get("models_list").copied().unwrap_or(0) - listed_before;
    assert_eq!(listed, 2, "one request per affected model, none for the aligned one");

    let json = rows_by_repo(&scan(&world, cache.path(), &["--format", "json"], false));
    assert_eq!(json["mlx-community/tiny-q4"]["mirror_lookup"], "found");
    assert_eq!(json["mlx-community/tiny-q4"]["next_step"], format!("hf download {mirror}"));
    assert_eq!(json["lmstudio/tiny-q8"]["mirror_lookup"], "not_found");
    let fix = json["lmstudio/tiny-q8"]["next_step"].as_str().unwrap().to_owned();
    assert!(fix.starts_with("hubalign fix ") && fix.ends_with(" --out tiny-q8-aligned"), "{fix}");
    assert_eq!(json["mlx-community/tiny-bf16"]["mirror_lookup"], "not_needed");
    assert_eq!(json["mlx-community/tiny-bf16"]["next_step"], Value::Null);

    // Offline: no request, and each affected model says so and gets the repair.
    let listed_before = world.counters().requests.get("models_list").copied().unwrap_or(0);
    let offline = scan(&world, cache.path(), &[], true);
    let text = stdout(&offline);
    assert_eq!(world.counters().requests.get("models_list").copied().unwrap_or(0), listed_before, "{text}");
    for model in ["mlx-community/tiny-q4", "lmstudio/tiny-q8"] {
        let said =
            format!("{model}: HF_HUB_OFFLINE is set, so no mirror was looked for. Repair a copy outside the cache:");
        assert!(text.contains(&said), "{text}");
    }
    let json = rows_by_repo(&scan(&world, cache.path(), &["--format", "json"], true));
    assert_eq!(json["mlx-community/tiny-q4"]["mirror_lookup"], "offline");

    // The repair it names, run as printed (from the working directory it names), gives an aligned copy.
    let work = tempfile::tempdir().unwrap();
    let words = shlex::split(&fix).unwrap();
    let repaired = hubalign().args(&words[1..]).current_dir(work.path()).output().unwrap();
    assert!(repaired.status.success(), "{}", String::from_utf8_lossy(&repaired.stderr));
    let rescan = hubalign().args(["scan", "tiny-q8-aligned"]).current_dir(work.path()).output().unwrap();
    assert_eq!(rescan.status.code(), Some(0), "{}", stdout(&rescan));
    assert!(work.path().join("tiny-q8-aligned/config.json").exists(), "the other files come along");
}

/// `hubalign pull REPO ARGS` against the world, with the cache at `cache` and `cwd` as working directory.
fn pull(world: &World, cache: &Path, cwd: &Path, repo: &str, args: &[&str]) -> Output {
    let mut command = hubalign();
    command.args(["pull", repo, "--mirrors", MIRRORS]).args(args).current_dir(cwd);
    command.env("HF_ENDPOINT", world.endpoint()).env("HF_HUB_CACHE", cache).env_remove("HF_TOKEN");
    command.env_remove("HF_HUB_OFFLINE").env("HF_HOME", cache.join("hf-home"));
    command.output().unwrap()
}

/// Loads each of `models` (repo ids from the cache `cache`, or folders) with `mlx_lm.load`, offline.
fn mlx_lm_loads(cache: &Path, models: &[&str]) {
    let script = "import sys\nfrom mlx_lm import load\nfor m in sys.argv[1:]:\n    load(m)\n    print('loaded', m)\n";
    let out = std::process::Command::new(python())
        .args(["-c", script])
        .args(models)
        .env("HF_HUB_CACHE", cache)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "mlx_lm.load: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn pull_gives_a_bundle_that_maps_with_a_mirror_and_without_one() {
    let world = world();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    let mirror = hubalign::mirror_name::mirror_name("mlx-community/tiny-q4", MIRRORS);

    // With a mirror: the mirror, into the cache as `hf download` puts it.
    let out = pull(&world, &cache, dir.path(), "mlx-community/tiny-q4", &[]);
    let text = text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(&format!("Downloaded the aligned mirror {mirror}")), "{text}");
    assert!(text.contains("every tensor maps in place"), "{text}");
    let folder = cache.join(format!("models--{}", mirror.replace('/', "--")));
    let commit = std::fs::read_to_string(folder.join("refs/main")).unwrap();
    let shard = folder.join("snapshots").join(&commit).join("model.safetensors");
    assert!(std::fs::symlink_metadata(&shard).unwrap().file_type().is_symlink(), "a snapshot links its blob");
    assert!(!folder.join(".hubalign-pull").exists(), "no work folder left");

    // Without one: the source, repaired as it streams, into NAME-aligned here, or into --local-dir.
    let out = pull(&world, &cache, dir.path(), "lmstudio/tiny-q8", &[]);
    let text = crate::support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Downloaded lmstudio/tiny-q8 at ") && text.contains("repaired it as it streamed"), "{text}");
    let repaired = dir.path().join("tiny-q8-aligned");
    assert!(repaired.join("MEI_ALIGN_MANIFEST.json").is_file(), "{text}");
    let kept: Vec<_> =
        std::fs::read_dir(repaired.join(".cache/hubalign")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(kept, ["pulled.json"], "no work folder left, only the list of what was pulled");
    // A stale file an earlier pull left (another commit's shard) goes; the pull's own come back.
    let stale = repaired.join("model-00001-of-00002.safetensors");
    std::fs::write(&stale, b"stale").unwrap();
    let listed = r#"["config.json","model-00001-of-00002.safetensors"]"#;
    std::fs::write(repaired.join(".cache/hubalign/pulled.json"), listed).unwrap();
    let again = pull(&world, &cache, dir.path(), "lmstudio/tiny-q8", &[]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(!stale.exists() && repaired.join("config.json").is_file(), "the stale shard is gone");
    let local = dir.path().join("q8-here");
    let out = pull(&world, &cache, dir.path(), "lmstudio/tiny-q8", &["--local-dir", local.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    // Another alignment than the mirror's: the source, repaired to it.
    let paged = dir.path().join("q4-paged");
    let out = pull(
        &world,
        &cache,
        dir.path(),
        "mlx-community/tiny-q4",
        &["--alignment", "16384", "--local-dir", paged.to_str().unwrap()],
    );
    let text = crate::support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Downloaded mlx-community/tiny-q4 at "), "{text}");
    let scanned = hubalign().args(["scan", "--alignment", "16384"]).arg(&paged).env("HF_HUB_OFFLINE", "1").output();
    assert_eq!(scanned.unwrap().status.code(), Some(0), "every data section on a page");

    // scan calls each aligned, and mlx-lm loads each: the mirror by its id from the cache, offline.
    for path in [&cache, &repaired, &local] {
        let scanned = hubalign().arg("scan").arg(path).env("HF_HUB_OFFLINE", "1").output().unwrap();
        assert_eq!(scanned.status.code(), Some(0), "{}: {}", path.display(), stdout(&scanned));
    }
    mlx_lm_loads(&cache, &[&mirror, repaired.to_str().unwrap(), local.to_str().unwrap()]);

    // huggingface_hub reads the cache pull wrote as its own: the mirror, at its commit, no warning.
    let script = "import sys\nfrom huggingface_hub import scan_cache_dir\ninfo = scan_cache_dir(sys.argv[1])\n\
                  assert not info.warnings, info.warnings\n\
                  print(*[f'{r.repo_id} {rev.commit_hash} {rev.nb_files}' for r in info.repos for rev in r.revisions])\n";
    let out = std::process::Command::new(python()).args(["-c", script]).arg(&cache).output().unwrap();
    assert!(out.status.success(), "scan_cache_dir: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).starts_with(&format!("{mirror} {commit} ")), "{}", stdout(&out));
}

/// How many files the pull's work folders under `work` have kept whole.
fn files_kept(work: &Path) -> usize {
    let Ok(works) = std::fs::read_dir(work) else { return 0 };
    works.filter_map(|w| std::fs::read_dir(w.ok()?.path().join("files")).ok()).map(Iterator::count).sum()
}

/// Starts `pull`, quiet, and returns it still running once a work folder under `work` has kept a file.
fn running_until_a_file_is_kept(mut pull: std::process::Command, work: &Path) -> std::process::Child {
    let mut child = pull.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while files_kept(work) == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the pull ended before it kept a file");
        assert!(std::time::Instant::now() < deadline, "no file was kept");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child
}

#[test]
fn a_pull_killed_mid_download_resumes_with_the_files_it_had() {
    // Each request takes 300 ms, so the download outlasts the first file it keeps.
    let world = world_tuned(|c| c.faults.latency = std::time::Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let (cache, local) = (dir.path().join("hub"), dir.path().join("q8"));
    let mut command = hubalign();
    command.args(["pull", "lmstudio/tiny-q8", "--mirrors", MIRRORS, "--local-dir", local.to_str().unwrap()]);
    command.env("HF_ENDPOINT", world.endpoint()).env("HF_HUB_CACHE", &cache).env_remove("HF_TOKEN");
    let work = local.join(".cache/hubalign");
    let mut child = running_until_a_file_is_kept(command, &work);
    child.kill().unwrap();
    child.wait().unwrap();
    let had = files_kept(&work);

    let resolved = || world.counters().requests.get("resolve").copied().unwrap_or(0);
    let before = resolved();
    let out = pull(&world, &cache, dir.path(), "lmstudio/tiny-q8", &["--local-dir", local.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let fetched = resolved() - before;
    let files = std::fs::read_dir(fixture("mlx_lm/q8")).unwrap().count() as u64;
    assert!(fetched + had as u64 <= files, "{had} files kept, {fetched} fetched again, of {files}");
    let scanned = hubalign().arg("scan").arg(&local).env("HF_HUB_OFFLINE", "1").output().unwrap();
    assert_eq!(scanned.status.code(), Some(0), "{}", stdout(&scanned));
}

#[test]
fn a_cache_path_with_a_tilde_or_a_variable_lands_where_huggingface_hub_looks() {
    let world = world();
    let home = tempfile::tempdir().unwrap();
    for (setting, folder) in [("~/tilde-hub", "tilde-hub"), ("${HUB_ROOT_FOR_TEST}/var-hub", "var-hub")] {
        let mut command = hubalign();
        command.args(["pull", "mlx-community/tiny-q4", "--mirrors", MIRRORS]).current_dir(home.path());
        command.env("HF_ENDPOINT", world.endpoint()).env_remove("HF_TOKEN").env_remove("HF_HUB_OFFLINE");
        command.env("HOME", home.path()).env("HUB_ROOT_FOR_TEST", home.path()).env("HF_HUB_CACHE", setting);
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

        let asked = std::process::Command::new(python())
            .args(["-c", "from huggingface_hub import constants; print(constants.HF_HUB_CACHE)"])
            .env("HOME", home.path())
            .env("HUB_ROOT_FOR_TEST", home.path())
            .env("HF_HUB_CACHE", setting)
            .output()
            .unwrap();
        let theirs = std::path::PathBuf::from(stdout(&asked).trim());
        assert_eq!(theirs, home.path().join(folder), "huggingface_hub reads {setting} so");
        let mirror = hubalign::mirror_name::mirror_name("mlx-community/tiny-q4", MIRRORS);
        assert!(theirs.join(format!("models--{}/refs/main", mirror.replace('/', "--"))).is_file(), "{setting}");
    }
}

#[test]
fn a_cache_scan_during_a_pull_lists_the_repo_without_a_warning() {
    // Each request takes 300 ms, so the download outlasts the first file it keeps.
    let world = world_tuned(|c| c.faults.latency = std::time::Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    let mirror = hubalign::mirror_name::mirror_name("mlx-community/tiny-q4", MIRRORS);
    let work = cache.join(format!("models--{}/.hubalign-pull", mirror.replace('/', "--")));
    let mut command = hubalign();
    command.args(["pull", "mlx-community/tiny-q4", "--mirrors", MIRRORS]);
    command.env("HF_ENDPOINT", world.endpoint()).env("HF_HUB_CACHE", &cache).env_remove("HF_TOKEN");
    let mut child = running_until_a_file_is_kept(command, &work);

    let script = "import sys\nfrom huggingface_hub import scan_cache_dir\ninfo = scan_cache_dir(sys.argv[1])\n\
                  assert not info.warnings, info.warnings\nprint(*[r.repo_id for r in info.repos])\n";
    let out = std::process::Command::new(python()).args(["-c", script]).arg(&cache).output().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(out.status.success(), "scan_cache_dir: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout(&out).trim(), mirror, "the repo is listed, with no revision yet");
}
