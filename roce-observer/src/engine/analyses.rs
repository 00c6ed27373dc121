//! The analyses an engine runs, in the order their sections are written: the one place an
//! analysis is registered (the trait they share is in analysis.rs).

use roce_observer_common::{
    FlowKey,
    account::{Outcome, RocePacket},
};

use super::{
    EngineConfig,
    alerts::AlertsAnalysis,
    analysis::{Analysis, Feed},
    ecmp::Ecmp,
    latency::Latency,
    lossless::LosslessAnalysis,
    mirrors::Mirrors,
    pathloss::PathsAnalysis,
    pfc::PfcAnalysis,
    pfc_origin::PfcOriginAnalysis,
    steps::StepsAnalysis,
};

/// The analyses of an engine (a new one goes in [`Analyses::each`] and [`Analyses::packet`]).
pub struct Analyses {
    pub pfc: PfcAnalysis,
    pub mirrors: Mirrors,
    pub ecmp: Ecmp,
    pub latency: Latency,
    pub alerts: AlertsAnalysis,
    pub lossless: LosslessAnalysis,
    pub pfc_origin: PfcOriginAnalysis,
    pub paths: PathsAnalysis,
    pub steps: StepsAnalysis,
}

impl Analyses {
    /// Every analysis, set up from `cfg`, fed the capture path's way `feed`.
    pub fn fed(feed: Feed, cfg: &EngineConfig) -> Analyses {
        Analyses {
            pfc: PfcAnalysis::default(),
            mirrors: Mirrors::default(),
            ecmp: Ecmp::default(),
            latency: Latency::new(cfg.pending_sets),
            alerts: AlertsAnalysis,
            lossless: LosslessAnalysis::default(),
            pfc_origin: PfcOriginAnalysis::default(),
            paths: PathsAnalysis::fed(feed),
            steps: StepsAnalysis::fed(feed),
        }
    }

    /// Capture path: one RoCE packet as the shared observation accounted it, through every
    /// analysis's [`Analysis::packet`] in the order of [`Analyses::each`], called on each type
    /// directly (the hooks that do nothing cost nothing per packet).
    pub fn packet(
        &mut self,
        cfg: &EngineConfig,
        ts: u64,
        key: &FlowKey,
        flow: u32,
        pkt: &RocePacket,
        out: &Outcome,
    ) {
        // Every field named: a new analysis does not compile until it is called here too.
        let Analyses {
            pfc,
            mirrors,
            ecmp,
            latency,
            alerts,
            lossless,
            pfc_origin,
            paths,
            steps,
        } = self;
        Analysis::packet(pfc, cfg, ts, key, flow, pkt, out);
        Analysis::packet(mirrors, cfg, ts, key, flow, pkt, out);
        Analysis::packet(ecmp, cfg, ts, key, flow, pkt, out);
        Analysis::packet(latency, cfg, ts, key, flow, pkt, out);
        Analysis::packet(alerts, cfg, ts, key, flow, pkt, out);
        Analysis::packet(lossless, cfg, ts, key, flow, pkt, out);
        Analysis::packet(pfc_origin, cfg, ts, key, flow, pkt, out);
        Analysis::packet(paths, cfg, ts, key, flow, pkt, out);
        Analysis::packet(steps, cfg, ts, key, flow, pkt, out);
    }

    /// Every analysis, in the order their sections are written (the lossless findings add
    /// their alerts after the alerts' section; the PFC origin reads the lossless findings).
    /// The PFC table comes first, as when the engine wrote it.
    pub fn each(&mut self) -> [&mut dyn Analysis; 9] {
        [
            &mut self.pfc,
            &mut self.mirrors,
            &mut self.ecmp,
            &mut self.latency,
            &mut self.alerts,
            &mut self.lossless,
            &mut self.pfc_origin,
            &mut self.paths,
            &mut self.steps,
        ]
    }
}
