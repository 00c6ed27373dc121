//! The capture path: one captured frame through the shared parser and per-packet accounting
//! (exactly what the kernel programs run), its outcome turned into the kernel's events, and
//! latency matching (docs/metrics.md, "Latency").

use super::*;

impl Engine {
    /// Capture path: one captured frame. `ts_ns` = capture time (ns since the epoch),
    /// `orig_len` = length on the wire, `ifindex` = capture interface (0 for pcap).
    pub fn ingest_frame(&mut self, ts_ns: u64, data: &[u8], orig_len: u32, ifindex: u32) {
        let d = Direction::Capture;
        self.seen(ts_ns);
        self.count(d, Counter::TotalPackets, 1);
        let view = SliceView::new(data, orig_len);
        // Captures may come from an ERSPAN destination: unwrap mirrored frames (the kernel
        // programs do not yet, see parse_mirrored).
        match parse_mirrored(&view, self.cfg.roce_port) {
            Frame::Roce {
                src_ip,
                dst_ip,
                pkt,
            } => {
                self.count(d, Counter::RocePackets, 1);
                self.roce_packet(ts_ns, ifindex, src_ip, dst_ip, &pkt);
            }
            Frame::Pfc {
                src_mac,
                class_enable,
                body,
            } => {
                self.count(d, Counter::PfcFrames, 1);
                let mut ev = Event::zeroed();
                ev.ts_ns = ts_ns;
                ev.kind = EventKind::Pfc as u32;
                ev.flow.ifindex = ifindex;
                ev.flow.direction = d as u8;
                ev.mac = src_mac;
                ev.c = u32::from(class_enable);
                for prio in 0..8u8 {
                    if class_enable & (1 << prio) != 0 {
                        ev.quanta[prio as usize] = body.quanta(prio as usize);
                        let key = pfc_key(ifindex, d, prio, src_mac);
                        self.pfc
                            .entry(key)
                            .or_default()
                            .stats
                            .account(body.quanta(prio as usize), ts_ns);
                    }
                }
                self.on_event(&ev);
            }
            Frame::Pause { src_mac, quanta } => {
                self.count(d, Counter::Pause8023x, 1);
                let key = pfc_key(ifindex, d, PRIORITY_LINK, src_mac);
                self.pfc
                    .entry(key)
                    .or_default()
                    .stats
                    .account(quanta, ts_ns);
                let mut ev = Event::zeroed();
                ev.ts_ns = ts_ns;
                ev.kind = EventKind::Pause as u32;
                ev.flow.ifindex = ifindex;
                ev.flow.direction = d as u8;
                ev.mac = src_mac;
                ev.quanta[0] = quanta;
                self.on_event(&ev);
            }
            Frame::Other(c) => self.count(d, c, 1),
        }
    }

