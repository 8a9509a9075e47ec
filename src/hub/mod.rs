//! The Hub client. It lists repos, probes ranges in single requests, and reads trees, repo info and
//! downloads. It also speaks the write protocol (`commit`): preupload, the Xet write token, and the NDJSON
//! commit, to `main` or as a pull request. Requests are paced per bucket and retried. A cap bounds every
//! body and every wait. Actions pause while the Hub's quota on them is spent (`action_pause`). Requests and
//! answers are typed here; nothing outside this module builds these URLs or reads these answers.
//!
//! Requests are sent as `huggingface_hub` sends them; `docs/HUB_REQUESTS.md` lists where they differ, and
//! why. hf-hub 1.x serves repo deletion, wrapped in `repos`. hf-xet serves the CAS upload itself
//! (`repack::upload`, with the token from `commit`). Reads go through here, because hf-hub's fall short.
//! Its listing sends one `filter` and no `expand`. Its retries ignore `RateLimit`/`Retry-After`, so a tight
//! quota fails the crawl. Its range reads send a HEAD first or go through Xet reconstruction, several
//! requests where the audit's budget is one. Its snapshot download lists the tree again and writes wherever
//! that second listing says. The Hub is not trusted: see `SECURITY.md`.

pub(crate) mod action_pause;
pub mod collections;
pub mod commit;
pub mod config;
pub(crate) mod discussions;
pub(crate) mod error;
pub mod identity;
pub(crate) mod info;
pub(crate) mod latency;
pub mod listing;
pub mod pacing;
pub mod pages;
pub(crate) mod post;
pub mod probe;
pub mod repo_ref;
pub mod repos;
pub mod retry;
pub(crate) mod tree;
pub mod webhooks;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{RequestBuilder, StatusCode};
use serde::Serialize;

pub use self::config::{HubConfig, Token};
pub use self::error::{Access, HubError};
use self::pacing::{Bucket, Pacer, parse_rate_limit, parse_retry_after};
use self::retry::{RetryPolicy, is_transient_error, is_transient_status, jitter_unit};
use crate::time::unix_seconds_after;
use crate::untrusted;

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

impl StatsSnapshot {
    /// Returns what was counted after `before`, an earlier snapshot of the same counters. This gives one
    /// run's share of a client that serves many runs.
    pub fn since(&self, before: &StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            api_requests: self.api_requests.saturating_sub(before.api_requests),
            resolver_requests: self.resolver_requests.saturating_sub(before.resolver_requests),
            bytes_read: self.bytes_read.saturating_sub(before.bytes_read),
            rate_limited: self.rate_limited.saturating_sub(before.rate_limited),
            retries: self.retries.saturating_sub(before.retries),
        }
    }
}

impl RequestStats {
    /// Returns the counts now.
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

/// A response whose body was read completely. A body shorter than announced is retried, never returned.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The final URL, after redirects.
    pub url: String,
    /// The status.
    pub status: StatusCode,
    /// The final response's headers.
    pub headers: HeaderMap,
    /// The headers of the Hub's own response, the first of a redirect chain. They carry `RateLimit`.
    pub hub_headers: HeaderMap,
    /// The body, or its first bytes for [`BodyLimit::Prefix`].
    pub body: Bytes,
}

/// A successful response whose body the caller streams (a download).
#[derive(Debug)]
pub struct Opened {
    /// The final URL, after redirects.
    pub url: String,
    /// The status (200 or 206).
    pub status: StatusCode,
    /// The Hub's own response's headers (the first of a redirect chain).
    pub hub_headers: HeaderMap,
    /// The final response, body unread.
    pub response: reqwest::Response,
}

/// How much of a body to read: nothing from the network is read without a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLimit {
    /// The first bytes are enough (a header probe); the connection is dropped after them.
    Prefix(usize),
    /// The whole body, which must not be longer: a longer one fails with [`HubError::TooLarge`].
    Whole(usize),
}

/// Largest listing page read. A full page of 1,000 repos with their file names is a few MB.
pub const LISTING_PAGE_CAP: usize = 64 << 20;
/// Largest tree page read.
pub const TREE_PAGE_CAP: usize = 16 << 20;
/// Largest repo info or discussion answer read.
pub const INFO_CAP: usize = 8 << 20;
/// Largest token or account answer read.
pub const SMALL_CAP: usize = 1 << 20;
/// Largest error body read (for its message).
const ERROR_BODY_CAP: usize = 64 << 10;

