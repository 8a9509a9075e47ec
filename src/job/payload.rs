//! What a job carries from one step to the next. The job's row stores each part as JSON, in these columns.
//! `sqlx::types::Json` reads them back as these types.
//!
//! - `jobs.progress`: what the download and the re-layout left in the job's directory.
//! - `jobs.verification`: the MLX check's record.
//! - `jobs.staged`: the bundle staged on the Hub for the Metal check.
//!
//! A step reads its input through these types, never by indexing a document.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::manifest::LeftOut;

/// What the last finished step left for the next one. It is recorded in one transaction with the job's new
/// state, so the row says both which step runs and what it starts from. A later attempt takes up the work
/// only on the same machine, by the same build, with the same settings. The job's directory must also be
/// exactly as recorded. Otherwise the attempt starts again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Progress {
    /// The download's end, and the re-layout's input. Every file the mirror carries is in the job's
    /// directory, each checked against the Hub's hash as it arrived.
    Downloaded {
        /// The source's files the mirror leaves out, for its manifest.
        left_out: Vec<LeftOut>,
        /// The job's directory as the download left it.
        files: WorkFiles,
    },
    /// The re-layout's end, and the checks' input: the staged bundle with its manifest, beside the source.
    Relaid {
        /// The job's directory as the re-layout left it.
        files: WorkFiles,
    },
    /// A step this build does not know, recorded by a newer build. There is nothing to take up, so the job
    /// starts again.
    #[serde(other)]
    Unknown,
}

impl Progress {
    /// The job's directory as the step left it (`None` for a step this build does not know).
    pub fn files(&self) -> Option<&WorkFiles> {
        match self {
            Progress::Downloaded { files, .. } | Progress::Relaid { files } => Some(files),
            Progress::Unknown => None,
        }
    }
}

/// The files of a job's directory as a step left them. A later attempt uses them to check three things.
/// The files are untouched: the same files, lengths and modification times. The machine has not restarted
/// since: a dead process leaves its written pages to the kernel, but a restart may lose unflushed pages. The
/// same build made them with the same settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkFiles {
    /// The kernel's id of the boot the files were written in.
    pub boot: String,
    /// The build that made them, by version and executable identity, and the settings that shape them: the
    /// alignment.
    pub made_by: String,
    /// Every regular file, by path under the job's directory, in path order.
    pub files: Vec<WorkFile>,
}

/// One file of a job's directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkFile {
    /// Its path under the job's directory, `/`-separated.
    pub path: String,
    /// Its device and inode: a file replaced by another is not the one recorded.
    pub inode: (u64, u64),
    /// Its length.
    pub len: u64,
    /// Its modification time, in nanoseconds since the Unix epoch.
    pub modified_ns: u64,
}

/// What `mlx_lm.load` of a bundle said, in the MLX load check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MlxLmLoad {
    /// The mlx-lm that loaded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Whether it loaded the model and its tokenizer.
    #[serde(default)]
    pub loaded: bool,
    /// The config's `model_type`, as the source wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
    /// Whether the weights were checked by name and shape without being read. The check does this for a
    /// bundle larger than its memory.
    #[serde(default)]
    pub lazy: bool,
    /// Why it was not loaded: a model type mlx-lm does not support, or no config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The MLX load check's record, as `deploy/verify_mlx.py` prints it and a runner posts it. Every field but
/// `ok` may be missing. An older runner omits them, and so does a run that failed before importing MLX.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MlxRecord {
    /// Whether every array loaded bit-identical to the source's.
    #[serde(default)]
    pub ok: bool,
    /// Where it ran: `gpu` (Metal) or `cpu`.
    #[serde(default)]
    pub device: String,
    /// The MLX that loaded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlx_version: Option<String>,
    /// Files loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    /// Arrays loaded and compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensors: Option<u64>,
    /// How long it took, as the script measured and printed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<serde_json::Number>,
    /// The check's peak resident memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// What failed, naming the file and tensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The staged mirror commit a runner checked, when the Hub is the rendezvous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_commit: Option<String>,
    /// What `mlx_lm.load` of the bundle said; missing from a record of an older script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlx_lm: Option<MlxLmLoad>,
    /// What each check the script runs after the load found, by the check's name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checks: BTreeMap<String, Figures>,
    /// Whatever else the script said, kept as said: a newer script's fields, a test's probes.
    #[serde(flatten)]
    pub more: serde_json::Map<String, serde_json::Value>,
}

