//! Wire analysis of the capture (decoded by tshark): per-direction figures.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;

use anyhow::Result;
use serde_json::{Value, json};

use crate::util::output_checked;

#[derive(Debug, Clone)]
pub(super) struct Pkt {
    pub(super) src: String,
    pub(super) dst: String,
    pub(super) dest_qp: u32,
    pub(super) opcode: u8,
    pub(super) psn: u32,
    pub(super) syndrome: Option<u8>,
    pub(super) dma_len: Option<u32>,
    /// Frame length on the wire (Ethernet header to the end of the ICRC, no FCS).
    pub(super) len: u32,
    /// IP ECN bits.
    pub(super) ecn: u8,
    pub(super) udp_sport: u16,
    /// Capture timestamp, seconds since the epoch (tcpdump's, in the client VM).
    pub(super) time: f64,
    /// BTH AckReq bit (the requests the observer timestamps, with READ requests).
    pub(super) ack_req: bool,
}

pub(super) fn num(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

pub(super) fn tshark_packets(cap: &Path) -> Result<Vec<Pkt>> {
    let fields = [
        "ip.src",
        "ip.dst",
        "infiniband.bth.destqp",
        "infiniband.bth.opcode",
        "infiniband.bth.psn",
        "infiniband.aeth.syndrome",
        "infiniband.reth.dmalen",
        "frame.len",
        "ip.dsfield.ecn",
        "udp.srcport",
        "frame.time_epoch",
        "infiniband.bth.a",
    ];
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(cap).args([
        "-Y",
        "infiniband",
        "-T",
        "fields",
        "-E",
        "separator=,",
        "-E",
        "occurrence=f",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = output_checked(&mut cmd)?;
    let mut v = Vec::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split(',').collect();
        if f.len() < fields.len() {
            continue;
        }
        let (Some(qp), Some(op), Some(psn)) = (num(f[2]), num(f[3]), num(f[4])) else {
            continue;
        };
        v.push(Pkt {
            src: f[0].to_string(),
            dst: f[1].to_string(),
            dest_qp: qp as u32,
            opcode: op as u8,
            psn: psn as u32,
            syndrome: num(f[5]).map(|x| x as u8),
            dma_len: num(f[6]).map(|x| x as u32),
            len: num(f[7]).unwrap_or(0) as u32,
            ecn: num(f[8]).unwrap_or(0) as u8,
            udp_sport: num(f[9]).unwrap_or(0) as u16,
            time: f[10].trim().parse().unwrap_or(0.0),
            ack_req: matches!(f[11].trim(), "1" | "True" | "true"),
        });
    }
    Ok(v)
}

pub(super) const PSN_MOD: u32 = 1 << 24;
/// (a - b) mod 2^24 as a signed distance in -2^23..2^23.
pub(super) fn psn_diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & (PSN_MOD - 1);
    if d >= PSN_MOD / 2 {
        d as i32 - PSN_MOD as i32
    } else {
        d as i32
    }
}
pub(super) fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & (PSN_MOD - 1)
}

pub(super) fn is_request(op: u8) -> bool {
    // RC requests: SEND*, RDMA_WRITE*, RDMA_READ_REQUEST, atomics, SEND_*_WITH_INVALIDATE
    matches!(op, 0x00..=0x0C | 0x13 | 0x14 | 0x16 | 0x17)
}
pub(super) fn is_read_response(op: u8) -> bool {
    matches!(op, 0x0D..=0x10)
}

/// Figures for one direction of traffic (all packets sent by one VM) in the capture.
#[derive(Debug, Default, Clone)]
pub(super) struct Dir {
    pub(super) packets: u64,
    pub(super) requests: u64,
    pub(super) distinct_request_psns: u64,
    pub(super) read_requests: u64,
    pub(super) read_responses: u64,
    pub(super) distinct_read_response_psns: u64,
    pub(super) acks: u64,
    pub(super) naks_seq: u64,
    pub(super) naks_other: u64,
    pub(super) rnr_naks: u64,
    // request stream, as the primer defines it (our gap detector, right path MTU)
    pub(super) req_retransmissions: u64,
    pub(super) req_gaps: u64,
    pub(super) req_missing_psns: u64,
    // same detector with a wrong path MTU of 4096 (what a naive analyzer would report)
    pub(super) req_gaps_pmtu4096: u64,
    // response stream
    pub(super) resp_gaps: u64,
    pub(super) resent_read_responses: u64,
    // the peer's responder, simulated like rxe's check_psn()
    pub(super) sim_duplicates: u64,
    pub(super) sim_out_of_seq: u64,
}

impl Dir {
    pub(super) fn json(&self) -> Value {
        json!({
            "packets": self.packets, "requests": self.requests,
            "distinct_request_psns": self.distinct_request_psns,
            "read_requests": self.read_requests, "read_responses": self.read_responses,
            "distinct_read_response_psns": self.distinct_read_response_psns,
            "acks": self.acks, "naks_psn_seq_err": self.naks_seq, "naks_other": self.naks_other,
            "rnr_naks": self.rnr_naks,
            "request_retransmissions": self.req_retransmissions, "request_gaps": self.req_gaps,
            "request_missing_psns": self.req_missing_psns,
            "request_gaps_if_pmtu_4096": self.req_gaps_pmtu4096,
            "response_gaps": self.resp_gaps, "resent_read_responses": self.resent_read_responses,
            "responder_model_duplicates": self.sim_duplicates,
            "responder_model_out_of_seq": self.sim_out_of_seq,
        })
    }
}

pub(super) fn span(p: &Pkt, pmtu: u64) -> u32 {
    if p.opcode == 0x0C {
        let len = p.dma_len.unwrap_or(0) as u64;
        len.div_ceil(pmtu).max(1) as u32
    } else {
        1
    }
}

