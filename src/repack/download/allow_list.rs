//! What a mirror carries: only the files an MLX loader reads, decided from the tree before anything is
//! downloaded.
//!
//! A mirror is published under the service's name for anyone to download, and anyone can push a repo tagged
//! `mlx`. So an allow-list decides what the mirror carries, never the source's file list.
//! It carries the top-level safetensors shards and their index, and the model and generation configs.
//! It carries the tokenizer, chat-template and processor files, and the licence, notice and use-policy texts.
//! Pickles, code, native libraries, archives, notebooks and every file no MLX loader reads are left out.
//! They are not downloaded, and the card lists each with the reason.
//! Each carried file that is not a shard is capped, and so are all of them together.
//!
//! Configs may point to code. `auto_map` and `custom_pipelines` name Python classes, in the source repo or in
//! another one, that `transformers` runs with `trust_remote_code`. `model_file` names a module of the repo
//! that mlx-lm imports and runs when its caller passes `trust_remote_code=True` (mlx-lm 0.32's `load_model`).
//! A mirror carries no code, so these pointers can only send a reader to code elsewhere.
//! The carried copy drops the pointers and a config's own `trust_remote_code` flag; the repo is not refused.
//! mlx-lm then builds the model from `model_type` with its own code, or says it does not know that type.
//! The manifest and the card name the keys removed, at most `MAX_NAMED` per file.

use std::path::Path;

use crate::bundle::{INDEX_SUFFIX, SHARD_SUFFIX};
use crate::hub::tree::TreeFile;
use crate::manifest::MANIFEST_FILE;
pub(crate) use crate::manifest::{Edited, LeftOut};

pub(crate) use crate::sources::MAX_SHARDS;
/// Largest carried file that is not a shard (the largest real tokenizers are about 35 MB).
pub(crate) const MAX_SIDECAR_BYTES: u64 = 64 << 20;
/// Most bytes all carried files that are not shards may hold together.
pub(crate) const MAX_SIDECARS_TOTAL: u64 = 128 << 20;

/// Keys of a config that point to code, or ask for it to be run; a mirror carries none of it.
const CODE_POINTERS: [&str; 4] = ["auto_map", "custom_pipelines", "model_file", "trust_remote_code"];

/// Configs rewritten without [`CODE_POINTERS`].
const CONFIGS: [&str; 6] = [
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "processor_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
];

/// Tokenizer, chat-template and processor files, as `transformers`' and mlx-lm's loaders name them.
const TOKENIZER_FILES: [&str; 12] = [
    "tokenizer.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "chat_template.jinja",
    "chat_template.json",
    "tiktoken.model",
];

/// Stems of licence, notice and use-policy files (`LICENSE`, `LICENSE.txt`, `LICENSE-MODEL`, `USE_POLICY.md`).
const LEGAL_STEMS: [&str; 5] = ["LICENSE", "LICENCE", "NOTICE", "COPYING", "USE_POLICY"];

/// The tree split into what the mirror carries and what it leaves out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Selection {
    /// Files to download and carry.
    pub carried: Vec<TreeFile>,
    /// Files left out, with why, in the tree's order.
    pub left_out: Vec<LeftOut>,
}

/// Why a whole repo is not mirrored, decided from its tree alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// More shards than any real MLX repo has.
    #[error("{0} shards at the top level, over the cap of {MAX_SHARDS}; not mirrored")]
    TooManyShards(usize),
    /// A shard whose name no writer produces: leaving it out would publish a model without some weights.
    #[error("shard {0}: a name no writer produces ([A-Za-z0-9._-], starting with a letter or digit); not mirrored")]
    ShardName(String),
}

