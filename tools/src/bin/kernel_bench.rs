//! Kernel per-packet cost (`cargo xtask bench` runs this as root): each representative frame
//! through our XDP program with BPF_PROG_TEST_RUN `repeat` times, next to a baseline XDP program
//! that only returns XDP_PASS, measured in the same run. Prints ns/packet, the ratio to the
//! baseline, and the per-packet time budget at 100 and 400 Gb/s line rate for that frame size.
//! Then the veth replay (tools/src/veth.rs): steady traffic and a retransmission storm over
//! `QPS` queue pairs (default 1000; 0 skips it), timed by the kernel's BPF statistics. With
//! `ROCE_BENCH_OBSERVER=/path/to/roce-observer` it adds that build's passes and a test-run of
//! the same frames through both builds' XDP and TC programs, interleaved over
//! `ROCE_BENCH_ROUNDS` rounds (default 15; tools/src/side.rs): the before/after comparison
//! that a loaded machine still resolves.
//! Numbers, not assertions: these machines are shared and noisy.
//!
//! After the test-run table: `run --kernel-log` off vs on, the same frames through both, and the
//! programs' size after the verifier (off, the logging code is removed).
//!
//! Last, user space at scale (tools/src/veth.rs): `FLOWS` flows (default 100,000; 0 skips it)
//! in the kernel's map, report ticks as the live loop runs them with a log directory and a
//! metrics file, with nothing, 2% and every flow changed: CPU time per tick and memory per flow.
//!
//! usage: kernel-bench [REPEAT] [QPS] [FLOWS]

use roce_observer::source::kernel::{BenchProgram, KernelOptions, KernelSource};
use roce_observer_common::{
    frames::{Mirror, RoceFrame, mirrored, pfc_frame},
    observe::Stage,
};

/// A frame 192.0.2.1 -> 192.0.2.2 to QP 0x11, PSN 0x1000, from UDP port 49153.
fn frame(opcode: u8, payload: usize, tos: u8) -> RoceFrame {
    RoceFrame {
        tos,
        udp_sport: 0xc001,
        payload,
        ..RoceFrame::new(opcode, 0x11, 0x1000)
    }
}

/// What unwrapping a switch mirror adds: the same 64-byte UD SEND plain and inside each
/// encapsulation, on XDP and TC, with the difference to the plain frame per program.
fn mirror_cost(src: &mut KernelSource, repeat: u32) -> anyhow::Result<()> {
    let plain = frame(0x64, 64, 0x6a).build();
    let cases = [
        ("plain", plain.clone()),
        (
            "ERSPAN II",
            mirrored(&plain, Mirror::Erspan2 { session: 7, seq: 1 }),
        ),
        (
            "ERSPAN III",
            mirrored(&plain, Mirror::Erspan3 { session: 7 }),
        ),
        ("VXLAN", mirrored(&plain, Mirror::Vxlan { vni: 5001 })),
    ];
    println!("\nmirror unwrapping, UD SEND_ONLY 64 B inside (the same frame plain first)");
    println!(
        "{:<12} {:>6} {:>9} {:>10} {:>9} {:>10}",
        "case", "bytes", "XDP ns", "XDP +ns", "TC ns", "TC +ns"
    );
    let mut base = None;
    for (name, f) in &cases {
        let xdp = src.bench(BenchProgram::Xdp, f, repeat)?.as_nanos() as f64;
        let tc = src.bench(BenchProgram::Tc, f, repeat)?.as_nanos() as f64;
        let (bx, bt) = *base.get_or_insert((xdp, tc));
        println!(
            "{:<12} {:>6} {:>9.1} {:>+10.1} {:>9.1} {:>+10.1}",
            name,
            f.len(),
            xdp,
            xdp - bx,
            tc,
            tc - bt
        );
    }
    Ok(())
}

/// `run --kernel-log` off and on, loaded side by side: the same frames through both XDP
/// programs, interleaved, and the programs' size after the verifier (off, it removes the
/// logging code). On, each frame pays the per-CPU first-seen bitmap check.
fn kernel_log_cost(cases: &[(&str, Vec<u8>)], repeat: u32) -> anyhow::Result<()> {
    let load = |on: bool| {
        KernelSource::load(&KernelOptions {
            kernel_log: on,
            ..KernelOptions::default()
        })
    };
    let (mut off, mut on) = (load(false)?, load(true)?);
    println!(
        "\nkernel log (run --kernel-log) off vs on, XDP, same run; program after the verifier: off {} B, on {} B",
        off.xdp_translated_bytes().unwrap_or(0),
        on.xdp_translated_bytes().unwrap_or(0)
    );
    println!(
        "{:<46} {:>9} {:>9} {:>7}",
        "case", "off ns", "on ns", "on/off"
    );
    for (name, f) in cases {
        // Interleaved, the better of two rounds each: the machine is noisy.
        let mut best = (f64::MAX, f64::MAX);
        for _ in 0..2 {
            best.0 = best
                .0
                .min(off.bench(BenchProgram::Xdp, f, repeat)?.as_nanos() as f64);
            best.1 = best
                .1
                .min(on.bench(BenchProgram::Xdp, f, repeat)?.as_nanos() as f64);
        }
        println!(
            "{:<46} {:>9.1} {:>9.1} {:>6.2}x",
            name,
            best.0,
            best.1,
            best.1 / best.0.max(1.0)
        );
    }
    // What the programs logged meanwhile (each frame kind once per CPU): shown, so a reader
    // sees the log works.
    for line in on.take_kernel_log().iter().take(3) {
        println!("  kernel log: {line}");
    }
    Ok(())
}

