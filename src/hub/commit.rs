//! The Hub's write protocol, typed: the preupload question (which files go to LFS), Git LFS's batch
//! negotiation and verify call, the Xet write token, and the NDJSON commit. Callers hand over paths, samples and
//! digests; only this module builds these URLs and reads these answers.
//!
//! hf-hub 1.0's `create_commit` reads every file twice (a SHA-256 pass before the upload, then the upload) and
//! needs every file before it sends any; these steps stand on their own, so a shard goes up as soon as it is
//! written and is read once.

use super::repo_ref::RepoRef;
use std::collections::BTreeMap;

use base64::Engine as _;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use super::pacing::Bucket;
use super::{BodyLimit, HubClient, HubError, SMALL_CAP};

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

#[derive(Serialize)]
struct BatchAsk<'a> {
    operation: &'static str,
    transfers: [&'static str; 1],
    objects: Vec<OidSize<'a>>,
    hash_algo: &'static str,
}

#[derive(Serialize)]
struct OidSize<'a> {
    oid: &'a str,
    size: u64,
}

#[derive(Deserialize)]
struct BatchAnswer {
    #[serde(default)]
    objects: Vec<BatchObject>,
}

/// The LFS server's answer for one object of a batch.
#[derive(Debug, Clone, Deserialize)]
pub struct BatchObject {
    /// The object's oid, as asked.
    pub oid: String,
    /// What to do with it; none when the storage already holds it.
    #[serde(default)]
    pub actions: Option<BatchActions>,
    /// Why the server will not take it.
    #[serde(default)]
    pub error: Option<BatchError>,
}

/// The transfers the LFS server asks for.
#[derive(Debug, Clone, Deserialize)]
pub struct BatchActions {
    /// Where to PUT the bytes.
    #[serde(default)]
    pub upload: Option<BatchAction>,
    /// Where to confirm the upload afterwards.
    #[serde(default)]
    pub verify: Option<BatchAction>,
}

/// A URL with the headers to send to it.
#[derive(Debug, Clone, Deserialize)]
pub struct BatchAction {
    /// The URL (pre-signed storage, another origin: the Hub's token does not go there).
    pub href: String,
    /// Headers to send along.
    #[serde(default)]
    pub header: BTreeMap<String, String>,
}

/// An object the LFS server refused.
#[derive(Debug, Clone, Deserialize)]
pub struct BatchError {
    /// Its code (HTTP-like).
    #[serde(default)]
    pub code: Option<i64>,
    /// Its message.
    #[serde(default)]
    pub message: String,
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommitAnswer {
    commit_oid: String,
}

/// Why a commit was not made.
#[derive(Debug, thiserror::Error)]
pub enum CommitRefused {
    /// The branch is no longer at the parent named (412): another commit came first, perhaps this one, sent
    /// before and its answer lost.
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

