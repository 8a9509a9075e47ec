//! The Hub's write protocol, typed: the preupload question (which files go to LFS storage), the Xet write
//! token, and the NDJSON commit. Each goes to a repo's main branch or opens a pull request.
//! Callers hand over paths, samples and digests.
//! Only this module builds these URLs and reads these answers.
//!
//! These steps stand on their own, so a shard goes up as soon as it is written and is read once.
//! hf-hub 1.0's `create_commit` reads every file twice and needs every file before it sends any.

use super::repo_ref::RepoRef;

use base64::Engine as _;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use super::pacing::Bucket;
use super::{BodyLimit, HubClient, HubError, SMALL_CAP};

/// Where a write lands: a repo's main branch, or a new pull request against it.
///
/// Only the repo's writers may write to `main`. Anyone signed in may open a pull request, but the Hub wants
/// `create_pr=1` on the preupload, the Xet write token and the commit. Without it, a non-writer gets 403
/// "pass `create_pr=1` as a query parameter to create a Pull Request".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteTo<'a> {
    /// The repo.
    pub repo: RepoRef<'a>,
    /// Whether the write opens a pull request instead of moving `main`.
    pub pull_request: bool,
}

impl<'a> WriteTo<'a> {
    /// Targets a new pull request against `repo`'s main branch.
    pub fn pull_request(repo: RepoRef<'a>) -> WriteTo<'a> {
        WriteTo { repo, pull_request: true }
    }

    /// Builds the URL of `rest` under the repo's API, with `?create_pr=1` for a pull request.
    fn api(self, hub: &HubClient, rest: &str) -> String {
        let url = hub.repo_api(self.repo, rest);
        if self.pull_request { format!("{url}?create_pr=1") } else { url }
    }
}

impl<'a> From<RepoRef<'a>> for WriteTo<'a> {
    /// Targets the repo's main branch.
    fn from(repo: RepoRef<'a>) -> WriteTo<'a> {
        WriteTo { repo, pull_request: false }
    }
}

impl<'a> From<&'a str> for WriteTo<'a> {
    /// Targets the main branch of the model repo `id`.
    fn from(id: &'a str) -> WriteTo<'a> {
        RepoRef::model(id).into()
    }
}

impl std::fmt::Display for WriteTo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pull_request {
            true => write!(f, "a pull request on {}", self.repo),
            false => self.repo.fmt(f),
        }
    }
}

/// A file in LFS storage or the CAS, as a commit names it: its SHA-256 (the LFS oid) and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its SHA-256, the LFS oid.
    pub sha256: String,
    /// Its size.
    pub size: u64,
}

/// One file of a preupload question: its path in the repo, its first bytes and its size.
#[derive(Debug, Clone)]
pub struct PreuploadFile {
    /// Path in the repo.
    pub path: String,
    /// Its first bytes (the Hub looks at at most 512).
    pub sample: Vec<u8>,
    /// Its size.
    pub size: u64,
}

#[derive(Serialize)]
struct PreuploadAsk<'a> {
    files: Vec<PreuploadAskFile<'a>>,
}

#[derive(Serialize)]
struct PreuploadAskFile<'a> {
    path: &'a str,
    sample: String,
    size: u64,
}

#[derive(Deserialize)]
struct PreuploadAnswer {
    #[serde(default)]
    files: Vec<PreuploadMode>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PreuploadMode {
    path: String,
    upload_mode: String,
}

/// A CAS write token for one repo, as the Hub hands it out.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct XetToken {
    /// The token.
    pub access_token: String,
    /// The CAS to upload to.
    pub cas_url: String,
    /// When it expires, in Unix seconds.
    #[serde(default)]
    pub exp: u64,
}

/// One change of a commit.
#[derive(Debug, Clone)]
pub enum Change<'a> {
    /// A file already in LFS storage or the CAS, committed as its pointer.
    Lfs {
        /// Path in the repo.
        path: &'a str,
        /// What was stored.
        stored: &'a Stored,
    },
    /// A small file sent inline.
    Inline {
        /// Path in the repo.
        path: &'a str,
        /// Its bytes.
        content: Vec<u8>,
    },
    /// A file removed.
    Delete {
        /// Path in the repo.
        path: &'a str,
    },
}

/// The NDJSON commit's lines: `{"key": …, "value": …}`.
#[derive(Serialize)]
#[serde(tag = "key", content = "value", rename_all = "camelCase")]
enum CommitLine<'a> {
    Header {
        summary: &'a str,
        description: &'a str,
        #[serde(rename = "parentCommit")]
        parent_commit: &'a str,
    },
    LfsFile {
        path: &'a str,
        algo: &'static str,
        oid: &'a str,
        size: u64,
    },
    File {
        path: &'a str,
        content: String,
        encoding: &'static str,
    },
    DeletedFile {
        path: &'a str,
    },
}

