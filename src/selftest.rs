//! `hubalign selftest`: makes every write the service makes, once, against a real Hub. It writes to
//! throwaway objects in a namespace the token owns, and cleans them up afterwards.
//!
//! It makes the first contact with a Hub a check rather than a production job. Each step is a write path the
//! service uses (see `docs/HUB_REQUESTS.md`). Each step checks its write by reading back what it made.
//!
//! - The repo is created private.
//! - A shard goes up through Xet and is committed on the head that was read.
//! - A commit on a head that moved since is refused. Every mirror's commit relies on this guard.
//! - A pull request is opened (`create_pr=1`), and its number is read from the Hub's answer.
//! - A discussion is opened.
//! - A private collection holds the repo.
//! - The repo is made public, then private again.
//!
//! The repo and the collection are deleted at the end, whatever failed before.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use crate::hub::collections::CollectionCreated;
use crate::hub::commit::{Change, CommitRefused, Message, WriteTo};
use crate::hub::identity::WriteAccess;
use crate::hub::repo_ref::RepoRef;
use crate::hub::repos::Created;
use crate::hub::{HubClient, HubError};
use crate::repack::upload;

/// What one step found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// What the step does.
    pub name: &'static str,
    /// Whether it did it.
    pub passed: bool,
    /// What it saw, or why it failed.
    pub detail: String,
}

/// What a self-test did, step by step, and the objects it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The Hub it ran against.
    pub endpoint: String,
    /// The throwaway repo.
    pub repo: String,
    /// Every step, in order, cleanup included.
    pub steps: Vec<Step>,
}

impl Report {
    /// Whether every step passed.
    pub fn passed(&self) -> bool {
        self.steps.iter().all(|s| s.passed)
    }
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error(transparent)]
    Repack(#[from] crate::repack::error::RepackError),
    #[error("{0}")]
    Unexpected(String),
}

