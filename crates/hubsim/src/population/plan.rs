//! Plans one synthetic repository. The seed decides what the repo is: publisher, model, writer, visibility
//! and popularity. Its files are generated from that on demand.

use std::sync::Arc;

use serde_json::json;

use super::dice::Dice;
use super::shard::{Dims, LayoutClass, Precision, ShardSpec, Writer};
use crate::model::{Gating, RepoMeta};

/// The largest shard `mlx_lm` writes (its `max_file_size_gb` is 5).
const MAX_SHARD_BYTES: u64 = 5 << 30;

/// Model families: a name, its dimensions, and how often the Hub's MLX repos are that size.
const FAMILIES: [(&str, Dims, f64); 7] = [
    ("Qwen2.5-0.5B-Instruct", Dims { hidden: 896, intermediate: 4864, layers: 24, vocab: 151_936, heads: 14 }, 0.12),
    ("Llama-3.2-1B-Instruct", Dims { hidden: 2048, intermediate: 8192, layers: 16, vocab: 128_256, heads: 32 }, 0.14),
    ("Llama-3.2-3B-Instruct", Dims { hidden: 3072, intermediate: 8192, layers: 28, vocab: 128_256, heads: 24 }, 0.16),
    ("Qwen2.5-7B-Instruct", Dims { hidden: 3584, intermediate: 18944, layers: 28, vocab: 152_064, heads: 28 }, 0.24),
    ("Qwen2.5-14B-Instruct", Dims { hidden: 5120, intermediate: 13824, layers: 48, vocab: 152_064, heads: 40 }, 0.14),
    ("Qwen2.5-32B-Instruct", Dims { hidden: 5120, intermediate: 27648, layers: 64, vocab: 152_064, heads: 40 }, 0.12),
    ("Llama-3.3-70B-Instruct", Dims { hidden: 8192, intermediate: 28672, layers: 80, vocab: 128_256, heads: 64 }, 0.08),
];

/// The sample's model: small enough to download, re-lay and check in seconds, laid out as the real ones are.
fn sample_dims(hidden: u64) -> Dims {
    let hidden = (hidden / 64).max(1) * 64;
    Dims { hidden, intermediate: hidden * 3, layers: 6, vocab: 2048, heads: 5 }
}

/// How the population is made.
#[derive(Debug, Clone, PartialEq)]
pub struct PopulationConfig {
    /// The seed: the same seed gives the same Hub.
    pub seed: u64,
    /// Repositories at the start.
    pub repos: u64,
    /// Of which this many form the backfill sample: small models in the `sample-*` namespaces. Their files
    /// match the sha256 the Hub lists, so they can be downloaded, repaired and mirrored.
    pub sample_repos: u64,
    /// Namespaces the sample is spread over (`sample-0` …).
    pub sample_namespaces: u64,
    /// The sample models' hidden size (their shards grow with its square).
    pub sample_hidden: u64,
}

impl PopulationConfig {
    /// A population of `repos` repositories with a sample of `sample_repos`, from `seed`.
    pub fn new(seed: u64, repos: u64, sample_repos: u64) -> PopulationConfig {
        PopulationConfig {
            seed,
            repos,
            sample_repos: sample_repos.min(repos),
            sample_namespaces: 4,
            sample_hidden: 256,
        }
    }
}

/// Which text file of a repo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFile {
    /// `README.md`, the card with its front matter.
    Readme,
    /// `config.json`.
    Config,
    /// `tokenizer_config.json`.
    TokenizerConfig,
    /// `model.safetensors.index.json` of a sharded repo.
    Index,
}

/// Everything a synthetic repo is, from which every file is generated again when asked for.
#[derive(Debug, Clone)]
pub struct RepoPlan {
    /// Its number in the population.
    pub index: u64,
    /// `namespace/name`, as created.
    pub id: String,
    /// The name it had before it was renamed, if it was.
    pub renamed_from: Option<String>,
    /// How many commits it has had: a push makes new shards.
    pub generation: u32,
    /// Part of the backfill sample: its listed digests are its bytes'.
    pub sample: bool,
    /// The base model.
    pub family: &'static str,
    /// Its shards.
    pub shards: Vec<ShardSpec>,
    /// Visibility, popularity and card fields.
    pub meta: RepoMeta,
}

impl RepoPlan {
    /// Rolls repo `index` of the population: one of the sample when its index is below the sample's size.
    pub fn roll(config: &PopulationConfig, index: u64) -> RepoPlan {
        RepoPlan::roll_as(config, index, index < config.sample_repos)
    }

