//! Gives the dashboard's ways to any repo: the search over names, and the list of every namespace, affected
//! or not, a page at a time.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;
use minijinja::value::Serde;
use serde::Deserialize;

use super::AppState;
use super::extract::PageParams;
use super::pages::{page_error, page_failed, page_offset, page_out_of_range, render, size_label};

/// Namespaces per page of the list.
const NAMESPACES_PAGE: i64 = 200;

/// The longest search the page takes. The longest repo id the Hub allows is 96 + 1 + 96 characters.
const LONGEST_SEARCH: usize = 200;

#[derive(Deserialize)]
pub(super) struct SearchQuery {
    q: Option<String>,
}

/// `/search?q=WORDS`: namespaces and repos whose names hold the words, case-insensitively.
pub(super) async fn search(State(state): State<AppState>, PageParams(query): PageParams<SearchQuery>) -> Response {
    let words = query.q.unwrap_or_default();
    let words = words.trim();
    if words.chars().count() > LONGEST_SEARCH {
        return page_error(
            &state,
            StatusCode::BAD_REQUEST,
            format!("Search for at most {LONGEST_SEARCH} characters: no repo id is longer."),
        );
    }
    if words.is_empty() {
        return render(&state, "search.html.j2", context! { q => "", searched => false });
    }
    match state.store.search(words).await {
        Ok(hits) => {
            let repos: Vec<_> = hits
                .repos
                .iter()
                .map(|r| {
                    context! { repo_id => r.repo_id.clone(), state => r.state.clone(), mirror => r.mirror.clone(),
                    bytes => r.misaligned_bytes, gb => r.misaligned_bytes.map(size_label) }
                })
                .collect();
            render(
                &state,
                "search.html.j2",
                context! { q => words, searched => true, namespaces => Serde(&hits.namespaces), repos,
                limit => crate::store::browse::SEARCH_LIMIT, hub => state.hub_url.clone() },
            )
        }
        Err(e) => page_failed(&state, e),
    }
}

#[derive(Deserialize)]
pub(super) struct NamespacesQuery {
    page: Option<i64>,
}

/// `/namespaces[?page=N]`: every namespace the store knows, by name, with its counts.
pub(super) async fn namespaces(State(state): State<AppState>, PageParams(q): PageParams<NamespacesQuery>) -> Response {
    let page = q.page.unwrap_or(0);
    let Some(offset) = page_offset(page, NAMESPACES_PAGE) else { return page_out_of_range(&state) };
    let (rows, count) =
        match tokio::try_join!(state.store.namespaces_page(NAMESPACES_PAGE + 1, offset), state.store.namespace_count())
        {
            Ok(both) => both,
            Err(e) => return page_failed(&state, e),
        };
    let more = rows.len() as i64 > NAMESPACES_PAGE;
    let rows: Vec<_> = rows
        .iter()
        .take(NAMESPACES_PAGE as usize)
        .map(|n| context! { namespace => n.namespace.clone(), repos_listed => n.repos_listed, repos_audited => n.repos_audited,
                            repos_affected => n.repos_affected, bytes => n.misaligned_bytes, gb => size_label(n.misaligned_bytes) })
        .collect();
    render(&state, "namespaces.html.j2", context! { namespaces => rows, count, page, more })
}
