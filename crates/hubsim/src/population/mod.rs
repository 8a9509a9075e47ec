//! Generates a synthetic Hub population. Its repositories' listings, trees, headers and payloads come from a
//! seed instead of from disk. It reaches the Hub's scale, hundreds of thousands of shards, without a byte per
//! repo on disk.
//!
//! - [`plan`]: what each repo is (publisher, model, writer, visibility, popularity), rolled from the seed.
//! - [`shard`]: a shard's header and payload bytes at any offset.
//! - [`content`]: the files the simulator serves from plans.
//! - [`pushes`]: commits, new repos and deletions during a run, announced by webhook.
//!
//! Only the backfill sample (`sample-*` namespaces: small models) lists the sha256 of its bytes. That sha256
//! is computed once when the repo is made, so that the repo can be downloaded, checked and mirrored. Every
//! other shard lists a stand-in oid, since hashing hundreds of terabytes is not possible here. Reading its
//! header is what the audit does, and that is exact. But a whole download could not match the oid. So the
//! simulator counts any read of such a payload (`unverifiable_payload_reads`). A client that stays within its
//! policy makes none.

pub mod content;
pub mod dice;
pub mod plan;
pub mod pushes;
pub mod shard;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

use self::content::{Source, SyntheticFile};
use self::plan::{Plan, PopulationConfig, RepoPlan};
use self::shard::LayoutClass;
use crate::model::{Commit, FileEntry, Repo, Storage};

/// One repo made from its plan: the repo to serve and the files behind its commit.
#[derive(Debug)]
pub struct Made {
    /// The repo, its `main` at the plan's commit.
    pub repo: Repo,
    /// Its files by oid.
    pub files: Vec<(String, Arc<SyntheticFile>)>,
}

/// The commit a plan's files make, after `parent`, and the files by oid.
pub fn make_commit(
    seed: u64,
    plan: &Plan,
    parent: Option<String>,
    date: String,
) -> (Commit, Vec<(String, Arc<SyntheticFile>)>) {
    let mut entries = BTreeMap::new();
    let mut files = Vec::new();
    for (name, kind) in plan.text_files() {
        let bytes = plan.text(kind);
        let sha = crate::digests::sha256_hex(&bytes);
        entries
            .insert(name.to_owned(), FileEntry::new(bytes.len() as u64, sha.clone(), Storage::Regular, Some(&bytes)));
        let file = SyntheticFile { plan: Arc::clone(plan), source: Source::Text(kind), size: bytes.len() as u64 };
        files.push((sha, Arc::new(file)));
    }
    for (i, spec) in plan.shards.iter().enumerate() {
        let layout = spec.layout();
        let file = SyntheticFile {
            plan: Arc::clone(plan),
            source: Source::Shard { index: i, data_start: layout.data_start(), verified: plan.sample },
            size: layout.file_size(),
        };
        let name = plan.shard_name(i);
        let oid = if plan.sample {
            file.sha256()
        } else {
            let stand_in = format!("hubsim-synthetic:{seed}:{}:{name}:{}", plan.id, plan.generation);
            crate::digests::sha256_hex(stand_in.as_bytes())
        };
        entries.insert(name, FileEntry::new(file.size, oid.clone(), Storage::Lfs, None));
        files.push((oid, Arc::new(file)));
    }
    let title = if plan.generation == 0 {
        "Upload folder using huggingface_hub".to_owned()
    } else {
        format!("Update weights ({})", plan.generation)
    };
    (Commit::new(parent, entries, title, date), files)
}

/// Makes repo `index` of the population as it is at the start.
pub fn make(config: &PopulationConfig, index: u64) -> Made {
    let plan: Plan = Arc::new(RepoPlan::roll(config, index));
    let date = crate::clock::hub_time(1_735_689_600 + index * 97 + 3600);
    let (commit, files) = make_commit(config.seed, &plan, None, date);
    let repo = Repo::new(plan.id.clone(), plan.meta.clone(), commit);
    Made { repo, files }
}