/// A tiny valid safetensors shard: one F32 tensor of 4 values, the data starting on 8.
fn shard_bytes() -> Vec<u8> {
    let mut header = br#"{"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#.to_vec();
    while !(8 + header.len()).is_multiple_of(8) {
        header.push(b' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&header);
    for v in [1.0f32, 2.0, 3.0, 4.0] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes
}

/// A self-test under way: the client, the namespace, the throwaway repo and the steps so far. The repo's
/// name is unique per run.
struct Run<'a> {
    hub: &'a HubClient,
    namespace: &'a str,
    repo: String,
    steps: Vec<Step>,
}

impl Run<'_> {
    /// Keeps a step's outcome, and returns whether it passed.
    fn record(&mut self, name: &'static str, outcome: Result<String, StepError>) -> bool {
        let passed = outcome.is_ok();
        let detail = match outcome {
            Ok(detail) => detail,
            Err(e) => crate::untrusted::escape_control(&crate::error_text::with_causes(&e)).into_owned(),
        };
        tracing::info!(step = name, passed, detail = %detail, "selftest");
        self.steps.push(Step { name, passed, detail });
        passed
    }

    /// The token's user, if it may write to the namespace.
    async fn identity(&self) -> Result<(String, String), StepError> {
        let who = self.hub.identity().await?;
        match who.may_write(self.namespace) {
            WriteAccess::Granted => Ok((who.name.clone(), format!("{} may write to {}", who.name, self.namespace))),
            WriteAccess::Unknown(why) => Ok((who.name.clone(), format!("{}: {why}", who.name))),
            WriteAccess::Refused(why) => Err(StepError::Unexpected(why.replace("--target-namespace", "--namespace"))),
        }
    }

    async fn create(&self) -> Result<String, StepError> {
        match self.hub.create_private_repo(&self.repo).await? {
            Created::New => Ok(format!("{} created private", self.repo)),
            Created::Existed => Err(StepError::Unexpected(format!("{} exists already; not ours to use", self.repo))),
        }
    }

    /// Sends the shard through Xet and commits it on the head just read. Returns that head, which the commit
    /// moved past.
    async fn upload(&self, scratch: &Path) -> Result<(String, String), StepError> {
        let parent = self.head().await?;
        let path = scratch.join("model.safetensors");
        let shard = shard_bytes();
        let size = shard.len() as u64;
        tokio::fs::write(&path, shard).await.map_err(|e| StepError::Unexpected(format!("{}: {e}", path.display())))?;
        let to = WriteTo::from(self.repo.as_str());
        let files = vec![upload::BundleFile { rel: "model.safetensors".to_owned(), path: path.clone(), size }];
        let (lfs, _) = upload::preupload(self.hub, to, &files).await?;
        if lfs != ["model.safetensors"] {
            return Err(StepError::Unexpected(format!("the Hub did not take the shard to LFS storage: {lfs:?}")));
        }
        let shard = [upload::LocalFile { rel: "model.safetensors".to_owned(), path }];
        let (mut stored, sent) = upload::to_xet(self.hub, to, &shard, (&[], &HashMap::new())).await?;
        let stored = stored.remove("model.safetensors").ok_or_else(|| StepError::Unexpected("not stored".into()))?;
        let message = Message::from("hubalign selftest: a shard through Xet");
        let committed = upload::commit(
            self.hub,
            to,
            &parent,
            message,
            &[upload::StoredFile { rel: "model.safetensors".into(), stored: stored.clone() }],
            &[],
        )
        .await
        .map_err(|e| StepError::Unexpected(e.to_string()))?;
        let listed = self.hub.tree(&self.repo, &committed.commit).await?;
        let entry = listed.iter().find(|f| f.path == "model.safetensors");
        match entry.and_then(|f| f.lfs.as_ref()) {
            Some(lfs) if lfs.oid == stored.sha256 => {
                Ok((parent, format!("{sent} bytes through Xet; the tree names the shard's SHA-256")))
            }
            _ => Err(StepError::Unexpected(format!(
                "the tree at {} does not name the shard's SHA-256",
                committed.commit
            ))),
        }
    }

    /// A commit naming `stale` as its parent, after the branch moved past it, is refused.
    async fn stale_parent(&self, stale: &str) -> Result<String, StepError> {
        let note = [Change::Inline { path: "NOTE.md", content: b"stale".to_vec() }];
        let to = WriteTo::from(self.repo.as_str());
        match self.hub.commit(to, stale, Message::from("hubalign selftest: must be refused"), &note).await {
            Err(CommitRefused::Moved) => Ok("refused with 412, as a commit on a moved branch must be".into()),
            Ok(made) => Err(StepError::Unexpected(format!("the Hub took a commit on a moved branch: {}", made.commit))),
            Err(CommitRefused::Hub(e)) => Err(e.into()),
        }
    }

    async fn pull_request(&self, bot: &str) -> Result<String, StepError> {
        let head = self.head().await?;
        let to = WriteTo::pull_request(RepoRef::model(&self.repo));
        let note = [Change::Inline { path: "NOTE.md", content: b"a proposal".to_vec() }];
        let title = "hubalign selftest: a pull request";
        let message = Message { summary: title, description: "Opened by hubalign selftest; deleted with the repo." };
        let opened = self.hub.commit(to, &head, message, &note).await.map_err(|e| match e {
            CommitRefused::Moved => StepError::Unexpected("the branch moved".into()),
            CommitRefused::Hub(e) => e.into(),
        })?;
        let num = opened.pull_request.ok_or_else(|| StepError::Unexpected("no pull request number".into()))?;
        let listed = self.hub.pull_requests(&self.repo, title, bot).await?;
        match listed.iter().any(|p| p.num == num && p.status == "open") {
            true => Ok(format!("#{num} opened and listed open")),
            false => Err(StepError::Unexpected(format!("#{num} is not listed open by {bot}"))),
        }
    }

    async fn discussion(&self) -> Result<String, StepError> {
        let num = self.hub.open_discussion(&self.repo, "hubalign selftest", "Deleted with the repo.").await?;
        match self.hub.discussion_status(&self.repo, num).await?.as_str() {
            "open" => Ok(format!("#{num} opened")),
            other => Err(StepError::Unexpected(format!("#{num} is {other}"))),
        }
    }

    /// Makes a private collection holding the repo. Its slug goes to `slug`, for the cleanup.
    async fn collection(&self, slug: &mut Option<String>) -> Result<String, StepError> {
        let title = format!("hubalign selftest {}", self.repo.rsplit('-').next().unwrap_or("run"));
        let made =
            match self.hub.create_collection(self.namespace, (&title, "Deleted by hubalign selftest."), true).await? {
                CollectionCreated::New(made) => made,
                CollectionCreated::Existed(other) => {
                    return Err(StepError::Unexpected(format!(
                        "a collection titled {title:?} exists already: {other}"
                    )));
                }
            };
        *slug = Some(made.clone());
        self.hub.add_to_collection(&made, &self.repo, "hubalign selftest").await?;
        let items = self.hub.collection_items(&made).await?;
        match items.iter().any(|i| i.id == self.repo) {
            true => Ok(format!("{made} holds the repo")),
            false => Err(StepError::Unexpected(format!("{made} does not list the repo"))),
        }
    }

    /// Makes the repo public, then private again, and reads each back. So a setting that did nothing cannot
    /// pass.
    async fn visibility(&self) -> Result<String, StepError> {
        for private in [false, true] {
            self.hub.set_private(&self.repo, private).await?;
            match self.hub.head_of(RepoRef::model(&self.repo)).await? {
                Some((_, now)) if now == private => {}
                other => return Err(StepError::Unexpected(format!("set private={private}, the Hub says {other:?}"))),
            }
        }
        Ok("made public, then private, as the Hub then said".into())
    }

    async fn head(&self) -> Result<String, StepError> {
        match self.hub.head_of(RepoRef::model(&self.repo)).await? {
            Some((head, _)) => Ok(head),
            None => Err(StepError::Unexpected(format!("{} is not there", self.repo))),
        }
    }
}