    /// Rolls repo `index`, in the sample or not.
    pub fn roll_as(config: &PopulationConfig, index: u64, sample: bool) -> RepoPlan {
        let mut d = Dice::new(config.seed, 0x7265_706f, index);
        let (family, dims, _) = FAMILIES[d.weighted(&FAMILIES.map(|f| f.2))];
        let precision =
            [Precision::Q4, Precision::Q8, Precision::Bf16, Precision::F16][d.weighted(&[0.55, 0.2, 0.15, 0.1])];
        let writer = if d.chance(0.85) { Writer::Mlx } else { Writer::Safetensors };
        let namespace = if sample {
            format!("sample-{}", index % config.sample_namespaces.max(1))
        } else if d.chance(0.25) {
            "mlx-community".to_owned()
        } else {
            format!("Publisher-{}", d.log_uniform(5000))
        };
        let quant = match precision {
            Precision::Q4 => "4bit",
            Precision::Q8 => "8bit",
            Precision::Bf16 => "bf16",
            Precision::F16 => "fp16",
        };
        let name = format!("{family}-{quant}-{index:06}");
        let renamed = d.chance(0.01);
        let id = if renamed { format!("{namespace}/{name}-v2") } else { format!("{namespace}/{name}") };
        let mlx_tagged = !d.chance(0.04);
        let mut meta = RepoMeta {
            private: d.chance(0.02),
            gated: [Gating::Open, Gating::Auto, Gating::Manual][d.weighted(&[0.97, 0.02, 0.01])],
            disabled: d.chance(0.005),
            downloads: d.log_uniform(1_000_000).saturating_sub(1),
            license: Some(["apache-2.0", "mit", "llama3.2", "other"][d.weighted(&[0.5, 0.2, 0.2, 0.1])].to_owned()),
            pipeline_tag: Some("text-generation".into()),
            created_at: Some(crate::clock::hub_time(1_735_689_600 + index * 97)),
            ..RepoMeta::default()
        };
        meta.likes = meta.downloads / 200;
        if mlx_tagged {
            meta.library_name = Some("mlx".into());
            meta.tags = vec!["mlx".into(), "safetensors".into()];
        } else {
            meta.library_name = Some("transformers".into());
            meta.tags = vec!["transformers".into(), "safetensors".into()];
        }
        let dims = if sample { sample_dims(config.sample_hidden) } else { dims };
        // Some models' attention carries an odd number of `sinks` floats. MLX's packing then leaves every
        // later tensor of the shard off its width.
        let sinks = d.chance(0.12);
        let dims = Dims { heads: if sinks { dims.heads | 1 } else { dims.heads }, ..dims };
        let key = d.next_u64();
        let shards = plan_shards(dims, precision, writer, sinks, key, if sample { Some(1 + d.below(3)) } else { None });
        RepoPlan {
            index,
            id,
            renamed_from: renamed.then(|| format!("{namespace}/{name}")),
            generation: 0,
            sample,
            family,
            shards,
            meta,
        }
    }

    /// The same repo after a push: every shard's bytes change, its layout does not.
    pub fn pushed(&self) -> RepoPlan {
        let generation = self.generation + 1;
        let shards = self
            .shards
            .iter()
            .map(|s| ShardSpec { key: super::dice::mix(s.key ^ u64::from(generation)), ..s.clone() })
            .collect();
        RepoPlan { generation, shards, ..self.clone() }
    }

    /// The file name of shard `i`.
    pub fn shard_name(&self, i: usize) -> String {
        if self.shards.len() == 1 {
            "model.safetensors".into()
        } else {
            format!("model-{:05}-of-{:05}.safetensors", i + 1, self.shards.len())
        }
    }

    /// The text files it has, with their names.
    pub fn text_files(&self) -> Vec<(&'static str, TextFile)> {
        let mut files = vec![
            ("README.md", TextFile::Readme),
            ("config.json", TextFile::Config),
            ("tokenizer_config.json", TextFile::TokenizerConfig),
        ];
        if self.shards.len() > 1 {
            files.push(("model.safetensors.index.json", TextFile::Index));
        }
        files
    }