/// Makes repos `0..config.repos` on every core, in order.
pub fn make_all(config: &PopulationConfig) -> Vec<Made> {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as u64;
    let per = config.repos.div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = (0..config.repos)
            .step_by(per as usize)
            .map(|start| {
                scope.spawn(move || {
                    (start..(start + per).min(config.repos)).map(|i| make(config, i)).collect::<Vec<_>>()
                })
            })
            .collect();
        parts.into_iter().flat_map(|p| p.join().unwrap_or_default()).collect()
    })
}

/// What the population holds, by the simulator's own reading of its layouts, independent of any client's.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Census {
    /// Repositories now.
    pub repos: u64,
    /// Shards now.
    pub shards: u64,
    /// Bytes of those shards.
    pub shard_bytes: u64,
    /// Shards per layout class.
    pub shards_by_class: BTreeMap<String, u64>,
    /// Private repos.
    pub private: u64,
    /// Gated repos.
    pub gated: u64,
    /// Disabled repos.
    pub disabled: u64,
    /// Renamed repos (their old names redirect).
    pub renamed: u64,
    /// Repos the `mlx` filter leaves out.
    pub not_mlx: u64,
}

/// A sample repo as the simulator knows it, for a rehearsal to check a service's work against.
#[derive(Debug, Clone, Serialize)]
pub struct SampleRepo {
    /// Its id.
    pub id: String,
    /// The name it had before a rename.
    pub renamed_from: Option<String>,
    /// Its `main` commit.
    pub head: String,
    /// Private.
    pub private: bool,
    /// Gating.
    pub gated: bool,
    /// Disabled.
    pub disabled: bool,
    /// Tagged `mlx`.
    pub mlx: bool,
    /// What a loader of it meets.
    pub class: LayoutClass,
    /// Bytes of its shards.
    pub shard_bytes: u64,
}

/// Counts a plan into a census.
pub fn count(census: &mut Census, plan: &RepoPlan) {
    census.repos += 1;
    for spec in &plan.shards {
        let layout = spec.layout();
        census.shards += 1;
        census.shard_bytes += layout.file_size();
        let class = serde_json::to_value(layout.class()).ok().and_then(|v| v.as_str().map(str::to_owned));
        *census.shards_by_class.entry(class.unwrap_or_default()).or_default() += 1;
    }
    census.private += u64::from(plan.meta.private);
    census.gated += u64::from(plan.meta.gated != crate::model::Gating::Open);
    census.disabled += u64::from(plan.meta.disabled);
    census.renamed += u64::from(plan.renamed_from.is_some());
    census.not_mlx += u64::from(plan.meta.library_name.as_deref() != Some("mlx"));
}

impl SyntheticFile {
    /// The sha256 of the whole file, generated and hashed in one pass.
    pub fn sha256(&self) -> String {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < self.size {
            let n = (self.size - at).min(buf.len() as u64) as usize;
            self.read_at(at, &mut buf[..n]);
            hasher.update(&buf[..n]);
            at += n as u64;
        }
        crate::digests::finish_hex(hasher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_repo_lists_the_digests_of_its_bytes_and_others_a_stand_in() {
        let config = PopulationConfig::new(9, 50, 5);
        let sample = make(&config, 0);
        let head = sample.repo.head().unwrap();
        for (path, entry) in &head.files {
            let file = &sample.files.iter().find(|(oid, _)| *oid == entry.sha256).unwrap().1;
            let mut bytes = vec![0; file.size as usize];
            file.read_at(0, &mut bytes);
            assert_eq!(crate::digests::sha256_hex(&bytes), entry.sha256, "{path}");
            assert_eq!(entry.size, file.size);
        }
        let other = make(&config, 30);
        let shard = other.repo.head().unwrap().files.iter().find(|(p, _)| p.ends_with(".safetensors")).unwrap().1;
        assert!(shard.size > 100 << 20, "a real model's shard: {} bytes", shard.size);
        assert_eq!(shard.sha256.len(), 64);
    }
}