impl MlxRecord {
    /// The record the card names while the check still runs beside the upload. It holds the device and the
    /// MLX version announced, before any count is known.
    pub fn announced(device: &str, mlx_version: Option<String>) -> Self {
        MlxRecord { ok: true, device: device.to_owned(), mlx_version, ..MlxRecord::default() }
    }

    /// A failed check's record: the device and why.
    pub fn failed(device: &str, error: impl Into<String>) -> Self {
        MlxRecord { ok: false, device: device.to_owned(), error: Some(error.into()), ..MlxRecord::default() }
    }
}

/// What a check found: a JSON object of its figures.
pub type Figures = serde_json::Map<String, serde_json::Value>;

/// What the checks that run on the worker found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalChecks {
    /// Shards mapped. Kept for readers of rows written before `figures`.
    pub shards: u64,
    /// Tensors mapped. Kept for readers of rows written before `figures`.
    pub tensors: u64,
    /// Tensors a memory map could hand out as their type without a copy. Kept as `shards` is.
    pub zero_copy: u64,
    /// What each check found, by the check's name; empty in a row written before the list of checks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub figures: BTreeMap<String, Figures>,
}

impl LocalChecks {
    /// The record of checks that found `figures`; the memory-map check's counts fill the older fields.
    pub fn of(figures: BTreeMap<String, Figures>) -> LocalChecks {
        let count = |key: &str| figures.get("mmap").and_then(|f| f.get(key)).and_then(serde_json::Value::as_u64);
        LocalChecks {
            shards: count("shards").unwrap_or(0),
            tensors: count("tensors").unwrap_or(0),
            zero_copy: count("zero_copy").unwrap_or(0),
            figures,
        }
    }

    /// What the check `name` found.
    /// A row written before the list holds only the three counts. The structural, index and memory-map
    /// checks are read from them.
    pub fn figures_of(&self, name: &str) -> Option<Figures> {
        if !self.figures.is_empty() {
            return self.figures.get(name).cloned();
        }
        let counts = |pairs: &[(&str, u64)]| -> Option<Figures> {
            Some(pairs.iter().map(|(key, n)| ((*key).to_owned(), (*n).into())).collect())
        };
        match name {
            "structural" => counts(&[("shards", self.shards), ("tensors", self.tensors)]),
            "index" => counts(&[]),
            "mmap" => counts(&[("shards", self.shards), ("tensors", self.tensors), ("zero_copy", self.zero_copy)]),
            _ => None,
        }
    }
}

/// What the card says of the source beyond the Hub's answer, read from its files while they were here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFacts {
    /// The licence its README names, for a source the Hub gives no licence for.
    pub license: Option<String>,
    /// Bytes a copying loader duplicates in it.
    pub before_bytes: u64,
    /// The licence file the mirror carries (`LICENSE`, …), for a card written away from the bundle.
    #[serde(default)]
    pub license_file: Option<String>,
    /// Whether the mirror's tokenizer has a chat template, likewise.
    #[serde(default)]
    pub chat_template: bool,
}

/// What a job records of a bundle staged on the Hub for the Metal check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staged {
    /// The mirror's commit that holds the repaired bundle, without a model card yet.
    pub commit: String,
    /// The structural and memory-map checks' counts, for the card.
    pub checks: LocalChecks,
    /// What the card says of the source.
    pub source: SourceFacts,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script's record reads as the type and writes back the same document, its time as printed.
    #[test]
    fn the_scripts_record_round_trips() {
        let printed = r#"{"ok":true,"device":"cpu","mlx_version":"0.29.1","files":2,"tensors":7,"seconds":1.25,"peak_rss_bytes":1024}"#;
        let record: MlxRecord = serde_json::from_str(printed).unwrap();
        assert_eq!(record.tensors, Some(7));
        assert_eq!(serde_json::to_string(&record).unwrap(), printed);
        // An older runner's record, with only its verdict, still reads.
        let bare: MlxRecord = serde_json::from_str(r#"{"ok": false}"#).unwrap();
        assert_eq!(bare, MlxRecord { ok: false, ..MlxRecord::default() });
        // A field this version does not know is kept.
        let newer: MlxRecord = serde_json::from_str(r#"{"ok":true,"device":"gpu","metal_arch":"g16"}"#).unwrap();
        assert_eq!(newer.more["metal_arch"], "g16");
        assert_eq!(serde_json::to_string(&newer).unwrap(), r#"{"ok":true,"device":"gpu","metal_arch":"g16"}"#);
    }
}
