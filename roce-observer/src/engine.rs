//! The analysis engine: one aggregation state fed by either source (captured frames from
//! `analyze`, or the kernel's maps and ring buffer from `run`), read by every renderer through
//! [`Engine::snapshot`].
//!
//! Capture path: each frame goes through the shared parser and per-packet observation of
//! `roce-observer-common` (exactly what the kernel runs, on the engine's tables), and the
//! [`Event`]s it emits take the same route as ring-buffer events.
//! Kernel path: [`Engine::update_flow`], [`Engine::update_pfc`] and [`Engine::update_counter`]
//! replace the absolute values read from the maps; [`Engine::ingest_event`] takes ring-buffer
//! records.
//!
//! Modules: `capture` (frames in), `live` (kernel maps and events in), `events` (events from
//! either path, handed to their concept); the engine's own concepts: `flows` (the flow table),
//! `alerts` (every alert rule; the store they raise into in `alerts/store.rs`); the analyses
//! behind [`analysis::Analysis`] (registered in `analyses`), each owning its state and its
//! report section: `pfc` (PFC counters, pause time, storms), `mirrors` (switch-mirror sessions), `ecmp`
//! (path balance: the views in `ecmp/balance.rs`, the advice in `ecmp_advice`), `latency`
//! (timestamped requests, samples, sketches), the alerts' section (`alerts`), `lossless` (ECN
//! before PFC, ECN at low load, PFC deadlock), `pfc_origin` (where a PFC storm started),
//! `pathloss` (where it was lost), `steps` (training steps, stragglers). `report` assembles the
//! snapshot, whose types ([`crate::report`]) import nothing from here. See
//! docs/design/engine.md.

pub mod alerts;
pub mod analyses;
pub mod analysis;
mod capture;
pub mod ecmp;
pub mod ecmp_advice;
mod events;
pub mod flows;
pub mod latency;
mod live;
pub mod lossless;
pub mod mirrors;
pub mod pathloss;
pub mod pfc;
pub mod pfc_origin;
mod report;

pub mod steps;

use roce_observer_common::{Counter, Direction, Event, EventKind, FlowKey, observe::Scratch};

use crate::report::CaptureSummary;
use alerts::Alerts;
use analyses::Analyses;
use analysis::{Feed, Names};
use ecmp::EcmpHash;
use flows::FlowTable;

/// The link speed assumed when none is given, Gb/s.
pub const DEFAULT_LINK_GBPS: f64 = 100.0;

/// Valid RoCE path MTUs, largest first.
const PMTUS: [u32; 5] = [4096, 2048, 1024, 512, 256];

/// Engine settings. The live path fills the same struct from its own options.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Path MTU for READ PSN reservations.
    pub pmtu: u32,
    /// `pmtu` was given by the user: do not learn it from READ responses.
    pub pmtu_explicit: bool,
    /// Reorder window in PSNs (roce-observer-common sequence.rs).
    pub reorder_window: u32,
    /// Link speed for PFC pause time, Gb/s.
    pub link_gbps: f64,
    /// `link_gbps` was given (not the default): loads against it can be judged
    /// (`ecn_at_low_load`).
    pub link_known: bool,
    /// RoCEv2 UDP destination port.
    pub roce_port: u16,
    /// UDP destination port of VXLAN mirrors to unwrap.
    pub vxlan_port: u16,
    /// Modelled ECMP: uplinks (0 disables the model), hash, seed.
    pub ecmp_paths: u32,
    pub ecmp_hash: EcmpHash,
    pub ecmp_seed: u32,
    /// The lossless traffic class RoCE data should use.
    pub lossless_dscp: u8,
    pub lossless_pcp: u8,
    /// DSCP CNPs should use.
    pub cnp_dscp: u8,
    /// Latency samples above this raise an alert (None: never).
    pub rtt_alert_ns: Option<u64>,
    /// PFC storm: paused fraction above `storm_threshold` (0..1) over `storm_window_ns`.
    pub storm_threshold: f64,
    pub storm_window_ns: u64,
    /// Retransmission / NAK bursts: `burst_count` within `burst_window_ns` on one flow.
    pub burst_count: u64,
    pub burst_window_ns: u64,
    /// Flow table size: past it, new flows are counted in `map_full` (as the kernel does when
    /// its maps are full).
    pub max_flows: usize,
    /// Sets of the table of timestamped requests (a power of two): the kernel's
    /// `latency::PENDING_SETS`, so that a capture and a live run keep the same requests; tests
    /// make it small to push requests out.
    pub pending_sets: u32,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            pmtu: roce_observer_common::DEFAULT_PMTU,
            pmtu_explicit: false,
            reorder_window: roce_observer_common::sequence::DEFAULT_REORDER_WINDOW,
            link_gbps: DEFAULT_LINK_GBPS,
            link_known: false,
            roce_port: roce_observer_common::ROCE_V2_PORT,
            vxlan_port: roce_observer_common::headers::VXLAN_PORT,
            ecmp_paths: 8,
            ecmp_hash: EcmpHash::Crc32,
            ecmp_seed: 0,
            lossless_dscp: 26,
            lossless_pcp: 3,
            cnp_dscp: 48,
            rtt_alert_ns: None,
            storm_threshold: 0.5,
            storm_window_ns: 1_000_000_000,
            burst_count: roce_observer_common::BURST_COUNT as u64,
            burst_window_ns: roce_observer_common::BURST_WINDOW_NS,
            max_flows: 1 << 20,
            pending_sets: roce_observer_common::latency::PENDING_SETS,
        }
    }
}

