//! Passes one file's bytes from the Hub to its writer, in order. A file comes over one connection from a
//! given byte on. A large file comes in fixed-size ranges over several connections at once, because a CDN
//! limits each connection's rate. The answers are passed on in file order, because the file's hash is one
//! chain that needs its bytes in order.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use reqwest::StatusCode;

use crate::hub::pacing::Bucket;
use crate::hub::tree::TreeFile;
use crate::hub::{HubClient, describe};
use crate::repack::error::RepackError;

/// Bytes one ranged request asks for when a file comes over several connections. A file then holds about
/// `connections × SEGMENT` in flight, plus the writer's queue of [`SLICE`]-sized pieces.
pub(crate) const SEGMENT: u64 = 4 << 20;

/// Pieces a segment is handed to the writer in, so that the writer's queue holds little.
const SLICE: usize = 256 << 10;

/// Files smaller than this come over one connection: a few ranges would not pay for their requests.
pub(crate) const SEGMENTED_FROM: u64 = 4 * SEGMENT;

/// What one request for the rest of a file gave the writer.
pub(crate) struct Sent {
    /// Bytes that came over the wire.
    pub(crate) received: u64,
    /// Bytes passed on to the writer. A server that ignored the range resent some the writer already had.
    pub(crate) accepted: u64,
    /// How it ended.
    pub(crate) end: End,
}

/// How a request for the rest of a file ended.
pub(crate) enum End {
    /// Every byte the tree lists has reached the writer.
    Complete,
    /// The body stopped early, or the answer could not be used.
    /// Asking again from where the writer stands may succeed.
    Cut(String),
    /// The request failed, or the server sent more than the tree lists. This attempt at the file is over.
    Refused(RepackError),
}

/// Asks for the file from byte `have` on and passes what arrives to the writer, in order. A server that
/// ignores the range sends the whole file: the bytes the writer already has are skipped. An answer for
/// another range is not used. Every byte still goes through the hash the tree promises, so a range that
/// brings other bytes than the file's fails that check.
pub(crate) async fn send_rest(
    hub: &HubClient,
    url: &str,
    f: &TreeFile,
    have: u64,
    tx: &tokio::sync::mpsc::Sender<Bytes>,
) -> Sent {
    let mut sent = Sent { received: 0, accepted: 0, end: End::Complete };
    let (mut response, whole) = match open_at(hub, url, f, have, None).await {
        Ok(answer) => answer,
        Err(end) => {
            sent.end = end;
            return sent;
        }
    };
    let mut skip = if whole { have } else { 0 };
    let expected = f.size - have;
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                sent.end = End::Cut(format!("{}: body cut short: {}", f.path, describe(&e)));
                return sent;
            }
        };
        sent.received = sent.received.saturating_add(chunk.len() as u64);
        let skipped = usize::try_from(skip).unwrap_or(usize::MAX).min(chunk.len());
        skip -= skipped as u64;
        let chunk = chunk.slice(skipped..);
        if chunk.is_empty() {
            continue;
        }
        if sent.accepted.saturating_add(chunk.len() as u64) > expected {
            let why = format!("{}: more bytes than the {} the tree lists", f.path, f.size);
            sent.end = End::Refused(RepackError::transient(why));
            return sent;
        }
        sent.accepted += chunk.len() as u64;
        if tx.send(chunk).await.is_err() {
            // The writer stopped; its own error says why.
            sent.end = End::Refused(RepackError::transient(format!("{}: the writer stopped", f.path)));
            return sent;
        }
    }
    if sent.accepted < expected {
        sent.end = End::Cut(format!("{}: {} of {} bytes arrived", f.path, have + sent.accepted, f.size));
    }
    sent
}

