//! Reads a remote shard's header with one range request, or two when the header is longer than the first
//! read.

use super::pacing::Bucket;
use super::{BodyLimit, Fetched, HubClient, HubError};
use crate::safetensors::{HeaderError, header};
use crate::untrusted;

/// Bytes asked for by the first request: most MLX headers fit.
pub const DEFAULT_PROBE_BYTES: u64 = 64 * 1024;

/// What a probe brought back.
#[derive(Debug, Clone)]
pub struct Probed {
    /// The file's first bytes: at least the whole header when it parsed.
    pub prefix: Vec<u8>,
    /// The file's size, from `Content-Range`.
    pub size: u64,
    /// The parsed header, or why it is invalid.
    pub header: Result<header::Header, HeaderError>,
    /// Resolver requests it took (1, or 2 for a long header).
    pub requests: u32,
}

/// Returns the total size from `Content-Range: bytes a-b/TOTAL`, or the length of a plain 200.
fn total_size(fetched: &Fetched) -> Option<u64> {
    if let Some(range) = fetched.headers.get(reqwest::header::CONTENT_RANGE).and_then(|v| v.to_str().ok()) {
        return range.rsplit('/').next().and_then(|t| t.trim().parse().ok());
    }
    fetched.headers.get(reqwest::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok())
}

fn range_header(start: u64, end_inclusive: u64) -> [(&'static str, String); 1] {
    [("range", format!("bytes={start}-{end_inclusive}"))]
}

/// Parses a probed header on tokio's blocking pool, not on the task that asked. A header may be up to
/// 100 MB of JSON, and a crawl parses hundreds a second. On the crawl's own task, parsing held one core
/// while the other sat partly idle; see BENCHMARKS.md. A parse that panics, on a parser bug this header
/// found, fails this probe only and names the URL.
async fn parse_off_executor(
    url: &str,
    prefix: Vec<u8>,
    size: u64,
) -> Result<(Vec<u8>, Result<header::Header, HeaderError>), HubError> {
    tokio::task::spawn_blocking(move || {
        let parsed = header::parse(&prefix, size);
        (prefix, parsed)
    })
    .await
    .map_err(|e| HubError::Malformed { url: url.to_owned(), detail: format!("parsing the header failed: {e}") })
}

impl HubClient {
    /// Builds the resolve URL of a file at a commit, with every part percent-encoded.
    pub fn resolve_url(&self, repo: &str, revision: &str, path: &str) -> String {
        format!(
            "{}/{}/resolve/{}/{}",
            self.endpoint(),
            untrusted::encode_path(repo),
            untrusted::encode_segment(revision),
            untrusted::encode_path(path)
        )
    }

    /// Reads a shard's header with `bytes=0-(probe-1)`, following the redirect to storage. A second, exact
    /// request follows only when the header is longer than what arrived. A server that ignores the range is
    /// read only as far as needed.
    pub async fn probe_header(&self, repo: &str, sha: &str, path: &str, probe_bytes: u64) -> Result<Probed, HubError> {
        let url = self.resolve_url(repo, sha, path);
        let probe_bytes = probe_bytes.max(8);
        let first = self
            .get(Bucket::Resolvers, &url, &range_header(0, probe_bytes - 1), BodyLimit::Prefix(probe_bytes as usize))
            .await?;
        let size = total_size(&first).ok_or_else(|| HubError::Malformed {
            url: url.clone(),
            detail: "no Content-Range or Content-Length on the probe".into(),
        })?;
        let mut requests = 1;
        let (mut prefix, mut parsed) = parse_off_executor(&url, first.body.to_vec(), size).await?;
        if let Err(HeaderError::Incomplete { needed, .. }) = parsed {
            let have = prefix.len() as u64;
            let rest = self
                .get(
                    Bucket::Resolvers,
                    &url,
                    &range_header(have, needed - 1),
                    BodyLimit::Prefix((needed - have) as usize),
                )
                .await?;
            requests += 1;
            if rest.body.len() as u64 != needed - have {
                let detail = format!("asked for {} header bytes, got {}", needed - have, rest.body.len());
                return Err(HubError::Malformed { url, detail });
            }
            prefix.extend_from_slice(&rest.body);
            (prefix, parsed) = parse_off_executor(&url, prefix, size).await?;
        }
        Ok(Probed { prefix, size, header: parsed, requests })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::{HubConfig, retry::RetryPolicy};

    #[test]
    fn resolve_urls_encode_revision_and_segments() {
        let c = HubClient::new(HubConfig { endpoint: "http://h".into(), token: None }, RetryPolicy::default()).unwrap();
        assert_eq!(
            c.resolve_url("a/b", "refs/pr/1", "sub dir/m.safetensors"),
            "http://h/a/b/resolve/refs%2Fpr%2F1/sub%20dir/m.safetensors"
        );
    }
}
