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
    write_timed_pcap(
        path,
        frames.into_iter().enumerate().map(|(i, f)| (i as u64, f)),
    )
}

/// Write `(time in us, frame)` pairs as a pcap (Ethernet).
pub fn write_timed_pcap(
    path: &Path,
    frames: impl IntoIterator<Item = (u64, Vec<u8>)>,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let file = std::fs::File::create(path)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    w.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
    w.write_all(&2u16.to_le_bytes())?;
    w.write_all(&4u16.to_le_bytes())?;
    w.write_all(&[0; 8])?;
    w.write_all(&65535u32.to_le_bytes())?;
    w.write_all(&1u32.to_le_bytes())?;
    for (us, frame) in frames {
        let len = u32::try_from(frame.len())?;
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
    rc_rounds(qps, rounds, payload, Order::InOrder)
}

/// Bursty RC traffic over `qps` queue pairs: every `period_us` each QP sends a burst of 8 to 20
/// requests (the length varies by QP and burst), the QPs' packets interleaved 1 us apart, then
/// all are idle until the next burst (a top-speed replay that pauses, or collective traffic in
/// small messages). Requests as in [`steady_frames`] (every fourth answered by an ACK), PSNs in
/// order; `(time in us, frame)` for [`write_timed_pcap`]. Each burst is one activity run of its
/// flow (run.rs) when the gap after it is above 1 ms.
pub fn bursty_frames(qps: u32, bursts: u32, payload: usize, period_us: u64) -> Vec<(u64, Vec<u8>)> {
    use roce_observer_common::frames::RoceFrame;
    let mut out = Vec::new();
    let mut psn = vec![0u32; qps as usize];
    for burst in 0..bursts {
        let mut t = u64::from(burst) * period_us;
        let len = |qp: u32| 8 + (qp * 7 + burst * 3) % 13;
        for i in 0..20 {
            for qp in 0..qps {
                if i >= len(qp) {
                    continue;
                }
                let p = &mut psn[qp as usize];
                let ack_req = *p % 4 == 3;
                let sport = 49152 + (qp % 1024) as u16;
                out.push((
                    t,
                    RoceFrame {
                        payload,
                        tos: 0x6a,
                        ack_req,
                        udp_sport: sport,
                        ..RoceFrame::new(0x04, 0x100 + qp, *p)
                    }
                    .build(),
                ));
                t += 1;
                if ack_req {
                    out.push((
                        t,
                        RoceFrame {
                            src_ip: [192, 0, 2, 2],
                            dst_ip: [192, 0, 2, 1],
                            tos: 0x6a,
                            syndrome: 0x1f,
                            udp_sport: sport,
                            ..RoceFrame::new(0x11, 0x10000 + qp, *p)
                        }
                        .build(),
                    ));
                    t += 1;
                }
                *p += 1;
            }
        }
    }
    out
}

/// PSN order within each block of four requests of [`sprayed_frames`]: round-robin over paths
/// of different delays delivers a QP's packets in this order (distances 3 and 1, nothing lost).
const SPRAY_ORDER: [u32; 4] = [1, 3, 0, 2];

/// [`steady_frames`] as a fabric that sprays each QP over several paths delivers it: the same
/// flows, PSNs continuing from `psn_base` (after the steady and storm passes: known flows, no
/// resend), each block of four requests arriving in [`SPRAY_ORDER`], nothing lost; the fourth
/// request of a block asks for an ACK of the block's highest PSN. `rounds` is rounded up to a
/// whole block.
pub fn sprayed_frames(
    qps: u32,
    rounds: u32,
    payload: usize,
    psn_base: u32,
) -> impl Iterator<Item = Vec<u8>> {
    rc_rounds(
        qps,
        rounds.div_ceil(4) * 4,
        payload,
        Order::Sprayed(psn_base),
    )
}

/// How the requests of a round arrive: in PSN order from 0, or sprayed from a base PSN.
#[derive(Clone, Copy)]
enum Order {
    InOrder,
    Sprayed(u32),
}

impl Order {
    /// The PSN of the request of `round`, and the PSN its ACK (if asked for) acknowledges.
    fn psns(self, round: u32) -> (u32, u32) {
        match self {
            Order::InOrder => (round, round),
            Order::Sprayed(base) => {
                let block = base + (round & !3);
                (block + SPRAY_ORDER[(round & 3) as usize], block + 3)
            }
        }
    }
}

/// `rounds` requests on each of `qps` RC queue pairs (interleaved), SEND_ONLY with `payload`
/// bytes, every fourth with AckReq and answered by an ACK from the responder.
fn rc_rounds(qps: u32, rounds: u32, payload: usize, order: Order) -> impl Iterator<Item = Vec<u8>> {
    use roce_observer_common::frames::RoceFrame;
    (0..rounds).flat_map(move |round| {
        (0..qps).flat_map(move |qp| {
            let (psn, ack_psn) = order.psns(round);
            let ack_req = round % 4 == 3;
            let request = RoceFrame {
                payload,
                tos: 0x6a,
                ack_req,
                udp_sport: 49152 + (qp % 1024) as u16,
                ..RoceFrame::new(0x04, 0x100 + qp, psn)
            }
            .build();
            let ack = ack_req.then(|| {
                RoceFrame {
                    src_ip: [192, 0, 2, 2],
                    dst_ip: [192, 0, 2, 1],
                    tos: 0x6a,
                    syndrome: 0x1f,
                    udp_sport: 49152 + (qp % 1024) as u16,
                    ..RoceFrame::new(0x11, 0x10000 + qp, ack_psn)
                }
                .build()
            });
            std::iter::once(request).chain(ack)
        })
    })
}

#[cfg(test)]
mod tests {
    use roce_observer::engine::{Engine, EngineConfig};

    use super::{sprayed_frames, steady_frames};

    /// The bench's passes are what its table says: the second steady pass resends every
    /// request, the sprayed pass reorders half of its requests (distances 1 and 3) and loses
    /// and resends nothing.
    #[test]
    fn the_sprayed_pass_reorders_and_loses_nothing() {
        let (qps, rounds) = (3, 8);
        let mut engine = Engine::new(EngineConfig::default());
        let frames = steady_frames(qps, rounds, 64)
            .chain(steady_frames(qps, rounds, 64))
            .chain(sprayed_frames(qps, rounds, 64, rounds));
        for (i, frame) in frames.enumerate() {
            let len = u32::try_from(frame.len()).expect("frame length");
            engine.ingest_frame(1_000 * (i as u64 + 1), &frame, len, 0);
        }
        let report = engine.snapshot(u64::MAX / 2);
        let requests: Vec<_> = report
            .flows
            .iter()
            .filter(|f| f.req_retransmits > 0 || f.reordered > 0)
            .collect();
        assert_eq!(requests.len(), qps as usize, "{:?}", report.flows);
        for f in requests {
            assert_eq!(f.req_retransmits, u64::from(rounds), "storm pass: {f:?}");
            assert_eq!(f.reordered, u64::from(rounds / 2), "sprayed pass: {f:?}");
            assert_eq!(f.reorder_distance_max, 3);
            assert_eq!((f.psn_missing, f.psn_gaps, f.psn_holes), (0, 0, 0));
        }
    }
}