/// Whether `name` is a plain file name as writers produce them: `[A-Za-z0-9._-]`, starting with a letter or
/// digit, at most 200 bytes. Such a name can be shown in Markdown, HTML and a terminal as it is.
pub(crate) fn plain_name(name: &str) -> bool {
    name.len() <= 200
        && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// What a mirror does with one file of the source's tree.
enum Verdict {
    Shard,
    Sidecar,
    Leave(&'static str),
}

fn judge(path: &str) -> Verdict {
    if path.contains('/') {
        return Verdict::Leave("in a subdirectory: MLX loaders read a repo's top level only");
    }
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(SHARD_SUFFIX) {
        return Verdict::Shard;
    }
    if path == "README.md" {
        return Verdict::Leave("the source's card: the mirror has a card of its own");
    }
    if path == MANIFEST_FILE {
        return Verdict::Leave("the mirror writes a manifest of its own");
    }
    if !plain_name(path) {
        return Verdict::Leave("a name no MLX loader reads");
    }
    let (stem, ext) = path.split_once('.').unwrap_or((path, ""));
    let legal = LEGAL_STEMS.iter().any(|s| stem.eq_ignore_ascii_case(s) || upper_prefix(stem, s))
        && matches!(ext.to_ascii_lowercase().as_str(), "" | "txt" | "md");
    if path.ends_with(INDEX_SUFFIX)
        || CONFIGS.contains(&path)
        || TOKENIZER_FILES.contains(&path)
        || lower.ends_with(".tiktoken")
        || legal
    {
        return Verdict::Sidecar;
    }
    let ext = lower.rsplit_once('.').map_or("", |(_, e)| e);
    Verdict::Leave(match ext {
        "bin" | "pt" | "pth" | "pkl" | "pickle" | "ckpt" | "joblib" | "npy" | "npz" | "h5" | "msgpack" | "gguf"
        | "onnx" | "ot" => "weights in a format this repair does not carry (pickles can run code when loaded)",
        "py" | "pyc" | "so" | "dylib" | "dll" | "exe" | "sh" | "js" | "ipynb" | "wasm" | "metal" | "metallib" => {
            "code: a mirror carries none"
        }
        "zip" | "tar" | "gz" | "tgz" | "bz2" | "xz" | "zst" | "7z" | "rar" => "an archive: a mirror carries none",
        _ => "no MLX loader reads it",
    })
}

/// `stem` is `prefix` followed by `-` or `_` and more (`LICENSE-MODEL`, `LICENSE_gemma`).
fn upper_prefix(stem: &str, prefix: &str) -> bool {
    stem.len() > prefix.len() + 1
        && stem[..prefix.len()].eq_ignore_ascii_case(prefix)
        && matches!(stem.as_bytes()[prefix.len()], b'-' | b'_')
}

/// Splits the tree into what the mirror carries and what it leaves out, or refuses the repo.
pub(crate) fn select(tree: &[TreeFile]) -> Result<Selection, Refused> {
    let mut selection = Selection::default();
    let mut shards = 0usize;
    let mut sidecar_bytes = 0u64;
    // Sidecars are capped in the tree's order of names, so which ones fit does not depend on the listing.
    let mut ordered: Vec<&TreeFile> = tree.iter().collect();
    ordered.sort_by(|a, b| a.path.cmp(&b.path));
    for f in ordered {
        let leave = |reason: &str| LeftOut { file: f.path.clone(), bytes: f.size, reason: reason.to_owned() };
        match judge(&f.path) {
            Verdict::Shard if !plain_name(&f.path) => return Err(Refused::ShardName(crate::untrusted::quote(&f.path))),
            Verdict::Shard => {
                shards += 1;
                selection.carried.push(f.clone());
            }
            Verdict::Sidecar if f.size > MAX_SIDECAR_BYTES => {
                selection.left_out.push(leave("larger than any file of its kind (64 MiB)"));
            }
            Verdict::Sidecar if sidecar_bytes.saturating_add(f.size) > MAX_SIDECARS_TOTAL => {
                selection.left_out.push(leave("past the cap on non-weight files (128 MiB in all)"));
            }
            Verdict::Sidecar => {
                sidecar_bytes += f.size;
                selection.carried.push(f.clone());
            }
            Verdict::Leave(reason) => selection.left_out.push(leave(reason)),
        }
    }
    if shards > MAX_SHARDS {
        return Err(Refused::TooManyShards(shards));
    }
    Ok(selection)
}

/// Why a carried config cannot be carried.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// Reading or writing it failed.
    #[error("{file}: {source}")]
    Io {
        file: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// It is not a JSON object: no loader could read it either.
    #[error("{file}: not a JSON object: {detail}")]
    NotJson {
        file: String,
        /// What the parser said.
        detail: String,
    },
}

/// Removes every `CODE_POINTERS` key, at any depth, from the carried configs in `dir`.
/// Returns what it removed from which file. A config with nothing to remove stays byte for byte as it came.
pub(crate) fn strip_code_pointers(dir: &Path) -> Result<Vec<Edited>, ConfigError> {
    let mut edited = Vec::new();
    for file in CONFIGS {
        let path = dir.join(file);
        let io = |source| ConfigError::Io { file: file.to_owned(), source };
        let bytes = match crate::safe_fs::read_capped(&path, MAX_SIDECAR_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(e)),
        };
        let not_json = |detail: String| ConfigError::NotJson { file: file.to_owned(), detail };
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| not_json(e.to_string()))?;
        if !value.is_object() {
            return Err(not_json("another JSON value".into()));
        }
        let mut removed = Vec::new();
        strip(&mut value, "", &mut removed);
        if removed.is_empty() {
            continue;
        }
        let mut text = serde_json::to_vec_pretty(&value).map_err(|e| not_json(e.to_string()))?;
        text.push(b'\n');
        crate::safe_fs::write_atomic(&path, &text).map_err(io)?;
        edited.push(Edited { file: file.to_owned(), removed });
    }
    Ok(edited)
}

/// Most keys named per file (a hostile config could hide thousands of pointers).
const MAX_NAMED: usize = 20;

