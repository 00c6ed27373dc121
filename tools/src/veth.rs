//! The veth replay part of `kernel-bench`: real packets through a veth pair in a throwaway
//! network namespace, timed by the kernel's own BPF statistics (`run_time_ns / run_cnt`, enabled
//! for the run with BPF_ENABLE_STATS) rather than BPF_PROG_TEST_RUN. Three replays of one
//! capture of steady traffic over many queue pairs, on the receiving end of the pair:
//! 1. the do-nothing XDP program (the baseline), before and after the observer;
//! 2. the observer, first pass: steady traffic (new flows, in-order PSNs, ACKs, latency);
//! 3. the observer, the same capture again: every request is now a retransmission (a go-back-N
//!    storm);
//! 4. the observer, the same flows sprayed (`sprayed_frames`): PSNs go on, each block of four
//!    arrives out of order, nothing lost (the reorder scoreboard's cost).
//!
//! The ring buffer is drained during each replay, as the observer's reader would, and the events
//! drained are counted.
//!
//! The namespace holds only the pair it creates (documentation addresses in the frames) and is
//! deleted on drop; this thread enters it, so `tcpreplay` and the attachments stay inside.

use std::{
    os::fd::AsRawFd as _,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use roce_observer::source::kernel::{BenchProgram, KernelOptions, KernelSource};
use roce_observer_common::{EventKind, floor, observe::Stage};

use crate::{sh, sprayed_frames, steady_frames, write_pcap};

/// A namespace with a veth pair `a` <-> `b`, entered by the calling thread.
struct Netns {
    name: String,
    a: String,
    b: String,
}

impl Netns {
    fn enter() -> anyhow::Result<Netns> {
        let name = format!("rokb{}", std::process::id());
        sh(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = Netns {
            a: format!("{name}a"),
            b: format!("{name}b"),
            name,
        };
        sh(Command::new("ip").args([
            "-n", &ns.name, "link", "add", &ns.a, "type", "veth", "peer", "name", &ns.b,
        ]))?;
        for dev in [&ns.a, &ns.b] {
            // No IPv6: no autoconfiguration frames, only the replayed ones cross the pair.
            sh(Command::new("ip").args([
                "netns",
                "exec",
                &ns.name,
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{dev}.disable_ipv6=1"),
            ]))?;
            sh(Command::new("ip").args(["-n", &ns.name, "link", "set", dev, "up"]))?;
        }
        let file =
            std::fs::File::open(format!("/run/netns/{}", ns.name)).context("open the namespace")?;
        // SAFETY: setns on a namespace file we just opened; it only changes this thread's
        // network namespace (the process is single-threaded here).
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("setns: {}", std::io::Error::last_os_error());
        }
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Per-packet time of `program` over the runs since `before`.
fn per_run(
    src: &KernelSource,
    program: BenchProgram,
    before: (Duration, u64),
) -> anyhow::Result<(f64, u64)> {
    let (time, runs) = src.program_stats(program)?;
    let runs = runs.saturating_sub(before.1);
    let ns = time.saturating_sub(before.0).as_nanos() as f64 / runs.max(1) as f64;
    Ok((ns, runs))
}

/// Events drained, by `EventKind::index`.
type Kinds = [usize; EventKind::ALL.len()];

/// Entries of the floor programs' maps: the hash floor's 65,536 (floor.rs).
const FLOOR_ENTRIES: u32 = 65_536;

/// The hash floor's rows with one of the observer's parts added (roce_observer_common::floor),
/// in the veth tables and kernel-bench's hot-flow table.
pub const FLOOR_PARTS: [(&str, u8); 3] = [
    ("floor + precise clock read", floor::CLOCK),
    ("floor, value of the flow record's size", floor::RECORD),
    ("floor, key from the observer's parser", floor::PARSER),
];

/// Replay `pcap` out of `iface` at top speed while draining the ring buffer every 10 ms, as the
/// observer's reader would (more often than its report tick); returns the replay's duration and
/// the events drained, by kind.
fn replay(src: &mut KernelSource, pcap: &Path, iface: &str) -> anyhow::Result<(Duration, Kinds)> {
    let start = Instant::now();
    let mut child = Command::new("tcpreplay")
        .args(["-q", "--topspeed", "-i", iface])
        .arg(pcap)
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("starting tcpreplay")?;
    let mut events = Kinds::default();
    let mut count = |ev: &roce_observer_common::Event| {
        if let Some(kind) = ev.kind() {
            events[kind.index()] += 1;
        }
    };
    let status = loop {
        src.drain_events(&mut count);
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = start.elapsed();
    if !status.success() {
        bail!("tcpreplay failed: {status}");
    }
    // Let the receiving veth's softirq finish with the last frames.
    std::thread::sleep(Duration::from_millis(300));
    src.drain_events(&mut count);
    Ok((took, events))
}

/// The XDP program of another roce-observer binary: run attached to `iface`, its stats read
/// from the kernel's list of loaded programs (for before/after comparisons with an older build;
/// set `ROCE_BENCH_OBSERVER=/path/to/roce-observer`).
struct External {
    child: std::process::Child,
    prog_id: u32,
    /// Its TC program.
    tc_id: u32,
}

impl External {
    fn start(bin: &str, iface: &str) -> anyhow::Result<External> {
        use std::io::BufRead as _;
        let known: Vec<u32> = loaded_xdp_programs().map(|(id, _)| id).collect();
        let known_tc: Vec<u32> = loaded_tc_programs().collect();
        let mut child = Command::new(bin)
            .args(["run", "-i", iface, "--json"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {bin}"))?;
        let stderr = child.stderr.take().context("stderr")?;
        let mut lines = std::io::BufReader::new(stderr).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("attached") => break,
                Some(_) => {}
                None => bail!("{bin} exited before attaching"),
            }
        }
        // Keep reading its stderr so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        // Its entry programs are the first it loads, so the lowest new ids: a build with the
        // reorder scoreboard also loads tail-call targets whose names the kernel cuts to the
        // same 15 bytes (and whose runs count in the entry program's statistics).
        let prog_id = loaded_xdp_programs()
            .map(|(id, _)| id)
            .filter(|id| !known.contains(id))
            .min()
            .context("its XDP program is not among the loaded programs")?;
        let tc_id = loaded_tc_programs()
            .filter(|id| !known_tc.contains(id))
            .min()
            .context("its TC program is not among the loaded programs")?;
        Ok(External {
            child,
            prog_id,
            tc_id,
        })
    }

    fn stats(&self) -> anyhow::Result<(Duration, u64)> {
        loaded_xdp_programs()
            .find(|(id, _)| *id == self.prog_id)
            .map(|(_, stats)| stats)
            .context("its XDP program is gone")
    }
}

impl Drop for External {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by its pid (SIGINT: a clean exit that detaches).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

/// (id, (run time, runs)) of every loaded roce-observer XDP program (names are cut to 15
/// bytes by the kernel).
fn loaded_xdp_programs() -> impl Iterator<Item = (u32, (Duration, u64))> {
    aya::programs::loaded_programs()
        .flatten()
        .filter(|p| p.name_as_str() == Some("roce_observer_x"))
        .map(|p| (p.id(), (p.run_time(), p.run_count())))
}

/// Ids of every loaded roce-observer TC program (`roce_observer_tc`, cut to 15 bytes).
fn loaded_tc_programs() -> impl Iterator<Item = u32> {
    aya::programs::loaded_programs()
        .flatten()
        .filter(|p| p.name_as_str() == Some("roce_observer_t"))
        .map(|p| p.id())
}

/// The passes of every row: steady, storm (the same capture again), sprayed.
const PASSES: usize = 3;
/// The capture of each pass.
type Pcaps<'a> = [&'a Path; PASSES];

/// The passes of our programs loaded with `opts`: (ns/pkt, runs, events) each.
fn staged(
    opts: &KernelOptions,
    pcaps: Pcaps,
    ns: &Netns,
) -> anyhow::Result<[(f64, u64, usize); PASSES]> {
    let mut src = KernelSource::load(opts)?;
    src.attach(&ns.b, aya::programs::XdpMode::Default)?;
    let mut out = [(0.0, 0, 0); PASSES];
    for (pass, pcap) in out.iter_mut().zip(pcaps) {
        let before = src.program_stats(BenchProgram::Xdp)?;
        let (_, events) = replay(&mut src, pcap, &ns.a)?;
        let (ns_pkt, runs) = per_run(&src, BenchProgram::Xdp, before)?;
        *pass = (ns_pkt, runs, events.iter().sum());
    }
    let _ = src.detach_all();
    Ok(out)
}

/// The passes of a floor program attached to `iface`, with the observer's `parts` added
/// (roce_observer_common::floor; XDP hash floor only) (no events: 0 drained). Fails unless the
/// floor counted RoCE packets of the passes (a floor that skipped frames would time nothing);
/// the do-nothing programs count nothing and are not checked.
fn floor_passes(
    program: BenchProgram,
    parts: u8,
    pcaps: Pcaps,
    ns: &Netns,
    iface: &str,
) -> anyhow::Result<[(f64, u64, usize); PASSES]> {
    let mut src = KernelSource::load(&KernelOptions {
        floor_entries: FLOOR_ENTRIES,
        floor_parts: parts,
        ..KernelOptions::default()
    })?;
    let id = src.attach_baseline(program, iface)?;
    let mut out = [(0.0, 0, 0); PASSES];
    for (pass, pcap) in out.iter_mut().zip(pcaps) {
        let before = src.program_stats(program)?;
        replay(&mut src, pcap, &ns.a)?;
        let (ns_pkt, runs) = per_run(&src, program, before)?;
        *pass = (ns_pkt, runs, 0);
    }
    src.detach_baseline(program, id)?;
    let (hashed, slotted) = src.floor_counts()?;
    let counted = match program {
        BenchProgram::FloorHash | BenchProgram::TcFloorHash => hashed,
        BenchProgram::FloorArray => slotted,
        _ => return Ok(out),
    };
    let runs: u64 = out.iter().map(|pass| pass.1).sum();
    if counted == 0 || counted > runs {
        bail!("{program:?} counted {counted} packets of {runs} frames: not timing a flow count");
    }
    Ok(out)
}

/// TC egress on the sending end, on the same replays: the do-nothing classifier (steady pass),
/// the hash floor as a classifier and the observer's TC program, (ns/pkt, runs, events) each.
/// The TC rows time what the XDP rows time on the receiving end, for the egress program.
fn tc_passes(
    pcaps: Pcaps,
    ns: &Netns,
    qps: u32,
) -> anyhow::Result<[[(f64, u64, usize); PASSES]; 3]> {
    let base = floor_passes(BenchProgram::TcBaseline, 0, pcaps, ns, &ns.a)?;
    let floor = floor_passes(BenchProgram::TcFloorHash, 0, pcaps, ns, &ns.a)?;
    let mut src = KernelSource::load(&KernelOptions {
        max_flows: (4 * qps).max(16384),
        ..KernelOptions::default()
    })?;
    src.attach(&ns.a, aya::programs::XdpMode::Default)?;
    let mut observer = [(0.0, 0, 0); PASSES];
    for (pass, pcap) in observer.iter_mut().zip(pcaps) {
        let before = src.program_stats(BenchProgram::Tc)?;
        let (_, events) = replay(&mut src, pcap, &ns.a)?;
        let (ns_pkt, runs) = per_run(&src, BenchProgram::Tc, before)?;
        *pass = (ns_pkt, runs, events.iter().sum());
    }
    let _ = src.detach_all();
    Ok([base, floor, observer])
}

/// The passes of an external observer binary: (ns/pkt, runs, duration) each.
fn external_passes(
    ext: &External,
    src: &mut KernelSource,
    pcaps: Pcaps,
    ns: &Netns,
) -> anyhow::Result<[(f64, u64, Duration); PASSES]> {
    let mut out = [(0.0, 0, Duration::ZERO); PASSES];
    for (pass, pcap) in out.iter_mut().zip(pcaps) {
        let before = ext.stats()?;
        let (took, _) = replay(src, pcap, &ns.a)?;
        let after = ext.stats()?;
        let runs = after.1.saturating_sub(before.1);
        let ns_pkt = after.0.saturating_sub(before.0).as_nanos() as f64 / runs.max(1) as f64;
        *pass = (ns_pkt, runs, took);
    }
    Ok(out)
}

/// CPU time of this process.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Resident memory of this process, bytes.
fn rss_bytes() -> u64 {
    let pages: u64 = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0);
    pages * 4096
}

/// One SEND_ONLY request of 16 bytes on each of the first `qps` queue pairs of
/// `steady_frames(_, _, 16)`, with PSN `round`: the same flows, counters moved on in order (no
/// gap, no retransmission, so no alert).
fn next_requests(qps: u32, round: u32) -> impl Iterator<Item = Vec<u8>> {
    use roce_observer_common::frames::RoceFrame;
    (0..qps).map(move |qp| {
        RoceFrame {
            payload: 16,
            tos: 0x6a,
            udp_sport: 49152 + (qp % 1024) as u16,
            ..RoceFrame::new(0x04, 0x100 + qp, round)
        }
        .build()
    })
}

/// CPU time of one report tick of the live loop, split into the map read and the whole tick
/// (without the TUI), and what the terminal UI adds on top when it is on.
struct Tick {
    read: Duration,
    whole: Duration,
    tui: Duration,
    flows: usize,
}

/// The terminal UI as `run` drives it on a tick: the snapshot handed to the app (history,
/// order, filter), then one frame drawn. Drawn on ratatui's TestBackend (a 200x50 buffer) rather
/// than a terminal, so the figure is the layout and widget work, not the terminal's writes.
struct Tui {
    app: roce_observer::tui::App,
    terminal: ratatui::Terminal<ratatui::backend::TestBackend>,
}

impl Tui {
    fn new() -> anyhow::Result<Tui> {
        let empty = roce_observer::engine::Engine::new(Default::default()).snapshot(0);
        Ok(Tui {
            app: roce_observer::tui::App::new("bench".into(), empty),
            terminal: ratatui::Terminal::new(ratatui::backend::TestBackend::new(200, 50))?,
        })
    }

    fn tick(&mut self, snap: roce_observer::report::Snapshot) -> anyhow::Result<()> {
        self.app
            .update(roce_observer::tui::Action::Snapshot(Box::new(snap)));
        let app = &self.app;
        self.terminal
            .draw(|f| roce_observer::tui::view::draw(f, app))?;
        Ok(())
    }
}

/// What the live loop does every report interval with `run --no-tui --log-dir D --prom-file F`:
/// read the maps, take the snapshot, write the log batch and the metrics file, start the next
/// interval; then, timed apart, what the terminal UI does with that snapshot.
fn live_tick(
    src: &mut KernelSource,
    engine: &mut roce_observer::engine::Engine,
    outputs: &mut roce_observer::sink::outputs::Outputs,
    tui: Option<&mut Tui>,
) -> anyhow::Result<Tick> {
    let c0 = cpu_time();
    roce_observer::source::kernel::refresh(src, engine)?;
    let c1 = cpu_time();
    let now = roce_observer::sink::logdir::now_ns();
    let snap = engine.report(
        now,
        roce_observer::report::Beside {
            outputs: outputs.health(),
            ..Default::default()
        },
    );
    let c_snap = cpu_time();
    outputs.interval(&snap, &mut std::io::sink())?;
    let c_out = cpu_time();
    engine.begin_interval(now);
    let flows = snap.flows.len();
    let c2 = cpu_time();
    if let Some(tui) = tui {
        tui.tick(snap)?;
    }
    let c_tui = cpu_time();
    if std::env::var_os("ROCE_BENCH_SPLIT").is_some() {
        eprintln!(
            "split: read {:?} snapshot {:?} outputs {:?} interval+drop {:?}",
            c1.saturating_sub(c0),
            c_snap.saturating_sub(c1),
            c_out.saturating_sub(c_snap),
            c2.saturating_sub(c_out)
        );
    }
    Ok(Tick {
        read: c1.saturating_sub(c0),
        whole: c2.saturating_sub(c0),
        tui: c_tui.saturating_sub(c2),
        flows,
    })
}

/// User space at scale: `flows` flows in the kernel's map (one request each, replayed on the
/// veth), then report ticks as the live loop runs them with a log directory and a metrics file:
/// with nothing changed, with 2% of the flows changed and with every flow changed since the
/// last tick (the changes replayed between ticks, outside the timing). Prints CPU ms per tick,
/// the share of a core at a 1 s interval, the tick's ratio to its own map read (the floor: what
/// any reader pays to copy the map out), and user memory per flow. `ROCE_BENCH_SPLIT=1` also
/// prints each tick's CPU time split into map read, snapshot, outputs and interval start.
pub fn user_space(flows: u32) -> anyhow::Result<()> {
    use roce_observer::{
        engine::{Engine, EngineConfig},
        sink::{
            logdir::LogDirConfig,
            metrics::DEFAULT_TOP_FLOWS,
            outputs::{IntervalTables, OutputPlan, Outputs},
        },
    };
    // ROCE_BENCH_TICKS: more ticks per case (for a profiler).
    let ticks: u32 = std::env::var("ROCE_BENCH_TICKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(2);
    let dir = std::env::temp_dir().join(format!("roce-user-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let pcap = dir.join("flows.pcap");
    let run = || -> anyhow::Result<()> {
        write_pcap(&pcap, steady_frames(flows, 1, 16))?;
        let ns = Netns::enter()?;
        let mut src = KernelSource::load(&KernelOptions {
            max_flows: flows + 1024,
            ..KernelOptions::default()
        })?;
        src.attach(&ns.b, aya::programs::XdpMode::Default)?;
        replay(&mut src, &pcap, &ns.a)?;
        let rss0 = rss_bytes();
        let mut engine = Engine::new(EngineConfig::default());
        let mut outputs = Outputs::open(OutputPlan {
            json: false,
            interval_tables: IntervalTables::Off,
            log_dir: Some(LogDirConfig {
                dir: dir.join("logs"),
                max_bytes: 1 << 30,
                max_files: 2,
                max_age_ns: 0,
                full_every_ns: 0,
                observer_id: None,
            }),
            prom_file: Some(dir.join("roce.prom")),
            metrics: None,
            metrics_top_flows: DEFAULT_TOP_FLOWS,
        })?;
        let first = live_tick(&mut src, &mut engine, &mut outputs, None)?;
        println!();
        println!(
            "user space, {} flows in the kernel map: report ticks of `run --no-tui --log-dir D --prom-file F` (map read, snapshot, log batch, metrics file), CPU time of this process; per case {ticks} ticks, the first (the change of case: every rate moves) apart, the mean of the others",
            first.flows
        );
        println!(
            "{:<30} {:>8} {:>9} {:>9} {:>10} {:>12} {:>10} {:>8} {:>9}",
            "case",
            "changed",
            "read ms",
            "tick ms",
            "tick/read",
            "% core @1 s",
            "1st ms",
            "+TUI ms",
            "TUI/tick"
        );
        let row =
            |name: &str, changed: u32, t: &Tick, n: u32, first: Option<Duration>, ui: bool| {
                let (read, whole, tui) = (t.read / n, t.whole / n, t.tui / n);
                let (tui_ms, tui_ratio) = if !ui {
                    ("-".to_string(), "-".to_string())
                } else {
                    (
                        format!("{:.1}", tui.as_secs_f64() * 1e3),
                        format!("{:.2}x", tui.as_secs_f64() / whole.as_secs_f64().max(1e-9)),
                    )
                };
                println!(
                    "{:<30} {:>8} {:>9.1} {:>9.1} {:>9.1}x {:>11.1}% {:>10} {:>8} {:>9}",
                    name,
                    changed,
                    read.as_secs_f64() * 1e3,
                    whole.as_secs_f64() * 1e3,
                    whole.as_secs_f64() / read.as_secs_f64().max(1e-9),
                    whole.as_secs_f64() * 100.0,
                    first.map_or("-".into(), |f| format!("{:.1}", f.as_secs_f64() * 1e3)),
                    tui_ms,
                    tui_ratio,
                );
            };
        row("first tick (every flow new)", flows, &first, 1, None, false);
        let mut round = 0;
        let few = (flows / 50).max(1);
        // The TUI cases come after the memory figure, which stays that of `run --no-tui`.
        let cases = [
            ("nothing changed", 0, false),
            ("every flow changed", flows, false),
            ("2% of the flows changed", few, false),
            ("TUI on, nothing changed", 0, true),
            ("TUI on, 2% changed", few, true),
        ];
        let mut tui = None;
        let mut rss1 = 0;
        // ROCE_BENCH_PROFILE: only the cases a profile of a quiet tick needs.
        let profile = std::env::var_os("ROCE_BENCH_PROFILE").is_some();
        for (name, changed, with_tui) in cases {
            if profile && (changed == flows || with_tui) {
                continue;
            }
            if with_tui && tui.is_none() {
                rss1 = rss_bytes();
                tui = Some(Tui::new()?);
            }
            let mut sum = Tick {
                read: Duration::ZERO,
                whole: Duration::ZERO,
                tui: Duration::ZERO,
                flows: 0,
            };
            let mut first = None;
            for n in 0..ticks {
                if changed > 0 {
                    // Every tick the same flows move on by one PSN (a new capture per round).
                    round += 1;
                    write_pcap(&pcap, next_requests(changed, round))?;
                    replay(&mut src, &pcap, &ns.a)?;
                }
                let t = live_tick(&mut src, &mut engine, &mut outputs, tui.as_mut())?;
                if n == 0 {
                    first = Some(t.whole);
                } else {
                    sum.read += t.read;
                    sum.whole += t.whole;
                    sum.tui += t.tui;
                }
            }
            row(name, changed, &sum, ticks - 1, first, with_tui);
        }
        let _ = src.detach_all();
        println!(
            "user memory {:.0} bytes per flow (RSS growth over the ticks before the TUI cases: engine, cached flow views, log baseline); target: <= 10% of a core at 100,000 flows; +TUI ms: what the terminal UI adds to a tick (snapshot handed to the app, one 200x50 frame drawn on ratatui's TestBackend)",
            rss1.saturating_sub(rss0) as f64 / f64::from(flows.max(1))
        );
        Ok(())
    };
    let result = run();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Run the veth replay over `qps` queue pairs, `rounds` requests each, and print the table.
pub fn run(qps: u32, rounds: u32) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("roce-kernel-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let pcap = dir.join("steady.pcap");
    let sprayed = dir.join("sprayed.pcap");
    let result = write_pcap(&pcap, steady_frames(qps, rounds, 1024))
        .and_then(|()| write_pcap(&sprayed, sprayed_frames(qps, rounds, 1024, rounds)))
        .and_then(|()| run_in_namespace([&pcap, &pcap, &sprayed], qps));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// One pass of the observer: ns per packet, runs, events by kind, replay duration.
#[derive(Clone, Copy)]
struct Pass {
    ns: f64,
    runs: u64,
    events: Kinds,
    took: Duration,
}

/// The pass names, in `Pcaps` order.
const PASS_NAMES: [&str; PASSES] = ["steady", "storm", "sprayed"];

fn run_in_namespace(pcaps: Pcaps, qps: u32) -> anyhow::Result<()> {
    let ns = Netns::enter()?;
    let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enable BPF run-time statistics")?;
    let mut src = KernelSource::load(&KernelOptions {
        max_flows: (4 * qps).max(16384),
        ..KernelOptions::default()
    })?;
    let zero = (Duration::ZERO, 0);
    let steady_pcap = pcaps[0];

    let id = src.attach_baseline(BenchProgram::Baseline, &ns.b)?;
    replay(&mut src, steady_pcap, &ns.a)?;
    let (base1, packets) = per_run(&src, BenchProgram::Baseline, zero)?;
    src.detach_baseline(BenchProgram::Baseline, id)?;
    let after_base = src.program_stats(BenchProgram::Baseline)?;

    src.attach(&ns.b, aya::programs::XdpMode::Default)?;
    let mut passes = Vec::new();
    for pcap in pcaps {
        let before = src.program_stats(BenchProgram::Xdp)?;
        let (took, events) = replay(&mut src, pcap, &ns.a)?;
        let (ns_pkt, runs) = per_run(&src, BenchProgram::Xdp, before)?;
        passes.push(Pass {
            ns: ns_pkt,
            runs,
            events,
            took,
        });
    }
    let lost = src.read_counters()?[0][roce_observer_common::Counter::RingbufFull as usize];
    let _ = src.detach_all();
    let id = src.attach_baseline(BenchProgram::Baseline, &ns.b)?;
    replay(&mut src, steady_pcap, &ns.a)?;
    let (base2, _) = per_run(&src, BenchProgram::Baseline, after_base)?;
    src.detach_baseline(BenchProgram::Baseline, id)?;
    drop(src);

    // The floors: what any exact per-flow count costs on the same replay (floor.rs).
    let mut floors = Vec::new();
    for program in [BenchProgram::FloorHash, BenchProgram::FloorArray] {
        floors.push(floor_passes(program, 0, pcaps, &ns, &ns.b)?);
    }
    // The hash floor with one of the observer's parts each: what that part costs by itself.
    let mut with_part = Vec::new();
    for (_, part) in FLOOR_PARTS {
        with_part.push(floor_passes(
            BenchProgram::FloorHash,
            part,
            pcaps,
            &ns,
            &ns.b,
        )?);
    }

    // The same frames, parsed but not RoCE to this observer (another RoCE port): what reading
    // the headers costs, apart from the flow accounting.
    let parse = staged(
        &KernelOptions {
            roce_port: 1,
            ..KernelOptions::default()
        },
        pcaps,
        &ns,
    )?;
    // The observer stopped part way (KernelOptions::stage): where the per-packet time goes.
    let mut stopped = Vec::new();
    for stage in [Stage::Lookup, Stage::Account] {
        let opts = KernelOptions {
            stage,
            max_flows: (4 * qps).max(16384),
            ..KernelOptions::default()
        };
        stopped.push(staged(&opts, pcaps, &ns)?);
    }
    let (lookup, accounted) = (stopped[0], stopped[1]);
    let tc = tc_passes(pcaps, &ns, qps)?;
    let external = match std::env::var("ROCE_BENCH_OBSERVER") {
        Ok(bin) => {
            let mut src = KernelSource::load(&KernelOptions::default())?;
            let ext = External::start(&bin, &ns.b)?;
            let passes = external_passes(&ext, &mut src, pcaps, &ns)?;
            // Test-run of the same frames through both builds, interleaved (side.rs); rounds
            // from ROCE_BENCH_ROUNDS (default 15).
            let rounds = std::env::var("ROCE_BENCH_ROUNDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(15);
            let theirs = crate::side::Theirs {
                xdp: ext.prog_id,
                tc: ext.tc_id,
            };
            // Without run-time statistics: they add two clock reads to every run.
            drop(stats);
            crate::side::table(&mut src, &theirs, &crate::side::cases(), 200_000, rounds)?;
            Some((bin.clone(), passes))
        }
        Err(_) => None,
    };
    drop(ns);

    let base = (base1 + base2) / 2.0;
    let ratio = |ns_pkt: f64| ns_pkt / base.max(1.0);
    println!();
    println!(
        "veth replay, {qps} queue pairs, {packets} packets per pass, native XDP on the receiving \
         end (kernel BPF stats: run_time_ns / run_cnt); steady = first pass (new flows, in-order \
         PSNs, ACKs, latency samples), storm = the same capture again (every request resent), \
         sprayed = the same flows, PSNs going on, each block of four out of order, nothing lost"
    );
    let mut header = format!("{:<44}", "case");
    for name in PASS_NAMES {
        header += &format!(
            " {:>9} {:>7} {:>8}",
            format!("{name} ns"),
            "ratio",
            "events"
        );
    }
    println!("{header}");
    let mut line = format!("{:<44}", "do-nothing XDP (mean of runs before, after)");
    for _ in PASS_NAMES {
        line += &format!(" {base:>9.1} {:>6.1}x {:>8}", 1.0, "");
    }
    println!("{line}");
    let pct = |events: usize, runs: u64| 100.0 * events as f64 / runs.max(1) as f64;
    let mut observer = [(0.0, 0, 0); PASSES];
    for (row, pass) in observer.iter_mut().zip(&passes) {
        *row = (pass.ns, pass.runs, pass.events.iter().sum());
    }
    let mut rows = vec![
        ("floor: hash map 64k (sip,dip,sport,qp) pk+B", floors[0]),
        ("floor: array-slot count (fixed offsets)", floors[1]),
    ];
    let part_names = FLOOR_PARTS.map(|(name, _)| format!("  {name}"));
    rows.extend(
        part_names
            .iter()
            .map(String::as_str)
            .zip(with_part.iter().copied()),
    );
    rows.extend([
        ("parse only (frames on another UDP port)", parse),
        ("+ flow lookup (stage: lookup)", lookup),
        ("+ accounting, bursts (stage: account)", accounted),
        ("observer (+ latency matching and samples)", observer),
    ]);
    for (name, row) in rows {
        let mut line = format!("{name:<44}");
        for (ns_pkt, runs, events) in row {
            line += &format!(
                " {ns_pkt:>9.1} {:>6.1}x {:>7.2}%",
                ratio(ns_pkt),
                pct(events, runs)
            );
        }
        println!("{line}");
    }
    if let Some((bin, ext)) = external {
        let mut line = format!("{:<44}", "ROCE_BENCH_OBSERVER (another build)");
        for (ns_pkt, _, _) in ext {
            line += &format!(" {ns_pkt:>9.1} {:>6.1}x {:>8}", ratio(ns_pkt), "-");
        }
        println!("{line}");
        let vs: Vec<String> = PASS_NAMES
            .iter()
            .zip(passes.iter().zip(ext))
            .map(|(name, (ours, theirs))| format!("{name} {:.2}x", ours.ns / theirs.0.max(1.0)))
            .collect();
        println!("this build / ROCE_BENCH_OBSERVER: {}", vs.join(", "));
        println!("(ROCE_BENCH_OBSERVER = {bin}, attached as a process that drains its own events)");
    }
    for (name, pass) in PASS_NAMES.iter().zip(&passes) {
        let parts: Vec<String> = EventKind::ALL
            .iter()
            .map(|k| {
                format!(
                    "{} {:.2}%",
                    k.name(),
                    pct(pass.events[k.index()], pass.runs)
                )
            })
            .collect();
        println!(
            "observer events, {name}, % of packets by kind: {}",
            parts.join(", ")
        );
    }
    let floor = floors[0];
    let vs: Vec<String> = PASS_NAMES
        .iter()
        .zip(passes.iter().zip(floor))
        .map(|(name, (pass, floor))| format!("{name} {:.2}x", pass.ns / floor.0.max(1.0)))
        .collect();
    println!(
        "observer XDP / hash floor ({qps} QPs): {} (target <= 1.3x)",
        vs.join(", ")
    );
    for ((name, _), row) in FLOOR_PARTS.iter().zip(&with_part) {
        let vs: Vec<String> = PASS_NAMES
            .iter()
            .zip(row.iter().zip(floor))
            .map(|(pass, (with, floor))| format!("{pass} {:.2}x", with.0 / floor.0.max(1.0)))
            .collect();
        println!("{name} / hash floor: {}", vs.join(", "));
    }
    let rates: Vec<String> = PASS_NAMES
        .iter()
        .zip(&passes)
        .map(|(name, pass)| {
            format!(
                "{name} {:.0} pkts/s",
                pass.runs as f64 / pass.took.as_secs_f64().max(1e-9)
            )
        })
        .collect();
    println!("replay rate: {}", rates.join(", "));
    println!(
        "targets: events <= 1% of packets in every pass; ring buffer reserve failures: {lost}"
    );
    println!(
        "TC egress on the sending end, the same replays ({qps} QPs; kernel BPF stats; ratio to \
         the do-nothing classifier's steady pass)"
    );
    let tc_base = tc[0][0].0;
    for (name, row) in [
        ("do-nothing TC", tc[0]),
        ("floor: hash map 64k, as a TC classifier", tc[1]),
        ("observer TC", tc[2]),
    ] {
        let mut line = format!("{name:<44}");
        for (ns_pkt, runs, events) in row {
            line += &format!(
                " {ns_pkt:>9.1} {:>6.1}x {:>7.2}%",
                ns_pkt / tc_base.max(1.0),
                pct(events, runs)
            );
        }
        println!("{line}");
    }
    let vs: Vec<String> = PASS_NAMES
        .iter()
        .zip(tc[2].iter().zip(tc[1]))
        .map(|(name, (ours, floor))| format!("{name} {:.2}x", ours.0 / floor.0.max(1.0)))
        .collect();
    println!(
        "observer TC / hash floor ({qps} QPs): {} (target <= 1.3x)",
        vs.join(", ")
    );
    Ok(())
}
