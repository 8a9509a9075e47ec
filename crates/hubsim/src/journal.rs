//! Keeps what clients asked of the Hub's API, so that two clients' requests for the same operation can be
//! compared. It keeps the method, the path, the query's keys, the content type, `Accept`, and the keys of the
//! body.
//!
//! `GET /_sim/requests` lists the newest [`KEPT`]. `POST /_sim/requests/reset` empties the journal.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;

use serde::Serialize;
use serde_json::Value;

/// Requests kept; older ones are dropped.
pub const KEPT: usize = 2000;

/// Bodies larger than this are not read for their keys. Such a body is an upload's bytes, not a question.
pub const BODY_READ: usize = 4 << 20;

/// One request, as a comparison needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Asked {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query's keys, sorted.
    pub query: Vec<String>,
    /// `Content-Type`, without parameters.
    pub content_type: Option<String>,
    /// `Accept`.
    pub accept: Option<String>,
    /// The body's keys: an object's keys, and its objects' keys one level down as `outer.inner`. For NDJSON,
    /// they are each line's `key`, and its value's keys as `key.inner`.
    pub body_keys: Vec<String>,
}

impl Asked {
    /// Builds a request's record from its parts. `body` is `None` when it was not read.
    pub fn new(
        method: &str,
        path: &str,
        query: Option<&str>,
        (content_type, accept): (Option<&str>, Option<&str>),
        body: Option<&[u8]>,
    ) -> Asked {
        let query = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|pair| !pair.is_empty())
            .map(|pair| pair.split('=').next().unwrap_or_default().to_owned())
            .collect::<BTreeSet<_>>();
        let content_type = content_type.map(|c| c.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
        Asked {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.into_iter().collect(),
            accept: accept.map(str::to_owned),
            body_keys: body.map(|b| body_keys(b, content_type.as_deref())).unwrap_or_default(),
            content_type,
        }
    }
}

/// The keys of a JSON or NDJSON body, sorted.
fn body_keys(body: &[u8], content_type: Option<&str>) -> Vec<String> {
    let mut keys = BTreeSet::new();
    let text = String::from_utf8_lossy(body);
    if content_type == Some("application/x-ndjson") {
        for line in text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
            let key = line["key"].as_str().unwrap_or("?").to_owned();
            for inner in line["value"].as_object().into_iter().flat_map(|o| o.keys()) {
                keys.insert(format!("{key}.{inner}"));
            }
            keys.insert(key);
        }
    } else if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&text) {
        for (k, v) in &o {
            let inner = match v {
                Value::Object(inner) => Some(inner),
                Value::Array(items) => items.first().and_then(Value::as_object),
                _ => None,
            };
            for i in inner.into_iter().flat_map(|o| o.keys()) {
                keys.insert(format!("{k}.{i}"));
            }
            keys.insert(k.clone());
        }
    }
    keys.into_iter().collect()
}

/// The newest requests.
#[derive(Debug, Default)]
pub struct Journal {
    entries: Mutex<VecDeque<Asked>>,
}

impl Journal {
    /// Keeps `asked`, dropping the oldest past [`KEPT`].
    pub fn record(&self, asked: Asked) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() == KEPT {
            entries.pop_front();
        }
        entries.push_back(asked);
    }

    /// What was asked, oldest first.
    pub fn entries(&self) -> Vec<Asked> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().cloned().collect()
    }

    /// Forgets every request.
    pub fn clear(&self) {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_json_and_ndjson_bodies_and_queries() {
        let json = br#"{"item": {"type": "model", "id": "a/b"}, "note": "x", "files": [{"path": "p", "size": 1}]}"#;
        let asked = Asked::new(
            "POST",
            "/api/x",
            Some("create_pr=1&b="),
            (Some("application/json; charset=utf-8"), None),
            Some(json),
        );
        assert_eq!(asked.query, ["b", "create_pr"]);
        assert_eq!(asked.content_type.as_deref(), Some("application/json"));
        assert_eq!(asked.body_keys, ["files", "files.path", "files.size", "item", "item.id", "item.type", "note"]);
        let ndjson =
            b"{\"key\":\"header\",\"value\":{\"summary\":\"s\"}}\n{\"key\":\"file\",\"value\":{\"path\":\"p\"}}\n";
        let asked = Asked::new("POST", "/api/c", None, (Some("application/x-ndjson"), None), Some(ndjson));
        assert_eq!(asked.body_keys, ["file", "file.path", "header", "header.summary"]);
    }

    #[test]
    fn the_journal_keeps_the_newest() {
        let journal = Journal::default();
        for i in 0..KEPT + 5 {
            journal.record(Asked::new("GET", &format!("/api/{i}"), None, (None, None), None));
        }
        let entries = journal.entries();
        assert_eq!(entries.len(), KEPT);
        assert_eq!(entries[0].path, "/api/5");
    }
}
