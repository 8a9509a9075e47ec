//! The Hub client the crawler uses: listing, single-request range probes, with per-bucket pacing and retries.
//!
//! hf-hub 1.x serves the repack worker (downloads and Xet uploads), but not the crawler: its listing sends
//! one `filter` and no `expand`, its retries ignore `RateLimit`/`Retry-After` (so a tight quota fails the
//! crawl), and its range reads send a HEAD first or go through Xet reconstruction, several requests where the
//! audit's budget is one. Those three are written here on reqwest.

pub mod config;
pub mod discussions;
pub mod error;
pub mod listing;
pub mod pacing;
pub mod probe;
pub mod retry;
pub mod tree;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{RequestBuilder, StatusCode};
use serde::Serialize;

pub use self::config::{HubConfig, Token};
pub use self::error::{Access, HubError};
use self::pacing::{Bucket, Pacer, parse_rate_limit, parse_retry_after};
use self::retry::{RetryPolicy, is_transient_error, is_transient_status, jitter_unit};

/// Requests and bytes, counted as they happen.
#[derive(Debug, Default)]
pub struct RequestStats {
    api_requests: AtomicU64,
    resolver_requests: AtomicU64,
    bytes_read: AtomicU64,
    rate_limited: AtomicU64,
    retries: AtomicU64,
}

/// A snapshot of [`RequestStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatsSnapshot {
    /// Requests sent in the `api` bucket.
    pub api_requests: u64,
    /// Requests sent in the `resolvers` bucket.
    pub resolver_requests: u64,
    /// Body bytes received.
    pub bytes_read: u64,
    /// 429 answers received.
    pub rate_limited: u64,
    /// Attempts repeated after a transient failure.
    pub retries: u64,
}

impl RequestStats {
    /// The counts now.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            api_requests: self.api_requests.load(Ordering::Relaxed),
            resolver_requests: self.resolver_requests.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
        }
    }
}

/// A response whose body was read completely (a body shorter than announced is a retry, never a result).
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The final URL, after redirects.
    pub url: String,
    /// The status.
    pub status: StatusCode,
    /// The final response's headers.
    pub headers: HeaderMap,
    /// The Hub's own response's headers (the first of a redirect chain), which carry `RateLimit`.
    pub hub_headers: HeaderMap,
    /// The body, or its first bytes when a cap was given.
    pub body: Bytes,
}

/// Redirects followed at most (the Hub sends one, to its storage).
const MAX_REDIRECTS: usize = 5;

/// At most this many 429s for one request before giving up (each one waits for the window to reset).
const MAX_RATE_LIMITED: u32 = 50;

/// The Hub client.
#[derive(Debug)]
pub struct HubClient {
    http: reqwest::Client,
    config: HubConfig,
    api: Pacer,
    resolvers: Pacer,
    retry: RetryPolicy,
    /// What was sent and received.
    pub stats: RequestStats,
}

impl HubClient {
    /// A client for `config`; HTTP errors are returned, never panicked on.
    pub fn new(config: HubConfig, retry: RetryPolicy) -> Result<HubClient, HubError> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("hubalign/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            // Redirects are followed by hand: the Hub's answer carries the rate-limit headers, the storage's
            // does not, and the token must not travel to another origin.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| HubError::Malformed { url: config.endpoint.clone(), detail: format!("HTTP client: {e}") })?;
        Ok(HubClient {
            http,
            config,
            api: Pacer::default(),
            resolvers: Pacer::default(),
            retry,
            stats: RequestStats::default(),
        })
    }

    /// The endpoint, without a trailing slash.
    pub fn endpoint(&self) -> &str {
        &self.config.endpoint
    }

    fn pacer(&self, bucket: Bucket) -> &Pacer {
        match bucket {
            Bucket::Api => &self.api,
            Bucket::Resolvers => &self.resolvers,
        }
    }

