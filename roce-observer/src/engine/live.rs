//! The live (kernel) path: absolute values read from the kernel's maps replace the engine's,
//! and ring-buffer events take the same route as the capture path's events.

use roce_observer_common::{
    Counter, Direction, Event, FlowKey, FlowStats, PfcKey, PfcStats,
    latency::LatencyHist,
    lossless::{LosslessKey, LosslessState},
    mirror::{MirrorKey, MirrorStats},
    run::{DataRun, RunBatch},
};

use super::{
    Engine,
    alerts::Added,
    dir_index,
    flows::{self, FlowEntry},
};

impl Engine {
    /// Kernel path: the absolute values of one flow map entry (replace, don't add). `first_ns`
    /// and `last_ns` are expected in ns since the epoch, like event times.
    pub fn update_flow(&mut self, key: &FlowKey, stats: &FlowStats) {
        let ts = stats.last_ns;
        if stats.packets() > 0 {
            self.seen(stats.first_ns);
            self.seen(ts);
        }
        let added = match self.flows.get_mut(key) {
            // Unchanged since the last read (most flows, most ticks): nothing to judge.
            Some(e) if e.stats() == stats => return,
            Some(e) => {
                let added = Added::between(e.stats(), stats);
                *e.stats_mut() = *stats;
                added
            }
            None => {
                if self.flows.len() >= self.cfg.max_flows {
                    return;
                }
                let mut e = FlowEntry::new(stats.first_ns, self.flows.len());
                let added = Added::between(e.stats(), stats);
                *e.stats_mut() = *stats;
                self.flows.insert(*key, Box::new(e));
                added
            }
        };
        self.dirty.push(*key);
        self.note_unbased(key);
        self.alerts.classes(key, added, ts, &self.cfg);
        for a in self.analyses.each() {
            a.flow_read(key, stats);
        }
    }

    /// Note that `key`'s bytes may have moved since the interval began (see `unbased`).
    fn note_unbased(&mut self, key: &FlowKey) {
        let bound = self.flows.len();
        if let Some(moved) = self.unbased.as_mut() {
            if moved.len() < bound {
                moved.push(*key);
            } else {
                // Noted more often than there are flows (no interval begins): a full pass
                // costs no more, and the list stays bounded.
                self.unbased = None;
            }
        }
    }

    /// Kernel path: the absolute values of one PFC map entry.
    pub fn update_pfc(&mut self, key: &PfcKey, stats: &PfcStats) {
        self.analyses.pfc.read(key, stats);
    }

    /// Kernel path: the programs keep the lossless class's episodes, loads and counts. Called
    /// before the first event.
    pub fn lossless_from_kernel(&mut self) {
        self.analyses.lossless.from_kernel(&self.cfg);
    }

    /// Kernel path: one lossless map entry as read (times since the epoch).
    pub fn update_lossless(&mut self, key: &LosslessKey, st: &LosslessState) {
        self.analyses
            .lossless
            .kernel_state(key.ifindex, key.priority, st);
    }

    /// Kernel path: the absolute values of one mirror session.
    pub fn update_mirror(&mut self, key: &MirrorKey, stats: &MirrorStats) {
        self.analyses.mirrors.read(key, stats);
    }

    /// Kernel path: the absolute value of one counter (summed over CPUs).
    pub fn update_counter(&mut self, direction: Direction, counter: Counter, value: u64) {
        self.counters[dir_index(direction)][counter as usize] = value;
    }

    /// Kernel path: the latency histogram of request flow `flow` as read now (times in ns since
    /// the epoch): what it gained since the last read goes to the flow's sketch and the latency
    /// analysis.
    pub fn update_latency(&mut self, flow: &FlowKey, hist: &LatencyHist) {
        let now = self.last_ns;
        let Some(e) = flows::entry_or_new(&mut self.flows, self.cfg.max_flows, flow, now) else {
            return;
        };
        let Some(grown) = e.read_rtt_hist(hist) else {
            return;
        };
        self.dirty.push(*flow);
        let cfg = &self.cfg;
        self.analyses
            .latency
            .read(&mut self.alerts, cfg, flow, hist, &grown);
    }

    /// Kernel path: a flow's batch of finished data runs (the kernel's `RUN_BATCHES` map, times
    /// converted), read after the flow records: its runs not yet sent count until the record
    /// that carries them arrives.
    pub fn update_runs(&mut self, key: &FlowKey, batch: &RunBatch) {
        for a in self.analyses.each() {
            a.runs_read(key, batch);
        }
    }

    /// Kernel path: one ring-buffer event (timestamps already converted to ns since the epoch).
    pub fn ingest_event(&mut self, ev: &Event) {
        self.ingest_record(ev, &[]);
    }

    /// Kernel path: one ring-buffer record, an event and, for a record of finished data runs
    /// (`run::RunBatch`), the runs after it (times converted as the event's).
    pub fn ingest_record(&mut self, ev: &Event, runs: &[DataRun]) {
        self.seen(ev.ts_ns);
        self.on_event(ev, runs, false);
    }
}
