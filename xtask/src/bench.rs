//! `cargo xtask bench`: how fast and how lean `roce-observer analyze` is, against baselines
//! measured in the same run on the same file. Not a test: it prints figures and ratios.
//!
//! 1. Generates (deterministically, in Rust) a RoCE capture of `--packets` packets over
//!    `--qps` queue pairs into target/bench/: RC SEND_ONLY requests with 1024-byte payloads,
//!    every fourth one with AckReq and answered by an ACK from the responder (so PSN tracking,
//!    latency matching and both flow directions are exercised), 1 us apart.
//! 2. Times `roce-observer analyze --json` (release build), `tshark -n -r FILE -T fields -e
//!    infiniband.bth.destqp -e infiniband.bth.psn` and `tcpdump -r FILE -w /dev/null`, and
//!    prints packets/s of each and the ratios (targets: >= 20x tshark, >= 0.3x tcpdump), plus
//!    the peak RSS of analyze (target <= 64 MB).
//! 3. Repeats analyze on a capture over `--big-qps` queue pairs and reports its peak RSS and
//!    the bytes per flow (RSS growth over the small run divided by the extra flows).

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};

use roce_observer_common::{frames::RoceFrame, opcode};

use crate::util::{cargo, workspace_root};

#[derive(Debug, Clone, clap::Args)]
pub struct BenchOpts {
    /// Packets in the generated captures.
    #[arg(long, default_value_t = 1_000_000)]
    pub packets: u64,
    /// Queue pairs in the main capture.
    #[arg(long, default_value_t = 1_000)]
    pub qps: u32,
    /// Queue pairs in the many-flows capture (0 skips it).
    #[arg(long, default_value_t = 100_000)]
    pub big_qps: u32,
    /// Do not build roce-observer (use the existing target/release binary).
    #[arg(long)]
    pub no_build: bool,
    /// Skip the tshark and tcpdump baselines.
    #[arg(long)]
    pub no_baselines: bool,
}

/// Payload bytes of a data packet.
const PAYLOAD: usize = 1024;

/// Deterministic RoCEv2 traffic: `packets` packets over `qps` QP pairs, written as pcap.
/// Returns the number of packets written.
pub fn generate(path: &Path, packets: u64, qps: u32) -> anyhow::Result<u64> {
    let qps = qps.max(1);
    let file = File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    // pcap header: microsecond timestamps, Ethernet.
    w.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
    w.write_all(&2u16.to_le_bytes())?;
    w.write_all(&4u16.to_le_bytes())?;
    w.write_all(&[0; 8])?;
    w.write_all(&65535u32.to_le_bytes())?;
    w.write_all(&1u32.to_le_bytes())?;

    // Each QP starts at its own PSN, as real QPs do (a fixed multiplicative spread).
    let mut next_psn: Vec<u32> = (0..qps)
        .map(|q| q.wrapping_mul(2_654_435_761) & 0x00ff_ffff)
        .collect();
    let mut sent = vec![0u32; qps as usize];
    // Pending ACK (qp, psn) to send right after its request.
    let mut ack_due: Option<(u32, u32)> = None;
    let mut frame = Vec::with_capacity(2048);
    let mut q: u64 = 0;
    for i in 0..packets {
        let ts = 1_700_000_000_000_000u64 + i; // microseconds
        frame.clear();
        if let Some((qp, psn)) = ack_due.take() {
            // ACK from the responder (qp's peer) to the requester.
            build(&mut frame, qp, true, psn, false, 0);
        } else {
            // Spread consecutive requests over the QPs (a stride coprime with most counts).
            q = (q + 7919) % u64::from(qps);
            let qp = q as u32;
            let psn = next_psn[qp as usize];
            next_psn[qp as usize] = (psn + 1) & 0x00ff_ffff;
            sent[qp as usize] += 1;
            let ack_req = sent[qp as usize].is_multiple_of(4);
            build(&mut frame, qp, false, psn, ack_req, PAYLOAD);
            if ack_req {
                ack_due = Some((qp, psn));
            }
        }
        let len = frame.len() as u32;
        w.write_all(&((ts / 1_000_000) as u32).to_le_bytes())?;
        w.write_all(&((ts % 1_000_000) as u32).to_le_bytes())?;
        w.write_all(&len.to_le_bytes())?;
        w.write_all(&len.to_le_bytes())?;
        w.write_all(&frame)?;
    }
    w.flush()?;
    Ok(packets)
}

