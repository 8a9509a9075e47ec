//! The checks a staged bundle passes before it is published, as one list: `CHECKS`.
//!
//! Each check is one file of this folder and one name in `checks!` below.
//! A check runs here, on the staged bundle (`Runs::Here`), or in the MLX check script (`Runs::InMlx`).
//! It gives what it found as figures (a JSON object), and the card renders each check's line from them.
//! A check that runs here fails the job with its name and why.
//! A check MLX runs after the load is also a function in `CHECKS` of `deploy/verify_mlx.py`, by the same
//! name. The load itself (`mlx_load`) is the script's own pass over every shard.
//! The test `a_check_is_one_file_and_one_line` holds all this.

pub(crate) mod mlx;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::job::payload::{Figures, LocalChecks, MlxRecord};
use crate::manifest::Manifest;
use crate::repack::RepackError;
use crate::safetensors::read::ReadError;

/// One check a bundle passes.
pub(crate) struct Check {
    /// Its name: its file's, the card template's and the script's.
    pub(crate) name: &'static str,
    /// Where it runs.
    pub(crate) runs: Runs,
    /// Its line on the card: a template over the card's context and `c.figures`; empty for no line.
    pub(crate) card: &'static str,
}

/// Where a check runs.
pub(crate) enum Runs {
    /// Here, on the staged bundle and its manifest, off the executor.
    Here(fn(&Path, &Manifest) -> Result<Figures, VerifyError>),
    /// In `deploy/verify_mlx.py`. The figures are read from its record; `None` if the record has none.
    InMlx(fn(&MlxRecord) -> Option<Figures>),
}

/// Declares each check's module and lists it, in the order the checks run and the card names them.
macro_rules! checks {
    ($($check:ident),* $(,)?) => {
        $(mod $check;)*
        /// Every check, in order.
        pub(crate) const CHECKS: &[Check] = &[$($check::CHECK),*];
    };
}

checks![structural, index, mmap, mlx_load, mlx_lm_load];

/// A staged bundle that passed the checks that run here.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    /// The bundle's manifest.
    pub(crate) manifest: Manifest,
    /// What the checks found.
    pub(crate) local: LocalChecks,
}

/// Runs every check that runs here on the staged bundle in `dir`, in order.
/// The first that fails fails the job for good, named in the reason.
pub(crate) fn run_here(dir: &Path) -> Result<Checked, RepackError> {
    let manifest = Manifest::read(dir)
        .map_err(|e| RepackError::permanent(e.to_string()))?
        .ok_or_else(|| RepackError::permanent("no manifest in the staged bundle"))?;
    let mut figures = BTreeMap::new();
    for check in CHECKS {
        if let Runs::Here(run) = check.runs {
            let found =
                run(dir, &manifest).map_err(|e| RepackError::permanent(format!("{} check: {e}", check.name)))?;
            figures.insert(check.name.to_owned(), found);
        }
    }
    Ok(Checked { manifest, local: LocalChecks::of(figures) })
}

/// What one check found, as the card renders it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckOutcome {
    /// The check's name.
    pub name: &'static str,
    /// What it found.
    pub figures: Figures,
}

/// Lists what each check with a card line found, in the list's order.
/// Checks that ran here read from `local`, the others from `record`.
/// A check with nothing recorded is left out.
pub(crate) fn outcomes(local: &LocalChecks, record: &MlxRecord) -> Vec<CheckOutcome> {
    CHECKS
        .iter()
        .filter(|check| !check.card.is_empty())
        .filter_map(|check| {
            let figures = match check.runs {
                Runs::Here(_) => local.figures_of(check.name),
                Runs::InMlx(read) => read(record),
            }?;
            Some(CheckOutcome { name: check.name, figures })
        })
        .collect()
}

/// Figures from a check's own typed result.
fn figures(found: &impl Serialize) -> Figures {
    match serde_json::to_value(found) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => Figures::new(),
    }
}

/// Why a written bundle failed a local check.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VerifyError {
    /// A shard could not be read or parsed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A shard could not be mapped.
    #[error("{file}: mmap: {source}")]
    Map {
        /// The shard.
        file: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A shard differs from what the manifest records, or is not what a zero-copy loader needs.
    #[error("{file}: {problem}")]
    Shard {
        /// The shard.
        file: String,
        /// What is wrong with it.
        problem: Problem,
    },
    /// Not every tensor can be viewed in place.
    #[error("{copied} of {tensors} tensors cannot be viewed in place")]
    NotInPlace {
        /// Tensors that need a copy.
        copied: u64,
        /// Tensors in all.
        tensors: u64,
    },
    /// A carried index names what the bundle does not hold, as loaders read it.
    #[error("{file}: {problem}")]
    Index {
        /// The index file.
        file: String,
        /// What it names wrongly (escaped).
        problem: String,
    },
}

/// What is wrong with one shard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Problem {
    /// Tensors (or the data start) still misaligned.
    #[error("{0} tensors misaligned after the fix")]
    Misaligned(u64),
    /// Its header or payload length is not the manifest's.
    #[error("header or payload length differs from the manifest's record")]
    Lengths,
    /// Its tensor count is not the source's.
    #[error("{found} tensors, the source had {recorded}")]
    TensorCount {
        /// In the shard.
        found: u64,
        /// In the manifest.
        recorded: u64,
    },
    /// The manifest has no payload digest for it.
    #[error("no payload digest recorded")]
    NoPayloadDigest,
    /// Reordered, but a tensor's digest is missing.
    #[error("reordered, but not every tensor's digest is recorded")]
    MissingTensorDigests,
    /// A tensor's bytes end past the file's end.
    #[error("`{0}` past the end")]
    PastTheEnd(String),
}

fn wrong(file: &str, problem: Problem) -> VerifyError {
    VerifyError::Shard { file: file.to_owned(), problem }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adding a check is one file of this folder and one name in `checks!`.
    /// Every file here but `mod.rs` is a check of that name, listed once.
    /// The checks MLX runs are exactly the script's `CHECKS`.
    #[test]
    fn a_check_is_one_file_and_one_line() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/repack/checks");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "mod.rs"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut listed: Vec<String> = CHECKS.iter().map(|c| c.name.to_owned()).collect();
        listed.sort();
        listed.dedup();
        assert_eq!(listed.len(), CHECKS.len(), "a check is listed once");
        assert_eq!(files, listed, "each file of src/repack/checks/ is a listed check of its name");
        let script =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/verify_mlx.py")).unwrap();
        let line = script.lines().find(|l| l.starts_with("CHECKS = {")).expect("the script lists its checks");
        let in_script: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        let in_mlx: Vec<&str> = CHECKS
            .iter()
            .filter(|c| matches!(c.runs, Runs::InMlx(_)) && c.name != "mlx_load")
            .map(|c| c.name)
            .collect();
        assert_eq!(in_script, in_mlx, "deploy/verify_mlx.py runs the checks after the load that the list names");
    }

    #[test]
    fn a_row_written_before_the_list_reads_as_the_same_outcomes() {
        let old: LocalChecks = serde_json::from_str(r#"{"shards":1,"tensors":2,"zero_copy":2}"#).unwrap();
        let record = MlxRecord::announced("cpu", Some("0.1".into()));
        let names: Vec<&str> = outcomes(&old, &record).iter().map(|o| o.name).collect();
        // The index check has no card line; the mlx-lm check has nothing recorded in an announced record.
        assert_eq!(names, ["structural", "mmap", "mlx_load"]);
        let mmap = outcomes(&old, &record).into_iter().find(|o| o.name == "mmap").unwrap();
        assert_eq!(mmap.figures["zero_copy"], 2);
    }
}
