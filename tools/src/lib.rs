//! Programs around roce-observer that are neither the product nor its tests: `roce-replay`
//! (the demo's traffic source, `cargo xtask demo`) and `kernel-bench` (the kernel per-packet
//! cost, `cargo xtask bench`). The library holds what they share with the integration tests.

use std::path::Path;

pub mod side;
pub mod veth;

/// Every frame of a capture, in order (with the capture reader `analyze` uses).
pub fn read_frames(path: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    Ok(read_points(path)?.into_iter().map(|f| f.2).collect())
}

/// Every frame of a capture, in order, with its capture time (ns since the epoch) and its
/// observation point (a pcapng interface; 0 in a pcap).
pub fn read_points(path: &Path) -> anyhow::Result<Vec<(u64, u32, Vec<u8>)>> {
    let file = std::fs::File::open(path)?;
    let mut frames = Vec::new();
    let end = roce_observer::wire::capture::read_capture(
        file,
        |_| {},
        |f| frames.push((f.ts_ns, f.iface, f.to_ethernet())),
    );
    if let Some(err) = end.error {
        anyhow::bail!("{}: {err}", path.display());
    }
    Ok(frames)
}

/// Run `cmd`; an error names the command and carries its stderr.
pub fn sh(cmd: &mut std::process::Command) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let shown = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("starting {shown}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{shown} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Write `frames` as a pcap (microsecond timestamps 1 us apart, Ethernet).
pub fn write_pcap(path: &Path, frames: impl IntoIterator<Item = Vec<u8>>) -> anyhow::Result<()> {
    use std::io::Write as _;
    let file = std::fs::File::create(path)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    w.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
    w.write_all(&2u16.to_le_bytes())?;
    w.write_all(&4u16.to_le_bytes())?;
    w.write_all(&[0; 8])?;
    w.write_all(&65535u32.to_le_bytes())?;
    w.write_all(&1u32.to_le_bytes())?;
    for (i, frame) in frames.into_iter().enumerate() {
        let len = u32::try_from(frame.len())?;
        let us = i as u64;
        for v in [(us / 1_000_000) as u32, (us % 1_000_000) as u32, len, len] {
            w.write_all(&v.to_le_bytes())?;
        }
        w.write_all(&frame)?;
    }
    w.flush()?;
    Ok(())
}

/// Steady RC traffic over `qps` queue pairs, `rounds` requests each (interleaved): SEND_ONLY
/// with `payload` bytes and in-order PSNs, every fourth with AckReq and answered by an ACK from
/// the responder. Replaying it a second time makes every request a retransmission (a go-back-N
/// storm) while the ACKs stay ACKs.
pub fn steady_frames(qps: u32, rounds: u32, payload: usize) -> impl Iterator<Item = Vec<u8>> {
    use roce_observer_common::frames::RoceFrame;
    (0..rounds).flat_map(move |round| {
        (0..qps).flat_map(move |qp| {
            let ack_req = round % 4 == 3;
            let request = RoceFrame {
                payload,
                tos: 0x6a,
                ack_req,
                udp_sport: 49152 + (qp % 1024) as u16,
                ..RoceFrame::new(0x04, 0x100 + qp, round)
            }
            .build();
            let ack = ack_req.then(|| {
                RoceFrame {
                    src_ip: [192, 0, 2, 2],
                    dst_ip: [192, 0, 2, 1],
                    tos: 0x6a,
                    syndrome: 0x1f,
                    udp_sport: 49152 + (qp % 1024) as u16,
                    ..RoceFrame::new(0x11, 0x10000 + qp, round)
                }
                .build()
            });
            std::iter::once(request).chain(ack)
        })
    })
}