/// Redirects followed at most (the Hub sends one, to its storage).
const MAX_REDIRECTS: usize = 5;

/// At most this many 429s for one request before giving up (each one waits for the window to reset).
const MAX_RATE_LIMITED: u32 = 50;

/// The longest wait the Hub may ask for (`Retry-After`, a `RateLimit` reset) unless the caller sets its
/// own: a little more than the Hub's five-minute windows.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(360);

/// The first wait after a 429 from the CDN's edge: one that names no wait and is not the Hub's quota on
/// actions. The wait doubles with each such refusal of the same request, within the longest wait allowed.
pub const DEFAULT_EDGE_WAIT: Duration = Duration::from_secs(30);

/// Sends hubalign's requests to the Hub's API and its resolvers.
/// It paces them under the Hub's quotas, retries what may be retried, and counts requests and bytes read.
#[derive(Debug)]
pub struct HubClient {
    http: reqwest::Client,
    /// For downloads: it limits each wait for the next bytes, not the whole transfer.
    stream_http: reqwest::Client,
    config: HubConfig,
    api: Pacer,
    resolvers: Pacer,
    retry: RetryPolicy,
    max_wait: Duration,
    edge_wait: Duration,
    /// Until when the Hub's quota on actions pauses this client's actions.
    action_pause: action_pause::ActionPause,
    /// What was sent and received.
    pub stats: RequestStats,
    /// hf-hub's client, for the requests it serves well (see `repos`). It is made at first use.
    hf: std::sync::OnceLock<hf_hub::HFClient>,
}

/// Why one attempt failed: worth another try, or not.
enum Failure {
    Transient(String),
    Fatal(HubError),
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Transient(s)
    }
}

