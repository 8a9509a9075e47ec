//! A Hub that lies: a proxy in front of the simulator that answers as the simulator does, except where a
//! test's rule says otherwise (a crafted header, an edited listing, an endless body). Storage redirects still
//! lead to the simulator's storage origin, as the Hub's lead to its CDN.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;

use crate::sim::world::World;

/// What a rule sees of a request.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    /// The path, percent-encoded as sent.
    pub path: String,
    /// The query, without `?`.
    pub query: String,
}

/// Edits a forwarded JSON body.
pub(crate) type JsonEdit = Box<dyn Fn(&mut Value) + Send + Sync>;

/// How to answer instead of the simulator.
pub(crate) enum Reply {
    /// This status, headers and body.
    Fixed(u16, Vec<(&'static str, String)>, Vec<u8>),
    /// 200 with a body that never ends and no length.
    Endless,
    /// The simulator's answer with these headers set and, if given, its JSON body edited.
    Edit(Vec<(&'static str, String)>, Option<JsonEdit>),
    /// The simulator's answer, forwarded only after this wait.
    Late(std::time::Duration),
}

/// A rule: given the request, an answer, or `None` to let the next rule (or the simulator) answer.
pub(crate) type Rule = Box<dyn Fn(&Req) -> Option<Reply> + Send + Sync>;

struct Inner {
    upstream: String,
    base: Mutex<String>,
    rules: Vec<Rule>,
    http: reqwest::Client,
    /// Requests per path prefix, for assertions.
    seen: Mutex<Vec<Req>>,
}

/// A running proxy; stops with the world's runtime.
pub(crate) struct Proxy {
    /// `http://127.0.0.1:port`: the endpoint to give hubalign.
    pub base_url: String,
    inner: Arc<Inner>,
}

impl Proxy {
    /// Requests whose path contains `part`.
    pub(crate) fn count(&self, part: &str) -> usize {
        self.inner.seen.lock().unwrap().iter().filter(|r| r.path.contains(part)).count()
    }
}

/// Starts a proxy to the world's simulator on the world's runtime.
pub(crate) fn start(world: &World, rules: Vec<Rule>) -> Proxy {
    let inner = Arc::new(Inner {
        upstream: world.endpoint(),
        base: Mutex::new(String::new()),
        rules,
        http: reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap(),
        seen: Mutex::new(Vec::new()),
    });
    let listener = world.runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    *inner.base.lock().unwrap() = base_url.clone();
    let app = axum::Router::new().fallback(handle).with_state(inner.clone());
    world.runtime.spawn(async move { axum::serve(listener, app).await });
    Proxy { base_url, inner }
}

async fn handle(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let req = Req { path: request.uri().path().to_owned(), query: request.uri().query().unwrap_or("").to_owned() };
    inner.seen.lock().unwrap().push(req.clone());
    let reply = inner.rules.iter().find_map(|rule| rule(&req));
    match reply {
        Some(Reply::Fixed(status, headers, body)) => {
            respond(StatusCode::from_u16(status).unwrap(), &headers, Body::from(body))
        }
        Some(Reply::Endless) => {
            let chunk = Bytes::from(vec![b' '; 64 << 10]);
            let endless = futures_util::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
            respond(StatusCode::OK, &[("content-type", "application/json".into())], Body::from_stream(endless))
        }
        Some(Reply::Edit(headers, edit)) => forward(&inner, request, &headers, edit).await,
        Some(Reply::Late(wait)) => {
            tokio::time::sleep(wait).await;
            forward(&inner, request, &[], None).await
        }
        None => forward(&inner, request, &[], None).await,
    }
}

fn respond(status: StatusCode, headers: &[(&'static str, String)], body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    for (k, v) in headers {
        response.headers_mut().insert(HeaderName::from_static(k), HeaderValue::from_bytes(v.as_bytes()).unwrap());
    }
    response
}

async fn forward(
    inner: &Inner,
    request: Request,
    headers: &[(&'static str, String)],
    edit: Option<JsonEdit>,
) -> Response {
    let (parts, body) = request.into_parts();
    let url = format!("{}{}", inner.upstream, parts.uri.path_and_query().map_or("/", |p| p.as_str()));
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let mut out = inner.http.request(parts.method, &url).body(body);
    for (k, v) in &parts.headers {
        if k != "host" {
            out = out.header(k, v);
        }
    }
    let answer = out.send().await.unwrap();
    let status = answer.status();
    let mut response_headers = answer.headers().clone();
    let mut body = answer.bytes().await.unwrap().to_vec();
    if let Some(edit) = edit {
        let mut json: Value = serde_json::from_slice(&body).unwrap();
        edit(&mut json);
        body = serde_json::to_vec(&json).unwrap();
        response_headers.remove("content-length");
    }
    // Pages link to the simulator's own origin; seen through the proxy they link to the proxy.
    let base = inner.base.lock().unwrap().clone();
    if let Some(link) = response_headers.get("link").and_then(|v| v.to_str().ok()).map(str::to_owned) {
        response_headers.insert("link", HeaderValue::from_str(&link.replace(&inner.upstream, &base)).unwrap());
    }
    response_headers.remove("transfer-encoding");
    let mut response = respond(status, headers, Body::from(body));
    for (k, v) in &response_headers {
        if !headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(k.as_str())) {
            response.headers_mut().insert(k, v.clone());
        }
    }
    response
}

/// A rule for requests whose path contains `part`, answering from its `from`-th match on (0: every one).
pub(crate) fn on(part: &'static str, from: u64, reply: impl Fn() -> Reply + Send + Sync + 'static) -> Rule {
    let matched = AtomicU64::new(0);
    Box::new(move |req| {
        if !req.path.contains(part) {
            return None;
        }
        (matched.fetch_add(1, Ordering::SeqCst) >= from).then(&reply)
    })
}

/// A rule for the first request whose path contains `part`, and none after.
pub(crate) fn once(part: &'static str, reply: impl Fn() -> Reply + Send + Sync + 'static) -> Rule {
    let matched = AtomicU64::new(0);
    Box::new(move |req| (req.path.contains(part) && matched.fetch_add(1, Ordering::SeqCst) == 0).then(&reply))
}
