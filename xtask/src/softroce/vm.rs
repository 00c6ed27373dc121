//! Running one scenario: two qemu VMs joined by a socket netdev, their shares and configs.

use std::fmt::Write as _;
use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::SoftRoceOpts;
use super::checks::{Summary, check_scenario};
use super::image::{Image, ldd};
use super::scenarios::{CLIENT_IP, SERVER_IP, Scenario};

/// A qemu process started by us; dropped = stopped (by its PID only).
struct Vm {
    pub(super) name: String,
    pub(super) child: Option<Child>,
}

impl Vm {
    fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }
    /// Wait for the VM to power off; Err after `limit`.
    fn wait(&mut self, limit: Duration) -> Result<std::process::ExitStatus> {
        let start = Instant::now();
        let child = self
            .child
            .as_mut()
            .ok_or_else(|| anyhow!("vm already reaped"))?;
        loop {
            if let Some(st) = child.try_wait()? {
                self.child = None;
                return Ok(st);
            }
            if start.elapsed() > limit {
                self.stop();
                bail!(
                    "VM {} did not power off within {}s",
                    self.name,
                    limit.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // `timeout` forwards SIGTERM to qemu; then make sure.
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            for _ in 0..50 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Is something listening on 127.0.0.1:port (from /proc/net/tcp, without connecting)?
fn listening(port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    fs::read_to_string("/proc/net/tcp")
        .map(|s| {
            s.lines().skip(1).any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1] == want && f[3] == "0A"
            })
        })
        .unwrap_or(false)
}

fn start_vm(
    name: &str,
    image: &Image,
    share: &Path,
    netdev: &str,
    mac: &str,
    opts: &SoftRoceOpts,
) -> Result<Vm> {
    let mut cmd = crate::qemu::Guest {
        kernel: &image.kernel,
        initrd: &image.initrd,
        timeout_secs: opts.vm_timeout,
        memory_mb: opts.vm_memory,
        kernel_args: &format!("softroce.vm={name}"),
        share,
        log_dir: share,
    }
    .command()?;
    cmd.args(["-netdev", netdev])
        .args(["-device", &format!("virtio-net-pci,netdev=n0,mac={mac}")]);
    let child = cmd.spawn().context("starting qemu-system-x86_64")?;
    Ok(Vm {
        name: name.to_string(),
        child: Some(child),
    })
}

fn write_config(share: &Path, sc: &Scenario, role: &str, opts: &SoftRoceOpts) -> Result<()> {
    let timeout = opts.vm_timeout;
    let (me, peer) = if role == "server" {
        (SERVER_IP, CLIENT_IP)
    } else {
        (CLIENT_IP, SERVER_IP)
    };
    let mut c = String::new();
    writeln!(c, "ROLE={role}\nMY_IP={me}\nPEER_IP={peer}\nMTU={}", sc.mtu)?;
    writeln!(
        c,
        "PERFTEST={}\nPERFTEST_ARGS=\"{}\"",
        sc.perftest,
        sc.perftest_args()
    )?;
    writeln!(c, "PERFTEST_TIMEOUT={}", timeout.saturating_sub(60).max(30))?;
    let client = role == "client";
    writeln!(
        c,
        "LOSS=\"{}\"",
        if client { sc.loss.unwrap_or("") } else { "" }
    )?;
    writeln!(c, "CAPTURE={}", if client { 1 } else { 0 })?;
    writeln!(c, "EXPECT_QPS={}", sc.qps)?;
    // the server delays its packets to one of the client's QPs (the steps scenarios)
    if let (false, Some((qpn, ms))) = (client, sc.slow_qpn()) {
        writeln!(c, "SLOW_QPN={qpn}\nSLOW_DELAY={ms}ms")?;
    }
    // netem reordering on this VM's egress (the reorder scenarios)
    if let Some(r) = sc.reorder.filter(|r| r.on_server != client) {
        writeln!(c, "NETEM=\"{}\"", r.netem)?;
    }
    // the loss scenarios also capture before netem (pre.pcap): the path view's two points;
    // so do the scenarios reordering the client's requests (what the observer's TC egress sees)
    let pre = client && (sc.loss.is_some() || sc.reorder.is_some_and(|r| !r.on_server));
    writeln!(c, "PRE_CAPTURE={}", if pre { 1 } else { 0 })?;
    if let (true, Some(cmd)) = (client, opts.extra_cmd.as_deref()) {
        let cmd = cmd
            .replace("{pmtu}", &sc.expected_pmtu().to_string())
            .replace("{mtu}", &sc.mtu.to_string())
            // virtio_net refuses native XDP above about 3.5 KB of MTU: generic XDP then
            .replace("{xdp_mode}", if sc.mtu > 3000 { "skb" } else { "auto" })
            .replace("{scenario}", sc.name);
        writeln!(c, "EXTRA_CMD={}", sh_quote(&cmd))?;
        writeln!(c, "EXTRA_WAIT={}", opts.extra_wait)?;
        if let Some(r) = &opts.extra_ready {
            writeln!(c, "EXTRA_READY={}", sh_quote(r))?;
        }
    }
    fs::write(share.join("config.env"), c)?;
    Ok(())
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn stage_extra_bin(bin: &Path, share: &Path) -> Result<()> {
    let dir = share.join("extra");
    fs::create_dir_all(dir.join("lib"))?;
    let name = bin.file_name().ok_or_else(|| anyhow!("bad --extra-bin"))?;
    fs::copy(bin, dir.join(name)).with_context(|| format!("copying {}", bin.display()))?;
    for lib in ldd(bin)? {
        if let Some(n) = lib.file_name() {
            fs::copy(&lib, dir.join("lib").join(n))?;
        }
    }
    Ok(())
}

pub(super) fn run_scenario(
    sc: &Scenario,
    image: &Image,
    dir: &Path,
    opts: &SoftRoceOpts,
) -> Result<Summary> {
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    let (sdir, cdir) = (dir.join("vm-server"), dir.join("vm-client"));
    fs::create_dir_all(&sdir)?;
    fs::create_dir_all(&cdir)?;
    write_config(&sdir, sc, "server", opts)?;
    write_config(&cdir, sc, "client", opts)?;
    if let Some(bin) = &opts.extra_bin {
        stage_extra_bin(bin, &cdir)?;
    }

    let t0 = Instant::now();
    let port = free_port()?;
    let mut server = start_vm(
        "server",
        image,
        &sdir,
        &format!("socket,id=n0,listen=127.0.0.1:{port}"),
        "52:54:00:00:02:01",
        opts,
    )?;
    let wait_listen = Instant::now();
    while !listening(port) {
        if wait_listen.elapsed() > Duration::from_secs(30) {
            bail!(
                "server qemu (pid {}) never listened on 127.0.0.1:{port}; see {}",
                server.pid(),
                sdir.join("qemu.err").display()
            );
        }
        let exited = match server.child.as_mut() {
            Some(c) => c.try_wait()?,
            None => None,
        };
        if let Some(st) = exited {
            server.child = None;
            bail!(
                "server qemu exited early ({st}); see {}",
                sdir.join("qemu.err").display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut client = start_vm(
        "client",
        image,
        &cdir,
        &format!("socket,id=n0,connect=127.0.0.1:{port}"),
        "52:54:00:00:02:02",
        opts,
    )?;
    let limit = Duration::from_secs(opts.vm_timeout + 20);
    let cst = client.wait(limit)?;
    let client_secs = t0.elapsed().as_secs_f64();
    let sst = server.wait(
        limit
            .saturating_sub(t0.elapsed())
            .max(Duration::from_secs(30)),
    )?;
    let wall = t0.elapsed().as_secs_f64();
    if !cst.success() || !sst.success() {
        bail!("qemu exit status: client {cst}, server {sst} (124 = hard timeout)");
    }
    // the capture is the scenario's main artefact
    let cap = dir.join("cap.pcap");
    if cdir.join("cap.pcap").exists() {
        fs::rename(cdir.join("cap.pcap"), &cap)?;
    }
    check_scenario(sc, dir, (wall, client_secs), opts)
}
