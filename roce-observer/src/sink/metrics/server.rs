//! `run --metrics ADDR`: serve `/metrics` over HTTP/1.1 with hyper on the runtime `run`
//! already drives (bound at start, served once the live loop runs). The run loop publishes each
//! interval's snapshot; a scrape encodes the latest one (so the time a scrape takes is measured
//! and reported in the next).
//!
//! Any local user can connect, so no client can starve the endpoint ([`Limits`]):
//! - at most `max_connections` connections are open; at the cap, the connection that has
//!   waited longest for a request (at least `evict_after`) is closed to make room, and
//!   otherwise accepting waits until one ends;
//! - a connection that has not sent a whole request within `idle_timeout` of connecting or of
//!   its last response is closed (idle and slowloris clients, and clients that do not read);
//! - when the process runs out of file descriptors (EMFILE, ENFILE) accepting backs off
//!   (10 ms doubling to 1 s) and the longest-waiting connection is closed, instead of retrying
//!   at once on the same error.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{ALLOW, CONTENT_TYPE},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::Notify,
    task::JoinHandle,
};

use super::{CONTENT_TYPE as METRICS_CONTENT_TYPE, Health, render};
use crate::report::Snapshot;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "`{0}` is not a listen address: give PORT (loopback), HOST:PORT or [IPv6]:PORT, e.g. `--metrics 9470` or `--metrics 0.0.0.0:9470`"
    )]
    BadAddress(String),
    #[error(
        "cannot serve metrics on {addr}: the address is already in use (another exporter or roce-observer?): pick another port with --metrics"
    )]
    InUse { addr: SocketAddr },
    /// The OS error is part of the message, not a source: printed with its cause chain it
    /// would otherwise appear twice.
    #[error(
        "cannot serve metrics on {addr}: {cause}{}",
        bind_advice(.cause)
    )]
    Bind {
        addr: SocketAddr,
        cause: std::io::Error,
    },
}

/// What to do about a refused bind.
fn bind_advice(err: &std::io::Error) -> &'static str {
    match err.kind() {
        std::io::ErrorKind::AddrNotAvailable => {
            " (that address is not one of this host's: give one from `ip addr`, or 0.0.0.0:PORT for all)"
        }
        std::io::ErrorKind::PermissionDenied => {
            " (ports below 1024 need CAP_NET_BIND_SERVICE: pick a higher one, e.g. --metrics 9470)"
        }
        _ => "",
    }
}

/// `PORT` means loopback (127.0.0.1:PORT): exposing flow details to the network is a choice the
/// user makes by naming an address. A host name (`localhost:9470`) is resolved now; its first
/// IPv4 address is used, else its first address.
pub fn parse_listen(s: &str) -> Result<SocketAddr, ServeError> {
    use std::net::ToSocketAddrs as _;
    let s = s.trim();
    if let Ok(port) = s.trim_start_matches(':').parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bad = || ServeError::BadAddress(s.to_string());
    // Only HOST:PORT is looked up (a bare word is no address).
    if !s
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
    {
        return Err(bad());
    }
    let addrs: Vec<SocketAddr> = s.to_socket_addrs().map_err(|_| bad())?.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(bad)
}

/// What keeps the endpoint answering scrapes whatever other local users do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    /// A connection without a whole request this long after connecting or after its last
    /// response is closed.
    pub idle_timeout: Duration,
    /// At the cap, a connection that has waited this long for a request gives its place.
    pub evict_after: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // Far below the unit's LimitNOFILE (and the usual 1,024 default), so connections
            // never take the descriptors the kernel programs need.
            max_connections: 256,
            idle_timeout: Duration::from_secs(10),
            evict_after: Duration::from_secs(1),
        }
    }
}

/// One open connection: since when it waits for a request (None while one is served), and
/// how to close it.
struct Slot {
    waiting_since: Mutex<Option<Instant>>,
    close: Notify,
}

impl Slot {
    fn waiting_since(&self) -> Option<Instant> {
        self.waiting_since.lock().map_or(None, |w| *w)
    }

    fn set_waiting(&self, since: Option<Instant>) {
        if let Ok(mut w) = self.waiting_since.lock() {
            *w = since;
        }
    }
}

/// The open connections.
#[derive(Default)]
struct Connections {
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    next: AtomicU64,
    /// Signalled when a connection ends.
    freed: Notify,
}

impl Connections {
    fn len(&self) -> usize {
        self.slots.lock().map_or(0, |s| s.len())
    }

