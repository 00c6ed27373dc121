//! roce-replay: send a capture out of an interface in a loop (like `tcpreplay --loop`), shifting
//! every PSN space by its own length on each pass so that sequence numbers continue. A plain
//! loop replays old PSNs, and from the second pass on the observer would (rightly) count every
//! packet as a retransmission. Used by `cargo xtask demo`; run it inside the demo's namespace.
//!
//! usage: roce-replay IFACE PCAP [PPS] [PMTU]     (runs until killed)

use std::{cell::Cell, collections::HashMap, net::IpAddr, time::Duration};

use anyhow::{Context as _, bail};
use roce_observer::{
    engine::{Engine, EngineConfig, flows::show_ip},
    wire::SliceView,
};
use roce_observer_common::{
    FlowStats, account,
    headers::{Bth, Header},
    opcode::{self, PsnSpace},
    parse::{Frame, PacketView, parse},
    psn::{PSN_MASK, psn_diff},
};

type FlowId = (IpAddr, IpAddr, u32);

/// A captured frame that remembers where the parser found the BTH (where the PSN is patched).
struct BthView<'a> {
    view: SliceView<'a>,
    bth: Cell<Option<usize>>,
}

impl PacketView for BthView<'_> {
    fn frame_len(&self) -> u32 {
        self.view.frame_len()
    }
    fn load<T: Header>(&self, offset: usize) -> Option<T> {
        self.view.load(offset)
    }
    fn bth_at(&self, offset: usize) {
        self.bth.set(Some(offset));
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        bail!("usage: roce-replay IFACE PCAP [PPS] [PMTU]");
    }
    let (iface, pcap) = (&args[1], std::path::Path::new(&args[2]));
    let pps: u64 = args.get(3).map_or(Ok(2000), |s| s.parse())?;
    let pmtu: u32 = args.get(4).map_or(Ok(4096), |s| s.parse())?;
    let frames = roce_observer_tools::read_frames(pcap)?;

    // Pass 1: each request stream's length (first PSN to the next expected one), and which
    // request stream every response flow answers (the peer QPs the engine learns).
    let mut stats: HashMap<FlowId, (u32, FlowStats)> = HashMap::new();
    // Per frame: (flow, opcode, PSN, BTH offset) of a RoCE frame, parsed once here, not on
    // every pass.
    let mut roce: Vec<Option<(FlowId, u8, u32, usize)>> = Vec::with_capacity(frames.len());
    let mut engine = Engine::new(EngineConfig {
        pmtu,
        pmtu_explicit: true,
        ..EngineConfig::default()
    });
    for f in &frames {
        engine.ingest_frame(0, f, f.len() as u32, 0);
        roce.push(None);
        let view = BthView {
            view: SliceView::new(f, f.len() as u32),
            bth: Cell::new(None),
        };
        if let (
            Frame::Roce {
                src_ip,
                dst_ip,
                pkt,
            },
            Some(bth),
        ) = (parse(&view, 4791), view.bth.get())
        {
            let id = (show_ip(src_ip), show_ip(dst_ip), pkt.dst_qp);
            if let Some(last) = roce.last_mut() {
                *last = Some((id, pkt.opcode, pkt.psn, bth));
            }
            let entry = stats
                .entry(id)
                .or_insert_with(|| (u32::MAX, FlowStats::zeroed()));
            if opcode::psn_space(pkt.opcode) == PsnSpace::Request && entry.0 == u32::MAX {
                entry.0 = pkt.psn;
            }
            let window = roce_observer_common::sequence::DEFAULT_REORDER_WINDOW;
            account(&mut entry.1, &pkt, pmtu, window, 0, true);
        }
    }
    let span: HashMap<FlowId, u32> = stats
        .iter()
        .filter(|(_, (first, _))| *first != u32::MAX)
        .map(|(id, (first, s))| (*id, psn_diff(s.psn.req_expected, *first)))
        .collect();
    // A response flow (B -> A, A's QP) answers the request flow (A -> B, its peer QP).
    let answers: HashMap<FlowId, FlowId> = engine
        .snapshot(0)
        .flows
        .iter()
        .filter_map(|f| {
            Some((
                (f.src_ip, f.dst_ip, f.dst_qp),
                (f.dst_ip, f.src_ip, f.peer_qp?),
            ))
        })
        .collect();
    // Per frame: where its PSN sits, the PSN, and how far each pass shifts it.
    let patches: Vec<Option<(usize, u32, u32)>> = frames
        .iter()
        .zip(&roce)
        .map(|(f, r)| {
            let (id, op, psn, b) = (*r)?;
            let stream = match opcode::psn_space(op) {
                PsnSpace::Request => Some(id),
                PsnSpace::ReadResponse | PsnSpace::Ack => answers.get(&id).copied(),
                PsnSpace::None => None,
            };
            let shift = stream.and_then(|s| span.get(&s)).copied().unwrap_or(0);
            // the parser loaded the whole BTH at `b`, so the PSN bytes are inside the frame
            (b + Bth::LEN <= f.len()).then_some((b, psn, shift))
        })
        .collect();

    // SAFETY: plain socket(2); the descriptor is checked below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if fd < 0 {
        bail!(
            "AF_PACKET socket: {} (needs root)",
            std::io::Error::last_os_error()
        );
    }
    let ifindex = roce_observer::source::kernel::ifindex(iface)
        .with_context(|| format!("no interface {iface}"))?;
    // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set next.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    let gap = Duration::from_nanos(1_000_000_000 / pps.max(1));
    let mut pass: u32 = 0;
    loop {
        for (f, patch) in frames.iter().zip(&patches) {
            let mut buf = f.clone();
            if let Some((b, psn, shift)) = *patch {
                let psn = psn.wrapping_add(shift.wrapping_mul(pass)) & PSN_MASK;
                buf[b + 9..b + 12].copy_from_slice(&psn.to_be_bytes()[1..]);
            }
            // SAFETY: `buf` and `addr` are valid for the lengths given.
            let sent = unsafe {
                libc::sendto(
                    fd,
                    buf.as_ptr().cast(),
                    buf.len(),
                    0,
                    (&raw const addr).cast(),
                    size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            if sent < 0 {
                bail!("send on {iface}: {}", std::io::Error::last_os_error());
            }
            std::thread::sleep(gap);
        }
        pass = pass.wrapping_add(1);
    }
}
