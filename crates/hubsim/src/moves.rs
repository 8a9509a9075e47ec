//! Handles renamed repositories. `POST /api/repos/move` records the old name. A read of the old name, whether
//! of its API, its files or its page, gets the Hub's relative `307` to the same path under the new name.
//! Clients follow it before reading anything (hub-api §3.2). A repo created later under the old name takes
//! the name back.

use std::collections::HashMap;
use std::sync::RwLock;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Shared;

/// Old name → new name, for every move performed.
#[derive(Debug, Default)]
pub struct Moves {
    renamed: RwLock<HashMap<String, String>>,
}

impl Moves {
    /// Records that `from` is now called `to`.
    pub fn record(&self, from: &str, to: &str) {
        let mut renamed = self.renamed.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        renamed.remove(to);
        renamed.insert(from.to_owned(), to.to_owned());
    }

    /// The new name of `id`, if it was moved.
    pub fn new_name(&self, id: &str) -> Option<String> {
        self.renamed.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).cloned()
    }
}

/// The repo id a read path names, and the path's parts before and after it.
fn repo_in_path(path: &str) -> Option<(&str, String, &str)> {
    let (prefix, rest) = match path.strip_prefix("/api/models/") {
        Some(rest) => ("/api/models/", rest),
        None => ("/", path.strip_prefix('/')?),
    };
    let mut parts = rest.splitn(3, '/');
    let (ns, name) = (parts.next()?, parts.next()?);
    let tail = parts.next();
    if ns.is_empty() || name.is_empty() || ns.starts_with('_') || (prefix == "/" && ns == "api") {
        return None;
    }
    // Past the id, only the file routes (`/{ns}/{name}/resolve/…`) and the page (`/{ns}/{name}`) are a
    // repo's.
    if prefix == "/" && tail.is_some_and(|t| !t.starts_with("resolve/")) {
        return None;
    }
    let after = &rest[ns.len() + 1 + name.len()..];
    Some((prefix, format!("{ns}/{name}"), after))
}

/// Answers a read of a moved repo's old name with a relative `307` to its new name.
pub(super) async fn follow_moves(State(sim): State<Shared>, request: Request, next: Next) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD)
        && let Some((prefix, id, after)) = repo_in_path(request.uri().path())
        && !sim.repos().contains_key(&id)
        && let Some(to) = sim.moves.new_name(&id)
    {
        let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
        let location = format!("{prefix}{to}{after}{query}");
        if let Ok(value) = HeaderValue::from_str(&location) {
            let mut response = (StatusCode::TEMPORARY_REDIRECT, format!("moved to {to}")).into_response();
            response.headers_mut().insert(header::LOCATION, value);
            return response;
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_repos_own_read_paths_name_it() {
        assert_eq!(repo_in_path("/api/models/a/b"), Some(("/api/models/", "a/b".into(), "")));
        assert_eq!(repo_in_path("/api/models/a/b/tree/main"), Some(("/api/models/", "a/b".into(), "/tree/main")));
        assert_eq!(repo_in_path("/a/b/resolve/main/x.json"), Some(("/", "a/b".into(), "/resolve/main/x.json")));
        assert_eq!(repo_in_path("/a/b"), Some(("/", "a/b".into(), "")));
        assert_eq!(repo_in_path("/api/models"), None);
        assert_eq!(repo_in_path("/api/whoami-v2"), None);
        assert_eq!(repo_in_path("/_sim/counters"), None);
        assert_eq!(repo_in_path("/a/b/info/lfs/objects/batch"), None);
    }

    #[test]
    fn a_later_move_back_forgets_the_loop() {
        let moves = Moves::default();
        moves.record("a/x", "a/y");
        moves.record("a/y", "a/x");
        assert_eq!(moves.new_name("a/y").as_deref(), Some("a/x"));
        assert_eq!(moves.new_name("a/x"), None);
    }
}
