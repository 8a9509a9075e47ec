//! One short note on a mirrored source's discussion tab (`serve --note-sources`), linking its public mirror.
//!
//! A source gets at most one note, ever:
//!
//! - The store records each note.
//! - A source is claimed in the store before its note is posted, so two processes never both post.
//! - The post is sent once. A lost answer is not retried into a second discussion.
//! - Before posting, the source's discussions are searched for one by this account with the note's title. So
//!   a lost store does not post twice.
//!
//! A process that dies between its claim and its post leaves the source without a note rather than risk a
//! second.
//!
//! Closing the note opts out: a namespace that closed any note gets no further one on any of its repos.
//! Each pass asks the Hub about [`STATUS_CHECKS`] of a namespace's open notes, those asked about longest ago
//! first. So every note's turn comes. The store may know no note in a namespace: a new namespace, or a lost
//! store. Then the pass first reads the discussions of the first [`SCAN`] of its mirrored sources for one.
//!
//! The operator caps how many sources a pass tries. A source that refuses a note for good is recorded and
//! never tried again: it is gone, or its discussions are disabled. A token the Hub refuses stops the pass.
//! One source's failure is logged and the others go on.

use std::collections::{BTreeMap, BTreeSet};

use crate::hub::{HubClient, HubError};
use crate::store::{Store, StoreError};
use crate::untrusted;

/// The note's title, which also finds it again among the source's discussions.
pub const NOTE_TITLE: &str = "An aligned copy of this model for memory-mapping loaders";
/// How many of a namespace's open notes a pass asks the Hub about, those asked about longest ago first.
pub const STATUS_CHECKS: i64 = 10;
/// How many of a namespace's mirrored sources a pass reads for an earlier note, when the store knows none.
pub const SCAN: usize = 20;

/// Who posts the notes and how many a pass may try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotePolicy {
    /// The account the token posts as. Its notes are found again by this name.
    pub author: String,
    /// The most sources a pass tries, whether posted, found already there, or failed. The rest wait for the
    /// next pass.
    pub max_per_pass: usize,
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotesPosted {
    /// Sources that got their note, by id.
    pub posted: Vec<String>,
    /// Notes already on the Hub: recorded, not posted again.
    pub found: usize,
    /// Sources whose discussions refused the note for good: disabled, or the repo gone. They are recorded and
    /// never tried again, so they cannot take the cap of every pass.
    pub refused: Vec<String>,
    /// Namespaces seen to have closed a note this pass.
    pub declined: Vec<String>,
    /// Sources that failed, with why, for the log and the command's summary. The next pass tries again.
    pub failed: Vec<(String, String)>,
}

/// Why a note could not be posted or recorded.
#[derive(Debug, thiserror::Error)]
pub enum NoteError {
    /// The Hub refused or failed.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The store could not record it.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The Hub answered a discussion number out of range.
    #[error("discussion number {0} out of range")]
    Number(u64),
}

