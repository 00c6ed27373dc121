//! The analyses an engine runs, in the order their sections are written: the one place an
//! analysis is registered (the trait they share is in analysis.rs).

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

/// The analyses of an engine.
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
            ecmp: Ecmp,
            latency: Latency::new(cfg.max_pending),
            alerts: AlertsAnalysis,
            lossless: LosslessAnalysis::default(),
            pfc_origin: PfcOriginAnalysis::default(),
            paths: PathsAnalysis::fed(feed),
            steps: StepsAnalysis::fed(feed),
        }
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
