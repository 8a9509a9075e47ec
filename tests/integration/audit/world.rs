//! An audit world: the simulator's standard world plus a malformed repo and generated filler repos, and
//! helpers to run the binary and read its store.

use std::path::{Path, PathBuf};
use std::process::Output;

use hubalign::store::Store;
use hubalign_test_support::synth::{SynthTensor, write_mlx_style};
use hubsim::SimConfig;
use serde_json::Value;

use crate::sim::world::{ALICE, World, populate, start_on};
use crate::support::{fixture, hubalign, run, stdout, text};

/// Writes `count` small MLX repos over five namespaces, 1–3 shards each, some needing padding, some a reorder.
pub fn fillers(root: &Path, count: usize) {
    for i in 0..count {
        let dir = root.join(format!("models/fill-{}/model-{i:03}", i % 5));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(".hubsim.json"), r#"{"library_name":"mlx"}"#).unwrap();
        std::fs::write(dir.join("config.json"), format!("{{\"model\": {i}}}")).unwrap();
        let shards = 1 + i % 3;
        for s in 0..shards {
            let odd = (i + s) % 2 == 0;
            let tensors = vec![
                SynthTensor::filled(&format!("m{i}.s{s}.norm"), "BF16", &[if odd { 33 } else { 32 }]),
                SynthTensor::filled(&format!("m{i}.s{s}.weight"), "U32", &[16, 8 + s as u64]),
                SynthTensor::filled(&format!("m{i}.s{s}.scales"), "BF16", &[16, 2]),
            ];
            let name = if shards == 1 {
                "model.safetensors".to_owned()
            } else {
                format!("model-{:05}-of-{shards:05}.safetensors", s + 1)
            };
            std::fs::write(dir.join(name), write_mlx_style(&tensors, Some("mlx"))).unwrap();
        }
    }
}

/// The standard world, a repo with a truncated shard, and `filler` generated repos.
pub fn audit_world(filler: usize, tune: impl FnOnce(&mut SimConfig)) -> World {
    let root = tempfile::tempdir().unwrap();
    populate(root.path());
    let bad = root.path().join("models/bad-org/truncated-q4");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::copy(fixture("malformed/truncated.safetensors"), bad.join("model.safetensors")).unwrap();
    std::fs::write(bad.join(".hubsim.json"), r#"{"library_name":"mlx"}"#).unwrap();
    fillers(root.path(), filler);
    start_on(root, |c| {
        c.page_size = 7;
        tune(c);
    })
}

/// Runs `hubalign audit` against the world into `db`.
pub fn audit(world: &World, db: &Path, extra: &[&str]) -> Output {
    let endpoint = world.endpoint();
    let mut args = vec!["audit", "--endpoint", endpoint.as_str(), "--db", db.to_str().unwrap(), "--concurrency", "4"];
    args.extend_from_slice(extra);
    hubalign().args(&args).env("HF_TOKEN", ALICE).env_remove("DATABASE_URL").output().unwrap()
}

/// Asserts an audit succeeded, showing its output if not.
pub fn assert_ok(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
}

/// Every stored shard, as `report --shards --format json` prints it.
pub fn stored_shards(db: &Path) -> Vec<Value> {
    let out = run(&["report", "--db", db.to_str().unwrap(), "--shards", "--format", "json"]);
    stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The store's shards without their commit ids (which depend on when each world's files were written), for
/// comparing stores built from equal worlds.
pub fn comparable(mut shards: Vec<Value>) -> Vec<Value> {
    for s in &mut shards {
        s.as_object_mut().unwrap().remove("sha");
    }
    shards
}

/// The store's repos: `(id, state)`.
pub fn repo_states(world: &World, db: &Path) -> Vec<(String, String)> {
    world.runtime.block_on(async {
        let store = Store::open(db).await.unwrap();
        store.repos().await.unwrap().into_iter().map(|r| (r.id, r.state)).collect()
    })
}

/// A database path in a fresh directory.
pub fn db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    (dir, path)
}

/// Total shards in a fault-free audit of `audit_world(filler)`: the standard world's 6 audited repos
/// (q4, sharded ×4, bf16, q8, mixed, private-q4 = 9 shards), the truncated one, and the fillers.
pub fn expected_shards(filler: usize) -> usize {
    9 + 1 + (0..filler).map(|i| 1 + i % 3).sum::<usize>()
}
