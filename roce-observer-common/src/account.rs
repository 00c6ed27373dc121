//! Per-packet accounting: applies one parsed RoCE packet to its flow's [`FlowStats`].
//! The kernel calls this on the flow map's value in place; `analyze` calls it on its own table.

pub use crate::atomic::{add, add32};
pub use crate::parse::RocePacket;
use crate::{
    FlowStats, MAX_SPORTS,
    flow::{FLAG_PEER_KNOWN, TRANSPORT_UNSET, nak, nak_class},
    opcode::{self, PsnSpace},
    psn::{PsnVerdict, read_span},
    sequence::{self, Step},
};

/// What a packet did, for the caller to turn into events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub psn: PsnVerdict,
    /// The PSN space `psn` refers to is the response stream.
    pub response: bool,
    /// The packet was accounted as a request (its PSN went through the request stream).
    pub request: bool,
    /// Request PSNs this packet caused to be declared lost: the first and how many (0: none;
    /// `lost_split`: more than that run, path view incomplete). Plain fields copied out of the
    /// step, so that the path events read initialised values: read later from an enum, the
    /// 5.10 verifier saw a read of uninitialised stack on the paths without a payload.
    pub gap_first: u32,
    pub gap_missing: u32,
    pub lost_split: bool,
    pub nak: bool,
    /// A PSN sequence-error NAK (applied to its request flow by `observe`).
    pub nak_seq: bool,
    pub cnp: bool,
    /// This packet completed a retransmission burst / a NAK burst on its flow (set by
    /// `observe`, which keeps the burst windows).
    pub retransmit_burst: bool,
    pub nak_burst: bool,
}

impl Outcome {
    pub const fn zeroed() -> Outcome {
        Outcome {
            psn: PsnVerdict::InOrder,
            response: false,
            request: false,
            gap_first: 0,
            gap_missing: 0,
            lost_split: false,
            nak: false,
            nak_seq: false,
            cnp: false,
            retransmit_burst: false,
            nak_burst: false,
        }
    }
}

/// Load `v` and drop the value: starts bringing its cache line in. In the kernel the flow
/// record is usually out of cache at 1,000 flows and more, and an atomic add waits for its line
/// with everything after it held back (a locked instruction is a full barrier on x86), so the
/// lines a packet adds to are loaded first, in parallel with the first line's miss.
#[inline(always)]
pub(crate) fn touch(v: &u64) {
    // SAFETY: a read of a valid, aligned u64; volatile so that it is not dropped as unused.
    let _ = unsafe { core::ptr::read_volatile(v) };
}

/// Where `account` counts a packet.
enum Counted {
    Cnp,
    OtherTransport,
    Opcode,
}

/// Apply `pkt` to `stats`. `pmtu` sizes READ reservations; `now_ns` is the packet time.
///
/// Plain reads and writes first, atomic adds last (see [`touch`]; PSN anomalies and NAKs are
/// counted where they are found, see `count_psn`). A data packet makes two
/// atomic adds (`bytes`, its opcode count), an ECT-marked ACK too; only Not-ECT or CE
/// marks, NAKs, CNPs and PSN anomalies add more. `packets`, `ecn_ect` and `acks` follow from
/// the kept counters ([`FlowStats::packets`]).
/// `scoreboard`: see `sequence::request`.
#[inline(always)]
pub fn account(
    stats: &mut FlowStats,
    pkt: &RocePacket,
    pmtu: u32,
    window: u32,
    now_ns: u64,
    scoreboard: bool,
) -> Outcome {
    let mut out = Outcome::zeroed();
    let op = (pkt.opcode & 0x1f) as usize;
    touch(&stats.opcodes[op]);
    stats.last_ns = now_ns;
    stats.dscp = pkt.dscp;
    stats.pcp = pkt.pcp;
    note_sport(stats, pkt.udp_sport);

    let transport = opcode::transport(pkt.opcode);
    // Every packet is counted in exactly one of these (FlowStats::packets sums them).
    let counted = if transport == opcode::TRANSPORT_CNP {
        out.cnp = true;
        Counted::Cnp
    } else if stats.transport != TRANSPORT_UNSET && stats.transport != transport {
        Counted::OtherTransport
    } else {
        stats.transport = transport;
        match opcode::psn_space(pkt.opcode) {
            PsnSpace::Request => {
                let span = if opcode::operation(pkt.opcode) == opcode::RDMA_READ_REQUEST {
                    read_span(pkt.dma_len, pmtu)
                } else {
                    1
                };
                if !stats.psn.has_requests() {
                    // Once per flow: where its request PSNs began (path events).
                    stats.req_first = pkt.psn & crate::psn::PSN_MASK;
                }
                let step = sequence::request(stats, pkt.psn, span, window, scoreboard);
                out.request = true;
                take_step(&mut out, step);
            }
            PsnSpace::ReadResponse => {
                let op = opcode::operation(pkt.opcode);
                let continues = op == opcode::RDMA_READ_RESPONSE_MIDDLE
                    || op == opcode::RDMA_READ_RESPONSE_LAST;
                let step = sequence::read_response(stats, pkt.psn, continues, window, scoreboard);
                out.response = true;
                out.psn = step.verdict;
            }
            PsnSpace::Ack => {
                if let Some(class) = nak_class(pkt.syndrome) {
                    add(&mut stats.naks[class], 1);
                    out.nak = true;
                    out.nak_seq = class == nak::PSN_SEQ_ERR;
                }
            }
            PsnSpace::None => {}
        }
        Counted::Opcode
    };
    match counted {
        Counted::Cnp => add(&mut stats.cnp, 1),
        Counted::OtherTransport => add(&mut stats.other_transport, 1),
        Counted::Opcode => add(&mut stats.opcodes[op], 1),
    }
    add(&mut stats.bytes, pkt.frame_len as u64);
    match pkt.ecn {
        0 => add(&mut stats.ecn_not_ect, 1),
        3 => add(&mut stats.ecn_ce, 1),
        _ => {}
    }
    out
}