    /// A text file's bytes.
    pub fn text(&self, file: TextFile) -> Vec<u8> {
        let first = self.shards.first();
        let dims = first.map(|s| s.dims);
        match file {
            TextFile::Readme => {
                let library = self.meta.library_name.as_deref().unwrap_or("mlx");
                let tags: String = self.meta.tags.iter().map(|t| format!("- {t}\n")).collect();
                format!(
                    "---\nlibrary_name: {library}\nlicense: {}\npipeline_tag: text-generation\nbase_model: {}\ntags:\n{tags}---\n\n\
                     # {}\n\nConverted from {} (commit {}).\n",
                    self.meta.license.as_deref().unwrap_or("other"),
                    self.family,
                    self.id,
                    self.family,
                    self.generation
                )
                .into_bytes()
            }
            TextFile::Config => {
                // The shards are shaped like a llama's or a qwen2's, but no library builds a model from them:
                // no tokenizer, no biases, and sinks in some. The config says so. mlx-lm answers that it does
                // not support the type, as it would for any model type it does not know.
                let mut config = json!({
                    "model_type": "hubsim_synthetic",
                    "architectures": [if self.family.starts_with("Qwen") { "Qwen2ForCausalLM" } else { "LlamaForCausalLM" }],
                    "hidden_size": dims.map(|d| d.hidden),
                    "intermediate_size": dims.map(|d| d.intermediate),
                    "num_hidden_layers": dims.map(|d| d.layers),
                    "num_attention_heads": dims.map(|d| d.heads),
                    "vocab_size": dims.map(|d| d.vocab),
                });
                if let Some(bits) = first.and_then(|s| match s.precision {
                    Precision::Q4 => Some(4),
                    Precision::Q8 => Some(8),
                    _ => None,
                }) {
                    config["quantization"] = json!({"group_size": 64, "bits": bits});
                }
                config.to_string().into_bytes()
            }
            TextFile::TokenizerConfig => {
                json!({"model_max_length": 32768, "tokenizer_class": "PreTrainedTokenizerFast"})
                    .to_string()
                    .into_bytes()
            }
            TextFile::Index => {
                let mut map = serde_json::Map::new();
                let mut total = 0;
                for (i, shard) in self.shards.iter().enumerate() {
                    let layout = shard.layout();
                    total += layout.data_len;
                    for t in layout.tensors {
                        map.insert(t.name, self.shard_name(i).into());
                    }
                }
                json!({"metadata": {"total_size": total}, "weight_map": map}).to_string().into_bytes()
            }
        }
    }

    /// The worst class over its shards: what a loader of the whole repo meets.
    pub fn class(&self) -> LayoutClass {
        self.shards.iter().map(|s| s.layout().class()).max().unwrap_or(LayoutClass::Aligned)
    }
}

/// Splits a model into as many shards as [`MAX_SHARD_BYTES`] asks for, or into `count`. It splits by whole
/// layers and as evenly as layers go. The first shard also holds the embedding, so it may pass the limit, at
/// most twice over.
fn plan_shards(
    dims: Dims,
    precision: Precision,
    writer: Writer,
    sinks: bool,
    key: u64,
    count: Option<u64>,
) -> Vec<ShardSpec> {
    let spec = |i: u64, layers: (u32, u32), last: bool| ShardSpec {
        key: super::dice::mix(key ^ i),
        dims,
        precision,
        layers,
        embed: i == 0,
        head: last,
        sinks,
        writer,
    };
    let total = spec(0, (0, dims.layers), true).layout().data_len;
    let count = count.unwrap_or_else(|| total.div_ceil(MAX_SHARD_BYTES)).clamp(1, u64::from(dims.layers));
    let per = u64::from(dims.layers).div_ceil(count);
    let mut shards = Vec::new();
    let mut first = 0u32;
    while first < dims.layers {
        let end = (u64::from(first) + per).min(u64::from(dims.layers)) as u32;
        shards.push(spec(shards.len() as u64, (first, end), end == dims.layers));
        first = end;
    }
    shards
}

/// A shared plan.
pub type Plan = Arc<RepoPlan>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_repo_and_a_push_changes_only_the_bytes() {
        let config = PopulationConfig::new(42, 1000, 10);
        let a = RepoPlan::roll(&config, 500);
        let b = RepoPlan::roll(&config, 500);
        assert_eq!(a.id, b.id);
        assert_eq!(a.shards, b.shards);
        let pushed = a.pushed();
        assert_eq!(pushed.id, a.id);
        assert_eq!(pushed.shards.len(), a.shards.len());
        assert!(
            pushed.shards.iter().zip(&a.shards).all(|(p, s)| p.key != s.key && p.layout().header == s.layout().header)
        );
    }

    #[test]
    fn real_models_are_cut_by_layers_near_five_gib_and_the_sample_is_small() {
        let config = PopulationConfig::new(1, 400, 20);
        for i in 0..400 {
            let plan = RepoPlan::roll(&config, i);
            let sizes: Vec<u64> = plan.shards.iter().map(|s| s.layout().file_size()).collect();
            if plan.sample {
                assert!(plan.id.starts_with("sample-"));
                assert!(sizes.iter().all(|s| *s < 16 << 20), "{}: {sizes:?}", plan.id);
            } else {
                assert!(sizes.iter().all(|s| *s <= 2 * MAX_SHARD_BYTES), "{}: {sizes:?}", plan.id);
            }
            let layers: u32 = plan.shards.iter().map(|s| s.layers.1 - s.layers.0).sum();
            assert_eq!(layers, plan.shards[0].dims.layers);
        }
    }
}