/// The note's text: the operator's words and two repo ids, each checked for its shape.
pub fn note_text(endpoint: &str, source: &str, mirror: &str) -> String {
    let namespace = untrusted::namespace_of(source);
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
    let mut noted = store.noted_sources().await?;
    let mut declined = store.declined_namespaces().await?;
    let mirrored: Vec<(String, String)> = store
        .public_mirrors()
        .await?
        .into_iter()
        .filter(|m| untrusted::check_repo_id(&m.source).is_ok() && untrusted::check_repo_id(&m.mirror).is_ok())
        .map(|m| (m.source, m.mirror))
        .collect();
    let mut by_namespace: BTreeMap<String, Vec<&(String, String)>> = BTreeMap::new();
    for pair in &mirrored {
        by_namespace.entry(untrusted::namespace_of(&pair.0).to_ascii_lowercase()).or_default().push(pair);
    }
    let mut done = NotesPosted::default();
    let mut tried = 0;
    // Whether each namespace with something due has closed a note. The Hub is asked once a pass.
    let mut checked: BTreeMap<String, bool> = BTreeMap::new();
    // Sources whose discussions this pass read without finding this account's note. They are not read again.
    let mut clean: BTreeSet<String> = BTreeSet::new();
    for (source, mirror) in &mirrored {
        if noted.contains(&source.to_ascii_lowercase()) {
            continue; // noted before, or found by its namespace's scan this pass
        }
        if tried >= policy.max_per_pass {
            break;
        }
        let namespace = untrusted::namespace_of(source).to_ascii_lowercase();
        if declined.contains(&namespace) {
            continue;
        }
        if !checked.contains_key(&namespace) {
            let sources = by_namespace.get(&namespace).map(Vec::as_slice).unwrap_or_default();
            let said_no =
                closed_any(hub, store, policy, (&namespace, sources), (&mut done, &mut noted, &mut clean)).await?;
            checked.insert(namespace.clone(), said_no);
            if said_no {
                tracing::info!(namespace = %namespace, "a note was closed: no further notes to this namespace");
                declined.insert(namespace.clone());
                done.declined.push(namespace);
                continue;
            }
        }
        if noted.contains(&source.to_ascii_lowercase()) {
            continue; // found by the namespace's scan just now
        }
        tried += 1;
        let read = clean.contains(&source.to_ascii_lowercase());
        match one(hub, store, policy, (source, mirror), read).await {
            Ok(Posted::New) => done.posted.push(source.clone()),
            Ok(Posted::Refused) => done.refused.push(source.clone()),
            Ok(Posted::Held) => {}
            // The token may not post discussions: a 401, or a 403 that is not the repo's. Every other source
            // would fail alike, so the pass stops here and says why.
            Err(NoteError::Hub(e)) if token_refused(&e) => {
                tracing::warn!(error = %e, "the Hub refuses this token's discussions; no note is posted this pass");
                done.failed.push((source.clone(), e.to_string()));
                break;
            }
            // The Hub's quota on discussions is spent: every other note would wait alike.
            Err(NoteError::Hub(e @ HubError::ActionQuota { .. })) => {
                tracing::warn!(error = %e, "the Hub's quota on discussions is spent; no more notes this pass");
                done.failed.push((source.clone(), e.to_string()));
                break;
            }
            Ok(Posted::Found { closed }) => {
                done.found += 1;
                if closed {
                    declined.insert(namespace.clone());
                    done.declined.push(namespace);
                }
            }
            Err(e) => {
                tracing::warn!(repo.id = %source, error = %e, "the note on the source failed; the next pass tries again");
                done.failed.push((source.clone(), e.to_string()));
            }
        }
    }
    Ok(done)
}

enum Posted {
    New,
    Found {
        closed: bool,
    },
    Refused,
    /// Another process holds the source's claim.
    Held,
}

/// What the store records for a source whose discussions refused the note for good: no discussion number.
pub const REFUSED: i64 = -1;

/// Whether the namespace has closed a note. It asks the Hub about the open notes the store knows, those asked
/// about longest ago first, and records each found closed. If the store knows none, it reads its mirrored
/// sources' discussions for notes of this account, and records each found. A note the Hub cannot answer for
/// now counts as open.
async fn closed_any(
    hub: &HubClient,
    store: &Store,
    policy: &NotePolicy,
    (namespace, sources): (&str, &[&(String, String)]),
    (done, noted, clean): (&mut NotesPosted, &mut BTreeSet<String>, &mut BTreeSet<String>),
) -> Result<bool, StoreError> {
    let open = store.open_notes_in(namespace, STATUS_CHECKS).await?;
    let mut closed = false;
    if open.is_empty() {
        for (source, mirror) in sources.iter().take(SCAN).map(|p| (&p.0, &p.1)) {
            match hub.discussions_by(source, &policy.author).await {
                Ok(there) => {
                    let Some(note) = there.iter().find(|d| d.title == NOTE_TITLE) else {
                        clean.insert(source.to_ascii_lowercase());
                        continue;
                    };
                    let Ok(num) = i64::try_from(note.num) else {
                        tracing::warn!(repo.id = %source, num = note.num, "a discussion number out of range; left alone");
                        continue;
                    };
                    store.record_note(source, mirror, num).await?;
                    noted.insert(source.to_ascii_lowercase());
                    done.found += 1;
                    if note.status == "closed" {
                        store.decline_note(source).await?;
                        closed = true;
                    }
                }
                Err(e) => tracing::warn!(repo.id = %source, error = %e, "reading the source's discussions failed"),
            }
        }
        return Ok(closed);
    }
    for note in open {
        match hub.discussion_status(&note.source_repo, u64::try_from(note.num).unwrap_or(0)).await {
            Ok(status) if status == "closed" => {
                store.decline_note(&note.source_repo).await?;
                closed = true;
            }
            Ok(_) => store.note_checked(&note.source_repo).await?,
            Err(e) => tracing::warn!(repo.id = %note.source_repo, error = %e, "reading the note's status failed"),
        }
    }
    Ok(closed)
}

