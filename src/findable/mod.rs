//! Mirrors people can find: each public mirror in the operator's Collections (one per source namespace and
//! one for all), kept in step with the store after each crawl, and, if the operator enables it, one short
//! note on the source's discussion tab that its owner can close to hear no more.
//!
//! What goes in is the store's public mirrors of public sources (`Store::public_mirrors`, the dataset's rule):
//! a mirror made private, or removed, leaves every collection at the next pass. Names, titles and texts are
//! the operator's: nothing from a source is written but its repo id, checked for its shape.

pub mod collections;
pub mod notes;

/// What the pass after a crawl keeps findable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindablePolicy {
    /// The namespace the collections live in (the mirrors').
    pub owner: String,
    /// Whether to keep the collections.
    pub collections: bool,
    /// The notes on sources, if the operator enabled them.
    pub notes: Option<notes::NotePolicy>,
}
