//! A simulated Hub over a temporary directory of fixture bundles, on a runtime of its own.

use std::path::Path;

use hubsim::auth::TokenSpec;
use hubsim::faults::{Bucket, Quota};
use hubsim::{SimConfig, SimHandle, start};

use crate::support::{copy_tree, fixture};

/// The write token of user `alice` (who may also write to `alice-org`).
pub(crate) const ALICE: &str = "hf_alice_write";
/// The token of user `bob`, who was granted access to the gated repo.
pub(crate) const BOB: &str = "hf_bob_read";
/// The token of user `carol`, who was not.
pub(crate) const CAROL: &str = "hf_carol";

/// A running simulator with its directory; stops when dropped.
pub struct World {
    /// Keeps the server's runtime alive.
    pub runtime: tokio::runtime::Runtime,
    /// The simulator.
    pub hub: Option<SimHandle>,
    /// The directory served, removed with the world.
    _root: tempfile::TempDir,
}

impl World {
    /// `HF_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        self.hub.as_ref().map(|h| h.base_url.clone()).unwrap_or_default()
    }

    /// Renames `old` to `new` on the Hub without a webhook, as `move_repo` does: the old name then redirects.
    pub fn rename(&self, old: &str, new: &str) {
        let sim = &self.hub.as_ref().unwrap().sim;
        {
            let mut repos = sim.repos_mut();
            let mut repo = repos.remove(old).unwrap();
            repo.id = new.to_owned();
            repos.insert(new.to_owned(), repo);
        }
        sim.moves.record(old, new);
    }

    /// The counters, straight from the shared state.
    pub fn counters(&self) -> hubsim::counters::CounterSnapshot {
        self.hub.as_ref().map(|h| h.sim.counters.snapshot()).unwrap_or_default()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.take() {
            self.runtime.block_on(hub.stop());
        }
    }
}

/// Copies fixture `from` to repo `id` under `root`, with `sidecar` as its `.hubsim.json`.
pub(crate) fn bundle(root: &Path, id: &str, from: &str, sidecar: &str) {
    let dir = root.join("models").join(id);
    copy_tree(&fixture(from), &dir);
    std::fs::write(dir.join(".hubsim.json"), sidecar).unwrap();
}

/// The standard world: MLX bundles (several namespaces), a non-MLX repo, and gated, private and disabled ones.
pub(crate) fn populate(root: &Path) {
    let mlx = r#"{"library_name":"mlx","tags":["safetensors"],"license":"mit","downloads":100}"#;
    bundle(root, "mlx-community/tiny-q4", "mlx_lm/q4", mlx);
    bundle(root, "mlx-community/tiny-sharded", "mlx_lm/sharded", mlx);
    bundle(root, "mlx-community/tiny-bf16", "mlx_lm/bf16", mlx);
    bundle(root, "lmstudio/tiny-q8", "mlx_lm/q8", mlx);
    bundle(root, "lmstudio/tiny-mixed", "mlx_lm/mixed", mlx);
    bundle(
        root,
        "gemma-org/gated-q4",
        "mlx_lm/q4",
        r#"{"library_name":"mlx","gated":"manual","grantedUsers":["bob"],"downloads":100}"#,
    );
    // As popular as the public ones, so that the policy (not the popularity floor) is what keeps them out.
    bundle(root, "alice/private-q4", "mlx_lm/q4", r#"{"library_name":"mlx","private":true,"downloads":100}"#);
    bundle(root, "old-org/disabled-q4", "mlx_lm/q4", r#"{"library_name":"mlx","disabled":true,"downloads":100}"#);
    let plain = root.join("models/pytorch-org/not-mlx");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::copy(fixture("numpy/aligned.safetensors"), plain.join("model.safetensors")).unwrap();
    std::fs::write(plain.join(".hubsim.json"), r#"{"library_name":"transformers","downloads":5000}"#).unwrap();
}

/// Starts a simulator over `root` with the standard tokens and `tune` applied to its configuration.
pub(crate) fn start_on(root: tempfile::TempDir, tune: impl FnOnce(&mut SimConfig)) -> World {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut config = SimConfig::new(root.path().to_owned());
    config.tokens = [format!("{ALICE}:alice:alice-org"), format!("{BOB}:bob"), format!("{CAROL}:carol")]
        .iter()
        .map(|s| s.parse::<TokenSpec>().unwrap())
        .collect();
    tune(&mut config);
    let hub = runtime.block_on(start(config)).unwrap();
    World { runtime, hub: Some(hub), _root: root }
}

/// The standard world with small pages, so listing and trees take several requests.
pub(crate) fn standard() -> World {
    let root = tempfile::tempdir().unwrap();
    populate(root.path());
    start_on(root, |c| {
        c.page_size = 2;
        c.tree_page_size = 3;
    })
}

/// The standard world behind an `api` quota of `requests` per `window_secs`.
pub(crate) fn rate_limited(requests: u64, window_secs: u64) -> World {
    let root = tempfile::tempdir().unwrap();
    populate(root.path());
    start_on(root, |c| {
        c.page_size = 2;
        c.quotas = vec![(Bucket::Api, Quota { requests, window: std::time::Duration::from_secs(window_secs) })];
    })
}

/// Every public MLX repo of the standard world: what `list_models(filter="mlx")` must find.
pub(crate) const MLX_IDS: &str = "gemma-org/gated-q4,lmstudio/tiny-mixed,lmstudio/tiny-q8,mlx-community/tiny-bf16,mlx-community/tiny-q4,mlx-community/tiny-sharded,old-org/disabled-q4";
