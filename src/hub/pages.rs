//! Follows `Link: <…>; rel="next"` as far as it is safe to. It stays on the endpoint's own origin, never
//! reads a page twice, and follows a bounded number of pages. A Hub that links a page to itself, or to
//! another host, ends the listing with an error. The crawl then neither hangs forever nor sends the token
//! elsewhere.

use std::collections::HashSet;

use reqwest::header::HeaderMap;

use super::HubError;
use crate::untrusted;

/// The most pages one listing follows: 100 million repos at the Hub's page size.
pub const MAX_PAGES: usize = 100_000;

/// The `rel="next"` target of a `Link` header value, as written (`<url>; rel="next"`, possibly among others).
pub fn parse_next_link(value: &str) -> Option<&str> {
    value.split(',').find_map(|part| {
        let (target, params) = part.trim().strip_prefix('<')?.split_once('>')?;
        let is_next = params.split(';').any(|p| {
            let p = p.trim();
            p.strip_prefix("rel=").is_some_and(|rel| rel.trim_matches('"').split_whitespace().any(|r| r == "next"))
        });
        is_next.then(|| target.trim())
    })
}

/// The `rel="next"` target of a response's `Link` header.
pub fn next_link(headers: &HeaderMap) -> Option<String> {
    headers.get(reqwest::header::LINK)?.to_str().ok().and_then(parse_next_link).map(str::to_owned)
}

/// Where a paginated listing has been, and whether the next page may be fetched.
#[derive(Debug)]
pub struct Pagination {
    origin: Option<reqwest::Url>,
    seen: HashSet<String>,
    max_pages: usize,
}

impl Pagination {
    /// A listing that starts at `first` (already on `endpoint`).
    pub fn new(endpoint: &str, first: &str) -> Pagination {
        let mut seen = HashSet::new();
        seen.insert(normalize(first).unwrap_or_else(|| first.to_owned()));
        Pagination { origin: reqwest::Url::parse(endpoint).ok(), seen, max_pages: MAX_PAGES }
    }

    /// At most `max` pages (for tests).
    pub fn with_max_pages(mut self, max: usize) -> Pagination {
        self.max_pages = max;
        self
    }

    /// The next page's URL from the headers of the page at `current`, or `None` when the listing ends.
    /// A next page on another origin, one already read, or one past the page limit is an error naming it.
    pub fn next(&mut self, current: &str, headers: &HeaderMap) -> Result<Option<String>, HubError> {
        let Some(link) = next_link(headers) else { return Ok(None) };
        let refuse = |detail: String| HubError::Malformed { url: current.to_owned(), detail };
        let base = reqwest::Url::parse(current).map_err(|e| refuse(format!("page URL: {e}")))?;
        let next = base
            .join(&link)
            .map_err(|e| refuse(format!("unusable Link to the next page {}: {e}", untrusted::quote(&link))))?;
        let same_origin = self.origin.as_ref().is_some_and(|o| {
            o.scheme() == next.scheme()
                && o.host_str() == next.host_str()
                && o.port_or_known_default() == next.port_or_known_default()
        });
        if !same_origin {
            return Err(refuse(format!(
                "the Link to the next page leaves the Hub's origin: {}",
                untrusted::quote(next.as_str())
            )));
        }
        if !self.seen.insert(next.to_string()) {
            return Err(refuse(format!(
                "the Link to the next page points back to a page already read: {}",
                untrusted::quote(next.as_str())
            )));
        }
        if self.seen.len() > self.max_pages {
            return Err(refuse(format!("more than {} pages; stopped", self.max_pages)));
        }
        Ok(Some(next.to_string()))
    }
}

fn normalize(url: &str) -> Option<String> {
    reqwest::Url::parse(url).ok().map(|u| u.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn link(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("link", HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn parses_links_as_the_hub_writes_them() {
        assert_eq!(
            parse_next_link("<http://h/api/models?cursor=abc>; rel=\"next\""),
            Some("http://h/api/models?cursor=abc")
        );
        assert_eq!(parse_next_link("<http://h/p>; rel=\"prev\", <http://h/n>; rel=\"next\""), Some("http://h/n"));
        assert_eq!(parse_next_link("<http://h/x>; rel=\"prev\""), None);
        assert_eq!(parse_next_link(">; rel=\"next\" <"), None, "brackets out of order");
        assert_eq!(parse_next_link("<a>; rel=\"nextpage\""), None);
        assert_eq!(parse_next_link(""), None);
    }

    #[test]
    fn follows_new_pages_on_the_same_origin() {
        let mut p = Pagination::new("http://h:1", "http://h:1/api/models?limit=2");
        let next = p.next("http://h:1/api/models?limit=2", &link("</api/models?cursor=1>; rel=\"next\"")).unwrap();
        assert_eq!(next.as_deref(), Some("http://h:1/api/models?cursor=1"), "relative links resolve");
        assert_eq!(p.next("http://h:1/api/models?cursor=1", &HeaderMap::new()).unwrap(), None);
    }

    #[test]
    fn refuses_loops_other_origins_and_endless_listings() {
        let first = "http://h/api/models?limit=2";
        let mut p = Pagination::new("http://h", first);
        let e = p.next(first, &link(&format!("<{first}>; rel=\"next\""))).unwrap_err().to_string();
        assert!(e.contains("points back"), "{e}");

        let mut p = Pagination::new("http://h", first);
        let e = p.next(first, &link("<http://evil/api/models?c=1>; rel=\"next\"")).unwrap_err().to_string();
        assert!(e.contains("leaves the Hub's origin"), "{e}");

        let mut p = Pagination::new("http://h", first).with_max_pages(3);
        let mut url = first.to_owned();
        let mut error = None;
        for i in 0..10 {
            match p.next(&url, &link(&format!("<http://h/api/models?c={i}>; rel=\"next\""))) {
                Ok(Some(n)) => url = n,
                Ok(None) => unreachable!(),
                Err(e) => {
                    error = Some((i, e.to_string()));
                    break;
                }
            }
        }
        let (at, e) = error.unwrap();
        assert_eq!(at, 2);
        assert!(e.contains("more than 3 pages"), "{e}");
    }
}
