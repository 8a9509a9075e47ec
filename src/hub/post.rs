//! Writes to the Hub's API: POSTs a JSON or NDJSON body, PUTs a setting, or DELETEs an object. Each answer is
//! read within a bound.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};

use super::pacing::Bucket;
use super::{Ask, BodyLimit, Exchange, Fetched, HubClient, HubError, SMALL_CAP};

impl HubClient {
    /// POSTs `body` to `url` on the Hub, with the token, and reads the answer (at most 1 MiB). The request is
    /// paced, waits out a 429 and is retried like a GET. A non-success status is the Hub's error. Use it only
    /// for requests that a second send cannot carry out twice, such as a question or a commit that names its
    /// parent.
    pub async fn post(&self, url: &str, content_type: &str, body: Vec<u8>) -> Result<Fetched, HubError> {
        let ask = Ask::post(content_type, body.into());
        self.send(url, &ask).await
    }

    /// POSTs one of the actions the Hub counts per user per hour (a commit, a repo's creation), like
    /// [`HubClient::post`]. It is not sent while the Hub's quota on actions pauses them, and a refusal by that
    /// quota pauses them (see `hub::action_pause`).
    pub async fn post_action(&self, url: &str, content_type: &str, body: Vec<u8>) -> Result<Fetched, HubError> {
        self.send(url, &Ask::post(content_type, body.into()).action()).await
    }

    /// Sends [`HubClient::post_action`] once. A failure that leaves it unknown whether the Hub carried it out
    /// (a 5xx, a timeout, a cut connection) is returned, not retried. Use it for an action the Hub would carry
    /// out twice: opening a discussion, or a pull request by its commit. Only a 429 that names a wait is waited
    /// out and sent again, since the Hub did not act on it.
    pub async fn post_action_once(&self, url: &str, content_type: &str, body: Vec<u8>) -> Result<Fetched, HubError> {
        self.send(url, &Ask::post_once(content_type, body.into()).action()).await
    }

    /// Like [`HubClient::post`], but returns an answer of status `answered` for the caller to read, not as an
    /// error. An example is a 409 whose body names what exists.
    pub async fn post_answering(
        &self,
        url: &str,
        content_type: &str,
        body: Vec<u8>,
        answered: reqwest::StatusCode,
    ) -> Result<Fetched, HubError> {
        let ask = Ask { answered: Some(answered), ..Ask::post(content_type, body.into()) };
        self.send(url, &ask).await
    }

    /// PUTs a JSON `body` to `url` on the Hub, like [`HubClient::post`]. Use it for a setting, which a second
    /// send sets to the same value.
    pub async fn put_json(&self, url: &str, body: Vec<u8>) -> Result<Fetched, HubError> {
        let ask = Ask::put("application/json", body.into());
        self.send(url, &ask).await
    }

    /// DELETEs `url` on the Hub, paced and retried like a GET.
    pub async fn delete(&self, url: &str) -> Result<(), HubError> {
        self.send(url, &Ask::delete()).await.map(drop)
    }

    /// Does what [`HubClient::delete`] does, but an object already gone (404) is no error.
    pub async fn delete_unless_gone(&self, url: &str) -> Result<(), HubError> {
        match self.delete(url).await {
            Err(HubError::Status { status: reqwest::StatusCode::NOT_FOUND, .. }) => Ok(()),
            done => done,
        }
    }

    /// Sends `ask` to `url` in the API bucket and reads the answer (at most 1 MiB).
    async fn send(&self, url: &str, ask: &Ask<'_>) -> Result<Fetched, HubError> {
        match self.exchange(Bucket::Api, url, ask, Some(BodyLimit::Whole(SMALL_CAP))).await? {
            Exchange::Read(fetched) => Ok(fetched),
            Exchange::Open(_) => Err(HubError::Malformed { url: url.to_owned(), detail: "unread body".into() }),
        }
    }

    /// Returns the token as an `Authorization` header for a request to `url` on the Hub; none for another
    /// origin.
    pub fn auth_headers(&self, url: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let token = self.config.token.as_ref().filter(|_| super::same_origin(url, &self.config.endpoint));
        if let Some(mut value) = token.and_then(|t| HeaderValue::from_str(&format!("Bearer {}", t.expose())).ok()) {
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        headers
    }
}