/// Runs every step against `hub` in `namespace`, then deletes what it made. `scratch` holds the shard's file
/// while it goes up.
pub async fn run(hub: &HubClient, namespace: &str, scratch: &Path) -> Report {
    let suffix =
        format!("{:x}{:04x}", crate::time::unix_seconds_after(std::time::SystemTime::now()), fastrand::u16(..));
    let repo = format!("{namespace}/hubalign-selftest-{suffix}");
    let mut run = Run { hub, namespace, repo: repo.clone(), steps: Vec::new() };
    let identity = run.identity().await;
    let bot = identity.as_ref().ok().map(|(bot, _)| bot.clone());
    run.record("the token may write to the namespace", identity.map(|(_, detail)| detail));
    let created = match bot {
        Some(_) => {
            let outcome = run.create().await;
            run.record("create a private repo", outcome)
        }
        None => false,
    };
    if let (Some(bot), true) = (bot, created) {
        match run.upload(scratch).await {
            Ok((before, detail)) => {
                run.record("a shard through Xet, committed on the head read", Ok(detail));
                let outcome = run.stale_parent(&before).await;
                run.record("a commit on a moved branch is refused", outcome);
            }
            Err(e) => {
                run.record("a shard through Xet, committed on the head read", Err(e));
            }
        }
        let outcome = run.pull_request(&bot).await;
        run.record("open a pull request (create_pr=1)", outcome);
        let outcome = run.discussion().await;
        run.record("open a discussion", outcome);
        let mut slug = None;
        let outcome = run.collection(&mut slug).await;
        run.record("a private collection holds the repo", outcome);
        let outcome = run.visibility().await;
        run.record("make the repo public, then private", outcome);
        if let Some(slug) = slug {
            let outcome = hub.delete_collection(&slug).await.map(|()| format!("{slug} deleted")).map_err(Into::into);
            run.record("delete the collection", outcome);
        }
        let outcome = hub.delete_repo(&repo).await.map(|()| format!("{repo} deleted")).map_err(Into::into);
        run.record("delete the repo", outcome);
    }
    Report { endpoint: hub.endpoint().to_owned(), repo, steps: run.steps }
}
