//! The Hub's Collections API, as far as keeping the mirrors' collections needs it; hf-hub 1.0 has none. It
//! lists a namespace's collections and one collection's items, creates a collection, and adds and removes a
//! model.
//!
//! Slugs and item ids come from the Hub and go back into URLs: each is checked for its shape before use.

use serde::Deserialize;

use super::pacing::Bucket;
use super::{BodyLimit, HubClient, HubError, INFO_CAP};
use crate::untrusted;

/// Items a listing shows of each collection: a collection listed with fewer shows them all.
pub const LISTED_ITEMS: usize = 4;

/// A collection as listed: its slug, owner, title and description. Its items come too when the listing shows
/// them all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionRef {
    /// `namespace/title-words-id`.
    pub slug: String,
    /// The namespace that owns it, as the answer names it.
    pub owner: String,
    /// Its title.
    pub title: String,
    /// Its description (empty when it has none).
    pub description: String,
    /// Every item, when the listing showed fewer than [`LISTED_ITEMS`] and so all of them. `None` when the
    /// listing may have cut them, and the collection must be read.
    pub items: Option<Vec<CollectionItem>>,
}

/// One item of a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionItem {
    /// The item's own id in the collection, which removing it names.
    pub object_id: String,
    /// The repo (`namespace/name`) or paper it shows.
    pub id: String,
    /// `model`, `dataset`, `space`, `paper`, `collection`.
    pub kind: String,
}

#[derive(Deserialize)]
struct Listed {
    slug: String,
    #[serde(default)]
    owner: Owner,
    #[serde(default)]
    title: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    items: Vec<Item>,
}

/// The owner object of a collection: only its name is read.
#[derive(Deserialize, Default)]
struct Owner {
    #[serde(default)]
    name: String,
}

/// What creating a collection found: its slug either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CollectionCreated {
    /// Made now.
    New(String),
    /// One of that title exists in the namespace (the Hub's 409, which names it).
    Existed(String),
}

/// An answer that names a collection: a creation's, or its 409's.
#[derive(Deserialize)]
struct Slugged {
    slug: String,
}

#[derive(Deserialize)]
struct Item {
    #[serde(rename = "_id")]
    object_id: String,
    id: String,
    #[serde(rename = "type")]
    kind: String,
}

/// Items with their ids checked, as read from `url`.
fn checked(url: &str, items: Vec<Item>) -> Result<Vec<CollectionItem>, HubError> {
    items
        .into_iter()
        .map(|i| {
            if !check_object_id(&i.object_id) {
                return Err(malformed(url, format!("not an item id: {}", untrusted::quote(&i.object_id))));
            }
            Ok(CollectionItem { object_id: i.object_id, id: i.id, kind: i.kind })
        })
        .collect()
}

fn malformed(url: &str, detail: impl Into<String>) -> HubError {
    HubError::Malformed { url: url.to_owned(), detail: detail.into() }
}

/// Whether `slug` has the Hub's shape: a valid namespace, `/`, then words of letters, digits, `_` and `.`
/// joined by `-`, ending in the collection's hex id. Nothing passes that a URL parser would resolve (`.`,
/// `..`), or that would start another path segment or a query.
fn check_slug(slug: &str) -> bool {
    slug.split_once('/').is_some_and(|(ns, rest)| {
        untrusted::check_namespace(ns).is_ok()
            && rest.len() <= 200
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && !rest.starts_with('.')
            && !rest.contains("..")
            && rest.rsplit('-').next().is_some_and(check_object_id)
    })
}

/// Whether `id` looks like an object id (hex, at most 64 digits).
fn check_object_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

impl HubClient {
    fn collections_url(&self) -> String {
        format!("{}/api/collections", self.endpoint())
    }