/// Directions with their own counter block.
const DIRECTIONS: [Direction; 3] = [Direction::Ingress, Direction::Egress, Direction::Capture];

/// The analysis state.
pub struct Engine {
    cfg: EngineConfig,
    /// Path MTU in use (the configured one, or learned from READ responses).
    pmtu: u32,
    pmtu_learned: bool,
    names: Names,
    flows: FlowTable,
    /// Capture path: each flow's batch of finished data runs (the kernel's `RUN_BATCHES` map),
    /// bounded by `max_flows` as the flow table is.
    run_batches: flows::RunBatches,
    counters: Counters,
    alerts: Alerts,
    /// Earliest and latest time seen (frames, events).
    first_ns: Option<u64>,
    last_ns: u64,
    /// Start of the reporting interval (None: the earliest time seen).
    interval_start: Option<u64>,
    capture: Option<CaptureSummary>,
    /// The resolution of the timestamps, ns: 1 (the kernel's clock) until a capture announces
    /// a coarser interface.
    ts_resolution_ns: u64,
    /// The share of a capture file taken (`run --capture FILE`); none otherwise.
    capture_read: Option<f64>,
    /// Events of the frame being observed (capture path), kept to reuse the allocation.
    event_buf: Vec<Event>,
    /// Capture path: the observation's working space, kept from frame to frame as the
    /// kernel's per-CPU one is (`observe` writes what it reads of it for each frame).
    scratch: Scratch,
    /// Events received, by `EventKind::index`: ring-buffer records on the kernel path, the
    /// records the shared observation would have sent on the capture path.
    events: [u64; EventKind::ALL.len()],
    /// The analyses that own their state (analysis.rs, registered in analyses.rs): PFC, mirror
    /// sessions, ECMP, latency, the alerts' section, lossless class, PFC storm origin, where it
    /// was lost, training steps.
    analyses: Analyses,
    /// Tells engines apart (a kernel source skips map entries it already gave this engine).
    id: u64,
    /// The last snapshot's per-flow results, kept so that the next one redoes only the flows
    /// that changed (report.rs).
    shown: report::Shown,
    /// Flows changed since the last snapshot (kernel path: `update_flow`, latency samples).
    dirty: Vec<FlowKey>,
    /// Flows whose bytes may have moved since the interval began (kernel path), so that
    /// [`Engine::begin_interval`] rebases only those (a pass over 100,000 boxed flows was a
    /// cache miss each, every tick). `None`: any flow may have (frames were fed, or more were
    /// noted than there are flows).
    unbased: Option<Vec<FlowKey>>,
}

/// Frame classes and error counters, one block per direction (see [`dir_index`]).
type Counters = [[u64; Counter::COUNT as usize]; 3];

