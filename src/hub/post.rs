//! Writes to the Hub's API: a JSON or NDJSON body POSTed, its answer read within a bound.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};

use super::pacing::Bucket;
use super::{Ask, BodyLimit, Exchange, Fetched, HubClient, HubError, SMALL_CAP, describe, status_error};

impl HubClient {
    /// POSTs `body` to `url` on the Hub (the token goes along) and reads the answer (at most 1 MiB), paced,
    /// waited out on 429 and retried like a GET; a non-success status is the Hub's error. Only for requests
    /// that a second send cannot carry out twice (a question, or a commit that names its parent).
    pub async fn post(&self, url: &str, content_type: &str, body: Vec<u8>) -> Result<Fetched, HubError> {
        let ask = Ask::post(content_type, body.into());
        match self.exchange(Bucket::Api, url, &ask, Some(BodyLimit::Whole(SMALL_CAP))).await? {
            Exchange::Read(fetched) => Ok(fetched),
            Exchange::Open(_) => Err(HubError::Malformed { url: url.to_owned(), detail: "unread body".into() }),
        }
    }

    /// Like [`HubClient::post`], but sent once: a failure that leaves it unknown whether the Hub carried it
    /// out (a 5xx, a timeout, a cut connection) is returned, not retried. For a request the Hub would carry
    /// out twice (opening a discussion); only a 429, which the Hub did not act on, is waited out and sent again.
    pub async fn post_once(&self, url: &str, content_type: &str, body: Vec<u8>) -> Result<Fetched, HubError> {
        let ask = Ask::post_once(content_type, body.into());
        match self.exchange(Bucket::Api, url, &ask, Some(BodyLimit::Whole(SMALL_CAP))).await? {
            Exchange::Read(fetched) => Ok(fetched),
            Exchange::Open(_) => Err(HubError::Malformed { url: url.to_owned(), detail: "unread body".into() }),
        }
    }

    /// The token as an `Authorization` header, for a request to `url` on the Hub (none for another origin).
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

impl HubClient {
    /// PUTs the file at `path` (streamed, never held in memory) to a pre-signed storage URL with `headers`;
    /// the Hub's token does not go along to another origin. Sent once: the caller retries the whole upload.
    pub async fn put_file(
        &self,
        url: &str,
        headers: &[(String, String)],
        path: &std::path::Path,
    ) -> Result<u64, HubError> {
        let failed = |detail: String| HubError::Malformed { url: url.to_owned(), detail };
        let file = tokio::fs::File::open(path).await.map_err(|e| failed(format!("{}: {e}", path.display())))?;
        let size = file.metadata().await.map_err(|e| failed(format!("{}: {e}", path.display())))?.len();
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
        let mut req = self.stream_http.put(url).headers(self.auth_headers(url)).body(body);
        req = req.header(reqwest::header::CONTENT_LENGTH, size);
        for (k, v) in headers {
            if let (Ok(k), Ok(v)) = (reqwest::header::HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
                req = req.header(k, v);
            }
        }
        let response = req.send().await.map_err(|e| failed(describe(&e)))?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = self.read_body(response, url, BodyLimit::Prefix(64 << 10)).await.unwrap_or_default();
            let fetched = Fetched { url: url.to_owned(), status, hub_headers: headers.clone(), headers, body };
            return Err(status_error(url, &fetched));
        }
        Ok(size)
    }
}
