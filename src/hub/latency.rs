//! How long the Hub takes to answer, per rate-limit bucket and outcome. One histogram serves the whole
//! process, and every client observes into it. `serve`'s `/metrics` exposes it as
//! `hubalign_hub_request_duration_seconds`. Each attempt is measured on its own, from sending the request to
//! its answer. For answers read whole (listings, info) that includes the body; for a streamed download it
//! ends at the headers.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::pacing::Bucket;

/// The histogram's labels: `bucket` (`api` or `resolvers`) and `outcome` (`2xx` … `5xx`, or `error` when no
/// answer came).
pub(crate) type Labels = Vec<(String, String)>;

/// The histograms, one per label set.
pub(crate) type RequestSeconds = Family<Labels, Histogram, fn() -> Histogram>;

fn histogram() -> Histogram {
    // 5 ms to about 82 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Every Hub request's answer time in this process.
pub(crate) static REQUEST_SECONDS: LazyLock<RequestSeconds> = LazyLock::new(|| Family::new_with_constructor(histogram));

/// Records one attempt: its bucket, the status it got (`None` when none came) and how long it took.
pub(super) fn observe(bucket: Bucket, status: Option<u16>, took: Duration) {
    let bucket = match bucket {
        Bucket::Api => "api",
        Bucket::Resolvers => "resolvers",
    };
    let outcome = status.map_or_else(|| "error".to_owned(), |s| format!("{}xx", s / 100));
    REQUEST_SECONDS
        .get_or_create(&vec![("bucket".to_owned(), bucket.to_owned()), ("outcome".to_owned(), outcome)])
        .observe(took.as_secs_f64());
}
