//! What may be mirrored, and how visibly: never a public copy of something that is not public.
//!
//! A gated source is never mirrored, because its licence gate cannot be carried over.
//! Neither is a disabled source, nor one that is gone.
//! A private source is mirrored only when the operator allows private mirrors of private sources, and only
//! into the source's own namespace. That mirror stays private.
//! A source can change between the audit and the commit, so the check runs three times. It runs on the stored
//! flags when jobs are queued, on the Hub's answer when a job starts, and again right before publishing.

use std::collections::BTreeSet;

use crate::hub::info::ModelInfo;
use crate::hub::{Access, HubError};
use crate::job::VerifyDevice;
use crate::repack::error::RepackError;
use crate::store::jobs::{Candidate, NewJob};
use crate::store::{Store, StoreError};

/// The reason a gated source is skipped.
pub const GATED: &str = "gated: the licence gate cannot be carried over";
/// The reason a disabled source is skipped.
pub const DISABLED: &str = "disabled: the Hub disabled the source";
/// The reason a private source is skipped.
pub const PRIVATE: &str = "private: a mirror would publish what only the source's owners can see (--private-mirrors allows a private mirror in the source's own namespace)";
/// The reason a source that vanished is skipped.
pub const GONE: &str = "gone: the source was deleted or is no longer visible";

/// How a mirror may be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Anyone may see it, as they may see the source.
    Public,
    /// Only the namespace's members may, as only they may see the source.
    Private,
}

/// Who may see the source, as far as publication cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceFlags {
    /// Private.
    pub private: bool,
    /// Behind a licence gate.
    pub gated: bool,
    /// Disabled by the Hub.
    pub disabled: bool,
}

/// Where private mirrors of private sources are allowed: only into the namespace named here, and only for
/// sources in that same namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrivateMirrors(pub Option<String>);

impl PrivateMirrors {
    fn allows(&self, source: &str, target_namespace: &str) -> bool {
        let source_ns = crate::untrusted::namespace_of(source);
        self.0.as_deref().is_some_and(|ns| same_name(ns, target_namespace)) && same_name(source_ns, target_namespace)
    }
}

/// How a source with these flags may be mirrored into `target_namespace`, or why not.
pub fn visibility(
    source: &str,
    flags: SourceFlags,
    target_namespace: &str,
    private: &PrivateMirrors,
) -> Result<Visibility, &'static str> {
    if flags.disabled {
        Err(DISABLED)
    } else if flags.gated {
        Err(GATED)
    } else if flags.private && private.allows(source, target_namespace) {
        Ok(Visibility::Private)
    } else if flags.private {
        Err(PRIVATE)
    } else {
        Ok(Visibility::Public)
    }
}

/// Whether a source may be mirrored now, by the Hub's answer for it.
pub enum MayMirror {
    /// It may, with this visibility, by the Hub's answer `info`.
    Yes {
        /// The mirror's visibility.
        visibility: Visibility,
        /// The Hub's answer for the source.
        info: Box<ModelInfo>,
    },
    /// It may not, and why.
    No(&'static str),
}

/// Makes the same decision from the Hub's answer for the source now.
/// A source that is gone, or that the Hub reports gated or disabled, is not mirrored.
/// An answer that says nothing certain is an error to retry.
pub fn may_mirror_now(
    source: &str,
    info: Result<ModelInfo, HubError>,
    target_namespace: &str,
    private: &PrivateMirrors,
) -> Result<MayMirror, RepackError> {
    match info {
        Ok(info) => {
            let flags = SourceFlags {
                private: info.flags.private,
                gated: info.flags.is_gated(),
                disabled: info.flags.disabled,
            };
            Ok(match visibility(source, flags, target_namespace, private) {
                Ok(visibility) => MayMirror::Yes { visibility, info: Box::new(info) },
                Err(reason) => MayMirror::No(reason),
            })
        }
        Err(e) => match e.access() {
            Some(Access::Vanished) => Ok(MayMirror::No(GONE)),
            Some(Access::Gated) => Ok(MayMirror::No(GATED)),
            Some(Access::Disabled) => Ok(MayMirror::No(DISABLED)),
            Some(Access::Moved) | None => Err(RepackError::hub("checking the source's visibility", e)),
        },
    }
}

/// Names of publishers or repos, compared as the Hub compares them: without regard to ASCII case.
/// On the Hub, `OptCo` and `optco` are one owner, and `a/Model` and `a/model` are one repo.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names(BTreeSet<String>);

impl Names {
    /// Whether `name` is one of these, in any case.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(&name.to_ascii_lowercase())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Names {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Names {
        Names(names.into_iter().map(|n| n.as_ref().to_ascii_lowercase()).collect())
    }
}

