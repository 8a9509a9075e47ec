//! Serves HTTP so that clients cannot lock the listener up. Every connection must send a complete request
//! within the header timeout, counted from its accept or its previous answer. Otherwise it is closed. At most
//! `max_connections` are open. At that limit, the connection that has waited longest without a request is
//! closed to make room. So clients that hold connections open without asking cannot keep out one that asks.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::Service;

/// A listener's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most connections open at once.
    pub max_connections: usize,
    /// How long a connection may go without a complete request, after it opens or after its last answer.
    pub header_timeout: Duration,
    /// How long a request may take to be answered. The body streamed after it does not count.
    pub request_timeout: Duration,
}

impl Default for Limits {
    /// 1,024 connections, 10 s to send a request, 60 s to answer it.
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
        }
    }
}

/// One open connection: how many requests it has in flight, since when it has had none, and how to close it.
#[derive(Debug)]
struct Conn {
    state: Mutex<ConnState>,
    close: Notify,
}

#[derive(Debug)]
struct ConnState {
    in_flight: u64,
    idle_since: Instant,
}

impl Conn {
    fn begin(&self) {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.in_flight += 1;
    }

    fn end(&self) {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.in_flight = s.in_flight.saturating_sub(1);
        if s.in_flight == 0 {
            s.idle_since = Instant::now();
        }
    }

    /// Since when it has been waiting for a request, if it is.
    fn waiting_since(&self) -> Option<Instant> {
        let s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (s.in_flight == 0).then_some(s.idle_since)
    }
}

/// The open connections.
#[derive(Debug, Default)]
struct Registry {
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
}

impl Registry {
    fn add(&self) -> (u64, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            state: Mutex::new(ConnState { in_flight: 0, idle_since: Instant::now() }),
            close: Notify::new(),
        });
        self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, conn.clone());
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
    }

    fn len(&self) -> usize {
        self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Closes the connection that has waited longest for a request. Returns `false` if every one is busy. The
    /// closed connection leaves the registry at once, so a burst of new connections closes as many old ones.
    fn evict_oldest_waiting(&self) -> bool {
        let mut conns = self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let oldest = conns.iter().filter_map(|(id, c)| c.waiting_since().map(|t| (t, *id))).min_by_key(|(t, _)| *t);
        match oldest.and_then(|(_, id)| conns.remove(&id)) {
            Some(c) => {
                c.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// Closes every connection that has waited longer than `timeout` for a request.
    fn close_stale(&self, timeout: Duration) {
        let now = Instant::now();
        self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|_, c| {
            let stale = c.waiting_since().is_some_and(|t| now.saturating_duration_since(t) > timeout);
            if stale {
                c.close.notify_one();
            }
            !stale
        });
    }
}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves. Then it closes the connections still
/// open.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let registry = Arc::new(Registry::default());
    let stop = Arc::new(Notify::new());
    let reaper = {
        let (registry, stop) = (registry.clone(), stop.clone());
        tokio::spawn(async move {
            let tick = (limits.header_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
            loop {
                tokio::select! {
                    () = tokio::time::sleep(tick) => registry.close_stale(limits.header_timeout),
                    () = stop.notified() => return,
                }
            }
        })
    };
    let app = app.layer(axum::middleware::from_fn(move |req: Request, next: axum::middleware::Next| async move {
        match tokio::time::timeout(limits.request_timeout, next.run(req)).await {
            Ok(response) => response,
            Err(_) => {
                use axum::response::IntoResponse;
                (axum::http::StatusCode::SERVICE_UNAVAILABLE, "the request took too long to answer").into_response()
            }
        }
    }));
    tokio::pin!(shutdown);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors, or a reset before accept. Wait a little rather than spin.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if registry.len() >= limits.max_connections && !registry.evict_oldest_waiting() {
            // Every connection is answering a request. Refuse this one rather than queue it.
            drop(stream);
            continue;
        }
        let (id, conn) = registry.add();
        let registry = registry.clone();
        let service = Tracked { inner: app.clone(), conn: conn.clone() };
        tasks.spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            let connection = http.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                () = conn.close.notified() => {}
            }
            registry.remove(id);
        });
        // Reap finished connection tasks so the set does not grow with every connection ever served.
        while tasks.try_join_next().is_some() {}
    }
    stop.notify_one();
    let _ = reaper.await;
    tasks.shutdown().await;
    Ok(())
}

/// The router as a hyper service that marks its connection busy from a request's arrival until its response
/// body is sent.
#[derive(Clone)]
struct Tracked {
    inner: Router,
    conn: Arc<Conn>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        self.conn.begin();
        let guard = Busy(self.conn.clone());
        let mut router = self.inner.clone();
        Box::pin(async move {
            let response = router.call(req.map(Body::new)).await?;
            Ok(response.map(|body| Body::new(GuardedBody { inner: body, _busy: guard })))
        })
    }
}

/// Marks the connection idle again when dropped. It drops with the response body, once sent or abandoned.
struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

struct GuardedBody {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for GuardedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn start(limits: Limits) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", axum::routing::get(|| async { "ok\n" }));
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(serve(listener, app, limits, async move {
            let _ = rx.await;
        }));
        (addr, tx)
    }

    async fn get(addr: std::net::SocketAddr) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn half_requests_are_closed_after_the_header_timeout() {
        let limits = Limits { header_timeout: Duration::from_millis(300), ..Limits::default() };
        let (addr, _stop) = start(limits).await;
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nhost:").await.unwrap();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "closed, not left open: {read:?}");
        assert!(get(addr).await.ends_with("ok\n"));
    }

    #[tokio::test]
    async fn idle_clients_at_the_limit_make_room_for_one_that_asks() {
        let limits = Limits { max_connections: 8, header_timeout: Duration::from_secs(60), ..Limits::default() };
        let (addr, _stop) = start(limits).await;
        let mut idle = Vec::new();
        for _ in 0..32 {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            idle.push(s);
        }
        let answered = tokio::time::timeout(Duration::from_secs(5), get(addr)).await.expect("answered at once");
        assert!(answered.ends_with("ok\n"), "{answered}");
        // The limit holds through the burst. All but the newest few were closed to make room.
        let mut closed = 0;
        for s in &mut idle {
            let mut buf = [0u8; 1];
            if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
                closed += 1;
            }
        }
        assert!(closed >= 32 - 8, "{closed} of 32 closed with a limit of 8");
    }
}
