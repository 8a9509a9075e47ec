//! Keeps the operator's Collections of mirrors holding exactly the public mirrors of public sources. There is
//! one per source namespace ("Aligned MLX: {namespace}") and one for all ("Aligned MLX mirrors").
//!
//! Each pass reads the Hub: the owner's collections, then the items of each managed one whose listing may be
//! cut. Nothing is kept here that could drift from the Hub. So the next pass mends a removed item or a
//! collection deleted by hand.
//!
//! A collection is managed when its title is one of those names and it is ours. It is ours when the store
//! records its slug. It is also ours when its description carries [`MARKER`] or is an earlier release's; the
//! pass then records it. That covers a lost store and an upgrade.
//!
//! A collection of another namespace that a listing shows is ignored. One with a managed title that is not
//! ours is refused: it is named, and left as it is. In a managed collection, a model the store does not list
//! as a public mirror is removed. Any other kind of item, such as a paper the operator added, is left alone.
//! One collection's or item's failure is logged and the others go on.

use std::collections::{BTreeMap, BTreeSet};

use crate::hub::collections::{CollectionCreated, CollectionRef};
use crate::hub::{HubClient, HubError};
use crate::store::owned::OwnedKind;
use crate::store::{Store, StoreError};

/// The title of the collection of every mirror.
pub const ALL_TITLE: &str = "Aligned MLX mirrors";
/// The prefix of a source namespace's collection title.
pub const NAMESPACE_PREFIX: &str = "Aligned MLX: ";
/// The Hub's longest title. A namespace too long for it gets no collection of its own, only the one for all.
pub const MAX_TITLE: usize = 60;
/// Why a mirror deleted on the Hub is no longer public, as the store records it.
pub const GONE: &str = "the mirror was deleted on the Hub";
/// The note each item carries: the operator's words, none of the source's.
pub const ITEM_NOTE: &str = "Re-laid so memory-mapping loaders copy no tensor; its card names the source.";
/// The mark in the description of every collection the service makes. It tells the service its own
/// collections when the store's record is lost.
pub const MARKER: &str = "[hubalign:collection]";
/// The description of the collections that releases before [`MARKER`] made. A collection with exactly this
/// description counts as marked, so an upgrade keeps managing it.
pub const EARLIER_DESCRIPTION: &str = "Copies of MLX models whose safetensors are re-laid so that a memory-mapping \
                                       loader maps every tensor without copying it. Kept by hubalign.";
/// The description of every collection the service makes.
pub const DESCRIPTION: &str = "Copies of MLX models whose safetensors are re-laid so that a memory-mapping \
                               loader maps every tensor without copying it. Kept by hubalign. [hubalign:collection]";

/// Whether a pass writes, or only says what it would write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Create, add and remove.
    Apply,
    /// Read the Hub and the store, and list the changes in [`CollectionsSynced::planned`].
    DryRun,
}

