//! Writes to the Hub's API: a JSON or NDJSON body POSTed, its answer read within a bound.

use std::sync::atomic::Ordering;

use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};

use super::pacing::Bucket;
use super::retry::{is_transient_status, jitter_unit};
use super::{BodyLimit, Failure, Fetched, HubClient, HubError, SMALL_CAP, describe, status_error};

/// Whether a failed POST may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// A request that changes nothing twice (a preupload question): retried like a GET.
    Idempotent,
    /// A commit: a lost answer and a second send would make two commits, so it is sent once.
    Once,
}

impl HubClient {
    /// POSTs `body` to `url` on the Hub (the token goes along), paced in the API bucket, and reads the
    /// answer (at most 1 MiB). A non-success status is the Hub's error; only an [`Resend::Idempotent`] request
    /// is sent again after a transient failure.
    pub async fn post(
        &self,
        url: &str,
        content_type: &str,
        body: Vec<u8>,
        resend: Resend,
    ) -> Result<Fetched, HubError> {
        let mut attempts = 0;
        loop {
            self.paced(Bucket::Api, url).await?;
            attempts += 1;
            self.stats.api_requests.fetch_add(1, Ordering::Relaxed);
            let failure = match self.post_once(url, content_type, body.clone()).await {
                Ok(fetched) if fetched.status.is_success() => return Ok(fetched),
                Ok(fetched)
                    if fetched.status == StatusCode::TOO_MANY_REQUESTS || is_transient_status(fetched.status) =>
                {
                    format!("HTTP {}", fetched.status)
                }
                Ok(fetched) => return Err(status_error(url, &fetched)),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Transient(e)) => e,
            };
            self.pacer(Bucket::Api).release();
            if resend == Resend::Once || attempts >= self.retry.max_attempts {
                return Err(HubError::Exhausted { url: url.to_owned(), attempts, last: failure });
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(self.retry.delay(attempts, jitter_unit())).await;
        }
    }

    async fn post_once(&self, url: &str, content_type: &str, body: Vec<u8>) -> Result<Fetched, Failure> {
        let mut req = self.http.post(url).header(CONTENT_TYPE, content_type).body(body);
        req = req.headers(self.auth_headers(url));
        let response = req.send().await.map_err(|e| describe(&e))?;
        let (status, headers) = (response.status(), response.headers().clone());
        let limit = if status.is_success() { BodyLimit::Whole(SMALL_CAP) } else { BodyLimit::Prefix(64 << 10) };
        let body = self.read_body(response, url, limit).await?;
        Ok(Fetched { url: url.to_owned(), status, hub_headers: headers.clone(), headers, body })
    }

    /// The token as an `Authorization` header, for a request to `url` on the Hub (none for another origin).
    pub fn auth_headers(&self, url: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let token = self.config.token.as_ref().filter(|_| super::same_origin(url, &self.config.endpoint));
        if let Some(mut value) = token.and_then(|t| HeaderValue::from_str(&format!("Bearer {}", t.expose())).ok()) {
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        headers
    }
}

impl HubClient {
    /// PUTs the file at `path` (streamed, never held in memory) to a pre-signed storage URL with `headers`;
    /// the Hub's token does not go along to another origin. Sent once: the caller retries the whole upload.
    pub async fn put_file(
        &self,
        url: &str,
        headers: &[(String, String)],
        path: &std::path::Path,
    ) -> Result<u64, HubError> {
        let failed = |detail: String| HubError::Malformed { url: url.to_owned(), detail };
        let file = tokio::fs::File::open(path).await.map_err(|e| failed(format!("{}: {e}", path.display())))?;
        let size = file.metadata().await.map_err(|e| failed(format!("{}: {e}", path.display())))?.len();
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
        let mut req = self.stream_http.put(url).headers(self.auth_headers(url)).body(body);
        req = req.header(reqwest::header::CONTENT_LENGTH, size);
        for (k, v) in headers {
            if let (Ok(k), Ok(v)) = (reqwest::header::HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
                req = req.header(k, v);
            }
        }
        let response = req.send().await.map_err(|e| failed(describe(&e)))?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = self.read_body(response, url, BodyLimit::Prefix(64 << 10)).await.unwrap_or_default();
            let fetched = Fetched { url: url.to_owned(), status, hub_headers: headers.clone(), headers, body };
            return Err(status_error(url, &fetched));
        }
        Ok(size)
    }
}
