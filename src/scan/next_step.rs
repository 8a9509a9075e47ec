//! What a person does about an affected bundle: download the aligned mirror when one exists, or repair a
//! copy with `hubalign fix`. A bundle in a Hugging Face cache names its source repo, so its mirror can be
//! looked up. Any other bundle can only be repaired.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde::Serialize;

use super::ScanReport;
use crate::safetensors::Verdict;

/// The namespace `scan` looks in for mirrors when `--mirrors` is not given. This project publishes under it.
pub const DEFAULT_MIRRORS: &str = "hubalign";

/// A bundle's place in a Hugging Face cache: `…/models--{namespace}--{name}/snapshots/{revision}/…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedRepo {
    /// The Hub repo it was downloaded from.
    pub repo_id: String,
    /// The snapshot's commit.
    pub revision: String,
}

/// Reads the repo a bundle directory was downloaded from off its path in a Hugging Face cache. Returns
/// `None` outside a cache, or when the cache folder's name is no valid repo id.
pub fn cached_repo(dir: &Path) -> Option<CachedRepo> {
    let parts: Vec<&str> =
        dir.components().filter_map(|c| if let Component::Normal(p) = c { p.to_str() } else { None }).collect();
    parts.windows(3).rev().find_map(|w| {
        let folder = w[0].strip_prefix("models--")?;
        if w[1] != "snapshots" {
            return None;
        }
        // The cache writes `/` as `--`, and a repo id has no `--` of its own.
        let repo_id = folder.replace("--", "/");
        crate::untrusted::check_repo_id(&repo_id).ok()?;
        crate::untrusted::check_revision(w[2]).ok()?;
        Some(CachedRepo { repo_id, revision: w[2].to_owned() })
    })
}

/// Whether an aligned mirror of a bundle's source was looked for, and what came of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MirrorLookup {
    /// Nothing to look for: the bundle is aligned, or invalid.
    #[default]
    NotNeeded,
    /// The bundle is not in a Hugging Face cache, so its source is unknown.
    NoSource,
    /// `HF_HUB_OFFLINE` is set: the Hub was not asked.
    Offline,
    /// The Hub listed the mirror.
    Found,
    /// The Hub has no mirror under the namespaces asked.
    NotFound,
    /// The Hub could not be asked, or its answer could not be read.
    Failed,
}

/// The Hub's answer for one source repo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorAnswer {
    /// The aligned mirror's repo id.
    Found(String),
    /// No mirror under the namespaces asked.
    NotFound,
    /// Why the Hub could not be asked.
    Failed(String),
}

/// What was learnt of the mirrors, for [`plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorAnswers {
    /// The Hub was not asked (`HF_HUB_OFFLINE`).
    Offline,
    /// The Hub's answer for each source repo asked about.
    Asked(BTreeMap<String, MirrorAnswer>),
}

/// A bundle's next step, as [`plan`] sets it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NextStep {
    /// Whether an aligned mirror was looked for, and what came of it.
    pub mirror_lookup: MirrorLookup,
    /// The aligned mirror, when the Hub listed one.
    pub mirror: Option<String>,
    /// Why the lookup failed, when it did.
    pub lookup_error: Option<String>,
    /// The one command that gets an aligned copy; `None` when there is nothing to do.
    pub command: Option<String>,
    /// Where `command` writes a repaired copy, for pointing a loader at it; `None` for a download.
    pub repaired_into: Option<String>,
}

/// The source repos whose mirrors are worth a lookup: those of affected bundles in a Hugging Face cache,
/// each once.
pub fn sources_to_look_up(report: &ScanReport) -> Vec<String> {
    let mut repos: Vec<String> =
        report.bundles.iter().filter(|b| needs_work(b.verdict)).filter_map(|b| b.repo_id.clone()).collect();
    repos.sort();
    repos.dedup();
    repos
}

/// Sets each bundle's next step, and each shard's copy of it, from what was learnt of the mirrors.
pub fn plan(report: &mut ScanReport, answers: &MirrorAnswers) {
    for bundle in &mut report.bundles {
        bundle.next = next_step(bundle, answers);
    }
    let by_dir: BTreeMap<&str, (&Option<String>, &NextStep)> =
        report.bundles.iter().map(|b| (b.dir.as_str(), (&b.repo_id, &b.next))).collect();
    for shard in &mut report.shards {
        if let Some((repo_id, next)) = by_dir.get(shard.bundle.as_str()) {
            shard.repo_id.clone_from(repo_id);
            shard.mirror_lookup = next.mirror_lookup;
            shard.mirror.clone_from(&next.mirror);
            shard.next_step.clone_from(&next.command);
        }
    }
}