impl HubClient {
    /// Builds a client for `config`. It returns HTTP errors and never panics on them.
    pub fn new(config: HubConfig, retry: RetryPolicy) -> Result<HubClient, HubError> {
        let builder = || {
            reqwest::Client::builder()
                .user_agent(concat!("hubalign/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(Duration::from_secs(10))
                // Follow redirects by hand. The Hub's answer carries the rate-limit headers and the storage's
                // does not. The token must also not travel to another origin.
                .redirect(reqwest::redirect::Policy::none())
        };
        let client_error = |e: reqwest::Error| HubError::Malformed {
            url: config.endpoint.clone(),
            detail: format!("HTTP client: {e}"),
        };
        let http = builder().timeout(Duration::from_secs(120)).build().map_err(client_error)?;
        let stream_http = builder().read_timeout(Duration::from_secs(60)).build().map_err(client_error)?;
        Ok(HubClient {
            http,
            stream_http,
            config,
            api: Pacer::default(),
            resolvers: Pacer::default(),
            retry,
            max_wait: DEFAULT_MAX_WAIT,
            edge_wait: DEFAULT_EDGE_WAIT,
            action_pause: action_pause::ActionPause::default(),
            stats: RequestStats::default(),
            hf: std::sync::OnceLock::new(),
        })
    }

    /// Sets the longest wait the Hub may ask for before a request fails with [`HubError::WaitTooLong`].
    pub fn with_max_wait(mut self, max_wait: Duration) -> HubClient {
        self.max_wait = max_wait;
        self
    }

    /// Sets the first wait after a 429 at the edge, which names no wait ([`DEFAULT_EDGE_WAIT`] unless set).
    pub fn with_edge_wait(mut self, edge_wait: Duration) -> HubClient {
        self.edge_wait = edge_wait;
        self
    }

    /// Returns until when the Hub's hourly quota on actions pauses this client's actions, if it does now.
    /// Actions are commits, repo creations and discussions.
    pub fn actions_paused_until(&self) -> Option<std::time::SystemTime> {
        self.action_pause.until(std::time::SystemTime::now())
    }

    /// Builds a model's API URL: `{endpoint}/api/models/{repo}`, then `/{rest}` unless it is empty.
    pub(crate) fn model_api(&self, repo: &str, rest: &str) -> String {
        self.repo_api(repo_ref::RepoRef::model(repo), rest)
    }

    /// Builds `{endpoint}/api/{models|datasets}/{id}`, then `/{rest}` unless it is empty. This is the one
    /// place that makes a repo's API URL, and it percent-encodes the id.
    pub(crate) fn repo_api(&self, repo: repo_ref::RepoRef<'_>, rest: &str) -> String {
        let base = format!("{}/api/{}/{}", self.endpoint(), repo.api_segment(), untrusted::encode_path(repo.id));
        if rest.is_empty() { base } else { format!("{base}/{rest}") }
    }

    /// Returns the endpoint, without a trailing slash.
    pub fn endpoint(&self) -> &str {
        &self.config.endpoint
    }

    /// Whether requests carry a token.
    pub fn has_token(&self) -> bool {
        self.config.token.is_some()
    }

    fn pacer(&self, bucket: Bucket) -> &Pacer {
        match bucket {
            Bucket::Api => &self.api,
            Bucket::Resolvers => &self.resolvers,
        }
    }

    /// Sends `GET url`, with `extra` headers, until it succeeds or fails for good. Requests are paced per
    /// bucket. A 429 is waited out as the Hub says, up to the maximum wait. Transient failures are retried
    /// with backoff. Reads the body within `limit`.
    pub async fn get(
        &self,
        bucket: Bucket,
        url: &str,
        extra: &[(&'static str, String)],
        limit: BodyLimit,
    ) -> Result<Fetched, HubError> {
        match self.exchange(bucket, url, &Ask::get(extra), Some(limit)).await? {
            Exchange::Read(fetched) => Ok(fetched),
            Exchange::Open(_) => Err(HubError::Malformed { url: url.to_owned(), detail: "unread body".into() }),
        }
    }

    /// Like [`HubClient::get`], but a successful response is returned with its body unread, for the caller
    /// to stream under its own limits.
    pub async fn open(&self, bucket: Bucket, url: &str, extra: &[(&'static str, String)]) -> Result<Opened, HubError> {
        match self.exchange(bucket, url, &Ask::get(extra), None).await? {
            Exchange::Open(opened) => Ok(opened),
            Exchange::Read(_) => Err(HubError::Malformed { url: url.to_owned(), detail: "body read".into() }),
        }
    }

    /// Waits for the bucket's pacer, unless the wait is longer than the maximum.
    async fn paced(&self, bucket: Bucket, url: &str) -> Result<(), HubError> {
        loop {
            let wait = self.pacer(bucket).reserve(Instant::now());
            if wait.is_zero() {
                return Ok(());
            }
            if wait > self.max_wait {
                let seconds = self.pacer(bucket).named_wait().unwrap_or(wait.as_secs()).max(wait.as_secs());
                // This run stops here; a later one (the same client, under `serve`) asks the Hub afresh.
                self.pacer(bucket).forget();
                return Err(self.wait_too_long(url, seconds));
            }
            tracing::debug!(bucket = ?bucket, wait_ms = wait.as_millis() as u64, "pacing");
            tokio::time::sleep(wait).await;
        }
    }

    /// Builds the error for an action that the Hub's quota on actions refused. It also starts the pause for
    /// every action of this client.
    fn action_refused(&self, url: &str, message: String) -> HubError {
        let until = self.action_pause.refused(std::time::SystemTime::now());
        let seconds = until.duration_since(std::time::SystemTime::now()).unwrap_or_default().as_secs();
        tracing::warn!(url, pause_s = seconds, message = %message, "the Hub's hourly quota on actions refused one; pausing them");
        HubError::ActionQuota { url: url.to_owned(), message, until: unix_seconds_after(until) }
    }

    fn refuse_long_wait(&self, url: &str, wait: Duration) -> Result<(), HubError> {
        if wait > self.max_wait {
            return Err(self.wait_too_long(url, wait.as_secs()));
        }
        Ok(())
    }

    fn wait_too_long(&self, url: &str, seconds: u64) -> HubError {
        HubError::WaitTooLong { url: url.to_owned(), seconds, max_seconds: self.max_wait.as_secs() }
    }

    pub(super) async fn exchange(
        &self,
        bucket: Bucket,
        url: &str,
        ask: &Ask<'_>,
        limit: Option<BodyLimit>,
    ) -> Result<Exchange, HubError> {
        let mut attempts = 0;
        let mut refusals = 0;
        loop {
            self.paced(bucket, url).await?;
            // Check before each send: another job's refusal may have started a pause during a wait.
            if ask.action
                && let Some(until) = self.actions_paused_until()
            {
                let message = "not sent: the Hub's quota on actions pauses them".to_owned();
                return Err(HubError::ActionQuota { url: url.to_owned(), message, until: unix_seconds_after(until) });
            }
            attempts += 1;
            match bucket {
                Bucket::Api => self.stats.api_requests.fetch_add(1, Ordering::Relaxed),
                Bucket::Resolvers => self.stats.resolver_requests.fetch_add(1, Ordering::Relaxed),
            };
            let sent = Instant::now();
            let attempted = self.attempt(url, ask, limit).await;
            let answered = attempted.as_ref().ok().map(|e| e.status_and_hub_headers().0.as_u16());
            latency::observe(bucket, answered, sent.elapsed());
            let failure = match attempted {
                Ok(exchange) => {
                    let (status, hub_headers) = exchange.status_and_hub_headers();
                    self.pacer(bucket).observe(hub_headers, Instant::now());
                    if status == StatusCode::TOO_MANY_REQUESTS {
                        self.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
                        refusals += 1;
                        attempts -= 1;
                        let wait = match announced_wait(hub_headers) {
                            Some(wait) => wait,
                            // An action refused by the user's hourly quota on it: sending it again in seconds
                            // only spends more of it, so every action pauses.
                            None if ask.action
                                && let Some(message) = action_quota_message(url, &exchange) =>
                            {
                                self.pacer(bucket).release();
                                return Err(self.action_refused(url, message));
                            }
                            // Any other refusal without a wait is the CDN's edge: waits double from the edge wait.
                            None => self.edge_wait.saturating_mul(1 << (refusals - 1).min(10)),
                        };
                        // A wait too long ends this run without closing the bucket for the next one.
                        self.refuse_long_wait(url, wait)?;
                        self.pacer(bucket).refused(wait, Instant::now());
                        tracing::info!(bucket = ?bucket, wait_s = wait.as_secs(), "rate limited; waiting for the window to reset");
                        if refusals > MAX_RATE_LIMITED {
                            return Err(HubError::Exhausted {
                                url: url.to_owned(),
                                attempts: refusals,
                                last: "429 Too Many Requests".into(),
                            });
                        }
                        continue;
                    }
                    if ask.action && status.is_success() {
                        self.action_pause.succeeded();
                    }
                    match exchange {
                        Exchange::Read(fetched) if fetched.status.is_success() || ask.answered == Some(status) => {
                            return Ok(Exchange::Read(fetched));
                        }
                        Exchange::Open(opened) => return Ok(Exchange::Open(opened)),
                        Exchange::Read(fetched) if !is_transient_status(fetched.status) => {
                            return Err(status_error(url, &fetched));
                        }
                        Exchange::Read(fetched) => format!("HTTP {}", fetched.status),
                    }
                }
                Err(Failure::Fatal(e)) => {
                    self.pacer(bucket).release();
                    return Err(e);
                }
                Err(Failure::Transient(e)) => {
                    self.pacer(bucket).release();
                    e
                }
            };
            if attempts >= self.retry.max_attempts || ask.once {
                return Err(HubError::Exhausted { url: url.to_owned(), attempts, last: failure });
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            let delay = self.retry.delay(attempts, jitter_unit());
            // Log at warn: otherwise an unreachable Hub looks like a silent hang for the length of the retries.
            tracing::warn!(
                url,
                attempt = attempts,
                of = self.retry.max_attempts,
                delay_ms = delay.as_millis() as u64,
                reason = %crate::untrusted::escape_control(&failure),
                "the Hub request failed; trying again"
            );
            tokio::time::sleep(delay).await;
        }
    }

    fn build(&self, url: &str, ask: &Ask<'_>, streaming: bool) -> RequestBuilder {
        let http = if streaming { &self.stream_http } else { &self.http };
        let mut req = http.request(ask.method.clone(), url);
        if let Some((content_type, body)) = &ask.body {
            req = req.header(CONTENT_TYPE, *content_type).body(body.clone());
        }
        if let Some(token) = self.config.token.as_ref().filter(|_| same_origin(url, &self.config.endpoint)) {
            req = req.bearer_auth(token.expose());
        }
        for (k, v) in ask.extra {
            if let Ok(v) = HeaderValue::from_str(v) {
                req = req.header(*k, v);
            }
        }
        req
    }

    /// Makes one attempt, following redirects with the same headers: a `Range` stays, and the token stays on
    /// the Hub. Every answer, even an error status, is `Ok`, so the caller can read its headers. With no
    /// `limit`, a successful answer's body is left for the caller.
    async fn attempt(&self, url: &str, ask: &Ask<'_>, limit: Option<BodyLimit>) -> Result<Exchange, Failure> {
        let mut target = url.to_owned();
        let mut hub_headers = None;
        let mut response = None;
        for _ in 0..=MAX_REDIRECTS {
            let r = self.build(&target, ask, limit.is_none()).send().await.map_err(|e| describe(&e))?;
            let location = r.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
            // Never send a body on to another place: a redirected POST is the Hub's answer.
            match location.filter(|_| r.status().is_redirection() && ask.method == reqwest::Method::GET) {
                Some(location) => {
                    hub_headers.get_or_insert_with(|| r.headers().clone());
                    let next = r.url().join(&location).map_err(|e| {
                        Failure::Fatal(HubError::Malformed {
                            url: url.to_owned(),
                            detail: format!("bad redirect to {}: {e}", untrusted::quote(&location)),
                        })
                    })?;
                    if !matches!(next.scheme(), "http" | "https") {
                        return Err(Failure::Fatal(HubError::Malformed {
                            url: url.to_owned(),
                            detail: format!("redirect to a {} URL", untrusted::quote(next.scheme())),
                        }));
                    }
                    target = next.to_string();
                }
                None => {
                    response = Some(r);
                    break;
                }
            }
        }
        let Some(response) = response else { return Err(format!("more than {MAX_REDIRECTS} redirects").into()) };
        let status = response.status();
        let headers = response.headers().clone();
        let hub_headers = hub_headers.unwrap_or_else(|| headers.clone());
        let limit = match limit {
            None if status.is_success() => {
                return Ok(Exchange::Open(Opened { url: target, status, hub_headers, response }));
            }
            None => BodyLimit::Prefix(ERROR_BODY_CAP),
            Some(_) if !status.is_success() => BodyLimit::Prefix(ERROR_BODY_CAP),
            Some(limit) => limit,
        };
        let body = self.read_body(response, url, limit).await?;
        Ok(Exchange::Read(Fetched { url: target, status, headers, hub_headers, body }))
    }

    /// Reads a body within `limit`. A body shorter than its `Content-Length` is a transient failure.
    async fn read_body(&self, mut response: reqwest::Response, url: &str, limit: BodyLimit) -> Result<Bytes, Failure> {
        let announced = response.content_length();
        if let (BodyLimit::Whole(cap), Some(n)) = (limit, announced)
            && n > cap as u64
        {
            return Err(Failure::Fatal(HubError::TooLarge { url: url.to_owned(), cap: cap as u64 }));
        }
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    body.extend_from_slice(&chunk);
                    match limit {
                        BodyLimit::Prefix(cap) if body.len() >= cap => {
                            // Enough: dropping the response closes the connection instead of reading on.
                            body.truncate(cap);
                            self.stats.bytes_read.fetch_add(body.len() as u64, Ordering::Relaxed);
                            return Ok(body.into());
                        }
                        BodyLimit::Whole(cap) if body.len() > cap => {
                            self.stats.bytes_read.fetch_add(body.len() as u64, Ordering::Relaxed);
                            return Err(Failure::Fatal(HubError::TooLarge { url: url.to_owned(), cap: cap as u64 }));
                        }
                        _ => {}
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(format!("body cut short after {} bytes: {}", body.len(), describe(&e)).into());
                }
            }
        }
        self.stats.bytes_read.fetch_add(body.len() as u64, Ordering::Relaxed);
        if let Some(n) = announced
            && n != body.len() as u64
        {
            return Err(format!("body of {} bytes where {n} were announced", body.len()).into());
        }
        Ok(body.into())
    }
}

/// What one exchange sends: a GET with extra headers, a DELETE, or a POST or PUT of a body. A POST or PUT is
/// sent again after a failure, as a GET is. Only a request that cannot take effect twice may go this way; the
/// others set `once`.
pub(super) struct Ask<'a> {
    extra: &'a [(&'static str, String)],
    method: reqwest::Method,
    /// The content type and the body of a POST or PUT.
    body: Option<(&'a str, Bytes)>,
    /// Sent at most once past the rate limiter, for a request the Hub would carry out twice. The Hub may have
    /// carried it out though its answer was lost (a 5xx, a timeout), so it is not sent again.
    once: bool,
    /// An error status whose answer the caller reads (a 409 that names what exists), rather than an error.
    answered: Option<StatusCode>,
    /// One of the actions the Hub counts per user per hour: a commit, a repo's creation, a discussion. It is
    /// held back while those are paused, and its refusal by that quota starts the pause.
    action: bool,
}

impl<'a> Ask<'a> {
    fn get(extra: &'a [(&'static str, String)]) -> Ask<'a> {
        Ask { extra, method: reqwest::Method::GET, body: None, once: false, answered: None, action: false }
    }