/// The commit's answer, with the Hub's keys (huggingface_hub's `CommitInfo`). It has `pullRequestUrl` only
/// when the commit opened a pull request.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommitAnswer {
    commit_oid: String,
    #[serde(default)]
    pull_request_url: Option<String>,
}

/// A commit's message: its first line and the rest (a pull request's description).
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The first line (a pull request's title).
    pub summary: &'a str,
    /// The rest; may be empty.
    pub description: &'a str,
}

impl<'a> From<&'a str> for Message<'a> {
    /// A message of one line.
    fn from(summary: &'a str) -> Message<'a> {
        Message { summary, description: "" }
    }
}

/// A commit made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The new commit.
    pub commit: String,
    /// The pull request it opened, when it was written to one.
    pub pull_request: Option<u64>,
    /// The bytes the commit request sent.
    pub sent: u64,
}

/// Returns the number of the pull request on `repo` that a `…/{repo}/discussions/{num}` URL names, as
/// huggingface_hub reads it. Returns `None` for a URL of another repo, or a number that is not one.
fn pull_request_number(url: &str, repo: RepoRef<'_>) -> Option<u64> {
    let (before, num) = url.rsplit_once("/discussions/")?;
    let names_repo = before.to_ascii_lowercase().ends_with(&format!("/{}", repo.git_path()).to_ascii_lowercase());
    if !names_repo || num.is_empty() || num.len() > 18 || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse().ok()
}

/// Why a commit was not made.
#[derive(Debug, thiserror::Error)]
pub enum CommitRefused {
    /// The branch is no longer at the parent named (412). Another commit came first, perhaps this one, sent
    /// before with its answer lost.
    #[error("the branch moved since the upload began")]
    Moved,
    /// Anything else.
    #[error(transparent)]
    Hub(#[from] HubError),
}

impl HubClient {
    fn malformed(url: &str, what: &str, e: impl std::fmt::Display) -> HubError {
        HubError::Malformed { url: url.to_owned(), detail: format!("{what}: {e}") }
    }

    /// Asks which of `files` go to LFS for a write `to` a repo. It asks once, for at most 256 files, as the
    /// Hub takes them. The others travel inline in the commit. An empty file is never LFS. Returns the LFS
    /// paths and the bytes sent.
    #[tracing::instrument(level = "debug", skip_all, fields(repo.id = %to.repo, files = files.len()))]
    pub async fn preupload(&self, to: WriteTo<'_>, files: &[PreuploadFile]) -> Result<(Vec<String>, u64), HubError> {
        let url = to.api(self, "preupload/main");
        let b64 = base64::engine::general_purpose::STANDARD;
        let ask = PreuploadAsk {
            files: files
                .iter()
                .map(|f| PreuploadAskFile { path: &f.path, sample: b64.encode(&f.sample), size: f.size })
                .collect(),
        };
        let body = serde_json::to_vec(&ask).map_err(|e| Self::malformed(&url, "preupload question", e))?;
        let sent = body.len() as u64;
        let answer = self.post(&url, "application/json", body).await?;
        let answer: PreuploadAnswer =
            serde_json::from_slice(&answer.body).map_err(|e| Self::malformed(&url, "preupload answer", e))?;
        let lfs = files
            .iter()
            .filter(|f| f.size > 0)
            .filter(|f| answer.files.iter().any(|m| m.path == f.path && m.upload_mode == "lfs"))
            .map(|f| f.path.clone())
            .collect();
        Ok((lfs, sent))
    }

    /// Returns where the CAS write token for a write `to` a repo comes from and is refreshed. For a pull
    /// request, this is huggingface_hub's URL, whose revision is `None` (`_xet.xet_connection_info_refresh_url`).
    pub fn xet_write_token_url(&self, to: WriteTo<'_>) -> String {
        to.api(self, if to.pull_request { "xet-write-token/None" } else { "xet-write-token/main" })
    }

    /// Fetches a CAS write token for a write `to` a repo. Every repo on the Hub is Xet-backed. A 404 thus
    /// means the repo is missing or hidden from this token, and is an error like any other.
    pub async fn xet_write_token(&self, to: WriteTo<'_>) -> Result<XetToken, HubError> {
        let url = self.xet_write_token_url(to);
        let answer = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(SMALL_CAP)).await?;
        serde_json::from_slice(&answer.body).map_err(|e| Self::malformed(&url, "Xet write token", e))
    }