    fn insert(&self) -> (u64, Arc<Slot>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            waiting_since: Mutex::new(Some(Instant::now())),
            close: Notify::new(),
        });
        if let Ok(mut s) = self.slots.lock() {
            s.insert(id, slot.clone());
        }
        (id, slot)
    }

    fn remove(&self, id: u64) {
        if let Ok(mut s) = self.slots.lock() {
            s.remove(&id);
        }
        self.freed.notify_one();
    }

    /// Close the connection that has waited longest for a request, if it has waited at least
    /// `min`; it stops counting at once. Returns whether one was closed.
    fn evict(&self, min: Duration) -> bool {
        let Ok(mut slots) = self.slots.lock() else {
            return false;
        };
        let now = Instant::now();
        let oldest = slots
            .iter()
            .filter_map(|(id, s)| Some((s.waiting_since()?, *id)))
            .filter(|(since, _)| now.duration_since(*since) >= min)
            .min();
        let Some((_, id)) = oldest else {
            return false;
        };
        if let Some(slot) = slots.remove(&id) {
            slot.close.notify_one();
        }
        true
    }
}

/// Removes a connection from the table when its task ends, however it ends.
struct Registered {
    conns: Arc<Connections>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.conns.remove(self.id);
    }
}

/// What a scrape reads.
#[derive(Default)]
struct Shared {
    snapshot: Option<Arc<Snapshot>>,
    health: Health,
}

/// The endpoint: bound when the command starts, serving once the live loop runs; dropping it
/// stops accepting connections.
pub struct MetricsServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    top_flows: usize,
    limits: Limits,
    state: State,
}

enum State {
    Bound(std::net::TcpListener),
    Serving(JoinHandle<()>),
    Failed,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let State::Serving(accept) = &self.state {
            accept.abort();
        }
    }
}

impl MetricsServer {
    /// Bind now, without a runtime, so a busy port is an error before anything is attached.
    pub fn bind(addr: SocketAddr, top_flows: usize) -> Result<MetricsServer, ServeError> {
        let listener = std::net::TcpListener::bind(addr).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AddrInUse {
                ServeError::InUse { addr }
            } else {
                ServeError::Bind {
                    addr,
                    cause: source,
                }
            }
        })?;
        let addr = listener.local_addr().unwrap_or(addr);
        Ok(MetricsServer {
            addr,
            shared: Arc::new(Mutex::new(Shared::default())),
            top_flows,
            limits: Limits::default(),
            state: State::Bound(listener),
        })
    }

    /// Other limits than the defaults (before [`MetricsServer::serve`]).
    pub fn with_limits(mut self, limits: Limits) -> MetricsServer {
        self.limits = limits;
        self
    }

    /// Start serving on the current tokio runtime (must be called inside one); returns the
    /// address served. Calling it again changes nothing.
    pub fn serve(&mut self) -> Result<SocketAddr, ServeError> {
        let addr = self.addr;
        if let State::Bound(listener) = std::mem::replace(&mut self.state, State::Failed) {
            let listener = listener
                .set_nonblocking(true)
                .and_then(|()| TcpListener::from_std(listener))
                .map_err(|source| ServeError::Bind {
                    addr,
                    cause: source,
                })?;
            let accept = tokio::spawn(accept_loop(
                listener,
                self.shared.clone(),
                self.top_flows,
                self.limits,
            ));
            self.state = State::Serving(accept);
        } else if matches!(self.state, State::Failed) {
            return Err(ServeError::Bind {
                addr,
                cause: std::io::Error::other("serving failed to start earlier"),
            });
        }
        Ok(addr)
    }

    /// The bound address (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve `snap` from now on, with the log's counts when there is a log.
    pub fn publish(&self, snap: Arc<Snapshot>, log: Option<(u64, u64)>) {
        if let Ok(mut s) = self.shared.lock() {
            s.snapshot = Some(snap);
            s.health.log_records_lost = log.map(|l| l.0);
            s.health.log_records_written = log.map(|l| l.1);
        }
    }
}