    fn roce_packet(
        &mut self,
        ts: u64,
        ifindex: u32,
        src_ip: [u8; 16],
        dst_ip: [u8; 16],
        pkt: &RocePacket,
    ) {
        let d = Direction::Capture;
        self.learn_pmtu(src_ip, pkt);
        let key = FlowKey {
            src_ip,
            dst_ip,
            dst_qp: pkt.dst_qp,
            ifindex,
            direction: d as u8,
            _pad: [0; 3],
        };
        let pmtu = self.pmtu;
        let max_flows = self.cfg.max_flows;
        let flows_len = self.flows.len();
        let (outcome, before, after) = match self.flows.get_mut(&key) {
            Some(e) => {
                let before = Tally::of(&e.stats);
                let out = account(&mut e.stats, pkt, pmtu, ts);
                (out, before, Tally::of(&e.stats))
            }
            None if flows_len >= max_flows => {
                self.count(d, Counter::MapFull, 1);
                return;
            }
            None => {
                let mut e = FlowEntry::new(ts);
                let before = Tally::of(&e.stats);
                let out = account(&mut e.stats, pkt, pmtu, ts);
                let after = Tally::of(&e.stats);
                self.flows.insert(key, e);
                let mut ev = Event::zeroed();
                ev.ts_ns = ts;
                ev.kind = EventKind::NewFlow as u32;
                ev.flow = key;
                self.on_event(&ev);
                (out, before, after)
            }
        };
        self.check_classes(&key, before, after, ts);

        // The outcome as the kernel's events.
        let mut ev = Event::zeroed();
        ev.ts_ns = ts;
        ev.flow = key;
        ev.d = u32::from(outcome.response);
        match outcome.psn {
            PsnVerdict::InOrder => {}
            PsnVerdict::Gap {
                expected,
                got,
                missing,
            } => {
                ev.kind = EventKind::PsnGap as u32;
                ev.a = u64::from(expected);
                ev.b = u64::from(got);
                ev.c = missing;
                self.on_event(&ev);
            }
            PsnVerdict::Retransmit { highest, got } => {
                ev.kind = EventKind::PsnRetransmit as u32;
                ev.a = u64::from(highest);
                ev.b = u64::from(got);
                self.on_event(&ev);
            }
        }
        if outcome.nak {
            ev.kind = EventKind::Nak as u32;
            ev.a = u64::from(pkt.psn);
            ev.b = 0;
            ev.c = u32::from(pkt.syndrome);
            self.on_event(&ev);
        }
        if outcome.cnp {
            ev.kind = EventKind::Cnp as u32;
            ev.a = u64::from(pkt.psn);
            ev.b = 0;
            ev.c = 0;
            self.on_event(&ev);
        }

        // Latency matching (docs/metrics.md, "Latency"). Karn's rule: a retransmitted
        // request is never timestamped (its answer could belong to either transmission).
        let retransmit = matches!(outcome.psn, PsnVerdict::Retransmit { .. });
        if pkt.wants_timestamp() && !retransmit {
            let pk = PendingKey {
                requester: src_ip,
                responder: dst_ip,
                ifindex,
                psn: pkt.psn,
            };
            if !self.pending.contains_key(&pk) {
                if self.pending.len() >= self.cfg.max_pending {
                    self.count(d, Counter::PendingFull, 1);
                } else {
                    self.pending.insert(
                        pk,
                        PendingValue {
                            ts_ns: ts,
                            dst_qp: pkt.dst_qp,
                            direction: d as u8,
                            _pad: [0; 3],
                        },
                    );
                }
            }
        }
        if pkt.answers_request() {
            let pk = PendingKey {
                requester: dst_ip,
                responder: src_ip,
                ifindex,
                psn: pkt.psn,
            };
            if let Some(req) = self.pending.remove(&pk) {
                let req_key = FlowKey {
                    src_ip: dst_ip,
                    dst_ip: src_ip,
                    dst_qp: req.dst_qp,
                    ifindex,
                    direction: req.direction,
                    _pad: [0; 3],
                };
                // The response's destination QP is the requester's QP; the request's
                // destination QP is the responder's.
                if let Some(e) = self.flows.get_mut(&req_key) {
                    learn_peer(&mut e.stats, pkt.dst_qp);
                }
                if let Some(e) = self.flows.get_mut(&key) {
                    learn_peer(&mut e.stats, req.dst_qp);
                }
                let mut ev = Event::zeroed();
                ev.ts_ns = ts;
                ev.kind = EventKind::Latency as u32;
                ev.flow = req_key;
                ev.a = ts.saturating_sub(req.ts_ns);
                ev.c = pkt.dst_qp;
                self.on_event(&ev);
            }
        }
    }

    /// Learn the path MTU from a READ response FIRST/MIDDLE (always full PMTU-sized): the
    /// largest valid PMTU not above the payload (frame minus the smallest possible headers,
    /// so extra tags or IP options never make it smaller than the real one).
    fn learn_pmtu(&mut self, src_ip: [u8; 16], pkt: &RocePacket) {
        if self.cfg.pmtu_explicit {
            return;
        }
        let op = opcode::operation(pkt.opcode);
        if opcode::psn_space(pkt.opcode) != opcode::PsnSpace::ReadResponse
            || !(op == opcode::RDMA_READ_RESPONSE_FIRST || op == opcode::RDMA_READ_RESPONSE_MIDDLE)
        {
            return;
        }
        let v4 = src_ip[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
        let overhead = 14
            + if pkt.pcp != PCP_UNTAGGED { 4 } else { 0 }
            + if v4 { 20 } else { 40 }
            + 8
            + 12
            + if opcode::has_aeth(pkt.opcode) { 4 } else { 0 }
            + 4;
        let payload = pkt.frame_len.saturating_sub(overhead);
        if let Some(&m) = PMTUS.iter().find(|&&m| m <= payload)
            && (!self.pmtu_learned || m > self.pmtu)
        {
            self.pmtu = m;
            self.pmtu_learned = true;
        }
    }
}
