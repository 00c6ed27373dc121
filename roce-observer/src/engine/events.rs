//! Events from either path (the kernel's ring buffer, or the capture path's shared
//! observation), each handed to its concept: PFC and PAUSE classes to the PFC analysis's
//! timelines (which raise storms into the alert store), then to the analyses' pause hook;
//! activity runs and path events to the analyses' event hook. (Latency samples are no events: latency.rs.)
//! (Bursts of retransmissions and NAKs are read from the flow records, alerts::bursts.)

use roce_observer_common::{Event, EventBody, FlowKey, run::DataRun};

use super::{Engine, flows, pfc};

impl Engine {
    /// `per_packet`: the event comes from the capture path, which also feeds the analyses
    /// packet by packet (its frames may carry any direction: SLL captures say ingress or
    /// egress). `runs`: the runs after the head of a record of finished data runs
    /// (`run::RunBatch`), else empty.
    pub(super) fn on_event(&mut self, ev: &Event, runs: &[DataRun], per_packet: bool) {
        let Some(body) = ev.body() else {
            return;
        };
        if let Some(kind) = ev.kind() {
            self.events[kind.index()] += 1;
        }
        let ts = ev.ts_ns;
        match body {
            EventBody::Pfc { .. } | EventBody::Pause { .. } => {
                for (key, quanta) in pfc::classes(ev, body) {
                    let cfg = &self.cfg;
                    let ns = self
                        .analyses
                        .pfc
                        .frame(cfg, key, ts, quanta, &mut self.alerts);
                    for a in self.analyses.each() {
                        a.pause(cfg, &key, ts, quanta, ns);
                    }
                }
            }
            // Activity runs (training steps) and path events (where was it lost), for the
            // analyses (the capture path feeds them packet by packet unless fed as the kernel).
            EventBody::DataRuns { first, count } => {
                let runs = &runs[..runs.len().min(count as usize)];
                for a in self.analyses.each() {
                    a.data_runs(&ev.flow, first, runs, per_packet);
                }
            }
            EventBody::SignalRun { .. }
            | EventBody::Path { .. }
            | EventBody::LosslessEpisode { .. }
            | EventBody::LosslessLoad { .. } => {
                if let EventBody::Path {
                    gap: Some((first, count)),
                    ..
                } = body
                {
                    self.on_lost_run(&ev.flow, ts, first, count);
                }
                for a in self.analyses.each() {
                    a.event(ev, &body, per_packet);
                }
            }
        }
    }

    /// Request PSNs `first..first+count` of `flow` declared lost: kept with the flow for its
    /// log lines (docs/log-schema.md, `flow`). The event may come before the flow's first map
    /// read, as a latency sample may.
    fn on_lost_run(&mut self, flow: &FlowKey, ts: u64, first: u32, count: u32) {
        if let Some(e) = flows::entry_or_new(&mut self.flows, self.cfg.max_flows, flow, ts) {
            e.add_lost_run(first, count);
            self.dirty.push(*flow);
        }
    }
}