    /// Asks which of `files` go to LFS on `repo`'s main branch (one question, at most 256 files, as the Hub
    /// takes them); the others travel inline in the commit. An empty file is never LFS. Returns the LFS paths
    /// and the bytes sent.
    #[tracing::instrument(level = "debug", skip_all, fields(repo.id = %repo, files = files.len()))]
    pub async fn preupload(&self, repo: RepoRef<'_>, files: &[PreuploadFile]) -> Result<(Vec<String>, u64), HubError> {
        let url = self.repo_api(repo, "preupload/main");
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

    /// Git LFS's batch negotiation for uploading `objects` to `repo` by the basic transfer: the server's
    /// answer for each, and the bytes sent.
    #[tracing::instrument(level = "debug", skip_all, fields(repo.id = %repo, objects = objects.len()))]
    pub async fn lfs_batch(&self, repo: RepoRef<'_>, objects: &[&Stored]) -> Result<(Vec<BatchObject>, u64), HubError> {
        let url = format!("{}/{}.git/info/lfs/objects/batch", self.endpoint(), repo.git_path());
        let ask = BatchAsk {
            operation: "upload",
            transfers: ["basic"],
            objects: objects.iter().map(|s| OidSize { oid: &s.sha256, size: s.size }).collect(),
            hash_algo: "sha256",
        };
        let body = serde_json::to_vec(&ask).map_err(|e| Self::malformed(&url, "LFS batch question", e))?;
        let sent = body.len() as u64;
        let answer = self.post(&url, "application/vnd.git-lfs+json", body).await?;
        let answer: BatchAnswer =
            serde_json::from_slice(&answer.body).map_err(|e| Self::malformed(&url, "LFS batch answer", e))?;
        Ok((answer.objects, sent))
    }

    /// The verify call an LFS batch answer asked for after an upload; returns the bytes sent.
    pub async fn lfs_verify(&self, verify: &BatchAction, stored: &Stored) -> Result<u64, HubError> {
        let body = serde_json::to_vec(&OidSize { oid: &stored.sha256, size: stored.size })
            .map_err(|e| Self::malformed(&verify.href, "LFS verify", e))?;
        let sent = body.len() as u64;
        self.post(&verify.href, "application/vnd.git-lfs+json", body).await?;
        Ok(sent)
    }

    /// Where `repo`'s CAS write token comes from (and is refreshed).
    pub fn xet_write_token_url(&self, repo: RepoRef<'_>) -> String {
        self.repo_api(repo, "xet-write-token/main")
    }

    /// A CAS write token for `repo`, or `None` where the Hub offers no Xet storage (a 404).
    pub async fn xet_write_token(&self, repo: RepoRef<'_>) -> Result<Option<XetToken>, HubError> {
        let url = self.xet_write_token_url(repo);
        match self.get(Bucket::Api, &url, &[], BodyLimit::Whole(SMALL_CAP)).await {
            Ok(answer) => {
                serde_json::from_slice(&answer.body).map(Some).map_err(|e| Self::malformed(&url, "Xet write token", e))
            }
            Err(HubError::Status { status: StatusCode::NOT_FOUND, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Commits `changes` to `repo`'s main branch on top of `parent` (its head, read right before). Returns the
    /// commit and the bytes sent.
    ///
    /// The commit names its parent, so sending it again after a lost answer cannot make a second commit: if the
    /// first one landed, the Hub refuses the second with 412 ([`CommitRefused::Moved`]).
    #[tracing::instrument(level = "debug", skip_all, fields(repo.id = %repo, parent = %parent))]
    pub async fn commit(
        &self,
        repo: RepoRef<'_>,
        parent: &str,
        summary: &str,
        changes: &[Change<'_>],
    ) -> Result<(String, u64), CommitRefused> {
        let url = self.repo_api(repo, "commit/main");
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut lines = vec![CommitLine::Header { summary, parent_commit: parent }];
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
        let answer = match self.post(&url, "application/x-ndjson", body).await {
            Ok(answer) => answer,
            Err(HubError::Status { status: StatusCode::PRECONDITION_FAILED, .. }) => return Err(CommitRefused::Moved),
            Err(e) => return Err(e.into()),
        };
        let answer: CommitAnswer =
            serde_json::from_slice(&answer.body).map_err(|e| Self::malformed(&url, "commit answer", e))?;
        crate::gate::check_revision(&answer.commit_oid).map_err(|e| Self::malformed(&url, "the answer's commit", e))?;
        Ok((answer.commit_oid, sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_lines_are_the_hubs_ndjson() {
        let stored = Stored { sha256: "ab".repeat(32), size: 7 };
        let lines = [
            CommitLine::Header { summary: "s", parent_commit: "p" },
            CommitLine::LfsFile { path: "m.safetensors", algo: "sha256", oid: &stored.sha256, size: stored.size },
            CommitLine::File { path: "c.json", content: "e30=".into(), encoding: "base64" },
            CommitLine::DeletedFile { path: "old/part-03.parquet" },
        ];
        let text: Vec<String> = lines.iter().map(|l| serde_json::to_string(l).unwrap()).collect();
        assert_eq!(text[0], r#"{"key":"header","value":{"summary":"s","parentCommit":"p"}}"#);
        assert!(text[1].starts_with(r#"{"key":"lfsFile","value":{"path":"m.safetensors","algo":"sha256","oid":"abab"#));
        assert_eq!(text[2], r#"{"key":"file","value":{"path":"c.json","content":"e30=","encoding":"base64"}}"#);
        assert_eq!(text[3], r#"{"key":"deletedFile","value":{"path":"old/part-03.parquet"}}"#);
    }

    #[test]
    fn batch_answers_are_read_with_their_actions_and_errors() {
        let answer: BatchAnswer = serde_json::from_str(
            r#"{"objects":[{"oid":"a","size":1,"actions":{"upload":{"href":"https://s/a","header":{"x":"y"}}}},
                           {"oid":"b","error":{"code":422,"message":"too big"}},{"oid":"c"}]}"#,
        )
        .unwrap();
        let upload = answer.objects[0].actions.as_ref().and_then(|a| a.upload.as_ref()).unwrap();
        assert_eq!((upload.href.as_str(), upload.header["x"].as_str()), ("https://s/a", "y"));
        assert_eq!(answer.objects[1].error.as_ref().unwrap().to_string(), "422: too big");
        assert!(answer.objects[2].actions.is_none() && answer.objects[2].error.is_none());
        // Git LFS's headers are text; an answer with any other header is refused whole, not sent in part.
        let odd = r#"{"objects":[{"oid":"a","size":1,"actions":{"upload":{"href":"h","header":{"x":1}}}}]}"#;
        assert!(serde_json::from_str::<BatchAnswer>(odd).is_err());
    }
}
