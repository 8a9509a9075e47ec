//! Wraps axum's `Query` and `Path` with the service's own rejections. A query or path that does not parse,
//! such as `?limit=x` or `/api/admin/jobs/x/retry`, gets the answer every other error gets. Under `/api/`
//! that is `{"error": …}`; elsewhere it is a page in the site's style. axum's plain text is never sent.

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use axum::response::Response;
use serde::de::DeserializeOwned;

use super::AppState;
use super::respond::{api_error, page_error};

/// A query string of the JSON API; its rejection is a JSON error.
pub(super) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(api_error(rejection.status(), rejection.body_text())),
        }
    }
}

/// Path parameters of the JSON API; their rejection is a JSON error.
pub(super) struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => Err(api_error(rejection.status(), rejection.body_text())),
        }
    }
}

/// A query string of a page; its rejection is an error page.
pub(super) struct PageParams<T>(pub T);

impl<T: DeserializeOwned> FromRequestParts<AppState> for PageParams<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(PageParams(value)),
            Err(rejection) => Err(page_error(state, rejection.status(), rejection.body_text())),
        }
    }
}

/// Path parameters of a page; their rejection is an error page.
pub(super) struct PagePath<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for PagePath<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(PagePath(value)),
            Err(rejection) => Err(page_error(state, rejection.status(), rejection.body_text())),
        }
    }
}
