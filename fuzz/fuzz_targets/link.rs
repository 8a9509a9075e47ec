//! Any bytes as a `Link` header: parsing never panics, and pagination only ever follows a page on the
//! Hub's own origin that it has not read before.

#![no_main]

use hubalign::hub::pages::{Pagination, parse_next_link};
use libfuzzer_sys::fuzz_target;
use reqwest::header::{HeaderMap, HeaderValue};

const ENDPOINT: &str = "https://hub.example";
const FIRST: &str = "https://hub.example/api/models?filter=mlx";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Some(target) = parse_next_link(text) {
        assert!(text.contains(target));
    }
    // The same value answered by every page: a Hub that keeps linking somewhere.
    let Ok(value) = HeaderValue::from_str(text) else { return };
    let mut headers = HeaderMap::new();
    headers.insert("link", value);
    let mut pages = Pagination::new(ENDPOINT, FIRST).with_max_pages(50);
    let mut current = FIRST.to_owned();
    let mut seen = vec![current.clone()];
    for _ in 0..60 {
        match pages.next(&current, &headers) {
            Ok(Some(next)) => {
                let url = reqwest::Url::parse(&next).expect("a followed link is a URL");
                assert_eq!(url.origin().ascii_serialization(), ENDPOINT, "{next}");
                assert!(!seen.contains(&next), "{next} read twice");
                seen.push(next.clone());
                current = next;
            }
            Ok(None) | Err(_) => return,
        }
    }
    panic!("pagination went past its page limit");
});
