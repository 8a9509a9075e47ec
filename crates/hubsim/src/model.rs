//! The simulated Hub's repositories: commits as immutable file maps, branches and pull-request refs.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};

/// How a file's content is stored, which decides how `resolve` serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// A small file kept in git: served directly.
    Regular,
    /// Large content behind a Git LFS pointer: served through the storage redirect.
    Lfs,
    /// LFS content whose bytes live in the Xet CAS under this file hash.
    Xet {
        /// The Xet file hash (MerkleHash hex).
        xet_hash: String,
    },
}

/// One file of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Real size in bytes.
    pub size: u64,
    /// SHA-256 of the content (the LFS oid).
    pub sha256: String,
    /// Git blob id: of the content for regular files, of the LFS pointer otherwise.
    pub git_oid: String,
    /// Where the bytes are.
    pub storage: Storage,
}

impl FileEntry {
    /// Builds the entry for content with this hash and size, computing the git oid the way git does.
    pub fn new(size: u64, sha256: String, storage: Storage, content_if_regular: Option<&[u8]>) -> FileEntry {
        let git_oid = match content_if_regular {
            Some(bytes) if storage == Storage::Regular => git_blob_oid(bytes),
            _ => git_blob_oid(lfs_pointer(&sha256, size).as_bytes()),
        };
        FileEntry { size, sha256, git_oid, storage }
    }

    /// Whether the file is LFS- or Xet-backed.
    pub fn is_lfs(&self) -> bool {
        self.storage != Storage::Regular
    }

    /// The Xet hash, when Xet-backed.
    pub fn xet_hash(&self) -> Option<&str> {
        match &self.storage {
            Storage::Xet { xet_hash } => Some(xet_hash),
            _ => None,
        }
    }
}

/// The pointer git stores for LFS content.
pub fn lfs_pointer(sha256: &str, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n")
}

pub use crate::digests::git_blob_oid;

/// An immutable snapshot of a repository.
#[derive(Debug, Clone)]
pub struct Commit {
    /// 40-hex id.
    pub sha: String,
    /// The previous commit on its branch.
    pub parent: Option<String>,
    /// Path → file.
    pub files: BTreeMap<String, FileEntry>,
    /// Commit title.
    pub title: String,
    /// When, as ISO-8601 with milliseconds (`2026-11-29T10:00:00.000Z`).
    pub date: String,
}

impl Commit {
    /// Makes a commit whose id hashes its parent, title, date and every file, as git's does in effect.
    pub fn new(parent: Option<String>, files: BTreeMap<String, FileEntry>, title: String, date: String) -> Commit {
        let mut h = Sha1::new();
        h.update(parent.as_deref().unwrap_or("").as_bytes());
        h.update(title.as_bytes());
        h.update(date.as_bytes());
        for (path, f) in &files {
            h.update(path.as_bytes());
            h.update(f.git_oid.as_bytes());
        }
        Commit { sha: hex::encode(h.finalize()), parent, files, title, date }
    }
}

/// Gating as the Hub reports it: `false`, `"auto"` or `"manual"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gating {
    /// Not gated.
    #[default]
    #[serde(rename = "false")]
    Open,
    /// Access granted automatically on request.
    Auto,
    /// Access granted by the owner.
    Manual,
}

impl Gating {
    /// The JSON value: `false` or the mode string.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            Gating::Open => serde_json::Value::Bool(false),
            Gating::Auto => "auto".into(),
            Gating::Manual => "manual".into(),
        }
    }
}

/// Repository metadata that is not a file. It is read from the optional sidecar `.hubsim.json` in the repo's
/// directory, which is never served as a repo file. The settings endpoint changes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RepoMeta {
    /// Visible only to the owner's tokens.
    pub private: bool,
    /// Gating mode.
    pub gated: Gating,
    /// Users granted access to a gated repo.
    pub granted_users: BTreeSet<String>,
    /// Disabled by the Hub: every file request gets 403.
    pub disabled: bool,
    /// Downloads in the last 30 days.
    pub downloads: u64,
    /// Likes.
    pub likes: u64,
    /// Tags (the library and `license:` tags are added to these).
    pub tags: Vec<String>,
    /// `library_name`.
    #[serde(rename = "library_name")]
    pub library_name: Option<String>,
    /// `pipeline_tag`.
    #[serde(rename = "pipeline_tag")]
    pub pipeline_tag: Option<String>,
    /// Licence id.
    pub license: Option<String>,
    /// Creation date (ISO-8601); defaults to the first commit's.
    pub created_at: Option<String>,
    /// The model card's metadata as the Hub serves it (`cardData`). When absent, it is derived from the
    /// fields above.
    pub card_data: Option<serde_json::Value>,
}

/// An open or closed pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    /// Its number: the ref is `refs/pr/{num}`.
    pub num: u64,
    /// Its title.
    pub title: String,
    /// Whether it is still open.
    pub open: bool,
    /// Who opened it.
    pub author: String,
    /// The `main` commit it was built on (what a merge compares with). The Hub's answers name the target
    /// branch instead (`changes.base`), never this commit.
    pub base: String,
    /// Whether it was merged (and so is no longer open).
    pub merged: bool,
    /// A pull request (with `refs/pr/{num}`), or a discussion only.
    pub is_pull_request: bool,
}