    /// Commits `changes` `to` a repo on top of `parent`, the head of `main` read right before. The commit goes
    /// to `main`, or opens a new pull request. Returns the commit, the pull request's number, and the bytes
    /// sent.
    ///
    /// A commit to `main` names its parent, so a resend after a lost answer cannot make a second commit. If
    /// the first one landed, the Hub refuses the second with 412 ([`CommitRefused::Moved`]). A pull request is
    /// opened by its commit, so that commit is sent once: a resend would open a second one.
    #[tracing::instrument(level = "debug", skip_all, fields(repo.id = %to.repo, pull_request = to.pull_request, parent = %parent))]
    pub async fn commit(
        &self,
        to: WriteTo<'_>,
        parent: &str,
        message: Message<'_>,
        changes: &[Change<'_>],
    ) -> Result<Committed, CommitRefused> {
        let url = to.api(self, "commit/main");
        let b64 = base64::engine::general_purpose::STANDARD;
        let Message { summary, description } = message;
        let mut lines = vec![CommitLine::Header { summary, description, parent_commit: parent }];
        lines.extend(changes.iter().map(|c| match c {
            Change::Lfs { path, stored } => {
                CommitLine::LfsFile { path, algo: "sha256", oid: &stored.sha256, size: stored.size }
            }
            Change::Inline { path, content } => {
                CommitLine::File { path, content: b64.encode(content), encoding: "base64" }
            }
            Change::Delete { path } => CommitLine::DeletedFile { path },
        }));
        let mut body = Vec::new();
        for line in &lines {
            serde_json::to_writer(&mut body, line).map_err(|e| Self::malformed(&url, "commit line", e))?;
            body.push(b'\n');
        }
        let sent = body.len() as u64;
        let posted = match to.pull_request {
            true => self.post_action_once(&url, "application/x-ndjson", body).await,
            false => self.post_action(&url, "application/x-ndjson", body).await,
        };
        let answer = match posted {
            Ok(answer) => answer,
            Err(HubError::Status { status: StatusCode::PRECONDITION_FAILED, .. }) => return Err(CommitRefused::Moved),
            Err(e) => return Err(e.into()),
        };
        Ok(Self::committed(&url, to, &answer.body, sent)?)
    }

    /// Reads a commit's answer: the commit, checked, and for a pull request its number from `pullRequestUrl`.
    fn committed(url: &str, to: WriteTo<'_>, body: &[u8], sent: u64) -> Result<Committed, HubError> {
        let answer: CommitAnswer =
            serde_json::from_slice(body).map_err(|e| Self::malformed(url, "commit answer", e))?;
        crate::untrusted::check_revision(&answer.commit_oid)
            .map_err(|e| Self::malformed(url, "the answer's commit", e))?;
        let pull_request = match (to.pull_request, answer.pull_request_url.as_deref()) {
            (false, _) => None,
            (true, Some(pr_url)) => Some(pull_request_number(pr_url, to.repo).ok_or_else(|| {
                Self::malformed(url, "the answer's pullRequestUrl", crate::untrusted::escape_control(pr_url))
            })?),
            (true, None) => return Err(Self::malformed(url, "commit answer", "no pullRequestUrl for a pull request")),
        };
        Ok(Committed { commit: answer.commit_oid, pull_request, sent })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_requests_number_is_read_from_its_url_on_the_repo_asked_only() {
        let repo = RepoRef::model("ns/model");
        assert_eq!(pull_request_number("https://huggingface.co/ns/model/discussions/12", repo), Some(12));
        assert_eq!(pull_request_number("http://127.0.0.1:9/NS/Model/discussions/3", repo), Some(3), "any case");
        let dataset = RepoRef::dataset("ns/data");
        assert_eq!(pull_request_number("https://huggingface.co/datasets/ns/data/discussions/4", dataset), Some(4));
        for url in [
            "https://huggingface.co/other/model/discussions/12",
            "https://huggingface.co/ns/model/discussions/",
            "https://huggingface.co/ns/model/discussions/-1",
            "https://huggingface.co/ns/model/discussions/1x",
            "https://huggingface.co/ns/model/discussions/99999999999999999999",
            "https://huggingface.co/ns/model/commit/abc",
        ] {
            assert_eq!(pull_request_number(url, repo), None, "{url}");
        }
    }

    #[test]
    fn commit_lines_are_the_hubs_ndjson() {
        let stored = Stored { sha256: "ab".repeat(32), size: 7 };
        let lines = [
            CommitLine::Header { summary: "s", description: "", parent_commit: "p" },
            CommitLine::LfsFile { path: "m.safetensors", algo: "sha256", oid: &stored.sha256, size: stored.size },
            CommitLine::File { path: "c.json", content: "e30=".into(), encoding: "base64" },
            CommitLine::DeletedFile { path: "old/part-03.parquet" },
        ];
        let text: Vec<String> = lines.iter().map(|l| serde_json::to_string(l).unwrap()).collect();
        assert_eq!(text[0], r#"{"key":"header","value":{"summary":"s","description":"","parentCommit":"p"}}"#);
        assert!(text[1].starts_with(r#"{"key":"lfsFile","value":{"path":"m.safetensors","algo":"sha256","oid":"abab"#));
        assert_eq!(text[2], r#"{"key":"file","value":{"path":"c.json","content":"e30=","encoding":"base64"}}"#);
        assert_eq!(text[3], r#"{"key":"deletedFile","value":{"path":"old/part-03.parquet"}}"#);
    }
}