/// Whether two namespaces (or repo ids) name the same owner (or repo) on the Hub.
pub fn same_name(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Which affected repos become jobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnqueuePolicy {
    /// Only repos duplicating at least this many bytes.
    pub min_bytes: i64,
    /// Only these namespaces (all when empty).
    pub include: Names,
    /// Never these namespaces.
    pub skip: Names,
    /// Owners (namespaces) or repos that asked not to be mirrored.
    pub opt_out: Names,
    /// Where the jobs' MLX check runs (`Metal` waits for the macOS runner).
    pub verify_device: VerifyDevice,
    /// Where private mirrors of private sources are allowed.
    pub private_mirrors: PrivateMirrors,
    /// `--pr` mode: repairs are proposed to the source, so a repo whose owner closed one is not repaired again.
    pub pull_requests: bool,
    /// How popular a source must be before it is mirrored.
    pub popularity: Popularity,
}

/// The popularity floor. A source is mirrored once people use it, when its downloads or its likes reach
/// the floor. It is also mirrored when its publisher is on the allow-list.
/// Anyone can push a repo tagged `mlx`. So the service republishes a repo under its own name by what the
/// Hub's users did with it, which a pusher cannot cheaply fake at scale.
/// What the pusher says of the repo (its sizes, tags or card) does not decide it.
#[derive(Debug, Clone, PartialEq)]
pub struct Popularity {
    /// Downloads over the last 30 days (as the Hub counts them) that make a source popular enough.
    pub min_downloads: i64,
    /// Likes that make a source popular enough.
    pub min_likes: i64,
    /// Publishers mirrored whatever their repos' popularity.
    pub trusted: Names,
}

/// The floor unless told otherwise: 100 downloads in 30 days or 5 likes.
/// A real conversion that anyone loads passes within days; mlx-community's median repo has thousands.
/// A fresh push by a stranger, or a flood of them, does not pass.
pub const DEFAULT_MIN_DOWNLOADS: i64 = 100;
/// See [`DEFAULT_MIN_DOWNLOADS`].
pub const DEFAULT_MIN_LIKES: i64 = 5;

impl Default for Popularity {
    fn default() -> Self {
        Popularity { min_downloads: DEFAULT_MIN_DOWNLOADS, min_likes: DEFAULT_MIN_LIKES, trusted: Names::default() }
    }
}

impl Popularity {
    /// Whether the candidate has reached the floor (or its publisher needs none).
    pub fn reached_by(&self, candidate: &Candidate) -> bool {
        let repo = &candidate.affected.repo;
        let namespace = crate::untrusted::namespace_of(repo);
        candidate.downloads >= self.min_downloads
            || candidate.likes >= self.min_likes
            || self.trusted.contains(namespace)
    }
}

/// The reason a repo whose owner closed hubalign's pull request is skipped in `--pr` mode.
pub const DECLINED: &str = "the owner closed hubalign's pull request: not proposed again";

impl EnqueuePolicy {
    /// Why `candidate` is not to be repacked, or `None` if it is.
    pub fn excludes(&self, candidate: &Candidate) -> Option<&'static str> {
        let repo = &candidate.affected;
        let flags = SourceFlags { private: candidate.private, gated: candidate.gated, disabled: candidate.disabled };
        // Mirrors go to the namespace that allows private mirrors, if any.
        // Any other private source is skipped, whatever the target.
        let target_ns = self.private_mirrors.0.as_deref().unwrap_or("");
        if let Err(reason) = visibility(&repo.repo, flags, target_ns, &self.private_mirrors) {
            Some(reason)
        } else if let Some(reason) = self.excludes_name(&repo.repo) {
            Some(reason)
        } else if repo.shards_invalid > 0 {
            Some("the bundle has invalid shards")
        } else {
            None
        }
    }

    /// Why the repo named `repo` is never mirrored, whatever its state (`--include`, `--skip`, opt-out).
    /// Returns `None` if no name rule excludes it.
    pub fn excludes_name(&self, repo: &str) -> Option<&'static str> {
        let namespace = crate::untrusted::namespace_of(repo);
        if self.opt_out.contains(repo) || self.opt_out.contains(namespace) {
            Some("the owner opted out")
        } else if self.skip.contains(namespace) {
            Some("publisher skipped by policy")
        } else if !self.include.is_empty() && !self.include.contains(namespace) {
            Some("publisher not included by policy")
        } else {
            None
        }
    }
}