/// The hash floor and the floor with each of the observer's parts (roce-observer-ebpf/src/
/// floor.rs), one hot flow: the same frame through each, interleaved, the best of three
/// rounds; the observer's XDP program on the same frame for reference.
fn floor_parts_cost(src: &mut KernelSource, f: &[u8], repeat: u32) -> anyhow::Result<()> {
    let parts: Vec<(&str, u8)> = std::iter::once(("hash floor", 0))
        .chain(roce_observer_tools::veth::FLOOR_PARTS)
        .collect();
    let mut floors = Vec::new();
    for &(_, parts) in &parts {
        floors.push(KernelSource::load(&KernelOptions {
            floor_entries: 64,
            floor_parts: parts,
            ..KernelOptions::default()
        })?);
    }
    let mut best = vec![f64::MAX; parts.len()];
    let mut observer = f64::MAX;
    for _ in 0..3 {
        for (floor, best) in floors.iter_mut().zip(&mut best) {
            let ns = floor.bench(BenchProgram::FloorHash, f, repeat)?.as_nanos() as f64;
            *best = best.min(ns);
        }
        let ns = src.bench(BenchProgram::Xdp, f, repeat)?.as_nanos() as f64;
        observer = observer.min(ns);
    }
    println!(
        "\nthe hash floor and its parts, one hot flow, UD SEND_ONLY 64 B (test-run, best of 3 \
         interleaved rounds; the veth tables below time them with cold flows)"
    );
    println!("{:<40} {:>8} {:>8}", "case", "ns", "+ns");
    for ((name, _), ns) in parts.iter().zip(&best) {
        println!("{name:<40} {ns:>8.1} {:>+8.1}", ns - best[0]);
    }
    println!(
        "{:<40} {observer:>8.1} {:>+8.1}",
        "observer",
        observer - best[0]
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let repeat: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "UD SEND_ONLY 4096 B (data path, no event)",
            frame(0x64, 4096, 0x6a).build(),
        ),
        (
            "UD SEND_ONLY 64 B (data path, no event)",
            frame(0x64, 64, 0x6a).build(),
        ),
        (
            "RC ACKNOWLEDGE (AETH, latency lookup)",
            RoceFrame {
                syndrome: 0x1f,
                ..frame(0x11, 0, 0x68)
            }
            .build(),
        ),
        (
            "RC WRITE_MIDDLE resent (retransmit, no event)",
            frame(0x07, 1024, 0x6a).build(),
        ),
        (
            // the CNP's 16 reserved bytes stand where the old builder put 16 bytes of payload
            "CNP (counted in the flow, no event)",
            frame(0x81, 0, 0xc0).build(),
        ),
        (
            "PFC XOFF, 8 priorities (map + event)",
            pfc_frame(1, 0x00ff, [0xffff; 8]),
        ),
        (
            "non-RoCE UDP (parse only)",
            RoceFrame {
                udp_dport: 12345,
                ..frame(0x04, 64, 0)
            }
            .build(),
        ),
    ];
    let mut src = KernelSource::load(&KernelOptions::default())?;
    // The same programs stopped after the flow lookup and after the accounting
    // (KernelOptions::stage): what each part of a RoCE packet's work costs.
    let staged = |stage| {
        KernelSource::load(&KernelOptions {
            stage,
            ..KernelOptions::default()
        })
    };
    let (mut lookup, mut accounted) = (staged(Stage::Lookup)?, staged(Stage::Account)?);
    println!("kernel per-packet cost, {repeat} runs per case (BPF_PROG_TEST_RUN timing)");
    println!(
        "{:<46} {:>6} {:>9} {:>9} {:>7} {:>9} {:>9} {:>10} {:>10}",
        "case", "bytes", "ours ns", "base ns", "ratio", "lookup", "account", "100G ns", "400G ns"
    );
    for (name, f) in &cases {
        let ours = src.bench(BenchProgram::Xdp, f, repeat)?.as_nanos() as f64;
        let base = src.bench(BenchProgram::Baseline, f, repeat)?.as_nanos() as f64;
        let upto_lookup = lookup.bench(BenchProgram::Xdp, f, repeat)?.as_nanos() as f64;
        let upto_account = accounted.bench(BenchProgram::Xdp, f, repeat)?.as_nanos() as f64;
        let wire_bits = (f.len() + 4 + 20) as f64 * 8.0; // + FCS, preamble and gap
        println!(
            "{:<46} {:>6} {:>9.1} {:>9.1} {:>6.1}x {:>9.1} {:>9.1} {:>10.1} {:>10.1}",
            name,
            f.len(),
            ours,
            base,
            ours / base.max(1.0),
            upto_lookup,
            upto_account,
            wire_bits / 100.0,
            wire_bits / 400.0
        );
    }
    println!(
        "(lookup, account: ns of the same programs stopped after the flow lookup, after the \
         accounting; RoCE frames only)"
    );
    drop((lookup, accounted));
    mirror_cost(&mut src, repeat)?;
    floor_parts_cost(&mut src, &cases[1].1, repeat)?;
    kernel_log_cost(&cases[..3], repeat)?;
    let counters = src.read_counters()?;
    println!(
        "ring buffer reserve failures in the test-run table: {} (expected: nothing drains the \
         ring while one frame runs {repeat} times, so the table also times the full-ring path; \
         counters stay exact)",
        counters[0][roce_observer_common::Counter::RingbufFull as usize]
    );
    drop(src);
    // Queue-pair counts of the veth replay, comma-separated (0: none).
    let qps: Vec<u32> = std::env::args()
        .nth(2)
        .unwrap_or_else(|| "100,1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&q| q > 0)
        .collect();
    for qps in qps {
        roce_observer_tools::veth::run(qps, (100_000 / qps).max(1))?;
    }
    let user_flows: u32 = std::env::args()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    if user_flows > 0 {
        roce_observer_tools::veth::user_space(user_flows)?;
    }
    Ok(())
}
