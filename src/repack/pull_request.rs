//! `--pr` mode: propose the repaired files to the source repo as a pull request instead of a mirror, the
//! way the Hub's safetensors conversion bot does: a fixed title, one bot account, never two PRs for the same
//! head commit, and a closed PR taken as the owner's "no".

use std::path::{Path, PathBuf};

use super::error::RepackError;
use super::prime::prime;
use crate::hub::HubClient;

/// The title, which is also the de-duplication key.
pub const PR_TITLE: &str = "Align safetensors so memory-mapping loaders map tensors instead of copying them";

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
pub enum Proposal {
    /// A new pull request.
    Opened {
        /// Its number.
        num: u64,
        /// Its commit.
        commit: String,
    },
    /// Nothing to do, and why (already open, or declined).
    Declined(String),
}

async fn previous(hub: &HubClient, repo: &str, bot: &str, head: &str) -> Result<Option<String>, RepackError> {
    let prs =
        hub.pull_requests(repo, PR_TITLE, bot).await.map_err(|e| RepackError::hub("reading its pull requests", e))?;
    Ok(prs.into_iter().find(|p| p.base.as_deref() == Some(head) || p.status == "closed").map(|p| {
        match p.status.as_str() {
            "closed" => format!("the owner closed #{}: not proposing again", p.num),
            status => format!("#{} is already {status} for this commit", p.num),
        }
    }))
}

/// Where a pull request goes: the source repo at the audited head, from the bot's account.
pub struct Target<'a> {
    /// `namespace/name`.
    pub repo: &'a str,
    /// The commit the repair was made from.
    pub head: &'a str,
    /// The token's user, the author the de-duplication looks for.
    pub bot: &'a str,
    /// The source shards, for the upload's deduplication.
    pub sources: &'a [PathBuf],
}

/// Opens the pull request on the source repo with the shards and the manifest of `dir`, unless one by the
/// bot for this head exists, or the owner closed one. Checked again just before committing, for concurrent
/// workers.
#[tracing::instrument(name = "propose", skip_all, fields(repo.id = %target.repo))]
pub async fn propose(hub: &HubClient, target: &Target<'_>, dir: &Path) -> Result<Proposal, RepackError> {
    let Target { repo, head, bot, sources } = *target;
    if let Some(why) = previous(hub, repo, bot, head).await? {
        return Ok(Proposal::Declined(why));
    }
    let mut operations = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| RepackError::io(dir.display(), e))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // Only the repair: the shards and the manifest. The owner's other files stay theirs, as they are (the
    // carried configs of a mirror lose their pointers to code; a pull request proposes no such change).
    let repair = |n: &String| n.ends_with(crate::bundle::SHARD_SUFFIX) || n == crate::manifest::MANIFEST_FILE;
    for name in names.into_iter().filter(repair) {
        operations.push((name.clone(), dir.join(&name)));
    }
    prime(hub, repo, sources).await;
    // Again after priming, the last step before the commit, for a worker that opened one meanwhile.
    if let Some(why) = previous(hub, repo, bot, head).await? {
        return Ok(Proposal::Declined(why));
    }
    let opened = hub
        .open_pull_request(repo, head, (PR_TITLE, DESCRIPTION), operations)
        .await
        .map_err(|e| RepackError::hub(format_args!("opening a pull request on {repo}"), e))?;
    Ok(Proposal::Opened { num: opened.num, commit: opened.commit })
}