/// The names a service acts on when a source changes its name: the policy's name rules, and the audit's
/// `--author` if any. `--author` is one of them because a source moved to another owner is no longer
/// crawled, so its mirror could never be brought up to date.
#[derive(Debug, Clone, Copy)]
pub struct NameFilters<'a> {
    /// `--include`, `--skip` and opt-out.
    pub policy: &'a EnqueuePolicy,
    /// The audit's `--author`.
    pub author: Option<&'a str>,
}

impl NameFilters<'_> {
    /// Why the repo named `repo` is outside the filters, or `None`.
    pub fn excludes(&self, repo: &str) -> Option<&'static str> {
        let namespace = crate::untrusted::namespace_of(repo);
        if self.author.is_some_and(|a| !same_name(a, namespace)) {
            return Some("not the audited author");
        }
        self.policy.excludes_name(repo)
    }
}

/// Creates a job for every affected repo at its audited commit that has none yet.
/// Repos the policy excludes get a `skipped` job saying why. Returns how many jobs were queued.
#[tracing::instrument(skip_all)]
pub async fn enqueue_affected(store: &Store, policy: &EnqueuePolicy) -> Result<u64, StoreError> {
    enqueue(store, policy, None).await
}

/// [`enqueue_affected`] for one repo, a webhook's. Queues its job if it is affected and has none at this
/// commit.
pub async fn enqueue_repo(store: &Store, policy: &EnqueuePolicy, repo: &str) -> Result<u64, StoreError> {
    enqueue(store, policy, Some(repo)).await
}

