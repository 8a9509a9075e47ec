//! `--pr` mode proposes the repaired files to the source repo as a pull request instead of a mirror.
//! It works the way the Hub's safetensors conversion bot does: a fixed title, one bot account, and one open
//! PR at a time. A closed PR counts as the owner's "no".

use std::path::{Path, PathBuf};

use crate::hub::HubClient;
use crate::repack::error::RepackError;
use crate::repack::upload::{self, CommitError, Message, WriteTo};

/// The title, which is also the de-duplication key.
pub(crate) const PR_TITLE: &str = "Align safetensors so memory-mapping loaders map tensors instead of copying them";

const DESCRIPTION: &str = "This is an automated pull request by hubalign.\n\n\
Memory-mapping loaders (the osaurus MLX fork with `MLX_SAFETENSORS_MMAP=1`, Mei, vmlx) can hand out a tensor \
without copying it only when its file offset is a multiple of its element width. These shards miss that for \
most tensors, so such loaders copy them into anonymous memory at load. This PR re-lays the shards: every \
tensor's bytes are unchanged (only header padding and, where needed, the order of tensors change), which \
`MEI_ALIGN_MANIFEST.json` lets you check tensor by tensor. Every shard was loaded with MLX and compared bit for \
bit with the original before this PR was opened. Stock MLX loads both versions the same way.\n\n\
Feel free to ignore or close this PR; a closed PR is never reopened.";

/// What proposing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Proposal {
    /// A new pull request.
    Opened { num: u64, commit: String },
    /// Nothing to do, and why (already open, or declined).
    Declined(String),
}

/// Why not to open a pull request on `repo`: the bot has one open there already, or the owner closed one.
///
/// The Hub does not say which commit a pull request was built on; `changes.base` is the target branch.
/// So any open one by the bot stands for the repair, whatever head it was made from.
/// A closed one is the owner's "no", for good.
async fn previous(hub: &HubClient, repo: &str, bot: &str) -> Result<Option<String>, RepackError> {
    let prs =
        hub.pull_requests(repo, PR_TITLE, bot).await.map_err(|e| RepackError::hub("reading its pull requests", e))?;
    let declined = |status: &str| matches!(status, "open" | "draft" | "closed");
    Ok(prs.into_iter().find(|p| declined(&p.status)).map(|p| match p.status.as_str() {
        "closed" => format!("the owner closed #{}: not proposing again", p.num),
        status => format!("#{} is already {status}", p.num),
    }))
}

/// Where a pull request goes: the source repo at the audited head, from the bot's account.
pub(crate) struct Target<'a> {
    /// `namespace/name`.
    pub repo: &'a str,
    /// The commit the repair was made from.
    pub head: &'a str,
    /// The token's user, the author the de-duplication looks for.
    pub bot: &'a str,
    /// The source shards, for the upload's deduplication.
    pub sources: &'a [PathBuf],
}

/// Opens the pull request on the source repo with the shards and the manifest of `dir`.
/// Declines if the bot has one open there, or the owner closed one.
/// It checks this again just before committing, for concurrent workers.
///
/// The upload works as a mirror's does: preupload, Xet, one commit. Each request says it is for a pull
/// request (`create_pr=1`), as the Hub wants of a token that may not write to the repo.
#[tracing::instrument(name = "propose", skip_all, fields(repo.id = %target.repo))]
pub(crate) async fn propose(hub: &HubClient, target: &Target<'_>, dir: &Path) -> Result<Proposal, RepackError> {
    let Target { repo, head, bot, sources } = *target;
    if let Some(why) = previous(hub, repo, bot).await? {
        return Ok(Proposal::Declined(why));
    }
    // Only the repair goes up: the shards and the manifest. The owner's other files stay as they are.
    // A mirror's carried configs lose their pointers to code, but a pull request proposes no such change.
    let repair = |rel: &String| rel.ends_with(crate::bundle::SHARD_SUFFIX) || rel == crate::manifest::MANIFEST_FILE;
    let listed = dir.to_owned();
    let files = crate::blocking::run("listing the repair", move || upload::files_of(&listed))
        .await
        .map_err(RepackError::caused_by)?;
    let files: Vec<_> = files.into_iter().filter(|f| !f.rel.contains('/') && repair(&f.rel)).collect();
    if !files.iter().any(|f| f.rel == crate::manifest::MANIFEST_FILE) {
        let manifest = dir.join(crate::manifest::MANIFEST_FILE);
        return Err(RepackError::io(manifest.display(), std::io::ErrorKind::NotFound.into()));
    }
    let to = WriteTo::pull_request(repo.into());
    let sent = upload::send_files(hub, to, files, sources).await?;
    // Again after the upload, the last step before the commit, for a worker that opened one meanwhile.
    if let Some(why) = previous(hub, repo, bot).await? {
        return Ok(Proposal::Declined(why));
    }
    let message = Message { summary: PR_TITLE, description: &description(head) };
    match upload::commit(hub, to, head, message, &sent.stored, &sent.inline).await {
        // `commit` refuses an answer without the pull request's number, so this is the Hub's number.
        Ok(committed) => match committed.pull_request {
            Some(num) => Ok(Proposal::Opened { num, commit: committed.commit }),
            None => Err(RepackError::transient(format!("{to}: no pull request number"))),
        },
        Err(CommitError::Moved) => Err(RepackError::transient(format!("{repo} moved since its audit at {head}"))),
        // The commit is sent once, and a lost or unreadable answer may hide a pull request it opened.
        // None was open just before, so an open one by the bot now is that one, and is recorded as opened.
        Err(CommitError::Failed(e)) => match opened_meanwhile(hub, repo, bot).await {
            Some(proposal) => Ok(proposal),
            None => Err(e),
        },
    }
}

/// The bot's pull request on `repo` that is open now, with its commit, if there is one and the Hub says so.
async fn opened_meanwhile(hub: &HubClient, repo: &str, bot: &str) -> Option<Proposal> {
    let prs = hub.pull_requests(repo, PR_TITLE, bot).await.ok()?;
    let num = prs.into_iter().find(|p| p.status == "open")?.num;
    let (commit, _) = hub.revision_of(repo.into(), &format!("refs/pr/{num}")).await.ok()??;
    tracing::info!(repo.id = %repo, pr = num, "the pull request's commit answer was lost; found it open");
    Some(Proposal::Opened { num, commit })
}

/// The pull request's description: what it changes, and the source commit it was made from.
fn description(head: &str) -> String {
    format!("{DESCRIPTION}\n\nMade from commit {head}.")
}
