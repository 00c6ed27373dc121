//! `run --metrics ADDR`: serve `/metrics` over HTTP/1.1 with hyper on the runtime `run`
//! already drives (bound at start, served once the live loop runs). The run loop publishes each interval's snapshot; a scrape encodes the latest
//! one (so the time a scrape takes is measured and reported in the next).

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{Arc, Mutex},
    time::Instant,
};

use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{ALLOW, CONTENT_TYPE},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpListener, task::JoinHandle};

use super::{CONTENT_TYPE as METRICS_CONTENT_TYPE, Health, render};
use crate::engine::snapshot::Snapshot;

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
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// `PORT` means loopback (127.0.0.1:PORT): exposing flow details to the network is a choice the
/// user makes by naming an address.
pub fn parse_listen(s: &str) -> Result<SocketAddr, ServeError> {
    let s = s.trim();
    if let Ok(port) = s.trim_start_matches(':').parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse::<SocketAddr>()
        .map_err(|_| ServeError::BadAddress(s.to_string()))
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
                ServeError::Bind { addr, source }
            }
        })?;
        let addr = listener.local_addr().unwrap_or(addr);
        Ok(MetricsServer {
            addr,
            shared: Arc::new(Mutex::new(Shared::default())),
            top_flows,
            state: State::Bound(listener),
        })
    }

    /// Start serving on the current tokio runtime (must be called inside one); returns the
    /// address served. Calling it again changes nothing.
    pub fn serve(&mut self) -> Result<SocketAddr, ServeError> {
        let addr = self.addr;
        if let State::Bound(listener) = std::mem::replace(&mut self.state, State::Failed) {
            let listener = listener
                .set_nonblocking(true)
                .and_then(|()| TcpListener::from_std(listener))
                .map_err(|source| ServeError::Bind { addr, source })?;
            let accept = tokio::spawn(accept_loop(listener, self.shared.clone(), self.top_flows));
            self.state = State::Serving(accept);
        } else if matches!(self.state, State::Failed) {
            return Err(ServeError::Bind {
                addr,
                source: std::io::Error::other("serving failed to start earlier"),
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

async fn accept_loop(listener: TcpListener, shared: Arc<Mutex<Shared>>, top_flows: usize) {
    loop {
        // A failed accept (out of file descriptors, a reset connection) only loses that
        // connection; the endpoint keeps listening.
        let Ok((stream, _)) = listener.accept().await else {
            tokio::task::yield_now().await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(respond(&req, &shared, top_flows)) }
            });
            // A client that goes away mid-request is its own problem, not ours.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
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
}
