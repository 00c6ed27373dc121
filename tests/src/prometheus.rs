//! A real Prometheus server (Debian's `prometheus` package) for scrape tests: started inside a
//! test's network namespace on its loopback with a throwaway config and data directory,
//! stopped by its own PID on drop. Plus a small HTTP GET client that connects from inside a
//! namespace (a thread that joins the namespace first), for both Prometheus' API and the
//! observer's /metrics.

use std::{
    io::{Read as _, Write as _},
    os::fd::AsRawFd as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::netns::VethNs;

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Install Debian's `prometheus` package (server + promtool) when missing. `cargo xtask setup`
/// installs it too; this covers `cargo test` run on its own.
pub fn ensure_installed() -> anyhow::Result<()> {
    if installed("prometheus") && installed("promtool") {
        return Ok(());
    }
    let status = Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args([
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            "prometheus",
        ])
        .status()
        .context("running apt-get (Debian package `prometheus`)")?;
    if !status.success() || !installed("promtool") {
        bail!("could not install Debian's `prometheus` package: run `cargo xtask setup` as root");
    }
    Ok(())
}

/// Bring up the namespace's loopback (down in a new namespace).
pub fn loopback_up(ns: &VethNs) -> anyhow::Result<()> {
    let out = ns.exec("ip").args(["link", "set", "lo", "up"]).output()?;
    if !out.status.success() {
        bail!(
            "ip link set lo up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `GET path` on `addr` (host:port) from inside `ns`: (status, body).
pub fn http_get(ns: &VethNs, addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let netns = PathBuf::from("/run/netns").join(&ns.name);
    let addr = addr.to_string();
    let path = path.to_string();
    std::thread::spawn(move || -> anyhow::Result<(u16, String)> {
        let file = std::fs::File::open(&netns).with_context(|| format!("{}", netns.display()))?;
        // SAFETY: setns on this thread only (a thread of our own, ended right after), with an
        // open namespace file descriptor.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("setns: {}", std::io::Error::last_os_error());
        }
        let mut conn = std::net::TcpStream::connect(&addr)?;
        conn.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(conn, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw)?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header end")?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .context("no HTTP status")?;
        Ok((status, body.to_string()))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("HTTP client thread panicked"))?
}

/// Percent-encode a query parameter.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server inside a namespace.
pub struct Prometheus<'ns> {
    ns: &'ns VethNs,
    child: Child,
    dir: PathBuf,
    pub listen: String,
}

impl<'ns> Prometheus<'ns> {
    /// Start scraping `target` (host:port) every second, evaluating `rules` (a rule file) every
    /// second; returns once the API answers.
    pub fn start(
        ns: &'ns VethNs,
        target: &str,
        listen: &str,
        rules: Option<&std::path::Path>,
    ) -> anyhow::Result<Prometheus<'ns>> {
        let dir =
            std::env::temp_dir().join(format!("roce-prom-{}-{}", ns.name, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data"))?;
        let config = dir.join("prometheus.yml");
        let rule_files = rules
            .map(|r| format!("rule_files: ['{}']\n", r.display()))
            .unwrap_or_default();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n{rule_files}scrape_configs:\n  - job_name: roce\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )?;
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let child = ns
            .exec("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={listen}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting prometheus")?;
        let mut prom = Prometheus {
            ns,
            child,
            dir,
            listen: listen.to_string(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, _)) = http_get(ns, listen, "/-/ready") {
                return Ok(prom);
            }
            if let Some(status) = prom.child.try_wait()? {
                bail!("prometheus exited ({status}):\n{}", prom.log());
            }
            if Instant::now() > deadline {
                bail!("prometheus not ready within 60 s:\n{}", prom.log());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query: each result's labels and value.
    pub fn query(&self, expr: &str) -> anyhow::Result<Vec<(Value, f64)>> {
        let (status, body) = http_get(
            self.ns,
            &self.listen,
            &format!("/api/v1/query?query={}", encode(expr)),
        )?;
        let doc: Value =
            serde_json::from_str(&body).with_context(|| format!("{status}: {body}"))?;
        if doc["status"] != "success" {
            bail!("query {expr}: {body}");
        }
        let mut out = Vec::new();
        for r in doc["data"]["result"].as_array().context("result vector")? {
            let v = r["value"][1]
                .as_str()
                .and_then(|s| s.parse::<f64>().ok())
                .context("sample value")?;
            out.push((r["metric"].clone(), v));
        }
        Ok(out)
    }
}

impl Drop for Prometheus<'_> {
    fn drop(&mut self) {
        // SAFETY: signalling the child we started, by its PID (`ip netns exec` execs it).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `promtool check metrics` on `text`: the lint findings (empty when clean).
pub fn promtool_lint(text: &str) -> anyhow::Result<String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting promtool")?;
    child
        .stdin
        .take()
        .context("promtool stdin")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() && report.trim().is_empty() {
        bail!("promtool failed ({})", out.status);
    }
    Ok(report.trim().to_string())
}