    /// Returns every collection of `owner` that this token can see, following the listing's pages.
    pub async fn collections_of(&self, owner: &str) -> Result<Vec<CollectionRef>, HubError> {
        let first = format!("{}?owner={}&limit=100", self.collections_url(), untrusted::encode_segment(owner));
        let mut pages = super::pages::Pagination::new(self.endpoint(), &first);
        let mut url = first;
        let mut out = Vec::new();
        loop {
            let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(INFO_CAP)).await?;
            let listed: Vec<Listed> =
                serde_json::from_slice(&fetched.body).map_err(|e| malformed(&url, format!("collections: {e}")))?;
            for c in listed {
                // One odd entry is not the others' problem: leave it out, and name it.
                if !check_slug(&c.slug) {
                    tracing::warn!(slug = %untrusted::quote(&c.slug), "the Hub listed a collection whose slug is not one; left out");
                    continue;
                }
                // Items that fail their check are read again with the collection, where a failure affects that
                // collection alone.
                let items = (c.items.len() < LISTED_ITEMS).then(|| checked(&url, c.items).ok()).flatten();
                let description = c.description.unwrap_or_default();
                out.push(CollectionRef { slug: c.slug, owner: c.owner.name, title: c.title, description, items });
            }
            match pages.next(&url, &fetched.headers)? {
                Some(next) => url = next,
                None => return Ok(out),
            }
        }
    }

    /// Reads the collection `slug`, with every item this token can see.
    pub async fn collection(&self, slug: &str) -> Result<CollectionRef, HubError> {
        let url = self.collection_url(slug)?;
        let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(INFO_CAP)).await?;
        let full: Listed =
            serde_json::from_slice(&fetched.body).map_err(|e| malformed(&url, format!("collection: {e}")))?;
        let items = checked(&url, full.items)?;
        let description = full.description.unwrap_or_default();
        Ok(CollectionRef {
            slug: full.slug,
            owner: full.owner.name,
            title: full.title,
            description,
            items: Some(items),
        })
    }

    /// Returns every item of the collection `slug` that this token can see.
    pub async fn collection_items(&self, slug: &str) -> Result<Vec<CollectionItem>, HubError> {
        Ok(self.collection(slug).await?.items.unwrap_or_default())
    }

    /// Creates a collection `title` in `namespace`, public or private. If one of that title exists already,
    /// the Hub answers 409 with its `slug` in the body, where huggingface_hub's `create_collection` reads it.
    pub async fn create_collection(
        &self,
        namespace: &str,
        (title, description): (&str, &str),
        private: bool,
    ) -> Result<CollectionCreated, HubError> {
        let url = self.collections_url();
        let body = serde_json::json!({
            "title": title, "namespace": namespace, "description": description, "private": private,
        });
        let checked_slug = |body: &[u8]| -> Result<String, HubError> {
            let made: Slugged =
                serde_json::from_slice(body).map_err(|e| malformed(&url, format!("collection: {e}")))?;
            match check_slug(&made.slug) {
                true => Ok(made.slug),
                false => Err(malformed(&url, format!("not a collection slug: {}", untrusted::quote(&made.slug)))),
            }
        };
        let conflict = reqwest::StatusCode::CONFLICT;
        let fetched = self.post_answering(&url, "application/json", body.to_string().into_bytes(), conflict).await?;
        let slug = checked_slug(&fetched.body)?;
        Ok(if fetched.status == conflict { CollectionCreated::Existed(slug) } else { CollectionCreated::New(slug) })
    }

    /// Adds the model `repo` to the collection `slug` with `note`; one already there is not an error.
    pub async fn add_to_collection(&self, slug: &str, repo: &str, note: &str) -> Result<(), HubError> {
        untrusted::check_repo_id(repo).map_err(|e| malformed(repo, e.to_string()))?;
        let url = format!("{}/items", self.collection_url(slug)?);
        let body = serde_json::json!({ "item": { "type": "model", "id": repo }, "note": note });
        match self.post(&url, "application/json", body.to_string().into_bytes()).await {
            Ok(_) | Err(HubError::Status { status: reqwest::StatusCode::CONFLICT, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Removes the item `object_id` from the collection `slug`; one already gone is not an error.
    pub async fn remove_from_collection(&self, slug: &str, object_id: &str) -> Result<(), HubError> {
        if !check_object_id(object_id) {
            return Err(malformed(slug, format!("not an item id: {}", untrusted::quote(object_id))));
        }
        let url = format!("{}/items/{object_id}", self.collection_url(slug)?);
        self.delete_unless_gone(&url).await
    }

    /// Deletes the collection `slug`; one already gone is not an error.
    pub async fn delete_collection(&self, slug: &str) -> Result<(), HubError> {
        self.delete_unless_gone(&self.collection_url(slug)?).await
    }

    fn collection_url(&self, slug: &str) -> Result<String, HubError> {
        if !check_slug(slug) {
            return Err(malformed(slug, format!("not a collection slug: {}", untrusted::quote(slug))));
        }
        Ok(format!("{}/{}", self.collections_url(), untrusted::encode_path(slug)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_and_item_ids_from_the_hub_are_checked_before_they_go_into_a_url() {
        assert!(check_slug("hubalign/aligned-mlx-mlx-community-6000000000000000000000001"));
        for bad in [
            "",
            "ns",
            "ns/",
            "ns/.",
            "ns/..",
            "ns/..-6000000000000000000000001",
            "../x/y",
            "ns/a/b",
            "ns/a?b",
            "ns/a%2F..",
            "ns/a b",
            "ns/\u{1b}[31m",
            "ns/words-without-an-id",
        ] {
            assert!(!check_slug(bad), "{bad:?}");
        }
        assert!(check_object_id("6000000000000000000000001"));
        for bad in ["", "../x", "zz", &"a".repeat(65)] {
            assert!(!check_object_id(bad), "{bad:?}");
        }
    }
}
