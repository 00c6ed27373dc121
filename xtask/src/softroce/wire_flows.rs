//! Per-flow figures of the capture, by the rules of docs/metrics.md (for `analyze` and the
//! observer). Computed here from tshark's decoding, independently of roce-observer's code; the
//! PSN figures (reordering, loss, retransmissions) by `psn_truth`.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::psn_truth::{PsnFigures, psn_truth};
use super::wire::{FlowKey, Pkt, is_request};

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
    /// reordering, loss and retransmissions by the definitions (req_retransmits,
    /// resp_retransmits, psn_gaps and psn_missing above are copies of its figures)
    pub(super) psn: PsnFigures,
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

/// Every flow of the capture (RC traffic: the harness has no other), its packets in capture
/// order. Request PSN rules start at the first request seen (like `analyze`, which does not
/// know the QP's initial PSN).
pub(super) fn wire_flows(pkts: &[Pkt], pmtu: u64) -> BTreeMap<FlowKey, WireFlow> {
    let all: Vec<&Pkt> = pkts.iter().collect();
    wire_flows_of(&all, pmtu)
}

/// [`wire_flows`] of packets given by reference (e.g. two captures merged).
pub(super) fn wire_flows_of(pkts: &[&Pkt], pmtu: u64) -> BTreeMap<FlowKey, WireFlow> {
    let mut truth = psn_truth(pkts, pmtu);
    let mut by_flow: BTreeMap<FlowKey, Vec<&Pkt>> = BTreeMap::new();
    for p in pkts {
        by_flow
            .entry((p.src.clone(), p.dst.clone(), p.dest_qp))
            .or_default()
            .push(p);
    }
    let mut out = BTreeMap::new();
    for (key, pk) in by_flow {
        let mut f = WireFlow {
            psn: truth.remove(&key).unwrap_or_default(),
            ..Default::default()
        };
        f.req_retransmits = f.psn.req_retransmits;
        f.resp_retransmits = f.psn.resp_retransmits;
        f.psn_gaps = f.psn.psn_gaps;
        f.psn_missing = f.psn.psn_missing;
        let mut ports = HashSet::new();
        let mut req_psns = HashSet::new();
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
