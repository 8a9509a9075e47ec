//! Comparing the secrets callers present (runner and admin tokens, webhook secrets) with the configured ones.

use axum::http::HeaderMap;
use subtle::ConstantTimeEq;

/// Whether `sent` is `expected`. The time taken does not depend on how much of a guess was right (`subtle`).
/// An empty `expected`, for a secret not configured, never matches.
pub(crate) fn same_secret(sent: &str, expected: &str) -> bool {
    !expected.is_empty() && bool::from(sent.as_bytes().ct_eq(expected.as_bytes()))
}

/// Whether the request carries `Authorization: Bearer <token>`. The scheme is case-insensitive (RFC 9110
/// §11.1), so `bearer` and `BEARER` are the same. An empty token never matches.
pub(crate) fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let sent = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, credentials)| credentials.trim_start());
    same_secret(sent, token)
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::*;

    #[test]
    fn secrets_match_only_whole_and_never_when_unset() {
        assert!(same_secret("secret", "secret"));
        assert!(!same_secret("secreT", "secret"));
        assert!(!same_secret("secret2", "secret"));
        assert!(!same_secret("", ""));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for (value, ok) in
            [("Bearer t0k", true), ("bearer t0k", true), ("BEARER t0k", true), ("Basic t0k", false), ("t0k", false)]
        {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", HeaderValue::from_static(value));
            assert_eq!(bearer_matches(&headers, "t0k"), ok, "{value}");
        }
        assert!(!bearer_matches(&HeaderMap::new(), "t0k"));
    }
}
