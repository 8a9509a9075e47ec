//! Applies rate limits and injected faults. Both are off by default; when on, they are seeded and
//! reproducible.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// A rate-limit bucket, as the Hub names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    /// Everything under `/api/`.
    Api,
    /// Every URL containing `/resolve/`.
    Resolvers,
    /// Everything else the Hub serves (pages); storage and CAS traffic is not limited.
    Pages,
}

impl Bucket {
    /// The name in `RateLimit` headers.
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Api => "api",
            Bucket::Resolvers => "resolvers",
            Bucket::Pages => "pages",
        }
    }
}

/// A fixed-window quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests per window.
    pub requests: u64,
    /// Window length.
    pub window: Duration,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    used: u64,
}

/// What a request's bucket says: whether it may proceed, and the header values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Whether the request is within quota.
    pub allowed: bool,
    /// `RateLimit: "bucket";r=…;t=…`.
    pub rate_limit: String,
    /// `RateLimit-Policy: "fixed window";"bucket";q=…;w=…`.
    pub policy: String,
    /// Seconds until the window resets.
    pub reset_seconds: u64,
}

/// Callers' windows kept before the lapsed ones are dropped. So a client that sends a new token with every
/// request holds at most one window's worth of callers in memory, not every token it ever sent.
const MAX_WINDOWS: usize = 4096;

/// Who a quota counts against. The Hub counts per token, and per address for anonymous requests. Every
/// anonymous caller of a local simulator shares one address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// A request with this `Authorization` value.
    Token(String),
    /// A request without one.
    Anonymous,
}

/// Fixed windows per bucket and caller, as the Hub runs them. The Hub's windows last 5 minutes; here the
/// length is configurable.
#[derive(Debug)]
pub struct RateLimiter {
    quotas: Vec<(Bucket, Quota)>,
    windows: Mutex<HashMap<(Bucket, Caller), Window>>,
}

impl RateLimiter {
    /// Limits only the buckets given.
    pub fn new(quotas: Vec<(Bucket, Quota)>) -> RateLimiter {
        RateLimiter { quotas, windows: Mutex::new(HashMap::new()) }
    }

    /// Counts a request against its bucket's window for `caller`. Returns `None` when the bucket is
    /// unlimited.
    pub fn admit(&self, bucket: Bucket, caller: Caller, now: Instant) -> Option<Admission> {
        let quota = self.quotas.iter().find(|(b, _)| *b == bucket)?.1;
        let mut windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if windows.len() >= MAX_WINDOWS && !windows.contains_key(&(bucket, caller.clone())) {
            windows.retain(|_, w| now.duration_since(w.started) < quota.window);
        }
        let w = windows.entry((bucket, caller)).or_insert(Window { started: now, used: 0 });
        if now.duration_since(w.started) >= quota.window {
            // Windows are aligned to their start, so a pause longer than a window starts a fresh one.
            let elapsed = now.duration_since(w.started).as_nanos() / quota.window.as_nanos().max(1);
            let whole = quota.window.checked_mul(u32::try_from(elapsed).unwrap_or(u32::MAX)).unwrap_or(quota.window);
            w.started = w.started.checked_add(whole).unwrap_or(now);
            w.used = 0;
        }
        let allowed = w.used < quota.requests;
        if allowed {
            w.used += 1;
        }
        let reset = quota.window.saturating_sub(now.duration_since(w.started));
        let reset_seconds = reset.as_secs() + u64::from(reset.subsec_nanos() > 0);
        let name = bucket.name();
        Some(Admission {
            allowed,
            rate_limit: format!("\"{name}\";r={};t={reset_seconds}", quota.requests - w.used),
            policy: format!("\"fixed window\";\"{name}\";q={};w={}", quota.requests, quota.window.as_secs().max(1)),
            reset_seconds,
        })
    }
}