/// Asks for the file from byte `start`, up to `last` if given. Returns the answer's body, and whether it is
/// the whole file: a `200` from a server that ignores ranges. A `206` must start at `start`. A `206` for
/// another range returns an `End`, as a failed request does.
async fn open_at(
    hub: &HubClient,
    url: &str,
    f: &TreeFile,
    start: u64,
    last: Option<u64>,
) -> Result<(reqwest::Response, bool), End> {
    let range = [("range", last.map_or_else(|| format!("bytes={start}-"), |last| format!("bytes={start}-{last}")))];
    let headers: &[(&'static str, String)] = if start > 0 || last.is_some() { &range } else { &[] };
    let opened =
        hub.open(Bucket::Resolvers, url, headers).await.map_err(|e| End::Refused(RepackError::hub(&f.path, e)))?;
    match opened.status {
        StatusCode::PARTIAL_CONTENT if content_range_start(&opened) == Some(start) => Ok((opened.response, false)),
        StatusCode::PARTIAL_CONTENT => {
            Err(End::Cut(format!("{}: a range answer that does not start at byte {start}", f.path)))
        }
        _ => Ok((opened.response, true)),
    }
}

fn content_range_start(opened: &crate::hub::Opened) -> Option<u64> {
    let v = opened.response.headers().get(reqwest::header::CONTENT_RANGE)?.to_str().ok()?;
    v.strip_prefix("bytes ")?.split('-').next()?.trim().parse().ok()
}

/// Asks for the file from byte `have` on in [`SEGMENT`]-byte ranges, `connections` at a time.
/// Passes each answer on in file order. The first range that does not arrive whole ends the call.
/// Every byte before its gap is passed on, its own first bytes too, and the caller resumes from there.
/// Ranges still in flight are then dropped, and their bytes count as received.
pub(crate) async fn send_segments(
    hub: &HubClient,
    url: &str,
    f: &TreeFile,
    have: u64,
    connections: usize,
    tx: &tokio::sync::mpsc::Sender<Bytes>,
) -> Sent {
    let received = AtomicU64::new(0);
    let mut sent = Sent { received: 0, accepted: 0, end: End::Complete };
    let starts = std::iter::successors(Some(have), |s| s.checked_add(SEGMENT)).take_while(|s| *s < f.size);
    let mut segments = futures_util::stream::iter(starts.map(|start| {
        let end = start.saturating_add(SEGMENT).min(f.size);
        fetch_segment(hub, url, f, start..end, &received)
    }))
    .buffered(connections.max(1));
    while let Some((bytes, end)) = segments.next().await {
        for at in (0..bytes.len()).step_by(SLICE) {
            let piece = bytes.slice(at..(at + SLICE).min(bytes.len()));
            sent.accepted += piece.len() as u64;
            if tx.send(piece).await.is_err() {
                sent.end = End::Refused(RepackError::transient(format!("{}: the writer stopped", f.path)));
                break;
            }
        }
        if let Some(end) = end {
            sent.end = end;
            break;
        }
        if matches!(sent.end, End::Refused(_)) {
            break;
        }
    }
    drop(segments);
    sent.received = received.into_inner();
    sent
}

/// Fetches one range of the file, whole or up to where it stopped, with how it ended.
/// Adds the bytes that come over the wire to `received` as they come.
async fn fetch_segment(
    hub: &HubClient,
    url: &str,
    f: &TreeFile,
    range: std::ops::Range<u64>,
    received: &AtomicU64,
) -> (Bytes, Option<End>) {
    let (start, last) = (range.start, range.end - 1);
    let mut response = match open_at(hub, url, f, start, Some(last)).await {
        Ok((response, false)) => response,
        // The whole file is not the range asked for: ask again.
        Ok((_, true)) => {
            let why = format!("{}: a range answer that does not start at byte {start}", f.path);
            return (Bytes::new(), Some(End::Cut(why)));
        }
        Err(end) => return (Bytes::new(), Some(end)),
    };
    let want = usize::try_from(range.end - start).unwrap_or(usize::MAX);
    let mut buf = BytesMut::with_capacity(want);
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                received.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                if buf.len().saturating_add(chunk.len()) > want {
                    let why = format!("{}: more bytes than the range {start}-{last} asked for", f.path);
                    return (Bytes::new(), Some(End::Refused(RepackError::transient(why))));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) if buf.len() == want => return (buf.freeze(), None),
            Ok(None) => {
                let why = format!("{}: {} of the {want} bytes from byte {start} arrived", f.path, buf.len());
                return (buf.freeze(), Some(End::Cut(why)));
            }
            Err(e) => {
                let why = format!("{}: body cut short: {}", f.path, describe(&e));
                return (buf.freeze(), Some(End::Cut(why)));
            }
        }
    }
}
