//! Serves file downloads. `resolve` answers git files directly and redirects LFS/Xet ones to storage. The
//! storage bridge serves HTTP ranges.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Shared;
use super::auth::can_download;
use super::error::HubError;
use super::model::Storage;
use super::read::visible_repo;

/// A satisfiable byte range, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// Last byte.
    pub end: u64,
}

/// How to answer a `Range` header for a body of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAnswer {
    /// No (usable) range: 200 with everything.
    Full,
    /// 206 with this range.
    Partial(ByteRange),
    /// 416, `Content-Range: bytes */size`.
    Unsatisfiable,
}

/// Parses `bytes=a-b`, `bytes=a-` and `bytes=-n`. An end past the file is clamped, and a start at or past it
/// is unsatisfiable. Anything else is ignored as RFC 9110 allows: several ranges, other units, garbage.
pub fn parse_range(value: Option<&str>, size: u64) -> RangeAnswer {
    let Some(spec) = value.and_then(|v| v.trim().strip_prefix("bytes=")) else { return RangeAnswer::Full };
    if spec.contains(',') {
        return RangeAnswer::Full;
    }
    let Some((a, b)) = spec.split_once('-') else { return RangeAnswer::Full };
    let (a, b) = (a.trim(), b.trim());
    match (a.parse::<u64>().ok(), b.parse::<u64>().ok()) {
        (None, Some(n)) if a.is_empty() => {
            if n == 0 || size == 0 {
                return RangeAnswer::Unsatisfiable;
            }
            RangeAnswer::Partial(ByteRange { start: size.saturating_sub(n), end: size - 1 })
        }
        (Some(start), end) if b.is_empty() || end.is_some() => {
            if start >= size {
                return RangeAnswer::Unsatisfiable;
            }
            let end = end.unwrap_or(u64::MAX).min(size - 1);
            if end < start { RangeAnswer::Full } else { RangeAnswer::Partial(ByteRange { start, end }) }
        }
        _ => RangeAnswer::Full,
    }
}

fn quoted(v: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{v}\"")).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

fn set(headers: &mut HeaderMap, name: &'static str, value: impl AsRef<str>) {
    if let Ok(v) = HeaderValue::from_str(value.as_ref()) {
        headers.insert(name, v);
    }
}

/// `GET|HEAD /{ns}/{name}/resolve/{rev}/{*path}`.
pub(super) async fn resolve(
    State(sim): State<Shared>,
    kind: crate::kind::RepoKind,
    method: Method,
    headers: HeaderMap,
    Path((ns, name, revision, path)): Path<(String, String, String, String)>,
) -> Result<Response, HubError> {
    let id = format!("{ns}/{name}");
    let caller = sim.accounts.caller(&headers)?;
    let (entry, commit_sha) = {
        let repos = sim.repos_of(kind);
        let repo = visible_repo(&repos, &id, caller)?;
        can_download(repo, caller)?;
        let commit = repo.resolve(&revision).ok_or_else(|| HubError::revision_not_found(&revision))?;
        let entry = commit.files.get(&path).cloned().ok_or_else(|| HubError::entry_not_found(&path, &commit.sha))?;
        (entry, commit.sha.clone())
    };
    let mut out = HeaderMap::new();
    set(&mut out, "x-repo-commit", &commit_sha);
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if entry.storage == Storage::Regular {
        out.insert(header::ETAG, quoted(&entry.git_oid));
        return serve_content(&sim, &method, &headers, &entry.sha256, entry.size, out).await;
    }
    out.insert(header::ETAG, quoted(&entry.git_oid));
    link_headers(&sim, &mut out, &kind.api_path(&id), &commit_sha, &entry.sha256, entry.size, entry.xet_hash());
    // Redirect absolutely to another origin, as the Hub does to its CDN. Clients read the file's metadata
    // from this response and drop their token on the way. The query lets storage echo that metadata on a
    // HEAD. That serves clients that follow the redirect before reading it, such as hf-hub's range reads.
    let tagged = kind.tagged(&id);
    let mut location = format!("{}/_storage/{}?repo={tagged}&commit={commit_sha}", sim.storage_url, entry.sha256);
    if let Some(xet_hash) = entry.xet_hash() {
        location.push_str(&format!("&xet={xet_hash}"));
    }
    set(&mut out, "location", location);
    out.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    Ok((StatusCode::FOUND, out).into_response())
}