fn strip(value: &mut serde_json::Value, at: &str, removed: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for key in CODE_POINTERS {
                if map.shift_remove(key).is_some() && removed.len() < MAX_NAMED {
                    removed.push(format!("{at}{key}"));
                }
            }
            for (key, inner) in map.iter_mut() {
                // Only plain keys are named (they end up on the card); the rest are removed all the same.
                let here = if plain_name(key) { format!("{at}{key}.") } else { format!("{at}….") };
                strip(inner, &here, removed);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| strip(v, at, removed)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64) -> TreeFile {
        TreeFile { path: path.into(), size, oid: "a".repeat(40), lfs: None }
    }

    #[test]
    fn a_mirror_carries_only_what_an_mlx_loader_reads() {
        let tree = [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "config.json",
            "generation_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "chat_template.jinja",
            "LICENSE",
            "LICENSE-MODEL",
            "USE_POLICY.md",
            "pytorch_model.bin",
            "optimizer.pt",
            "training_args.pkl",
            "original/consolidated.00.pth",
            "modeling_evil.py",
            "junk.bin",
            "lib.so",
            "weights.tar.gz",
            "README.md",
            ".gitattributes",
            "MEI_ALIGN_MANIFEST.json",
            "notes.ipynb",
            "LICENSE.exe",
            "LICENSEE",
            "data.csv",
        ];
        let tree: Vec<TreeFile> = tree.iter().map(|p| file(p, 10)).collect();
        let s = select(&tree).unwrap();
        let carried: Vec<&str> = s.carried.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            carried,
            [
                "LICENSE",
                "LICENSE-MODEL",
                "USE_POLICY.md",
                "chat_template.jinja",
                "config.json",
                "generation_config.json",
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json",
                "special_tokens_map.json",
                "tokenizer.json",
                "tokenizer_config.json",
            ]
        );
        let reason = |p: &str| s.left_out.iter().find(|l| l.file == p).map(|l| l.reason.as_str()).unwrap();
        assert!(reason("pytorch_model.bin").contains("pickles"));
        assert!(reason("modeling_evil.py").contains("code"));
        assert!(reason("original/consolidated.00.pth").contains("subdirectory"));
        assert!(reason("weights.tar.gz").contains("archive"));
        assert!(reason("README.md").contains("card"));
        assert!(reason(".gitattributes").contains("name no MLX loader reads"));
        assert_eq!(reason("LICENSEE"), "no MLX loader reads it");
        assert_eq!(s.carried.len() + s.left_out.len(), tree.len(), "every file is either carried or listed");
    }

    #[test]
    fn sidecars_are_capped_alone_and_together_and_shards_by_count_and_name() {
        let big = [file("tokenizer.json", MAX_SIDECAR_BYTES + 1), file("model.safetensors", 1 << 40)];
        let s = select(&big).unwrap();
        assert_eq!(s.carried.len(), 1, "a shard is never capped here: the bundle cap and the disk decide");
        assert!(s.left_out[0].reason.contains("64 MiB"));
        let many: Vec<TreeFile> = ["LICENSE", "NOTICE", "tokenizer.json"].iter().map(|p| file(p, 60 << 20)).collect();
        let s = select(&many).unwrap();
        assert_eq!(s.carried.len(), 2);
        assert_eq!(s.left_out[0].file, "tokenizer.json", "caps go by name, not by the listing's order");
        let shards: Vec<TreeFile> = (0..=MAX_SHARDS).map(|i| file(&format!("model-{i}.safetensors"), 1)).collect();
        assert_eq!(select(&shards), Err(Refused::TooManyShards(MAX_SHARDS + 1)));
        let odd = [file("x` <img src=x onerror=alert(1)> y.safetensors", 1)];
        assert!(matches!(select(&odd), Err(Refused::ShardName(_))));
    }

    #[test]
    fn code_pointers_are_removed_at_any_depth_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let config = r#"{"model_type": "llama", "auto_map": {"AutoModel": "evil/repo--modeling.M"},
            "text_config": {"auto_map": {"A": "b"}, "hidden": 4}, "custom_pipelines": {},
            "model_file": "modeling_evil.py", "trust_remote_code": true}"#;
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        let clean = "{\"chat_template\": \"{{ x }}\"}";
        std::fs::write(dir.path().join("tokenizer_config.json"), clean).unwrap();
        let edited = strip_code_pointers(dir.path()).unwrap();
        assert_eq!(
            edited,
            [Edited {
                file: "config.json".into(),
                removed: vec![
                    "auto_map".into(),
                    "custom_pipelines".into(),
                    "model_file".into(),
                    "trust_remote_code".into(),
                    "text_config.auto_map".into()
                ]
            }]
        );
        let now: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("config.json")).unwrap()).unwrap();
        assert_eq!(now, serde_json::json!({"model_type": "llama", "text_config": {"hidden": 4}}));
        assert_eq!(std::fs::read_to_string(dir.path().join("tokenizer_config.json")).unwrap(), clean, "untouched");
        std::fs::write(dir.path().join("config.json"), "[1]").unwrap();
        assert!(matches!(strip_code_pointers(dir.path()), Err(ConfigError::NotJson { .. })));
    }
}