/// Copy a request's step into the outcome (sequence.rs counted it already).
#[inline(always)]
fn take_step(out: &mut Outcome, step: Step) {
    out.psn = step.verdict;
    out.gap_first = step.lost_first;
    out.gap_missing = step.lost_count;
    out.lost_split = step.lost_split;
}

#[inline(always)]
fn note_sport(stats: &mut FlowStats, port: u16) {
    if port == 0 {
        return;
    }
    // Unrolled on purpose: a bounded, branch-only search the verifier accepts at once.
    let mut i = 0;
    while i < MAX_SPORTS {
        let slot = stats.udp_sports[i];
        if slot == port {
            return;
        }
        if slot == 0 {
            stats.udp_sports[i] = port;
            return;
        }
        i += 1;
    }
    add(&mut stats.udp_sport_overflow, 1);
}

/// Record that `peer_qp` answers this flow.
#[inline(always)]
pub fn learn_peer(stats: &mut FlowStats, peer_qp: u32) {
    stats.peer_qp = peer_qp;
    stats.flags |= FLAG_PEER_KNOWN;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(opcode: u8, psn: u32) -> RocePacket {
        RocePacket {
            opcode,
            psn,
            dst_qp: 0x11,
            ack_req: false,
            dma_len: 0,
            syndrome: 0,
            ecn: 2,
            dscp: 26,
            pcp: 3,
            udp_sport: 49152,
            frame_len: 100,
        }
    }

    #[test]
    fn counts_opcodes_acks_naks_and_cnp() {
        let mut s = FlowStats::zeroed();
        account(&mut s, &pkt(0x04, 1), 4096, 64, 10, true);
        account(
            &mut s,
            &RocePacket {
                syndrome: 0x1f,
                ..pkt(0x11, 1)
            },
            4096,
            64,
            11,
            true,
        );
        account(
            &mut s,
            &RocePacket {
                syndrome: 0x60,
                ..pkt(0x11, 1)
            },
            4096,
            64,
            12,
            true,
        );
        account(
            &mut s,
            &RocePacket {
                syndrome: 0x2a,
                ..pkt(0x11, 1)
            },
            4096,
            64,
            13,
            true,
        );
        account(
            &mut s,
            &RocePacket {
                ecn: 3,
                ..pkt(opcode::OP_CNP, 0)
            },
            4096,
            64,
            14,
            true,
        );
        assert_eq!(s.packets(), 5);
        assert_eq!(s.bytes, 500);
        assert_eq!(s.opcodes[0x04], 1);
        assert_eq!(s.opcodes[0x11], 3);
        assert_eq!(s.acks(), 1);
        assert_eq!(s.naks[nak::PSN_SEQ_ERR], 1);
        assert_eq!(s.naks[nak::RNR], 1);
        assert_eq!(s.cnp, 1);
        assert_eq!((s.ecn_ce, s.ecn_ect(), s.ecn_not_ect), (1, 4, 0));
        assert_eq!(s.last_ns, 14);
        assert_eq!(s.udp_src_ports(), 1);
    }

    #[test]
    fn other_transport_is_counted_apart() {
        let mut s = FlowStats::zeroed();
        account(&mut s, &pkt(0x04, 1), 4096, 64, 0, true);
        account(&mut s, &pkt(0x24, 9), 4096, 64, 0, true);
        assert_eq!(s.other_transport, 1);
        assert_eq!(s.opcodes[4], 1);
        assert_eq!(s.psn_gaps, 0);
    }

    #[test]
    fn sport_set_overflows_after_four() {
        let mut s = FlowStats::zeroed();
        for port in [1u16, 2, 3, 4, 4, 5, 6] {
            account(
                &mut s,
                &RocePacket {
                    udp_sport: port,
                    ..pkt(0x64, 0)
                },
                4096,
                64,
                0,
                true,
            );
        }
        assert_eq!(s.udp_src_ports(), 4);
        assert_eq!(s.udp_sport_overflow, 2);
    }

    #[test]
    fn latency_roles() {
        assert!(
            RocePacket {
                ack_req: true,
                ..pkt(0x0a, 0)
            }
            .wants_timestamp()
        );
        assert!(pkt(0x0c, 0).wants_timestamp());
        assert!(!pkt(0x0a, 0).wants_timestamp());
        assert!(pkt(0x11, 0).answers_request());
        assert!(pkt(0x0d, 0).answers_request());
        assert!(!pkt(0x0e, 0).answers_request());
        // Signals: CNPs and NAKs (any class), not ACKs nor data.
        assert!(pkt(opcode::OP_CNP, 0).is_signal());
        for syndrome in [0x60, 0x20, 0x62] {
            assert!(
                RocePacket {
                    syndrome,
                    ..pkt(0x11, 0)
                }
                .is_signal()
            );
        }
        assert!(
            !RocePacket {
                syndrome: 0x1f,
                ..pkt(0x11, 0)
            }
            .is_signal()
        );
        assert!(!pkt(0x0a, 0).is_signal() && pkt(0x0a, 0).carries_data());
        assert!(pkt(0x64, 0).carries_data() && pkt(0x0d, 0).carries_data());
        assert!(!pkt(0x11, 0).carries_data() && !pkt(opcode::OP_CNP, 0).carries_data());
    }
}