/// A collection with a managed title that the service did not make. It is left as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{owner} has a collection titled {title:?} ({slug}) that hubalign did not make: no record of it in the \
     store, and no {MARKER} in its description. It is left as it is. Rename or delete it, or keep the mirrors' \
     collections in another namespace with --target-namespace"
)]
pub struct NotOurs {
    /// The namespace asked for.
    pub owner: String,
    /// The collection's title.
    pub title: String,
    /// Its slug.
    pub slug: String,
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectionsSynced {
    /// Collections created.
    pub created: usize,
    /// Items added.
    pub added: usize,
    /// Items removed.
    pub removed: usize,
    /// Mirrors deleted by hand, which the Hub no longer has. They are recorded as no longer public.
    pub gone: BTreeSet<String>,
    /// Collections or items that failed this pass, with why. The next pass tries again.
    pub failed: Vec<(String, String)>,
    /// Collections with a managed title that are not ours. Each is left as it is.
    pub refused: Vec<NotOurs>,
    /// In a dry run, each change the pass would make, one line each.
    pub planned: Vec<String>,
}

/// Why the pass could not start.
#[derive(Debug, thiserror::Error)]
pub enum CollectionsError {
    /// The store could not be read.
    #[error("reading the public mirrors")]
    Store(#[from] StoreError),
    /// The owner's collections could not be listed.
    #[error("listing the collections of {owner}")]
    Hub {
        /// The namespace.
        owner: String,
        /// Why.
        #[source]
        source: HubError,
    },
}

/// The title of `namespace`'s collection, if it fits the Hub's limit.
pub fn namespace_title(namespace: &str) -> Option<String> {
    let title = format!("{NAMESPACE_PREFIX}{namespace}");
    (title.chars().count() <= MAX_TITLE).then_some(title)
}

/// What each managed collection must hold, by title: mirror ids, lower-cased as the Hub compares them.
pub fn wanted(mirrors: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    out.entry(ALL_TITLE.to_owned()).or_default();
    for (source, mirror) in mirrors {
        let mirror = mirror.to_ascii_lowercase();
        out.entry(ALL_TITLE.to_owned()).or_default().insert(mirror.clone());
        if let Some(title) = namespace_title(crate::untrusted::namespace_of(source)) {
            out.entry(title).or_default().insert(mirror);
        }
    }
    out
}

/// Makes the owner's managed collections hold exactly the store's public mirrors under `owner`.
#[tracing::instrument(skip_all, fields(owner = %owner))]
pub async fn sync(
    hub: &HubClient,
    store: &Store,
    owner: &str,
    mode: Mode,
) -> Result<CollectionsSynced, CollectionsError> {
    let mirrors: Vec<(String, String)> = store
        .public_mirrors()
        .await?
        .into_iter()
        .filter(|m| crate::untrusted::namespace_of(&m.mirror).eq_ignore_ascii_case(owner))
        .filter(|m| {
            crate::untrusted::check_repo_id(&m.mirror).is_ok() && crate::untrusted::check_repo_id(&m.source).is_ok()
        })
        .map(|m| (m.source, m.mirror))
        .collect();
    let wanted = wanted(&mirrors);
    // The store's own spelling of each mirror, for recording one gone. The collections compare lower-cased.
    let spelled: BTreeMap<String, String> = mirrors.iter().map(|(_, m)| (m.to_ascii_lowercase(), m.clone())).collect();
    let listed =
        hub.collections_of(owner).await.map_err(|source| CollectionsError::Hub { owner: owner.to_owned(), source })?;
    let mut done = CollectionsSynced::default();
    let mut slugs: BTreeMap<String, CollectionRef> = BTreeMap::new();
    let mut refused_titles = BTreeSet::new();
    for c in listed.into_iter().filter(|c| managed(&c.title)) {
        if !in_namespace(&c, owner) {
            let slug = crate::untrusted::escape_control(&c.slug);
            tracing::warn!(slug = %slug, "the listing of {owner}'s collections showed one of another namespace; ignored");
            continue;
        }
        if !is_ours(store, &c, mode).await? {
            refused_titles.insert(c.title.clone());
            done.refused.push(NotOurs { owner: owner.to_owned(), title: c.title.clone(), slug: c.slug.clone() });
            continue;
        }
        // The Hub cannot hold two collections of one title. If its answer lists two anyway, keep the first.
        slugs.entry(c.title.clone()).or_insert(c);
    }
    for refused in &done.refused {
        tracing::warn!(slug = %refused.slug, "{refused}");
    }
    let titles: BTreeSet<String> =
        wanted.keys().chain(slugs.keys()).filter(|t| !refused_titles.contains(*t)).cloned().collect();
    for title in titles {
        let want = wanted.get(&title).cloned().unwrap_or_default();
        let pass = Pass { hub, store, spelled: &spelled, owner, mode };
        match pass.keep(&title, slugs.get(&title), &want, &mut done).await {
            Ok(()) => {}
            Err(KeepError::NotOurs(refused)) => {
                tracing::warn!(slug = %refused.slug, "{refused}");
                done.refused.push(refused);
            }
            Err(e) => {
                let shown = crate::untrusted::escape_control(&title).into_owned();
                tracing::warn!(collection = %shown, error = %e, "keeping the collection failed; the next pass tries again");
                done.failed.push((shown, e.to_string()));
            }
        }
    }
    Ok(done)
}

/// Whether `title` is one of the names the service keeps collections under.
fn managed(title: &str) -> bool {
    title == ALL_TITLE || title.starts_with(NAMESPACE_PREFIX)
}

/// Whether the collection `c` belongs to `owner`: by the owner its answer names and by its slug.
fn in_namespace(c: &CollectionRef, owner: &str) -> bool {
    c.owner.eq_ignore_ascii_case(owner) && crate::untrusted::namespace_of(&c.slug).eq_ignore_ascii_case(owner)
}

/// Whether the collection `c` is the service's: recorded in the store, or marked. A marked one is then
/// recorded, except in a dry run.
async fn is_ours(store: &Store, c: &CollectionRef, mode: Mode) -> Result<bool, StoreError> {
    if store.owns(OwnedKind::Collection, &c.slug).await? {
        return Ok(true);
    }
    if !c.description.contains(MARKER) && c.description != EARLIER_DESCRIPTION {
        return Ok(false);
    }
    if mode == Mode::Apply {
        tracing::info!(slug = %c.slug, "a collection marked as hubalign's, not in the store; recorded");
        store.record_owned(OwnedKind::Collection, &c.slug).await?;
    }
    Ok(true)
}

/// Why one collection could not be kept this pass.
#[derive(Debug, thiserror::Error)]
enum KeepError {
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    NotOurs(NotOurs),
}

/// What every collection of one pass shares.
struct Pass<'a> {
    hub: &'a HubClient,
    store: &'a Store,
    /// The store's spelling of each mirror, by its lower-cased id.
    spelled: &'a BTreeMap<String, String>,
    owner: &'a str,
    mode: Mode,
}

impl Pass<'_> {
    /// Makes the collection `title` hold `want`. `listed` is the collection, if it exists.
    async fn keep(
        &self,
        title: &str,
        listed: Option<&CollectionRef>,
        want: &BTreeSet<String>,
        done: &mut CollectionsSynced,
    ) -> Result<(), KeepError> {
        let (hub, store) = (self.hub, self.store);
        let mut fresh = false;
        let slug = match listed {
            Some(listed) => listed.slug.clone(),
            // An empty collection is not worth making.
            None if want.is_empty() => return Ok(()),
            None if self.mode == Mode::DryRun => {
                done.planned.push(format!("create the collection {title:?} in {}", self.owner));
                done.created += 1;
                for mirror in want {
                    done.planned.push(format!("add {mirror} to {title:?}"));
                    done.added += 1;
                }
                return Ok(());
            }
            None => match hub.create_collection(self.owner, (title, DESCRIPTION), false).await? {
                CollectionCreated::New(slug) => {
                    store.record_owned(OwnedKind::Collection, &slug).await?;
                    done.created += 1;
                    fresh = true;
                    slug
                }
                // It was made meanwhile, by another replica or with a lost answer. Or it is someone else's,
                // and the listing did not show it. The Hub's 409 names it, and reading it tells which.
                CollectionCreated::Existed(slug) => {
                    let found = hub.collection(&slug).await?;
                    if !in_namespace(&found, self.owner) || !is_ours(store, &found, self.mode).await? {
                        let owner = self.owner.to_owned();
                        return Err(KeepError::NotOurs(NotOurs { owner, title: title.to_owned(), slug }));
                    }
                    slug
                }
            },
        };
        // The listing showed every item of a small collection, so it is not read again.
        let items = match listed.and_then(|l| l.items.clone()) {
            Some(items) => items,
            // Nor is one just made, which holds nothing yet.
            None if fresh => Vec::new(),
            None => hub.collection_items(&slug).await?,
        };
        let held: BTreeSet<String> =
            items.iter().filter(|i| i.kind == "model").map(|i| i.id.to_ascii_lowercase()).collect();
        // Handle each item on its own. One the Hub refuses, such as a mirror deleted by hand, is named and
        // the rest go on.
        for item in items.iter().filter(|i| i.kind == "model" && !want.contains(&i.id.to_ascii_lowercase())) {
            let shown = crate::untrusted::escape_control(&item.id).into_owned();
            if self.mode == Mode::DryRun {
                done.planned.push(format!("remove {shown} from {slug}"));
                done.removed += 1;
                continue;
            }
            match hub.remove_from_collection(&slug, &item.object_id).await {
                Ok(()) => {
                    tracing::info!(collection = %slug, repo.id = %shown, "removed from the collection");
                    done.removed += 1;
                }
                Err(e) => done.failed.push((format!("{slug}: {shown}"), e.to_string())),
            }
        }
        let missing: Vec<&String> = want.iter().filter(|m| !held.contains(*m) && !done.gone.contains(*m)).collect();
        for mirror in missing {
            if self.mode == Mode::DryRun {
                done.planned.push(format!("add {mirror} to {slug}"));
                done.added += 1;
                continue;
            }
            match hub.add_to_collection(&slug, mirror, ITEM_NOTE).await {
                Ok(()) => {
                    tracing::info!(collection = %slug, repo.id = %mirror, "added to the collection");
                    done.added += 1;
                }
                // The Hub says the mirror does not exist. Once its info says so too, the store stops calling
                // it public. So neither the collections nor the dataset list it. The second check spares a
                // mirror the Hub is still creating.
                Err(e) if e.error_code() == Some("RepoNotFound") => self.gone(&slug, mirror, e, done).await,
                Err(e) => done.failed.push((format!("{slug}: {mirror}"), e.to_string())),
            }
        }
        Ok(())
    }

