//! How often long work reports how far it is, such as an audit without a terminal or a job's download.

use std::time::Duration;

/// Every 10 s. Debug builds take `HUBALIGN_DEBUG_PROGRESS_MS` instead, so tests see lines from short work.
pub fn every() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("HUBALIGN_DEBUG_PROGRESS_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
        return Duration::from_millis(ms.max(1));
    }
    Duration::from_secs(10)
}