/// Back-off after running out of file descriptors: doubling from the first to the last.
const FD_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));
/// How often a full table is looked at again for a connection that may give its place.
const FULL_RECHECK: Duration = Duration::from_millis(50);

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Mutex<Shared>>,
    top_flows: usize,
    limits: Limits,
) {
    let conns = Arc::new(Connections::default());
    let mut backoff = FD_BACKOFF.0;
    loop {
        // Room for the next connection before taking it off the backlog.
        while conns.len() >= limits.max_connections && !conns.evict(limits.evict_after) {
            tokio::select! {
                _ = conns.freed.notified() => {}
                _ = tokio::time::sleep(FULL_RECHECK) => {}
            }
        }
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = FD_BACKOFF.0;
                stream
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                // Retrying at once would fail the same way, on a full core: free a descriptor
                // and wait a little.
                conns.evict(Duration::ZERO);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(FD_BACKOFF.1);
                continue;
            }
            // A connection reset before it was accepted only loses that connection.
            Err(_) => {
                tokio::task::yield_now().await;
                continue;
            }
        };
        let (id, slot) = conns.insert();
        let registered = Registered {
            conns: conns.clone(),
            id,
        };
        tokio::spawn(serve_connection(
            stream,
            slot,
            registered,
            shared.clone(),
            top_flows,
            limits,
        ));
    }
}