    /// Records `mirror` as no longer public once the Hub's info agrees that it is gone.
    async fn gone(&self, slug: &str, mirror: &String, refused: HubError, done: &mut CollectionsSynced) {
        let own = self.spelled.get(mirror).map_or(mirror.as_str(), String::as_str);
        match self.hub.head_of(crate::hub::repo_ref::RepoRef::model(own)).await {
            Ok(None) => match self.store.hide_mirror(own, GONE).await {
                Ok(()) => {
                    tracing::warn!(repo.id = %own, "the mirror is gone from the Hub; recorded as no longer public");
                    done.gone.insert(mirror.clone());
                }
                Err(e) => done.failed.push((format!("{slug}: {mirror}"), e.to_string())),
            },
            Ok(Some(_)) => done.failed.push((format!("{slug}: {mirror}"), refused.to_string())),
            Err(e) => done.failed.push((format!("{slug}: {mirror}"), e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mirror_goes_in_its_source_namespace_s_collection_and_the_one_for_all() {
        let mirrors = vec![
            ("alice/a".to_owned(), "ops/a-aligned".to_owned()),
            ("alice/b".to_owned(), "ops/B-aligned".to_owned()),
            ("bob/c".to_owned(), "ops/c-aligned".to_owned()),
            (format!("{}/d", "n".repeat(50)), "ops/d-aligned".to_owned()),
        ];
        let w = wanted(&mirrors);
        assert_eq!(w[ALL_TITLE].len(), 4);
        assert_eq!(w["Aligned MLX: alice"], BTreeSet::from(["ops/a-aligned".to_owned(), "ops/b-aligned".to_owned()]));
        assert_eq!(w["Aligned MLX: bob"], BTreeSet::from(["ops/c-aligned".to_owned()]));
        assert_eq!(w.len(), 3, "a namespace too long for a title is only in the one for all: {w:?}");
        assert!(wanted(&[]).contains_key(ALL_TITLE), "the one for all is kept even empty, to be emptied");
    }
}