/// Injected faults, decided by a seeded generator so a run can be replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultConfig {
    /// Added to every response.
    pub latency: Duration,
    /// Share of requests answered with a random 500/502/503.
    pub error_rate: f64,
    /// Share of successful bodies cut short: the connection closes mid-body.
    pub truncate_rate: f64,
    /// Storage bodies longer than this are cut after this many bytes, every time; 0 means never. So a file is
    /// only ever fetched whole by resuming with ranges.
    pub storage_cut: u64,
    /// A ranged storage answer carries the bytes from this many before the asked start, under the asked
    /// `Content-Range`. So the range returns other bytes; 0 means honest answers.
    pub range_skew: u64,
    /// Each storage answer is sent at most this many bytes per second, as a CDN limits each connection. 0
    /// means as fast as it goes.
    pub storage_rate: u64,
    /// The first this many successful commit answers are cut short after the commit is made. This stands for
    /// an answer lost on its way back: the client cannot tell whether its commit landed.
    pub lost_commit_answers: u32,
    /// The first this many repo creations are refused with the Hub's 409 "another conflicting operation is
    /// in progress", which it sends to concurrent creations by one user.
    pub create_conflicts: u32,
    /// The first this many API requests are refused with a 429 that carries no `RateLimit` and no
    /// `Retry-After`, as the CDN's edge refuses a burst before the Hub counts it.
    pub edge_429s: u32,
    /// Seed of the generator.
    pub seed: u64,
}

/// A fault decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Serve normally.
    None,
    /// Answer with this 5xx status.
    ServerError(u16),
    /// Serve, but cut the body short.
    Truncate,
}

/// A fault that hits the first `limit` times it is asked about, then never.
#[derive(Debug, Default)]
struct FirstN {
    limit: u32,
    hit: std::sync::atomic::AtomicU32,
}

impl FirstN {
    fn new(limit: u32) -> FirstN {
        FirstN { limit, hit: Default::default() }
    }

    /// Whether this time is one of the first `limit`.
    fn hits(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.hit.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < self.limit).then_some(n + 1)).is_ok()
    }
}

/// The seeded fault generator.
#[derive(Debug)]
pub struct Faults {
    config: FaultConfig,
    state: Mutex<u64>,
    commit_answers_lost: FirstN,
    create_conflicts: FirstN,
    edge_429s: FirstN,
}

impl Faults {
    /// Faults as configured.
    pub fn new(config: FaultConfig) -> Faults {
        Faults {
            config,
            state: Mutex::new(config.seed ^ 0x9E37_79B9_7F4A_7C15),
            commit_answers_lost: FirstN::new(config.lost_commit_answers),
            create_conflicts: FirstN::new(config.create_conflicts),
            edge_429s: FirstN::new(config.edge_429s),
        }
    }

    /// Whether this successful commit's answer is to be lost.
    pub fn lose_commit_answer(&self) -> bool {
        self.commit_answers_lost.hits()
    }

    /// Whether this repo creation is refused as conflicting with another in progress.
    pub fn conflict_on_create(&self) -> bool {
        self.create_conflicts.hits()
    }

    /// Whether this API request is refused at the edge, without rate headers.
    pub fn edge_refuses(&self) -> bool {
        self.edge_429s.hits()
    }

    /// Added latency.
    pub fn latency(&self) -> Duration {
        self.config.latency
    }

    /// Where a storage body of `len` bytes is cut, if it is.
    pub fn storage_cut(&self, len: u64) -> Option<u64> {
        let cut = self.config.storage_cut;
        (cut > 0 && len > cut).then_some(cut)
    }

    /// The rate each storage answer is held to, in bytes per second, if any.
    pub fn storage_rate(&self) -> Option<u64> {
        (self.config.storage_rate > 0).then_some(self.config.storage_rate)
    }

    /// The first byte actually served for a range asked from `start`: `range_skew` bytes earlier, if set.
    pub fn range_start_served(&self, start: u64) -> u64 {
        start.saturating_sub(self.config.range_skew)
    }