/// The note on `source`. It is found among the source's discussions if one is there already, else posted.
/// It is recorded either way. `read` says this pass already read the discussions and found none.
async fn one(
    hub: &HubClient,
    store: &Store,
    policy: &NotePolicy,
    (source, mirror): (&str, &str),
    read: bool,
) -> Result<Posted, NoteError> {
    let there = match read {
        true => Vec::new(),
        false => match hub.discussions_by(source, &policy.author).await {
            Ok(there) => there,
            Err(e) if for_good(&e) => return refused(store, (source, mirror), &e).await,
            Err(e) => return Err(e.into()),
        },
    };
    if let Some(note) = there.iter().find(|d| d.title == NOTE_TITLE) {
        store.record_note(source, mirror, i64::try_from(note.num).map_err(|_| NoteError::Number(note.num))?).await?;
        let closed = note.status == "closed";
        if closed {
            store.decline_note(source).await?;
        }
        return Ok(Posted::Found { closed });
    }
    // Claim the source first. Another process may have read the same discussions, such as a replica that took
    // the lease over, or `hubalign findable` beside `serve`. The claim stops it posting a second note.
    if !store.claim_note(source, mirror).await? {
        return Ok(Posted::Held);
    }
    let text = note_text(hub.endpoint(), source, mirror);
    let num = match hub.open_discussion(source, NOTE_TITLE, &text).await {
        Ok(num) => num,
        Err(e) if for_good(&e) => return refused(store, (source, mirror), &e).await,
        Err(e) => {
            store.release_note(source).await?;
            return Err(e.into());
        }
    };
    store.record_note(source, mirror, i64::try_from(num).map_err(|_| NoteError::Number(num))?).await?;
    tracing::info!(repo.id = %source, mirror = %mirror, num, "note posted on the source");
    Ok(Posted::New)
}

/// Whether the Hub's answer refuses a note for good. The repo is gone (404), or its discussions are disabled
/// (a 403 saying so). Asking again each pass would change nothing, and would take the cap from sources that
/// can take a note. Any other refusal may be the token's or the request's, and is not recorded.
fn for_good(e: &HubError) -> bool {
    match e {
        HubError::Status { status, .. } if status.as_u16() == 404 => true,
        HubError::Status { status, message, .. } if status.as_u16() == 403 => {
            let message = message.to_ascii_lowercase();
            message.contains("discussion") && message.contains("disabled")
        }
        _ => false,
    }
}

/// Whether the Hub refuses the token itself: a 401, or a 403 that is not about the repo's discussions.
fn token_refused(e: &HubError) -> bool {
    matches!(e, HubError::Status { status, .. } if matches!(status.as_u16(), 401 | 403)) && !for_good(e)
}

/// Records that `source` takes no note, so it is never asked again.
async fn refused(store: &Store, (source, mirror): (&str, &str), e: &HubError) -> Result<Posted, NoteError> {
    tracing::info!(repo.id = %source, error = %e, "the source takes no note; it is not asked again");
    store.record_note(source, mirror, REFUSED).await?;
    Ok(Posted::Refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> HubError {
        HubError::Status {
            url: "http://hub/api/models/a/b/discussions".into(),
            status: reqwest::StatusCode::from_u16(code).unwrap(),
            code: None,
            message: message.into(),
            request_id: None,
        }
    }

    /// Only a repo gone or its discussions disabled refuse a note for good. If any 400, 403 or 422 did, a
    /// token without the discussions scope would use up every source in one pass.
    #[test]
    fn only_a_repo_gone_or_its_discussions_disabled_refuse_a_note_for_good() {
        assert!(for_good(&status(404, "Repository not found")));
        assert!(for_good(&status(403, "Discussions are disabled for this repo")));
        for (code, message) in
            [(403, "You don't have the rights"), (401, "Invalid token"), (400, "Bad request"), (422, "")]
        {
            assert!(!for_good(&status(code, message)), "{code} {message}");
        }
        assert!(token_refused(&status(403, "You don't have the rights")));
        assert!(token_refused(&status(401, "Invalid token")));
        assert!(!token_refused(&status(403, "Discussions are disabled for this repo")));
        assert!(!token_refused(&status(500, "")));
    }
}