fn dir_index(d: Direction) -> usize {
    match d {
        Direction::Ingress => 0,
        Direction::Egress => 1,
        Direction::Capture => 2,
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn show_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Engine {
        Engine::with_feed(cfg, Feed::Packets)
    }

    /// An engine whose capture path feeds the analyses the kernel path's way (`Feed::Events`:
    /// from activity runs, path events and flow records), to compare the two paths.
    pub fn with_feed(cfg: EngineConfig, feed: Feed) -> Engine {
        let pmtu = if PMTUS.contains(&cfg.pmtu) || cfg.pmtu_explicit {
            cfg.pmtu.max(1)
        } else {
            roce_observer_common::DEFAULT_PMTU
        };
        Engine {
            pmtu,
            pmtu_learned: false,
            names: Names::default(),
            flows: FlowTable::default(),
            run_batches: flows::RunBatches::default(),
            counters: [[0; Counter::COUNT as usize]; 3],
            alerts: Alerts::default(),
            first_ns: None,
            last_ns: 0,
            interval_start: None,
            capture: None,
            ts_resolution_ns: 1,
            capture_read: None,
            event_buf: Vec::new(),
            scratch: Scratch::zeroed(),
            events: [0; EventKind::ALL.len()],
            analyses: Analyses::fed(feed, &cfg),
            shown: report::Shown::default(),
            dirty: Vec::new(),
            unbased: Some(Vec::new()),
            id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            cfg,
        }
    }

    /// A capture's interface: its name, and the resolution of its timestamps (the report
    /// gives the coarsest of them).
    pub fn announce(&mut self, iface: &crate::wire::capture::CaptureIface) {
        self.set_ts_resolution(iface.ts_resolution_ns);
        self.set_iface_name(iface.index, &iface.name);
    }

    /// Timestamps of `ns` resolution are read from now on (the report keeps the coarsest).
    pub fn set_ts_resolution(&mut self, ns: u64) {
        self.ts_resolution_ns = self.ts_resolution_ns.max(ns);
    }

    pub fn set_iface_name(&mut self, ifindex: u32, name: &str) {
        self.names.set(ifindex, name);
        for a in self.analyses.each() {
            a.renamed(&self.names);
        }
        // Names are part of every flow's view and of the flow order.
        self.shown = report::Shown::default();
        for e in self.flows.values_mut() {
            e.view.clear();
            e.ordered = false;
        }
    }

    /// The next snapshot analyses the steps afresh instead of reusing the last analysis
    /// (report.rs: reused until the series has grown by a 64th): for a final report.
    pub fn forget_steps_analysis(&mut self) {
        self.analyses.steps.forget();
    }

    /// Every flow record through the analyses' kernel-path hook, as if read from the kernel's
    /// map now (with [`Feed::Events`], the capture path then feeds them as `run -i` does).
    pub fn read_flows_as_kernel(&mut self) {
        for (k, e) in &self.flows {
            for a in self.analyses.each() {
                a.flow_read(k, e.stats());
            }
        }
        for (k, batch) in &self.run_batches {
            for a in self.analyses.each() {
                a.runs_read(k, batch);
            }
        }
    }

    /// The share of a capture file taken so far (`run --capture FILE`).
    pub fn set_capture_read(&mut self, share: f64) {
        self.capture_read = Some(share.clamp(0.0, 1.0));
    }

    /// Attach the capture's own counts (shown in the summary).
    pub fn set_capture_summary(&mut self, c: CaptureSummary) {
        self.capture = Some(c);
    }

    /// The settings this engine runs with.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// This engine's identity among the engines of the process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Frames counted so far, all directions.
    pub fn frames_seen(&self) -> u64 {
        self.counters
            .iter()
            .map(|d| d[Counter::TotalPackets as usize])
            .sum()
    }

    fn seen(&mut self, ts: u64) {
        if self.first_ns.is_none_or(|f| ts < f) {
            self.first_ns = Some(ts);
        }
        self.last_ns = self.last_ns.max(ts);
    }

    /// Start a new reporting interval at `now_ns`: `rate_bps` and `paused_fraction` cover
    /// `[now_ns, snapshot time]` from here on. Without a call, the interval starts at the
    /// earliest time seen.
    pub fn begin_interval(&mut self, now_ns: u64) {
        self.interval_start = Some(now_ns);
        match self.unbased.replace(Vec::new()) {
            Some(moved) => {
                for k in moved {
                    if let Some(e) = self.flows.get_mut(&k) {
                        e.base_bytes = e.stats().bytes;
                    }
                }
            }
            None => {
                for e in self.flows.values_mut() {
                    e.base_bytes = e.stats().bytes;
                }
            }
        }
        self.analyses.pfc.mark(now_ns);
    }
}

#[cfg(test)]
mod tests;
