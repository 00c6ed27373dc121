//! The analyses an engine runs, in the order their sections are written: the one place an
//! analysis is registered (the trait they share is in analysis.rs).

use super::{
    analysis::{Analysis, Feed},
    ecmp::Ecmp,
    lossless::LosslessAnalysis,
    mirrors::Mirrors,
    pathloss::PathsAnalysis,
    pfc_origin::PfcOriginAnalysis,
    steps::StepsAnalysis,
};

/// The analyses of an engine.
#[derive(Default)]
pub struct Analyses {
    pub mirrors: Mirrors,
    pub ecmp: Ecmp,
    pub lossless: LosslessAnalysis,
    pub pfc_origin: PfcOriginAnalysis,
    pub paths: PathsAnalysis,
    pub steps: StepsAnalysis,
}

impl Analyses {
    /// Every analysis fed the capture path's way `feed`.
    pub fn fed(feed: Feed) -> Analyses {
        Analyses {
            paths: PathsAnalysis::fed(feed),
            steps: StepsAnalysis::fed(feed),
            ..Analyses::default()
        }
    }

    /// Every analysis, in the order their sections are written (the PFC origin reads the
    /// lossless findings).
    pub fn each(&mut self) -> [&mut dyn Analysis; 6] {
        [
            &mut self.mirrors,
            &mut self.ecmp,
            &mut self.lossless,
            &mut self.pfc_origin,
            &mut self.paths,
            &mut self.steps,
        ]
    }
}
