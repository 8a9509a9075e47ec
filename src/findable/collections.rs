//! The operator's Collections of mirrors, made to hold exactly the public mirrors of public sources: one per
//! source namespace ("Aligned MLX: {namespace}") and one for all ("Aligned MLX mirrors").
//!
//! The Hub is read each pass (the collections of the owner, then the items of each managed one the listing
//! may have cut), so nothing is kept here that could drift from it: a lost store, a removed item or a
//! collection deleted by hand is mended by the next pass. A collection is managed when its title is one of
//! those names; in it, a model the store does not list as a public mirror is removed, and any other kind of
//! item (a paper the operator added) is left alone. One collection's or item's failure is logged and the
//! others go on.

use std::collections::{BTreeMap, BTreeSet};

use crate::hub::collections::{CollectionCreated, CollectionRef};
use crate::hub::{HubClient, HubError};
use crate::store::{Store, StoreError};

/// The title of the collection of every mirror.
pub const ALL_TITLE: &str = "Aligned MLX mirrors";
/// The prefix of a source namespace's collection title.
pub const NAMESPACE_PREFIX: &str = "Aligned MLX: ";
/// The Hub's longest title: a namespace too long for it gets no collection of its own (it is in the one
/// for all).
pub const MAX_TITLE: usize = 60;
/// Why a mirror deleted on the Hub is no longer public, as the store records it.
pub const GONE: &str = "the mirror was deleted on the Hub";
/// The note each item carries: the operator's words, none of the source's.
pub const ITEM_NOTE: &str = "Re-laid so memory-mapping loaders copy no tensor; its card names the source.";

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectionsSynced {
    /// Collections created.
    pub created: usize,
    /// Items added.
    pub added: usize,
    /// Items removed.
    pub removed: usize,
    /// Mirrors the Hub no longer has (deleted by hand): recorded as no longer public.
    pub gone: BTreeSet<String>,
    /// Collections or items that failed this pass, with why (the next pass tries again).
    pub failed: Vec<(String, String)>,
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
        if let Some(title) = namespace_title(crate::gate::namespace_of(source)) {
            out.entry(title).or_default().insert(mirror);
        }
    }
    out
}

/// Makes the owner's managed collections hold exactly the store's public mirrors (only those under `owner`).
#[tracing::instrument(skip_all, fields(owner = %owner))]
pub async fn sync(hub: &HubClient, store: &Store, owner: &str) -> Result<CollectionsSynced, CollectionsError> {
    let mirrors: Vec<(String, String)> = store
        .public_mirrors()
        .await?
        .into_iter()
        .filter(|m| crate::gate::namespace_of(&m.mirror).eq_ignore_ascii_case(owner))
        .filter(|m| crate::gate::check_repo_id(&m.mirror).is_ok() && crate::gate::check_repo_id(&m.source).is_ok())
        .map(|m| (m.source, m.mirror))
        .collect();
    let wanted = wanted(&mirrors);
    // The store's own spelling of each mirror, for recording one gone (the collections compare lower-cased).
    let spelled: BTreeMap<String, String> = mirrors.iter().map(|(_, m)| (m.to_ascii_lowercase(), m.clone())).collect();
    let listed =
        hub.collections_of(owner).await.map_err(|source| CollectionsError::Hub { owner: owner.to_owned(), source })?;
    let managed = |title: &str| title == ALL_TITLE || title.starts_with(NAMESPACE_PREFIX);
    let mut slugs: BTreeMap<String, CollectionRef> = BTreeMap::new();
    for c in listed.into_iter().filter(|c| managed(&c.title)) {
        // Two of one title cannot exist on the Hub; the first listed is kept if it answers so.
        slugs.entry(c.title.clone()).or_insert(c);
    }
    let mut done = CollectionsSynced::default();
    let titles: BTreeSet<String> = wanted.keys().chain(slugs.keys()).cloned().collect();
    for title in titles {
        let want = wanted.get(&title).cloned().unwrap_or_default();
        if let Err(e) = keep((hub, store, &spelled), owner, &title, slugs.get(&title), &want, &mut done).await {
            let shown = crate::gate::escape_control(&title).into_owned();
            tracing::warn!(collection = %shown, error = %e, "keeping the collection failed; the next pass tries again");
            done.failed.push((shown, e.to_string()));
        }
    }
    Ok(done)
}

/// Makes the collection `title` (at `slug` if it exists) hold `want`.
async fn keep(
    (hub, store, spelled): (&HubClient, &Store, &BTreeMap<String, String>),
    owner: &str,
    title: &str,
    listed: Option<&CollectionRef>,
    want: &BTreeSet<String>,
    done: &mut CollectionsSynced,
) -> Result<(), HubError> {
    let mut fresh = false;
    let slug = match listed {
        Some(listed) => listed.slug.clone(),
        // An empty collection is not worth making.
        None if want.is_empty() => return Ok(()),
        None => {
            let description = "Copies of MLX models whose safetensors are re-laid so that a memory-mapping \
                               loader maps every tensor without copying it. Kept by hubalign.";
            match hub.create_collection(owner, (title, description), false).await? {
                CollectionCreated::New(slug) => {
                    done.created += 1;
                    fresh = true;
                    slug
                }
                // Made meanwhile (another replica, or an answer lost): the Hub's 409 names it.
                CollectionCreated::Existed(slug) => slug,
            }
        }
    };
    // The listing showed every item of a small collection: it is not read again.
    let items = match listed.and_then(|l| l.items.clone()) {
        Some(items) => items,
        // Nor is one just made, which holds nothing yet.
        None if fresh => Vec::new(),
        None => hub.collection_items(&slug).await?,
    };
    let held: BTreeSet<String> =
        items.iter().filter(|i| i.kind == "model").map(|i| i.id.to_ascii_lowercase()).collect();
    // Each item on its own: one the Hub refuses (a mirror deleted by hand, say) is named and the rest go on.
    for item in items.iter().filter(|i| i.kind == "model" && !want.contains(&i.id.to_ascii_lowercase())) {
        let shown = crate::gate::escape_control(&item.id).into_owned();
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
        match hub.add_to_collection(&slug, mirror, ITEM_NOTE).await {
            Ok(()) => {
                tracing::info!(collection = %slug, repo.id = %mirror, "added to the collection");
                done.added += 1;
            }
            // The Hub says the mirror does not exist. Once its info says so too (not a mirror the Hub is still
            // creating), the store stops calling it public, so neither the collections nor the dataset list it.
            Err(e) if e.error_code() == Some("RepoNotFound") => {
                let own = spelled.get(mirror).map_or(mirror.as_str(), String::as_str);
                match hub.head_of(crate::hub::repo_ref::RepoRef::model(own)).await {
                    Ok(None) => match store.hide_mirror(own, GONE).await {
                        Ok(()) => {
                            tracing::warn!(repo.id = %own, "the mirror is gone from the Hub; recorded as no longer public");
                            done.gone.insert(mirror.clone());
                        }
                        Err(e) => done.failed.push((format!("{slug}: {mirror}"), e.to_string())),
                    },
                    Ok(Some(_)) => done.failed.push((format!("{slug}: {mirror}"), e.to_string())),
                    Err(e) => done.failed.push((format!("{slug}: {mirror}"), e.to_string())),
                }
            }
            Err(e) => done.failed.push((format!("{slug}: {mirror}"), e.to_string())),
        }
    }
    Ok(())
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
