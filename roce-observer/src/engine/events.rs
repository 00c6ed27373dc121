//! Events from either path (the kernel's ring buffer, or the capture path's shared
//! observation), each handed to its concept: PFC pause timelines, latency samples, activity
//! runs (training steps, kernel path), path events (where was it lost, kernel path).
//! (Bursts of retransmissions and NAKs are read from the flow records, alerts::bursts.)

use roce_observer_common::{Direction, Event, EventBody, pfc::PRIORITY_LINK};

use super::{Engine, pfc_key, steps::Run};

impl Engine {
    /// `per_packet`: the event comes from the capture path, which also feeds steps and path
    /// views packet by packet (its frames may carry any direction: SLL captures say ingress or
    /// egress).
    pub(super) fn on_event(&mut self, ev: &Event, per_packet: bool) {
        let Some(body) = ev.body() else {
            return;
        };
        if let Some(kind) = ev.kind() {
            self.events[kind.index()] += 1;
        }
        let ts = ev.ts_ns;
        let d = Direction::from_u8(ev.flow.direction);
        match body {
            EventBody::NewFlow => {}
            EventBody::Pfc {
                src_mac,
                class_enable,
                quanta,
            } => {
                for prio in 0..8u8 {
                    if class_enable & (1 << prio) != 0 {
                        let key = pfc_key(ev.flow.ifindex, d, prio, src_mac);
                        self.pause_timeline(key, ts, quanta[prio as usize]);
                    }
                }
            }
            EventBody::Pause { src_mac, quanta } => {
                let key = pfc_key(ev.flow.ifindex, d, PRIORITY_LINK, src_mac);
                self.pause_timeline(key, ts, quanta);
            }
            EventBody::Latency { ns, .. } => self.on_latency(&ev.flow, ts, ns),
            // The capture path feeds steps packet by packet (exact bins): the runs its shared
            // observation also emits are not needed there.
            EventBody::DataRun { .. } | EventBody::SignalRun { .. }
                if per_packet && !self.steps_from_runs => {}
            EventBody::DataRun {
                duration_ns,
                bytes,
                ce,
                retransmits,
                ..
            } => self.steps.data_run(
                &ev.flow,
                Run {
                    start: ts,
                    end: ts.saturating_add(duration_ns),
                    bytes,
                    ce: u64::from(ce),
                    retransmits: u64::from(retransmits),
                },
            ),
            // The capture path sees every PSN (pathloss.rs): its path events are not needed.
            EventBody::Path { .. } if per_packet && !self.paths_from_events => {}
            EventBody::Path { resend, gap } => {
                if let Some((first, last)) = resend {
                    self.paths.from_events.resend(&ev.flow, first, last);
                }
                if let Some((first, missing)) = gap {
                    self.paths.from_events.gap(&ev.flow, first, missing);
                }
            }
            EventBody::SignalRun {
                duration_ns,
                cnp,
                naks,
            } => self
                .steps
                .signal_run(&ev.flow, ts, ts.saturating_add(duration_ns), cnp, naks),
        }
    }
}
