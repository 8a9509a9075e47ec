//! Makes mirrors findable. Each public mirror goes into the operator's Collections: one per source
//! namespace, and one for all. A pass after each crawl keeps them in step with the store. If the operator
//! enables it, the source's discussion tab also gets one short note. Its owner can close the note to hear no
//! more.
//!
//! What goes in is the store's public mirrors of public sources, by the dataset's rule
//! (`Store::public_mirrors`). A mirror made private, or removed, leaves every collection at the next pass.
//! Names, titles and texts are the operator's. Nothing from a source is written but its repo id, checked for
//! its shape.

pub mod collections;
pub mod notes;

/// What the pass after a crawl keeps findable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindablePolicy {
    /// The namespace the collections live in, which is the mirrors' namespace.
    pub owner: String,
    /// Whether to keep the collections.
    pub collections: bool,
    /// The notes on sources, if the operator enabled them.
    pub notes: Option<notes::NotePolicy>,
}