impl PullRequest {
    /// An open pull request.
    pub fn opened(num: u64, title: String, author: String, base: String) -> PullRequest {
        PullRequest { num, title, open: true, author, base, merged: false, is_pull_request: true }
    }

    /// An open discussion, with no changes of its own.
    pub fn discussion(num: u64, title: String, author: String) -> PullRequest {
        PullRequest { num, title, open: true, author, base: String::new(), merged: false, is_pull_request: false }
    }

    /// `open`, `closed` or `merged`, as the Hub says.
    pub fn status(&self) -> &'static str {
        match (self.open, self.merged) {
            (true, _) => "open",
            (false, true) => "merged",
            (false, false) => "closed",
        }
    }
}

/// A model repository.
#[derive(Debug, Clone)]
pub struct Repo {
    /// `namespace/name`.
    pub id: String,
    /// Metadata.
    pub meta: RepoMeta,
    /// Branch (and `refs/pr/N`) → head commit.
    pub refs: BTreeMap<String, String>,
    /// Every commit ever made, by id, so old revisions stay addressable.
    pub commits: HashMap<String, Commit>,
    /// Pull requests, in order.
    pub pull_requests: Vec<PullRequest>,
}

impl Repo {
    /// A repository whose `main` is `first`.
    pub fn new(id: String, meta: RepoMeta, first: Commit) -> Repo {
        let mut refs = BTreeMap::new();
        refs.insert("main".to_owned(), first.sha.clone());
        let mut commits = HashMap::new();
        commits.insert(first.sha.clone(), first);
        Repo { id, meta, refs, commits, pull_requests: Vec::new() }
    }

    /// The namespace (owner).
    pub fn namespace(&self) -> &str {
        crate::digests::namespace_of(&self.id)
    }

    /// The head of `main`.
    pub fn head(&self) -> Option<&Commit> {
        self.resolve("main")
    }

    /// A branch, `refs/pr/N`, or a commit id (full, or a prefix of 7+ hex digits).
    pub fn resolve(&self, revision: &str) -> Option<&Commit> {
        if let Some(sha) = self.refs.get(revision) {
            return self.commits.get(sha);
        }
        if let Some(c) = self.commits.get(revision) {
            return Some(c);
        }
        if revision.len() >= 7 && revision.bytes().all(|b| b.is_ascii_hexdigit()) {
            return self.commits.values().find(|c| c.sha.starts_with(revision));
        }
        None
    }

    /// Tags as listed: the sidecar's, plus the library and licence.
    pub fn tags(&self) -> Vec<String> {
        let mut tags = self.meta.tags.clone();
        if let Some(lib) = &self.meta.library_name
            && !tags.contains(lib)
        {
            tags.insert(0, lib.clone());
        }
        if let Some(license) = &self.meta.license {
            tags.push(format!("license:{license}"));
        }
        tags
    }

    /// Creation date: the sidecar's, else the oldest commit's.
    pub fn created_at(&self) -> String {
        self.meta
            .created_at
            .clone()
            .unwrap_or_else(|| self.commits.values().map(|c| c.date.clone()).min().unwrap_or_default())
    }
}

/// The repositories by id, found as the Hub finds them: without regard to case. So `Alice/Tiny` and
/// `alice/tiny` are one repo. A read of either answers with the id as created, and creating the other is a
/// 409. Iterates in the order of the case-folded ids.
#[derive(Debug, Clone, Default)]
pub struct RepoMap(BTreeMap<String, Repo>);

/// The key an id is stored under.
fn folded(id: &str) -> String {
    id.to_ascii_lowercase()
}

impl RepoMap {
    /// The repo of this id, in any case.
    pub fn get(&self, id: &str) -> Option<&Repo> {
        self.0.get(&folded(id))
    }

    /// The repo of this id, in any case, to change.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Repo> {
        self.0.get_mut(&folded(id))
    }

    /// Whether a repo of this id, in any case, exists.
    pub fn contains_key(&self, id: &str) -> bool {
        self.0.contains_key(&folded(id))
    }

    /// Adds or replaces the repo of this id, in any case. The repo keeps the case of its own `id`.
    pub fn insert(&mut self, id: String, repo: Repo) -> Option<Repo> {
        self.0.insert(folded(&id), repo)
    }

    /// Removes the repo of this id, in any case.
    pub fn remove(&mut self, id: &str) -> Option<Repo> {
        self.0.remove(&folded(id))
    }

    /// How many repos there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every repo.
    pub fn values(&self) -> impl Iterator<Item = &Repo> {
        self.0.values()
    }

    /// The repos whose ids come after `folded_id` (an id in lower case) in the listing's default order.
    pub fn after(&self, folded_id: &str) -> impl Iterator<Item = &Repo> {
        use std::ops::Bound;
        self.0.range::<str, _>((Bound::Excluded(folded_id), Bound::Unbounded)).map(|(_, r)| r)
    }

    /// Every repo's id, as created.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.values().map(|r| &r.id)
    }
}
