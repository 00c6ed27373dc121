//! `cargo xtask demo`: set up, build, create a throwaway network namespace with a veth pair,
//! replay the bundled mixed capture into one end in a loop (roce-replay: like tcpreplay --loop,
//! but each pass continues the PSN sequences instead of repeating them), and run the observer
//! on both ends. Everything is removed on exit, Ctrl-C included.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{
    setup,
    util::{cargo, is_root, sh, workspace_root},
};

#[derive(Args)]
pub struct DemoOpts {
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    pub duration: Option<u64>,
    /// Replay rate in packets per second.
    #[arg(long, default_value_t = 2000)]
    pub pps: u32,
    /// Capture to replay (default: tests/fixtures/mixed_demo.pcap).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Plain periodic table instead of the terminal UI.
    #[arg(long)]
    pub no_tui: bool,
}

/// A namespace with a veth pair, deleted on drop (deleting the namespace removes the pair).
struct DemoNet {
    ns: String,
    replay: Option<Child>,
}

impl Drop for DemoNet {
    fn drop(&mut self) {
        if let Some(mut child) = self.replay.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

fn ns_cmd(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

pub fn run(opts: &DemoOpts) -> anyhow::Result<()> {
    if !is_root() {
        bail!("the demo creates a network namespace and loads BPF programs: run it as root");
    }
    setup::setup()?;
    let root = workspace_root();
    sh(cargo()
        .current_dir(&root)
        // --bin applies to every -p: name both binaries (with only roce-replay named, the
        // roce-observer binary was not built)
        .args([
            "build",
            "--release",
            "-p",
            "roce-observer",
            "--bin",
            "roce-observer",
        ])
        .args(["-p", "roce-observer-tools", "--bin", "roce-replay"]))?;
    let bin = root.join("target/release/roce-observer");
    let pcap = opts
        .pcap
        .clone()
        .unwrap_or_else(|| root.join("tests/fixtures/mixed_demo.pcap"));
    if !pcap.exists() {
        bail!(
            "{} not found (regenerate with `cargo xtask fixtures`)",
            pcap.display()
        );
    }

    let ns = format!("ro-demo-{}", std::process::id());
    sh(Command::new("ip").args(["netns", "add", &ns]))?;
    let mut net = DemoNet {
        ns: ns.clone(),
        replay: None,
    };
    for args in [
        vec![
            "link", "add", "rdemo0", "mtu", "9500", "type", "veth", "peer", "name", "rdemo1",
            "mtu", "9500",
        ],
        vec!["link", "set", "lo", "up"],
    ] {
        sh(ns_cmd(&ns, "ip").args(&args))?;
    }
    for dev in ["rdemo0", "rdemo1"] {
        // No IPv6 autoconfiguration chatter: only the replayed frames cross the pair.
        let _ = ns_cmd(&ns, "sysctl")
            .args(["-qw", &format!("net.ipv6.conf.{dev}.disable_ipv6=1")])
            .status();
        sh(ns_cmd(&ns, "ip").args(["link", "set", dev, "up"]))?;
    }
    let replayer = root.join("target/release/roce-replay");
    let replay = ns_cmd(&ns, replayer.to_str().context("non-UTF-8 path")?)
        .arg("rdemo0")
        .arg(&pcap)
        .arg(opts.pps.to_string())
        .stdout(Stdio::null())
        .spawn()
        .context("starting roce-replay")?;
    net.replay = Some(replay);

    let mut observer = ns_cmd(&ns, bin.to_str().context("non-UTF-8 path")?);
    observer.args(["run", "-i", "rdemo0,rdemo1"]);
    if let Some(d) = opts.duration {
        observer.args(["--duration", &d.to_string()]);
    }
    // Without a terminal on stdout the observer prints plain tables by itself.
    if opts.no_tui {
        observer.arg("--no-tui");
    }
    eprintln!(
        "demo: replaying {} on veth rdemo0 -> rdemo1 in namespace {ns}; observer on both \
         (XDP ingress on rdemo1, TC egress on rdemo0). Ctrl-C to stop.",
        pcap.display()
    );
    let mut child = observer.spawn().context("starting roce-observer")?;
    // The observer handles Ctrl-C itself; we only wait for it, then clean up.
    ignore_sigint();
    let status = child.wait()?;
    drop(net);
    if !status.success() {
        bail!("roce-observer exited with {status}");
    }
    Ok(())
}

/// Ignore SIGINT in this process (the child was started before, with the default).
fn ignore_sigint() {
    // SAFETY: setting SIGINT's disposition to SIG_IGN; no handler code runs.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
}