/// One RoCEv2 frame of QP pair `qp`: a SEND_ONLY request (requester -> responder) or an ACK
/// (responder -> requester).
fn build(f: &mut Vec<u8>, qp: u32, ack: bool, psn: u32, ack_req: bool, payload: usize) {
    // Hosts: 64 requesters 10.1.0.x talk to 64 responders 10.2.0.x.
    let host = (qp % 64) as u8 + 1;
    let (req_ip, resp_ip) = ([10, 1, 0, host], [10, 2, 0, host]);
    let (src_ip, dst_ip) = if ack {
        (resp_ip, req_ip)
    } else {
        (req_ip, resp_ip)
    };
    // Requester QP 0x10000 + qp, responder QP 0x800000 + qp.
    let (opcode, dest_qp) = if ack {
        (opcode::ACKNOWLEDGE, 0x1_0000 + qp)
    } else {
        (0x04, 0x80_0000 + qp) // RC SEND_ONLY
    };
    RoceFrame {
        dst_mac: [0x02, 0, 0, 0, 0x02, host],
        src_mac: [0x02, 0, 0, 0, 0x01, host],
        src_ip,
        dst_ip,
        // DSCP 26, ECT(0)
        tos: (26 << 2) | 2,
        udp_sport: 49152 + (qp % 16384) as u16,
        ack_req,
        // ACK syndrome (credit field all ones)
        syndrome: 0x1f,
        payload,
        fill: 0x5a,
        ..RoceFrame::new(opcode, dest_qp, psn)
    }
    .build_into(f);
}

fn warm(path: &Path) {
    if let Ok(mut f) = File::open(path) {
        let mut buf = vec![0u8; 1 << 20];
        while matches!(std::io::Read::read(&mut f, &mut buf), Ok(n) if n > 0) {}
    }
}

struct Measured {
    seconds: f64,
    max_rss_kb: u64,
    stdout: Vec<u8>,
}

