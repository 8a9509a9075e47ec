//! One short note on a mirrored source's discussion tab (`serve --note-sources`), linking its public mirror.
//!
//! At most one per source, ever: the store records each note, and before posting the source's own
//! discussions are read for one by this account with the note's title, so a lost store does not post twice.
//! Opting out is closing the note: a namespace that closed any note gets no further one on any of its repos.
//! How many go out per pass is the operator's cap. One source's failure is logged and the others go on.

use std::collections::BTreeMap;

use crate::hub::HubClient;
use crate::store::{Store, StoreError};

/// The note's title, which also finds it again among the source's discussions.
pub const NOTE_TITLE: &str = "An aligned copy of this model for memory-mapping loaders";

/// Who posts the notes and how many a pass may post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotePolicy {
    /// The account the token posts as (its notes are found again by it).
    pub author: String,
    /// Notes a pass posts at most; the rest wait for the next.
    pub max_per_pass: usize,
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotesPosted {
    /// Sources that got their note, by id.
    pub posted: Vec<String>,
    /// Sources whose note was already on the Hub (recorded, not posted again).
    pub found: usize,
    /// Namespaces seen to have closed a note this pass.
    pub declined: Vec<String>,
    /// Sources that failed, with why (the next pass tries again).
    pub failed: Vec<(String, String)>,
}

/// The note's text: the operator's words and two repo ids, each checked for its shape.
pub fn note_text(endpoint: &str, source: &str, mirror: &str) -> String {
    let namespace = crate::gate::namespace_of(source);
    format!(
        "The safetensors of this model are laid out so that memory-mapping loaders copy tensors they could map. \
         An aligned copy, byte-identical tensors in a loader-friendly layout, is published at \
         [{mirror}]({endpoint}/{mirror}).\n\n\
         This is the only note hubalign posts here. Close this discussion and it will post none on any repo of \
         {namespace}."
    )
}

/// Posts the due notes: one per public mirror's source that has none, outside the namespaces that said no.
#[tracing::instrument(skip_all)]
pub async fn post(hub: &HubClient, store: &Store, policy: &NotePolicy) -> Result<NotesPosted, StoreError> {
    let noted = store.noted_sources().await?;
    let mut declined = store.declined_namespaces().await?;
    let due: Vec<(String, String)> = store
        .public_mirrors()
        .await?
        .into_iter()
        .filter(|m| crate::gate::check_repo_id(&m.source).is_ok() && crate::gate::check_repo_id(&m.mirror).is_ok())
        .filter(|m| !noted.contains(&m.source.to_ascii_lowercase()))
        .map(|m| (m.source, m.mirror))
        .collect();
    let mut done = NotesPosted::default();
    // Whether each namespace with something due has closed a note, asked of the Hub once a pass.
    let mut checked: BTreeMap<String, bool> = BTreeMap::new();
    for (source, mirror) in due {
        if done.posted.len() >= policy.max_per_pass {
            break;
        }
        let namespace = crate::gate::namespace_of(&source).to_ascii_lowercase();
        if declined.contains(&namespace) {
            continue;
        }
        if !checked.contains_key(&namespace) {
            let said_no = closed_any(hub, store, &namespace).await?;
            checked.insert(namespace.clone(), said_no);
            if said_no {
                tracing::info!(namespace = %namespace, "a note was closed: no further notes to this namespace");
                declined.insert(namespace.clone());
                done.declined.push(namespace);
                continue;
            }
        }
        match one(hub, store, policy, &source, &mirror).await {
            Ok(Posted::New) => done.posted.push(source),
            Ok(Posted::Found { closed }) => {
                done.found += 1;
                if closed {
                    declined.insert(namespace.clone());
                    done.declined.push(namespace);
                }
            }
            Err(e) => {
                tracing::warn!(repo.id = %source, error = %e, "the note on the source failed; the next pass tries again");
                done.failed.push((source, e));
            }
        }
    }
    Ok(done)
}

enum Posted {
    New,
    Found { closed: bool },
}

/// Whether any of the namespace's open notes has been closed on the Hub since (each one found so is recorded).
/// A note the Hub cannot answer for now counts as open.
async fn closed_any(hub: &HubClient, store: &Store, namespace: &str) -> Result<bool, StoreError> {
    let mut closed = false;
    for note in store.open_notes_in(namespace).await? {
        match hub.discussion_status(&note.source_repo, note.num.max(0) as u64).await {
            Ok(status) if status == "closed" => {
                store.decline_note(&note.source_repo).await?;
                closed = true;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(repo.id = %note.source_repo, error = %e, "reading the note's status failed"),
        }
    }
    Ok(closed)
}

/// The note on `source`: found among its discussions if one is there already, else posted; recorded either way.
async fn one(
    hub: &HubClient,
    store: &Store,
    policy: &NotePolicy,
    source: &str,
    mirror: &str,
) -> Result<Posted, String> {
    let there = hub.discussions_by(source, &policy.author).await.map_err(|e| e.to_string())?;
    if let Some(note) = there.iter().find(|d| d.title == NOTE_TITLE) {
        let num = i64::try_from(note.num).map_err(|e| e.to_string())?;
        store.record_note(source, mirror, num).await.map_err(|e| e.to_string())?;
        let closed = note.status == "closed";
        if closed {
            store.decline_note(source).await.map_err(|e| e.to_string())?;
        }
        return Ok(Posted::Found { closed });
    }
    let text = note_text(hub.endpoint(), source, mirror);
    let num = hub.open_discussion(source, NOTE_TITLE, &text).await.map_err(|e| e.to_string())?;
    let num = i64::try_from(num).map_err(|e| e.to_string())?;
    store.record_note(source, mirror, num).await.map_err(|e| e.to_string())?;
    tracing::info!(repo.id = %source, mirror = %mirror, num, "note posted on the source");
    Ok(Posted::New)
}
