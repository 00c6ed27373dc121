//! Per-flow figures of the capture, by the rules of docs/metrics.md (for `analyze` and the
//! observer). Computed here from tshark's decoding, independently of roce-observer's code.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::wire::{PSN_MOD, Pkt, is_read_response, is_request, psn_add, psn_diff, span};

/// A flow: (source IP, destination IP, BTH destination QP).
pub(super) type FlowKey = (String, String, u32);

pub(super) fn flow_label(k: &FlowKey) -> String {
    format!("{}>{} qp {:#x}", k.0, k.1, k.2)
}

/// One flow of the capture, counted as docs/metrics.md defines the flow record.
#[derive(Debug, Default, Clone)]
pub(super) struct WireFlow {
    pub(super) packets: u64,
    pub(super) bytes: u64,
    pub(super) opcodes: BTreeMap<String, u64>,
    pub(super) acks: u64,
    pub(super) naks_psn_seq_err: u64,
    /// every other NAK class (rnr, invalid_request, remote_access, remote_op, other)
    pub(super) naks_other: u64,
    pub(super) req_retransmits: u64,
    pub(super) resp_retransmits: u64,
    pub(super) psn_gaps: u64,
    pub(super) psn_missing: u64,
    pub(super) ecn_ce: u64,
    pub(super) ecn_ect: u64,
    pub(super) udp_src_ports: u64,
    /// distinct request PSNs
    pub(super) distinct_request_psns: u64,
    /// frame lengths seen per opcode name
    pub(super) op_lens: BTreeMap<String, BTreeSet<u32>>,
}

/// The opcode's name as the flow records spell it (`RC_RDMA_WRITE_FIRST`, `CNP`): the names
/// come from the shared table (only names; the wire figures themselves are computed here).
pub(super) fn opcode_name(op: u8) -> String {
    use roce_observer_common::opcode::{OP_CNP, operation_name, transport, transport_name};
    if op == OP_CNP {
        return "CNP".into();
    }
    format!("{}_{}", transport_name(transport(op)), operation_name(op))
}

/// Every flow of the capture (RC traffic: the harness has no other). Request PSN rules start
/// at the first request seen (like `analyze`, which does not know the QP's initial PSN).
pub(super) fn wire_flows(pkts: &[Pkt], pmtu: u64) -> BTreeMap<FlowKey, WireFlow> {
    let mut by_flow: BTreeMap<FlowKey, Vec<&Pkt>> = BTreeMap::new();
    for p in pkts {
        by_flow
            .entry((p.src.clone(), p.dst.clone(), p.dest_qp))
            .or_default()
            .push(p);
    }
    let mut out = BTreeMap::new();
    for (key, pk) in by_flow {
        let mut f = WireFlow::default();
        let mut ports = HashSet::new();
        let mut req_psns = HashSet::new();
        // request PSN space
        let (mut req_expected, mut req_highest): (Option<u32>, Option<u32>) = (None, None);
        // response PSN space (READ responses)
        let (mut resp_highest, mut resp_last): (Option<u32>, Option<u32>) = (None, None);
        for p in pk {
            f.packets += 1;
            f.bytes += p.len as u64;
            match p.ecn {
                3 => f.ecn_ce += 1,
                1 | 2 => f.ecn_ect += 1,
                _ => {}
            }
            if p.udp_sport != 0 {
                ports.insert(p.udp_sport);
            }
            *f.opcodes.entry(opcode_name(p.opcode)).or_default() += 1;
            f.op_lens
                .entry(opcode_name(p.opcode))
                .or_default()
                .insert(p.len);
            if is_request(p.opcode) {
                req_psns.insert(p.psn);
                if req_highest.is_some_and(|h| psn_diff(p.psn, h) <= 0) {
                    f.req_retransmits += 1;
                    continue;
                }
                if let Some(e) = req_expected {
                    let d = psn_diff(p.psn, e);
                    if d > 0 {
                        f.psn_gaps += 1;
                        f.psn_missing += d as u64;
                    }
                }
                req_expected = Some(psn_add(p.psn, span(p, pmtu)));
                req_highest = Some(p.psn);
            } else if is_read_response(p.opcode) {
                if resp_highest.is_some_and(|h| psn_diff(p.psn, h) <= 0) {
                    f.resp_retransmits += 1;
                    continue;
                }
                // MIDDLE / LAST must follow the previous response packet by exactly one
                if let (0x0E | 0x0F, Some(last)) = (p.opcode, resp_last) {
                    let e = psn_add(last, 1);
                    if p.psn != e {
                        f.psn_gaps += 1;
                        f.psn_missing += (p.psn.wrapping_sub(e) & (PSN_MOD - 1)) as u64;
                    }
                }
                resp_highest = Some(p.psn);
                resp_last = Some(p.psn);
            } else if matches!(p.opcode, 0x11 | 0x12) {
                let s = p.syndrome.unwrap_or(0);
                match (s >> 5) & 3 {
                    0 => f.acks += 1,
                    3 if s & 0x1F == 0 => f.naks_psn_seq_err += 1,
                    _ => f.naks_other += 1,
                }
            }
        }
        f.udp_src_ports = ports.len().min(4) as u64;
        f.distinct_request_psns = req_psns.len() as u64;
        out.insert(key, f);
    }
    out
}