/// Run `cmd` to completion, timing it and reading its peak RSS from wait4().
fn measure(cmd: &mut Command) -> anyhow::Result<Measured> {
    let shown = format!("{cmd:?}");
    let out_path = std::env::temp_dir().join(format!("roce-bench-{}.out", std::process::id()));
    let out_file = File::create(&out_path).context("temp file for stdout")?;
    let start = Instant::now();
    let child = cmd
        .stdout(out_file)
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("could not start {shown}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be overwritten by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped; status and usage point to live locals.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let seconds = start.elapsed().as_secs_f64();
    if rc != pid {
        bail!("wait4 on {shown} failed");
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{shown} failed (wait status {status})");
    }
    let stdout = std::fs::read(&out_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    Ok(Measured {
        seconds,
        max_rss_kb: usage.ru_maxrss as u64,
        stdout,
    })
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn flows_in(doc: &[u8]) -> u64 {
    serde_json::from_slice::<serde_json::Value>(doc)
        .ok()
        .and_then(|v| v["summary"]["flows"].as_u64())
        .unwrap_or(0)
}

pub fn run(opts: &BenchOpts) -> anyhow::Result<()> {
    let root = workspace_root();
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    if !opts.no_build {
        crate::util::sh(cargo().current_dir(&root).args([
            "build",
            "--release",
            "--package",
            "roce-observer",
        ]))?;
    }
    let bin: PathBuf = root.join("target/release/roce-observer");
    if !bin.exists() {
        bail!("{} is missing: run without --no-build", bin.display());
    }

    let main = dir.join(format!("roce-{}p-{}qp.pcap", opts.packets, opts.qps));
    let t = Instant::now();
    generate(&main, opts.packets, opts.qps)?;
    let size = std::fs::metadata(&main).map(|m| m.len()).unwrap_or(0);
    println!(
        "capture: {} ({} packets, {} QP pairs, {:.0} MB) generated in {:.2} s",
        main.display(),
        opts.packets,
        opts.qps,
        size as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    // Warm the page cache so every tool reads from memory (streamed: a child's peak RSS as
    // reported by wait4 starts from this process's RSS at fork time).
    warm(&main);

    let pps = |m: &Measured| opts.packets as f64 / m.seconds;
    let analyze = measure(Command::new(&bin).arg("analyze").arg("--json").arg(&main))?;
    let small_flows = flows_in(&analyze.stdout);
    println!(
        "analyze : {:>8.3} s  {:>12.0} packets/s  peak RSS {:>6.1} MB  ({} flows)",
        analyze.seconds,
        pps(&analyze),
        analyze.max_rss_kb as f64 / 1024.0,
        small_flows
    );
    if !opts.no_baselines {
        if have("tshark") {
            let tshark = measure(Command::new("tshark").args(["-n", "-r"]).arg(&main).args([
                "-T",
                "fields",
                "-e",
                "infiniband.bth.destqp",
                "-e",
                "infiniband.bth.psn",
            ]))?;
            let lines = tshark.stdout.iter().filter(|b| **b == b'\n').count();
            println!(
                "tshark  : {:>8.3} s  {:>12.0} packets/s  ({lines} lines)",
                tshark.seconds,
                pps(&tshark)
            );
            println!(
                "  analyze / tshark  = {:>6.1}x  (target >= 20x, stretch 50x)",
                tshark.seconds / analyze.seconds
            );
        } else {
            println!("tshark  : not installed (apt-get install tshark)");
        }
        if have("tcpdump") {
            let tcpdump = measure(
                Command::new("tcpdump")
                    .arg("-r")
                    .arg(&main)
                    .args(["-w", "/dev/null"]),
            )?;
            println!(
                "tcpdump : {:>8.3} s  {:>12.0} packets/s",
                tcpdump.seconds,
                pps(&tcpdump)
            );
            println!(
                "  analyze / tcpdump = {:>6.2}x  (target >= 1.0x)",
                tcpdump.seconds / analyze.seconds
            );
        } else {
            println!("tcpdump : not installed (apt-get install tcpdump)");
        }
    }
    println!(
        "  analyze peak RSS  = {:.1} MB for {} packets / {} QPs (target <= 64 MB)",
        analyze.max_rss_kb as f64 / 1024.0,
        opts.packets,
        opts.qps
    );

    if opts.big_qps > 0 {
        let big = dir.join(format!("roce-{}p-{}qp.pcap", opts.packets, opts.big_qps));
        generate(&big, opts.packets, opts.big_qps)?;
        warm(&big);
        // Table first: the JSON run's output is held here afterwards, and a child's peak RSS
        // starts from ours at fork time.
        let table = measure(Command::new(&bin).arg("analyze").arg(&big))?;
        println!(
            "many QPs, table output: {:.3} s, peak RSS {:.1} MB",
            table.seconds,
            table.max_rss_kb as f64 / 1024.0
        );
        let m = measure(Command::new(&bin).arg("analyze").arg("--json").arg(&big))?;
        let flows = flows_in(&m.stdout);
        let extra_flows = flows.saturating_sub(small_flows).max(1);
        let extra_kb = m.max_rss_kb.saturating_sub(analyze.max_rss_kb);
        println!(
            "many QPs: {} QP pairs, {} flows: {:.3} s, peak RSS {:.1} MB, {:.0} bytes per flow (RSS growth / extra flows)",
            opts.big_qps,
            flows,
            m.seconds,
            m.max_rss_kb as f64 / 1024.0,
            extra_kb as f64 * 1024.0 / extra_flows as f64
        );
        let _ = std::fs::remove_file(&big);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_frames_are_consistent() {
        let mut f = Vec::new();
        build(&mut f, 5, false, 7, true, PAYLOAD);
        assert_eq!(f.len(), 14 + 20 + 8 + 12 + PAYLOAD + 4);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, f.len() - 14);
        assert_eq!(f[42], 0x04);
        assert_eq!(f[50] & 0x80, 0x80);
        let mut a = Vec::new();
        build(&mut a, 5, true, 7, false, 0);
        assert_eq!(a.len(), 14 + 20 + 8 + 12 + 4 + 4);
        assert_eq!(a[42], 0x11);
    }
}