    pub(super) fn post(content_type: &'a str, body: Bytes) -> Ask<'a> {
        let body = Some((content_type, body));
        Ask { extra: &[], method: reqwest::Method::POST, body, once: false, answered: None, action: false }
    }

    pub(super) fn post_once(content_type: &'a str, body: Bytes) -> Ask<'a> {
        Ask { once: true, ..Ask::post(content_type, body) }
    }

    pub(super) fn put(content_type: &'a str, body: Bytes) -> Ask<'a> {
        Ask { method: reqwest::Method::PUT, ..Ask::post(content_type, body) }
    }

    pub(super) fn delete() -> Ask<'a> {
        Ask { method: reqwest::Method::DELETE, ..Ask::get(&[]) }
    }

    /// Marks this ask as one of the actions the Hub counts per user per hour.
    pub(super) fn action(self) -> Ask<'a> {
        Ask { action: true, ..self }
    }
}

/// What an attempt brought back: a body read, or a successful response left open.
pub(super) enum Exchange {
    Read(Fetched),
    Open(Opened),
}

impl Exchange {
    fn status_and_hub_headers(&self) -> (StatusCode, &HeaderMap) {
        match self {
            Exchange::Read(f) => (f.status, &f.hub_headers),
            Exchange::Open(o) => (o.status, &o.hub_headers),
        }
    }
}

/// Reads a response's whole body, failing once it passes `cap` bytes (for answers that come from
/// elsewhere than the Hub's API, such as the Xet CAS).
pub async fn read_capped(mut response: reqwest::Response, cap: usize) -> Result<Vec<u8>, HubError> {
    let too_large = |url: &reqwest::Url| HubError::TooLarge { url: url.to_string(), cap: cap as u64 };
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large(response.url()));
    }
    let mut body = Vec::new();
    let url = response.url().clone();
    while let Some(chunk) =
        response.chunk().await.map_err(|e| HubError::Malformed { url: url.to_string(), detail: describe(&e) })?
    {
        if body.len() + chunk.len() > cap {
            return Err(too_large(&url));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
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

/// A reqwest error with its chain of causes, for a log line or a job's reason.
pub fn describe(e: &reqwest::Error) -> String {
    let kind = if is_transient_error(e) { "transient" } else { "network" };
    let mut msg = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

/// Returns how long a 429 says to wait. That is the window's reset when `RateLimit` says nothing is left,
/// else `Retry-After`, at least a second. Returns `None` when it names no wait.
fn announced_wait(headers: &HeaderMap) -> Option<Duration> {
    let seconds = match parse_rate_limit(headers) {
        Some(l) if l.remaining == 0 => Some(l.reset_seconds),
        _ => parse_retry_after(headers),
    };
    seconds.map(|s| Duration::from_secs(s.max(1)))
}

/// Returns the Hub's words, escaped, when a 429 is its hourly quota on an action. `datasets` issue 6257
/// recorded them as "You have exceeded our hourly quotas for action: commit". Returns `None` for any
/// other 429.
fn action_quota_message(url: &str, exchange: &Exchange) -> Option<String> {
    let Exchange::Read(fetched) = exchange else { return None };
    match status_error(url, fetched) {
        HubError::Status { message, .. } if message.to_ascii_lowercase().contains("quotas for action") => Some(message),
        _ => None,
    }
}

fn status_error(url: &str, fetched: &Fetched) -> HubError {
    let header = |k: &str| fetched.headers.get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body_message = serde_json::from_slice::<serde_json::Value>(&fetched.body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned));
    // The Hub's own words go into logs and terminals, so escape control characters here, once.
    let escaped = |s: String| untrusted::escape_control(&s).into_owned();
    HubError::Status {
        url: url.to_owned(),
        status: fetched.status,
        code: header("x-error-code").map(escaped),
        message: escaped(header("x-error-message").or(body_message).unwrap_or_default()),
        request_id: header("x-request-id").map(escaped),
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
        assert_eq!(announced_wait(&h), Some(Duration::from_secs(7)), "the window's reset when nothing is left");
        h.insert("ratelimit", HeaderValue::from_static("\"api\";r=5;t=7"));
        assert_eq!(announced_wait(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after", HeaderValue::from_static("0"));
        assert_eq!(announced_wait(&h), Some(Duration::from_secs(1)), "at least a second");
        assert_eq!(announced_wait(&HeaderMap::new()), None, "an action quota or the edge: no wait named");
    }
}
