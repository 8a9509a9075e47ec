//! Answers with an error: JSON under `/api/`, a page in the site's style elsewhere. The API, the pages and
//! the extractors all answer through here, so none of them names another.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use minijinja::context;

use super::AppState;

/// An API error: the status, and `{"error": "…"}` as the body, as every `/api/*` answers one.
pub(super) fn api_error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    let message = message.to_string();
    (status, Json(serde_json::json!({ "error": message.trim_end() }))).into_response()
}

/// A 500 from the API, as JSON.
pub(super) fn failed(e: impl std::fmt::Display) -> Response {
    api_error(StatusCode::INTERNAL_SERVER_ERROR, e)
}

/// An error as a page in the site's style, with the way back: the navigation and the search. A browser gets
/// it for a page that does not exist, a bad query or a store that failed.
pub(super) fn page_error(state: &AppState, status: StatusCode, message: impl std::fmt::Display) -> Response {
    let message = message.to_string();
    let ctx = context! { status => status.as_u16(), title => status.canonical_reason().unwrap_or("Error"), message };
    match state.templates.get_template("error.html.j2").and_then(|t| t.render(ctx)) {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("rendering error.html.j2: {e}")).into_response(),
    }
}