/// Gap / retransmission detector of the request stream (docs: "Sequence rules").
pub(super) fn request_stream(reqs: &[&Pkt], pmtu: u64, first_psn: Option<u32>) -> (u64, u64, u64) {
    let (mut retrans, mut gaps, mut missing) = (0u64, 0u64, 0u64);
    let mut highest: Option<u32> = None;
    let mut expected: Option<u32> = first_psn;
    for p in reqs {
        // a request not newer than the highest is a retransmission and changes nothing
        // (docs/metrics.md): after a partial resend, the next new PSN is no gap
        if highest.is_some_and(|h| psn_diff(p.psn, h) <= 0) {
            retrans += 1;
            continue;
        }
        if let Some(e) = expected {
            let d = psn_diff(p.psn, e);
            if d > 0 {
                gaps += 1;
                missing += d as u64;
            }
        }
        expected = Some(psn_add(p.psn, span(p, pmtu)));
        highest = Some(p.psn);
    }
    (retrans, gaps, missing)
}

/// Distinct READs: READ request PSNs, except those inside another READ's reservation (rxe
/// retries a READ whose responses came out of order from the PSN it expects, with a READ
/// request for the rest: PSN p + k of a READ p of span > k).
pub(super) fn read_requests(reqs: &[&Pkt], pmtu: u64) -> u64 {
    let mut firsts: BTreeMap<u32, u32> = BTreeMap::new();
    for p in reqs.iter().filter(|p| p.opcode == 0x0C) {
        firsts.entry(p.psn).or_insert_with(|| span(p, pmtu));
    }
    firsts
        .keys()
        .filter(|&&p| {
            !firsts.iter().any(|(&q, &s)| {
                let d = psn_diff(p, q);
                d > 0 && (d as u32) < s
            })
        })
        .count() as u64
}

/// `first_psn`: the initial PSN of the sending QP (from perftest), so that a loss of the very
/// first request is seen as one; None = trust the first packet seen.
pub(super) fn direction(pkts: &[Pkt], src: &str, pmtu: u64, first_psn: Option<u32>) -> Dir {
    let mine: Vec<&Pkt> = pkts.iter().filter(|p| p.src == src).collect();
    let mut d = Dir {
        packets: mine.len() as u64,
        ..Default::default()
    };
    // flows: (dst, dest QP); the requests of each flow form one PSN space
    let mut flows: BTreeMap<(String, u32), Vec<&Pkt>> = BTreeMap::new();
    for p in &mine {
        flows.entry((p.dst.clone(), p.dest_qp)).or_default().push(p);
    }
    for pk in flows.values() {
        let reqs: Vec<&Pkt> = pk
            .iter()
            .copied()
            .filter(|p| is_request(p.opcode))
            .collect();
        d.requests += reqs.len() as u64;
        d.distinct_request_psns += reqs.iter().map(|p| p.psn).collect::<HashSet<_>>().len() as u64;
        d.read_requests += read_requests(&reqs, pmtu);
        let (r, g, m) = request_stream(&reqs, pmtu, first_psn);
        d.req_retransmissions += r;
        d.req_gaps += g;
        d.req_missing_psns += m;
        d.req_gaps_pmtu4096 += request_stream(&reqs, 4096, first_psn).1;

        // responder model (rxe check_psn): diff > 0: out of sequence, NAK once until an
        // in-order packet arrives; diff < 0: duplicate; == 0: accept, ePSN += span.
        let mut epsn: Option<u32> = first_psn;
        let mut nak_sent = false;
        for p in &reqs {
            let e = *epsn.get_or_insert(p.psn);
            let diff = psn_diff(p.psn, e);
            if diff > 0 {
                if !nak_sent {
                    nak_sent = true;
                    d.sim_out_of_seq += 1;
                }
            } else if diff < 0 {
                d.sim_duplicates += 1;
            } else {
                nak_sent = false;
                epsn = Some(psn_add(p.psn, span(p, pmtu)));
            }
        }

        // responses this VM sent for the peer's requests
        let mut highest: Option<u32> = None;
        let mut last: Option<u32> = None; // previous (not resent) READ response PSN
        let mut resp_psns = HashSet::new();
        for p in pk.iter().filter(|p| !is_request(p.opcode)) {
            match p.opcode {
                0x11 => {
                    let s = p.syndrome.unwrap_or(0);
                    match s & 0x60 {
                        0x00 => d.acks += 1,
                        0x20 => d.rnr_naks += 1,
                        0x60 if s & 0x1F == 0 => d.naks_seq += 1,
                        _ => d.naks_other += 1,
                    }
                }
                op if is_read_response(op) => {
                    // only READ responses form the response PSN space (an ACK or NAK in
                    // the same flow, e.g. a NAK for a lost READ request, does not); a resent
                    // response changes nothing; MIDDLE and LAST follow the previous by one
                    d.read_responses += 1;
                    resp_psns.insert(p.psn);
                    if highest.is_some_and(|h| psn_diff(p.psn, h) <= 0) {
                        d.resent_read_responses += 1;
                        continue;
                    }
                    if matches!(op, 0x0E | 0x0F) && last.is_some_and(|l| p.psn != psn_add(l, 1)) {
                        d.resp_gaps += 1;
                    }
                    highest = Some(p.psn);
                    last = Some(p.psn);
                }
                _ => {}
            }
        }
        d.distinct_read_response_psns += resp_psns.len() as u64;
    }
    d
}

/// A flow: (source IP, destination IP, BTH destination QP).
pub(super) type FlowKey = (String, String, u32);

pub(super) fn flow_label(k: &FlowKey) -> String {
    format!("{}>{} qp {:#x}", k.0, k.1, k.2)
}