/// Serve one connection until the client closes it, it stays without a request for
/// `idle_timeout`, or it is evicted.
async fn serve_connection(
    stream: TcpStream,
    slot: Arc<Slot>,
    _registered: Registered,
    shared: Arc<Mutex<Shared>>,
    top_flows: usize,
    limits: Limits,
) {
    let in_service = slot.clone();
    let service = service_fn(move |req| {
        let shared = shared.clone();
        let slot = in_service.clone();
        async move {
            slot.set_waiting(None);
            let resp = respond(&req, &shared, top_flows);
            slot.set_waiting(Some(Instant::now()));
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    loop {
        // While a request is served, look again after a while.
        let deadline = slot.waiting_since().map_or_else(
            || Instant::now() + limits.idle_timeout,
            |since| since + limits.idle_timeout,
        );
        tokio::select! {
            // A client that goes away mid-request is its own problem, not ours.
            _ = &mut conn => return,
            _ = slot.close.notified() => return,
            _ = tokio::time::sleep_until(deadline.into()) => {
                if slot
                    .waiting_since()
                    .is_some_and(|since| since.elapsed() >= limits.idle_timeout)
                {
                    return;
                }
            }
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn respond(
    req: &Request<Incoming>,
    shared: &Mutex<Shared>,
    top_flows: usize,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
        resp.headers_mut()
            .insert(ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    match req.uri().path() {
        "/metrics" => {}
        "/" => {
            return text(
                StatusCode::OK,
                "roce-observer: Prometheus metrics at /metrics\n".into(),
            );
        }
        _ => return text(StatusCode::NOT_FOUND, "not found: try /metrics\n".into()),
    }
    let started = Instant::now();
    let Ok(mut s) = shared.lock() else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "state unavailable\n".into(),
        );
    };
    let Some(snap) = s.snapshot.clone() else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "no snapshot yet: the first arrives after one interval\n".into(),
        );
    };
    s.health.scrapes += 1;
    let body = render(&snap, top_flows, &s.health);
    s.health.last_scrape_seconds = Some(started.elapsed().as_secs_f64());
    let mut resp = text(StatusCode::OK, body);
    resp.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(METRICS_CONTENT_TYPE),
    );
    resp
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("send");
        let mut out = String::new();
        conn.read_to_string(&mut out).expect("read");
        out
    }

    #[test]
    fn an_address_of_another_host_is_refused_once_with_advice() {
        // A documentation address: never one of this host's, so the bind fails and nothing
        // listens or is sent anywhere.
        let addr: SocketAddr = "192.0.2.1:9470".parse().expect("addr");
        let Err(err) = MetricsServer::bind(addr, 10) else {
            panic!("192.0.2.1 is not an address of this host");
        };
        let msg = format!("{:#}", anyhow::Error::new(err));
        assert_eq!(msg.matches("os error").count(), 1, "{msg}");
        assert!(msg.contains("ip addr") && msg.contains("0.0.0.0"), "{msg}");
    }

    #[test]
    fn listen_addresses_default_to_loopback() {
        assert_eq!(
            parse_listen("9470").expect("port"),
            "127.0.0.1:9470".parse().expect("addr")
        );
        assert_eq!(
            parse_listen(":9470").expect("port"),
            "127.0.0.1:9470".parse().expect("addr")
        );
        assert_eq!(
            parse_listen("0.0.0.0:1").expect("addr"),
            "0.0.0.0:1".parse().expect("addr")
        );
        assert_eq!(
            parse_listen("[::1]:2").expect("addr"),
            "[::1]:2".parse().expect("addr")
        );
        assert!(matches!(
            parse_listen("eth0"),
            Err(ServeError::BadAddress(_))
        ));
        // A host name that resolves (from /etc/hosts) to loopback.
        let local = parse_listen("localhost:9470").expect("localhost resolves");
        assert!(local.ip().is_loopback() && local.port() == 9470, "{local}");
        assert!(matches!(
            parse_listen("no-such-host.invalid:9470"),
            Err(ServeError::BadAddress(_))
        ));
    }

    #[test]
    fn serves_the_published_snapshot_and_refuses_a_busy_port() {
        // Worker threads serve while this thread plays the client with blocking sockets.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let any = parse_listen("127.0.0.1:0").expect("addr");
        let mut server = MetricsServer::bind(any, 10).expect("bind");
        let addr = server.local_addr();
        let busy = MetricsServer::bind(addr, 10).err().expect("port in use");
        assert!(matches!(busy, ServeError::InUse { .. }), "{busy}");
        assert!(busy.to_string().contains("--metrics"));
        let _guard = rt.enter();
        assert_eq!(server.serve().expect("serve"), addr);
        assert!(get(addr, "/metrics").starts_with("HTTP/1.1 503"));
        let snap = crate::engine::Engine::new(crate::engine::EngineConfig::default()).snapshot(0);
        server.publish(Arc::new(snap), Some((3, 9)));
        let first = get(addr, "/metrics");
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        assert!(
            first.contains("content-type: text/plain; version=0.0.4"),
            "{first}"
        );
        assert!(
            first.contains("\nroce_observer_log_records_lost_total 3\n"),
            "{first}"
        );
        assert!(first.contains("roce_frames_total{class=\"roce\"} 0"));
        // The second scrape reports how long the first took.
        let second = get(addr, "/metrics");
        assert!(
            second.contains("\nroce_observer_scrapes_total 2\n"),
            "{second}"
        );
        assert!(second.contains("roce_observer_last_scrape_duration_seconds "));
        assert!(get(addr, "/nope").starts_with("HTTP/1.1 404"));
        drop(server);
    }

    /// Whether the server closed `conn` (EOF or reset) within `within`.
    fn closed_within(mut conn: &std::net::TcpStream, within: std::time::Duration) -> bool {
        conn.set_read_timeout(Some(within)).expect("timeout");
        let mut buf = [0u8; 256];
        loop {
            match conn.read(&mut buf) {
                Ok(0) => return true,
                // A response to a request it sent (none of them do) would be bytes.
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }

    /// Many idle and slowloris connections (more than the cap): scrapes are still answered,
    /// at most the cap stays open, and every idle one is closed after the idle timeout.
    #[test]
    fn idle_and_slow_clients_cannot_starve_scrapes() {
        use std::time::{Duration, Instant};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let limits = Limits {
            max_connections: 8,
            idle_timeout: Duration::from_secs(3),
            evict_after: Duration::from_millis(100),
        };
        let any = parse_listen("127.0.0.1:0").expect("addr");
        let mut server = MetricsServer::bind(any, 10)
            .expect("bind")
            .with_limits(limits);
        let addr = server.local_addr();
        let _guard = rt.enter();
        server.serve().expect("serve");
        let snap = crate::engine::Engine::new(crate::engine::EngineConfig::default()).snapshot(0);
        server.publish(Arc::new(snap), None);
        let start = Instant::now();
        // 40 connections that send nothing and 20 that send half a request header.
        let idle: Vec<std::net::TcpStream> = (0..60)
            .map(|i| {
                let mut c = std::net::TcpStream::connect(addr).expect("connect");
                if i >= 40 {
                    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                        .expect("send");
                }
                c
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        for _ in 0..5 {
            let t = Instant::now();
            let got = get(addr, "/metrics");
            assert!(got.starts_with("HTTP/1.1 200"), "{got}");
            assert!(
                t.elapsed() < limits.idle_timeout,
                "a scrape waited for the idle ones"
            );
        }
        // Everything beyond the cap was closed to make room, well before the idle timeout.
        let evicted = idle
            .iter()
            .filter(|c| closed_within(c, Duration::from_millis(20)))
            .count();
        assert!(evicted >= 60 - limits.max_connections, "{evicted} closed");
        assert!(start.elapsed() < limits.idle_timeout);
        // The rest are closed by the idle timeout.
        let open: Vec<_> = idle
            .iter()
            .filter(|c| !closed_within(c, Duration::from_millis(1)))
            .collect();
        let late = open
            .into_iter()
            .filter(|c| !closed_within(c, limits.idle_timeout * 2))
            .count();
        assert_eq!(late, 0, "idle connections left open after the idle timeout");
        assert!(get(addr, "/metrics").starts_with("HTTP/1.1 200"));
        drop(server);
    }
}
