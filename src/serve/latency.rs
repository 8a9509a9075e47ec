//! Measures how long `serve` takes to answer, per route, method and status class. A histogram keeps the times
//! for the process's life, and `/metrics` exposes it as `hubalign_http_request_duration_seconds`. The
//! middleware times each matched route; a path no route matches is not timed.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

/// The histograms, one per `route`, `method` and `status` (`2xx` … `5xx`).
pub(super) type HttpSeconds = Family<Vec<(String, String)>, Histogram, fn() -> Histogram>;

fn histogram() -> Histogram {
    // 0.25 ms to about 8 s: a page's target is 20 ms.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// A fresh family.
pub(super) fn http_seconds() -> HttpSeconds {
    Family::new_with_constructor(histogram)
}

/// The middleware: times the route's answer up to its headers. A streamed body's transfer is not counted.
pub(super) async fn observe(
    State(seconds): State<HttpSeconds>,
    matched: Option<MatchedPath>,
    request: Request,
    next: Next,
) -> Response {
    let route = matched.map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = format!("{}xx", response.status().as_u16() / 100);
    let labels = vec![("route".to_owned(), route), ("method".to_owned(), method), ("status".to_owned(), status)];
    seconds.get_or_create(&labels).observe(started.elapsed().as_secs_f64());
    response
}