    /// Sends `GET url` (with `extra` headers) until it succeeds or fails for good: paced per bucket, 429s waited
    /// out as the Hub says, transient failures retried with backoff. Reads at most `cap` body bytes.
    pub async fn get(
        &self,
        bucket: Bucket,
        url: &str,
        extra: &[(&'static str, String)],
        cap: Option<usize>,
    ) -> Result<Fetched, HubError> {
        let mut attempts = 0;
        let mut refusals = 0;
        loop {
            loop {
                let wait = self.pacer(bucket).reserve(Instant::now());
                if wait.is_zero() {
                    break;
                }
                tracing::debug!(bucket = ?bucket, wait_ms = wait.as_millis() as u64, "pacing");
                tokio::time::sleep(wait).await;
            }
            attempts += 1;
            match bucket {
                Bucket::Api => self.stats.api_requests.fetch_add(1, Ordering::Relaxed),
                Bucket::Resolvers => self.stats.resolver_requests.fetch_add(1, Ordering::Relaxed),
            };
            let outcome = self.attempt(url, extra, cap).await;
            let failure = match outcome {
                Ok(fetched) => {
                    self.pacer(bucket).observe(&fetched.hub_headers, Instant::now());
                    if fetched.status == StatusCode::TOO_MANY_REQUESTS {
                        self.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
                        refusals += 1;
                        attempts -= 1;
                        let wait = rate_limit_wait(&fetched.hub_headers);
                        tracing::info!(bucket = ?bucket, wait_s = wait.as_secs(), "rate limited; waiting for the window to reset");
                        self.pacer(bucket).refused(wait, Instant::now());
                        if refusals > MAX_RATE_LIMITED {
                            return Err(HubError::Exhausted {
                                url: url.to_owned(),
                                attempts: refusals,
                                last: "429 Too Many Requests".into(),
                            });
                        }
                        continue;
                    }
                    if fetched.status.is_success() {
                        return Ok(fetched);
                    }
                    if !is_transient_status(fetched.status) {
                        return Err(status_error(url, &fetched));
                    }
                    format!("HTTP {}", fetched.status)
                }
                Err(e) => {
                    self.pacer(bucket).release();
                    e
                }
            };
            if attempts >= self.retry.max_attempts {
                return Err(HubError::Exhausted { url: url.to_owned(), attempts, last: failure });
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            let delay = self.retry.delay(attempts, jitter_unit());
            tracing::debug!(url, attempt = attempts, delay_ms = delay.as_millis() as u64, failure = %failure, "retrying");
            tokio::time::sleep(delay).await;
        }
    }

    fn build(&self, url: &str, extra: &[(&'static str, String)]) -> RequestBuilder {
        let mut req = self.http.get(url);
        if let Some(token) = self.config.token.as_ref().filter(|_| same_origin(url, &self.config.endpoint)) {
            req = req.bearer_auth(token.expose());
        }
        for (k, v) in extra {
            if let Ok(v) = HeaderValue::from_str(v) {
                req = req.header(*k, v);
            }
        }
        req
    }

    /// One attempt, following redirects with the same headers (a `Range` stays, the token stays on the Hub).
    /// `Err` carries a transient failure's description; every answer, even an error status, is `Ok` so the
    /// caller can read its headers.
    async fn attempt(
        &self,
        url: &str,
        extra: &[(&'static str, String)],
        cap: Option<usize>,
    ) -> Result<Fetched, String> {
        let mut target = url.to_owned();
        let mut hub_headers = None;
        let mut response = None;
        for _ in 0..=MAX_REDIRECTS {
            let r = self.build(&target, extra).send().await.map_err(|e| describe(&e))?;
            let location = r.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
            match location.filter(|_| r.status().is_redirection()) {
                Some(location) => {
                    hub_headers.get_or_insert_with(|| r.headers().clone());
                    target =
                        r.url().join(&location).map_err(|e| format!("bad redirect to {location}: {e}"))?.to_string();
                }
                None => {
                    response = Some(r);
                    break;
                }
            }
        }
        let Some(mut response) = response else { return Err(format!("more than {MAX_REDIRECTS} redirects")) };
        let status = response.status();
        let headers = response.headers().clone();
        let hub_headers = hub_headers.unwrap_or_else(|| headers.clone());
        let announced = response.content_length();
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    body.extend_from_slice(&chunk);
                    if let Some(cap) = cap.filter(|c| body.len() >= *c) {
                        // Enough: dropping the response closes the connection instead of reading on.
                        body.truncate(cap);
                        self.stats.bytes_read.fetch_add(body.len() as u64, Ordering::Relaxed);
                        return Ok(Fetched { url: target, status, headers, hub_headers, body: body.into() });
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(format!("body cut short after {} bytes: {}", body.len(), describe(&e))),
            }
        }
        self.stats.bytes_read.fetch_add(body.len() as u64, Ordering::Relaxed);
        if let Some(n) = announced
            && n != body.len() as u64
        {
            return Err(format!("body of {} bytes where {n} were announced", body.len()));
        }
        Ok(Fetched { url: target, status, headers, hub_headers, body: body.into() })
    }
}

/// Whether two URLs share scheme, host and port.
fn same_origin(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a), reqwest::Url::parse(b)) {
        (Ok(a), Ok(b)) => {
            a.scheme() == b.scheme()
                && a.host_str() == b.host_str()
                && a.port_or_known_default() == b.port_or_known_default()
        }
        _ => false,
    }
}

fn describe(e: &reqwest::Error) -> String {
    let kind = if is_transient_error(e) { "transient" } else { "network" };
    let mut msg = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

/// How long a 429 says to wait: the window's reset when `RateLimit` says nothing is left, else `Retry-After`,
/// else a second.
fn rate_limit_wait(headers: &HeaderMap) -> Duration {
    let seconds = match parse_rate_limit(headers) {
        Some(l) if l.remaining == 0 => Some(l.reset_seconds),
        _ => parse_retry_after(headers),
    };
    Duration::from_secs(seconds.unwrap_or(1).max(1))
}

fn status_error(url: &str, fetched: &Fetched) -> HubError {
    let header = |k: &str| fetched.headers.get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body_message = serde_json::from_slice::<serde_json::Value>(&fetched.body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned));
    HubError::Status {
        url: url.to_owned(),
        status: fetched.status,
        code: header("x-error-code"),
        message: header("x-error-message").or(body_message).unwrap_or_default(),
        request_id: header("x-request-id"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        assert!(same_origin("http://127.0.0.1:80/a", "http://127.0.0.1/b"));
        assert!(!same_origin("http://127.0.0.1:8080/a", "http://127.0.0.1:8081/a"), "storage on another port");
        assert!(!same_origin("https://huggingface.co/x", "https://cdn-lfs.hf.co/x"));
        assert!(!same_origin("not a url", "http://h"));
    }

    #[test]
    fn waits_for_429s() {
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_static("\"api\";r=0;t=7"));
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(rate_limit_wait(&h), Duration::from_secs(7), "the window's reset when nothing is left");
        h.insert("ratelimit", HeaderValue::from_static("\"api\";r=5;t=7"));
        assert_eq!(rate_limit_wait(&h), Duration::from_secs(3));
        assert_eq!(rate_limit_wait(&HeaderMap::new()), Duration::from_secs(1));
    }
}