/// One bundle's next step. It is nothing when the bundle is aligned or invalid. It is the mirror's download
/// when the Hub listed one. Otherwise it is the repair, with why no mirror was named.
fn next_step(bundle: &super::BundleReport, answers: &MirrorAnswers) -> NextStep {
    if !needs_work(bundle.verdict) {
        return NextStep::default();
    }
    let (mirror_lookup, lookup_error) = match (&bundle.repo_id, answers) {
        (None, _) => (MirrorLookup::NoSource, None),
        (Some(_), MirrorAnswers::Offline) => (MirrorLookup::Offline, None),
        (Some(repo), MirrorAnswers::Asked(asked)) => match asked.get(repo) {
            Some(MirrorAnswer::Found(mirror)) => {
                return NextStep {
                    mirror_lookup: MirrorLookup::Found,
                    mirror: Some(mirror.clone()),
                    command: Some(command(&["hf", "download", mirror])),
                    ..NextStep::default()
                };
            }
            Some(MirrorAnswer::NotFound) => (MirrorLookup::NotFound, None),
            Some(MirrorAnswer::Failed(why)) => (MirrorLookup::Failed, Some(why.clone())),
            None => (MirrorLookup::Failed, None),
        },
    };
    let out = repaired_dir(&bundle.dir, bundle.repo_id.as_deref());
    NextStep {
        mirror_lookup,
        mirror: None,
        lookup_error,
        command: Some(command(&["hubalign", "fix", &bundle.dir, "--out", &out])),
        repaired_into: Some(out),
    }
}

/// Whether a bundle with this verdict has something to fix.
fn needs_work(verdict: Verdict) -> bool {
    matches!(verdict, Verdict::HeaderPad | Verdict::Relayout)
}

/// Where a repaired copy of `dir` goes. For a cached repo it is `{name}-aligned` in the working directory,
/// outside the cache, whose files are named by their hashes. Otherwise it is a sibling of `dir`.
fn repaired_dir(dir: &str, repo_id: Option<&str>) -> String {
    match repo_id {
        Some(repo) => repaired_folder(repo),
        None => format!("{}-aligned", dir.trim_end_matches('/')),
    }
}

/// The folder, in the working directory, that a repaired copy of the Hub repo `repo_id` goes to:
/// `{name}-aligned`. `pull` writes there too.
pub fn repaired_folder(repo_id: &str) -> String {
    format!("{}-aligned", repo_id.rsplit('/').next().unwrap_or(repo_id))
}

/// `words` as one shell command line, each quoted where the shell would read it otherwise.
fn command(words: &[&str]) -> String {
    shlex::try_join(words.iter().copied()).unwrap_or_else(|_| words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_path_names_its_repo_and_revision() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let dir = format!("/home/me/.cache/huggingface/hub/models--mlx-community--Qwen3-4B-4bit/snapshots/{sha}");
        let found = cached_repo(Path::new(&dir)).unwrap();
        assert_eq!((found.repo_id.as_str(), found.revision.as_str()), ("mlx-community/Qwen3-4B-4bit", sha));
        let nested = cached_repo(Path::new(&format!("{dir}/text_encoder"))).unwrap();
        assert_eq!(nested.repo_id, "mlx-community/Qwen3-4B-4bit", "a subfolder of a snapshot");
        for outside in ["/models/Qwen3-4B-4bit", "/c/models--a--b/blobs", "/c/models--a--b--c/snapshots/abc"] {
            assert_eq!(cached_repo(Path::new(outside)), None, "{outside}");
        }
    }

    fn bundle(verdict: Verdict, repo_id: Option<&str>) -> super::super::BundleReport {
        super::super::BundleReport {
            dir: "/c/models--org--m/snapshots/abc".into(),
            shards: 1,
            verdict,
            misaligned_tensors: 0,
            misaligned_bytes: 0,
            index_problems: Vec::new(),
            repo_id: repo_id.map(str::to_owned),
            next: NextStep::default(),
        }
    }

    #[test]
    fn each_answer_gives_its_step() {
        let asked = |answer: MirrorAnswer| MirrorAnswers::Asked([("org/m".to_owned(), answer)].into());
        let cached = bundle(Verdict::HeaderPad, Some("org/m"));
        let found = next_step(&cached, &asked(MirrorAnswer::Found("hubalign/x".into())));
        assert_eq!(
            (found.mirror_lookup, found.command.as_deref()),
            (MirrorLookup::Found, Some("hf download hubalign/x"))
        );
        assert_eq!(found.repaired_into, None);
        let fix = Some("hubalign fix /c/models--org--m/snapshots/abc --out m-aligned");
        let failed = next_step(&cached, &asked(MirrorAnswer::Failed("timed out".into())));
        assert_eq!((failed.mirror_lookup, failed.lookup_error.as_deref()), (MirrorLookup::Failed, Some("timed out")));
        assert_eq!(failed.command.as_deref(), fix);
        for (answers, lookup) in [
            (asked(MirrorAnswer::NotFound), MirrorLookup::NotFound),
            (MirrorAnswers::Offline, MirrorLookup::Offline),
            (MirrorAnswers::Asked(BTreeMap::new()), MirrorLookup::Failed),
        ] {
            let step = next_step(&cached, &answers);
            assert_eq!((step.mirror_lookup, step.command.as_deref(), step.lookup_error), (lookup, fix, None));
        }
        let local = next_step(&bundle(Verdict::Relayout, None), &MirrorAnswers::Offline);
        assert_eq!(local.mirror_lookup, MirrorLookup::NoSource);
        assert_eq!(local.repaired_into.as_deref(), Some("/c/models--org--m/snapshots/abc-aligned"));
        for verdict in [Verdict::Aligned, Verdict::Invalid] {
            assert_eq!(next_step(&bundle(verdict, Some("org/m")), &MirrorAnswers::Offline), NextStep::default());
        }
    }

    #[test]
    fn a_command_quotes_what_the_shell_would_split() {
        assert_eq!(command(&["hubalign", "fix", "/a b/it's", "--out", "x"]), r#"hubalign fix "/a b/it's" --out x"#);
    }
}
