//! Kernel per-packet cost (`cargo xtask bench` runs this as root): each representative frame
//! through our XDP program with BPF_PROG_TEST_RUN `repeat` times, next to a baseline XDP program
//! that only returns XDP_PASS, measured in the same run. Prints ns/packet, the ratio to the
//! baseline, and the per-packet time budget at 100 and 400 Gb/s line rate for that frame size.
//! Numbers, not assertions: these machines are shared and noisy.

use roce_observer::source::kernel::{BenchProgram, KernelOptions, KernelSource};

fn frame(opcode: u8, ext: &[u8], payload: usize, tos: u8) -> Vec<u8> {
    let udp_len = 8 + 12 + ext.len() + payload + 4;
    let ip_len = 20 + udp_len;
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend_from_slice(&[
        0x45,
        tos,
        (ip_len >> 8) as u8,
        ip_len as u8,
        0,
        1,
        0x40,
        0,
        64,
        17,
        0,
        0,
    ]);
    f.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
    f.extend_from_slice(&[
        0xc0,
        0x01,
        0x12,
        0xb7,
        (udp_len >> 8) as u8,
        udp_len as u8,
        0,
        0,
    ]);
    f.extend_from_slice(&[opcode, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0x10, 0x00]);
    f.extend_from_slice(ext);
    f.resize(f.len() + payload + 4, 0);
    f
}

fn pfc_frame() -> Vec<u8> {
    let mut f = vec![
        0x01, 0x80, 0xc2, 0, 0, 1, 2, 0, 0, 0, 0, 1, 0x88, 0x08, 0x01, 0x01, 0, 0xff,
    ];
    for _ in 0..8 {
        f.extend_from_slice(&[0xff, 0xff]);
    }
    f.resize(60, 0);
    f
}

fn main() -> anyhow::Result<()> {
    let repeat: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "UD SEND_ONLY 4096 B (data path, no event)",
            frame(0x64, &[0; 8], 4096, 0x6a),
        ),
        (
            "UD SEND_ONLY 64 B (data path, no event)",
            frame(0x64, &[0; 8], 64, 0x6a),
        ),
        (
            "RC ACKNOWLEDGE (AETH, latency lookup)",
            frame(0x11, &[0x1f, 0, 0, 1], 0, 0x68),
        ),
        (
            "RC WRITE_MIDDLE resent (retransmit event)",
            frame(0x07, &[], 1024, 0x6a),
        ),
        (
            "CNP (one event each; ring fills in a storm)",
            frame(0x81, &[], 16, 0xc0),
        ),
        ("PFC XOFF, 8 priorities (map + event)", pfc_frame()),
        ("non-RoCE UDP (parse only)", {
            let mut f = frame(0x04, &[], 64, 0);
            f[36] = 0x30; // destination port 12345
            f[37] = 0x39;
            f
        }),
    ];
    let mut src = KernelSource::load(&KernelOptions::default())?;
    println!("kernel per-packet cost, {repeat} runs per case (BPF_PROG_TEST_RUN timing)");
    println!(
        "{:<46} {:>6} {:>9} {:>9} {:>7} {:>10} {:>10}",
        "case", "bytes", "ours ns", "base ns", "ratio", "100G ns", "400G ns"
    );
    for (name, f) in &cases {
        let ours = src.bench(BenchProgram::Xdp, f, repeat)?.as_nanos() as f64;
        let base = src.bench(BenchProgram::Baseline, f, repeat)?.as_nanos() as f64;
        let wire_bits = (f.len() + 4 + 20) as f64 * 8.0; // + FCS, preamble and gap
        println!(
            "{:<46} {:>6} {:>9.1} {:>9.1} {:>6.1}x {:>10.1} {:>10.1}",
            name,
            f.len(),
            ours,
            base,
            ours / base.max(1.0),
            wire_bits / 100.0,
            wire_bits / 400.0
        );
    }
    let counters = src.read_counters()?;
    println!(
        "ring buffer reserve failures during the run: {} (events lost, counters exact)",
        counters[0][roce_observer_common::Counter::RingbufFull as usize]
    );
    Ok(())
}
