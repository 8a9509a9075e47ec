//! Counts what the simulator served and received, so tests and benchmarks count instead of estimate.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// A snapshot of every counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CounterSnapshot {
    /// Requests per endpoint class (`models_list`, `model_info`, `tree`, `resolve`, `storage`, `commit`, …).
    pub requests: BTreeMap<String, u64>,
    /// Requests in the `api` bucket.
    pub api_requests: u64,
    /// Requests in the `resolvers` bucket (every `/resolve/` URL).
    pub resolver_requests: u64,
    /// Requests that carried a `Range` header.
    pub range_requests: u64,
    /// Response body bytes sent.
    pub bytes_served: u64,
    /// Request body bytes received at every endpoint: API calls, commits, LFS and Xet uploads. This is
    /// everything a client sent the Hub beyond request lines and headers.
    pub bytes_received: u64,
    /// Bytes received by LFS uploads (basic and multipart).
    pub lfs_bytes_received: u64,
    /// Bytes received by the Xet CAS (xorbs and shards).
    pub xet_bytes_received: u64,
    /// 429 responses sent.
    pub rate_limited: u64,
    /// Faults injected (5xx and truncations).
    pub faults_injected: u64,
    /// Reads of a synthetic payload whose listed oid is a stand-in (see `population`). A client that stays
    /// within its policy makes none.
    #[serde(default)]
    pub unverifiable_payload_reads: u64,
}

/// The live counters.
#[derive(Debug, Default)]
pub struct Counters {
    inner: Mutex<CounterSnapshot>,
}

impl Counters {
    /// Applies a change.
    pub fn update(&self, f: impl FnOnce(&mut CounterSnapshot)) {
        f(&mut self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    /// The current values.
    pub fn snapshot(&self) -> CounterSnapshot {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Zeroes everything.
    pub fn reset(&self) {
        *self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = CounterSnapshot::default();
    }
}