async fn enqueue(store: &Store, policy: &EnqueuePolicy, only: Option<&str>) -> Result<u64, StoreError> {
    let declined = if policy.pull_requests { store.declined_repos(only).await? } else { BTreeSet::new() };
    // A source below the floor gets no job yet, so that each later enqueue looks at it again.
    let (candidates, below): (Vec<Candidate>, Vec<Candidate>) =
        store.candidates(policy.min_bytes, only).await?.into_iter().partition(|c| policy.popularity.reached_by(c));
    if !below.is_empty() {
        tracing::info!(repos = below.len(), "affected repos below the popularity floor; not queued yet");
    }
    let jobs: Vec<NewJob> = candidates
        .into_iter()
        .map(|c| NewJob {
            skipped: policy
                .excludes(&c)
                .or_else(|| declined.contains(&c.affected.repo).then_some(DECLINED))
                .map(str::to_owned),
            repo: c.affected.repo,
            sha: c.affected.sha,
            misaligned_bytes: c.affected.misaligned_bytes,
            verify_device: policy.verify_device,
        })
        .collect();
    store.create_jobs(&jobs).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: SourceFlags = SourceFlags { private: false, gated: false, disabled: false };

    #[test]
    fn names_are_compared_as_the_hub_compares_them() {
        let policy = EnqueuePolicy {
            include: ["Mlx-Community", "optco", "bob"].into_iter().collect(),
            skip: ["bob"].into_iter().collect(),
            opt_out: ["OptCo", "mlx-community/Private-Model"].into_iter().collect(),
            ..EnqueuePolicy::default()
        };
        assert_eq!(policy.excludes_name("OPTCO/tiny-4bit"), Some("the owner opted out"));
        assert_eq!(policy.excludes_name("optco/x"), Some("the owner opted out"));
        assert_eq!(policy.excludes_name("MLX-COMMUNITY/private-model"), Some("the owner opted out"));
        assert_eq!(policy.excludes_name("mlx-community/other"), None);
        assert_eq!(policy.excludes_name("Bob/x"), Some("publisher skipped by policy"));
        assert_eq!(policy.excludes_name("carol/x"), Some("publisher not included by policy"));
        let filters = NameFilters { policy: &EnqueuePolicy::default(), author: Some("MLX-Community") };
        assert_eq!(filters.excludes("mlx-community/x"), None);
        assert_eq!(filters.excludes("other/x"), Some("not the audited author"));
    }

    #[test]
    fn nothing_that_is_not_public_gets_a_public_mirror() {
        let none = PrivateMirrors::default();
        let mine = PrivateMirrors(Some("me".into()));
        assert_eq!(visibility("a/b", OPEN, "me", &none), Ok(Visibility::Public));
        assert_eq!(visibility("a/b", SourceFlags { gated: true, ..OPEN }, "me", &mine), Err(GATED));
        assert_eq!(visibility("me/b", SourceFlags { disabled: true, ..OPEN }, "me", &mine), Err(DISABLED));
        let private = SourceFlags { private: true, ..OPEN };
        assert_eq!(visibility("a/b", private, "me", &none), Err(PRIVATE));
        assert_eq!(visibility("a/b", private, "me", &mine), Err(PRIVATE), "another owner's private repo");
        assert_eq!(visibility("me/b", private, "me", &none), Err(PRIVATE), "not without the operator's flag");
        assert_eq!(visibility("me/b", private, "me", &mine), Ok(Visibility::Private));
        assert_eq!(visibility("me/b", SourceFlags { gated: true, ..private }, "me", &mine), Err(GATED));
    }

    #[test]
    fn a_source_is_mirrored_once_people_use_it_or_its_publisher_is_trusted() {
        let candidate = |repo: &str, downloads, likes| Candidate {
            affected: crate::store::queries::AffectedRepo {
                repo: repo.into(),
                namespace: String::new(),
                sha: String::new(),
                shards_header_pad: 1,
                shards_relayout: 0,
                shards_invalid: 0,
                misaligned_tensors: 1,
                misaligned_bytes: 1,
            },
            private: false,
            gated: false,
            disabled: false,
            downloads,
            likes,
        };
        let floor = Popularity { trusted: ["MLX-Community"].into_iter().collect(), ..Popularity::default() };
        assert!(!floor.reached_by(&candidate("spam/r0", 0, 0)), "a fresh push");
        assert!(!floor.reached_by(&candidate("spam/r1", DEFAULT_MIN_DOWNLOADS - 1, DEFAULT_MIN_LIKES - 1)));
        assert!(floor.reached_by(&candidate("pubco/x", DEFAULT_MIN_DOWNLOADS, 0)));
        assert!(floor.reached_by(&candidate("pubco/y", 0, DEFAULT_MIN_LIKES)));
        assert!(floor.reached_by(&candidate("mlx-community/new", 0, 0)), "the allow-list needs no floor");
    }
}