/// The headers that describe an LFS/Xet file: its sha256, size, and Xet hash with the token route. The route
/// sits under the repo's API path `api`.
fn link_headers(
    sim: &Shared,
    out: &mut HeaderMap,
    api: &str,
    commit: &str,
    sha256: &str,
    size: u64,
    xet_hash: Option<&str>,
) {
    set(out, "x-repo-commit", commit);
    out.insert("x-linked-etag", quoted(sha256));
    set(out, "x-linked-size", size.to_string());
    if let Some(xet_hash) = xet_hash {
        set(out, "x-xet-hash", xet_hash);
        let route = format!("{api}/xet-read-token/{commit}");
        set(out, "x-xet-refresh-route", &route);
        set(out, "link", format!("<{}{route}>; rel=\"xet-auth\"", sim.base_url));
    }
}

/// Where a storage URL came from: `resolve` puts the repo, commit and Xet hash in its query.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct StorageQuery {
    repo: Option<String>,
    commit: Option<String>,
    xet: Option<String>,
}

/// `GET|HEAD /_storage/{sha256}`: the storage and CDN side, with ranges. A HEAD repeats the file's metadata.
/// A GET does not send `X-Linked-Size`, which clients would take for the length of a ranged body.
pub(super) async fn storage(
    State(sim): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Path(sha256): Path<String>,
    axum::extract::Query(origin): axum::extract::Query<StorageQuery>,
) -> Result<Response, HubError> {
    let size = sim.content_size(&sha256).ok_or_else(|| HubError::not_found(format!("no object {sha256}")))?;
    let mut out = HeaderMap::new();
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    out.insert(header::ETAG, quoted(&sha256));
    if method == Method::HEAD
        && let (Some(repo), Some(commit)) = (&origin.repo, &origin.commit)
    {
        let (kind, id) = crate::kind::RepoKind::untag(repo);
        link_headers(&sim, &mut out, &kind.api_path(id), commit, &sha256, size, origin.xet.as_deref());
    }
    serve_content(&sim, &method, &headers, &sha256, size, out).await
}

async fn serve_content(
    sim: &Shared,
    method: &Method,
    request: &HeaderMap,
    sha256: &str,
    size: u64,
    mut out: HeaderMap,
) -> Result<Response, HubError> {
    let range = request.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, start, len) = match parse_range(range, size) {
        RangeAnswer::Full => (StatusCode::OK, 0, size),
        RangeAnswer::Partial(r) => {
            set(&mut out, "content-range", format!("bytes {}-{}/{size}", r.start, r.end));
            (StatusCode::PARTIAL_CONTENT, sim.faults.range_start_served(r.start), r.end - r.start + 1)
        }
        RangeAnswer::Unsatisfiable => {
            set(&mut out, "content-range", format!("bytes */{size}"));
            let msg = format!("Requested range: {}. Content-Range: bytes */{size}", range.unwrap_or(""));
            let mut response = HubError::bad_request(msg).into_response();
            *response.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            response.headers_mut().extend(out);
            return Ok(response);
        }
    };
    set(&mut out, "content-length", len.to_string());
    if method == Method::HEAD {
        return Ok((status, out).into_response());
    }
    let body: Body = sim.content_stream(sha256, start, len).await.map_err(|e| HubError::not_found(e.to_string()))?;
    Ok((status, out, body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_forms() {
        let p = |v| parse_range(Some(v), 100);
        assert_eq!(p("bytes=0-9"), RangeAnswer::Partial(ByteRange { start: 0, end: 9 }));
        assert_eq!(p("bytes=90-"), RangeAnswer::Partial(ByteRange { start: 90, end: 99 }));
        assert_eq!(p("bytes=-10"), RangeAnswer::Partial(ByteRange { start: 90, end: 99 }));
        assert_eq!(p("bytes=-1000"), RangeAnswer::Partial(ByteRange { start: 0, end: 99 }));
        assert_eq!(p("bytes=50-5000"), RangeAnswer::Partial(ByteRange { start: 50, end: 99 }));
        assert_eq!(p("bytes=100-200"), RangeAnswer::Unsatisfiable);
        assert_eq!(p("bytes=-0"), RangeAnswer::Unsatisfiable);
        assert_eq!(p("bytes=5-1"), RangeAnswer::Full);
        assert_eq!(p("bytes=0-1,5-6"), RangeAnswer::Full);
        assert_eq!(p("items=0-1"), RangeAnswer::Full);
        assert_eq!(parse_range(None, 100), RangeAnswer::Full);
        assert_eq!(parse_range(Some("bytes=0-"), 0), RangeAnswer::Unsatisfiable);
    }
}