    fn next_unit(&self) -> f64 {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // splitmix64: good enough for fault dice, and stable across platforms.
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Rolls the dice for one request.
    pub fn decide(&self) -> Fault {
        if self.config.error_rate > 0.0 && self.next_unit() < self.config.error_rate {
            let statuses = [500, 502, 503];
            let pick = (self.next_unit() * statuses.len() as f64) as usize;
            return Fault::ServerError(statuses[pick.min(statuses.len() - 1)]);
        }
        if self.config.truncate_rate > 0.0 && self.next_unit() < self.config.truncate_rate {
            return Fault::Truncate;
        }
        Fault::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_window_refuses_then_resets() {
        let limiter = RateLimiter::new(vec![(Bucket::Api, Quota { requests: 2, window: Duration::from_secs(10) })]);
        let t0 = Instant::now();
        let me = || Caller::Token("Bearer hf_a".into());
        assert!(limiter.admit(Bucket::Api, me(), t0).unwrap().allowed);
        let second = limiter.admit(Bucket::Api, me(), t0).unwrap();
        assert!(second.allowed);
        assert_eq!(second.rate_limit, "\"api\";r=0;t=10");
        assert_eq!(second.policy, "\"fixed window\";\"api\";q=2;w=10");
        assert!(!limiter.admit(Bucket::Api, me(), t0 + Duration::from_secs(3)).unwrap().allowed);
        assert!(limiter.admit(Bucket::Resolvers, me(), t0).is_none(), "unlimited bucket");
        let later = limiter.admit(Bucket::Api, me(), t0 + Duration::from_secs(25)).unwrap();
        assert!(later.allowed);
        assert_eq!(later.reset_seconds, 5);
    }

    #[test]
    fn each_token_and_the_anonymous_callers_have_a_quota_of_their_own() {
        let limiter = RateLimiter::new(vec![(Bucket::Api, Quota { requests: 1, window: Duration::from_secs(10) })]);
        let t0 = Instant::now();
        let a = || Caller::Token("Bearer hf_a".into());
        assert!(limiter.admit(Bucket::Api, a(), t0).unwrap().allowed);
        assert!(!limiter.admit(Bucket::Api, a(), t0).unwrap().allowed, "a's quota is spent");
        assert!(limiter.admit(Bucket::Api, Caller::Token("Bearer hf_b".into()), t0).unwrap().allowed, "b's is not");
        assert!(limiter.admit(Bucket::Api, Caller::Anonymous, t0).unwrap().allowed);
        assert!(!limiter.admit(Bucket::Api, Caller::Anonymous, t0).unwrap().allowed, "anonymous callers share one");
    }

    #[test]
    fn a_new_token_per_request_cannot_grow_the_windows_past_their_bound() {
        let limiter = RateLimiter::new(vec![(Bucket::Api, Quota { requests: 1, window: Duration::from_secs(1) })]);
        let t0 = Instant::now();
        for i in 0..MAX_WINDOWS * 3 {
            let at = t0 + Duration::from_millis(i as u64);
            assert!(limiter.admit(Bucket::Api, Caller::Token(format!("Bearer {i}")), at).unwrap().allowed);
        }
        let kept = limiter.windows.lock().unwrap().len();
        assert!(kept <= MAX_WINDOWS, "{kept} windows kept");
    }

    #[test]
    fn faults_are_reproducible_and_near_their_rate() {
        let config = FaultConfig { error_rate: 0.05, truncate_rate: 0.05, seed: 7, ..FaultConfig::default() };
        let run = || {
            let faults = Faults::new(config);
            (0..10_000).map(|_| faults.decide()).collect::<Vec<_>>()
        };
        let (a, b) = (run(), run());
        assert_eq!(a, b);
        let errors = a.iter().filter(|f| matches!(f, Fault::ServerError(_))).count();
        assert!((400..600).contains(&errors), "{errors} errors in 10,000");
        assert!(Faults::new(FaultConfig::default()).decide() == Fault::None);
    }
}
