//! ECMP (docs/metrics.md, "ECMP"): how evenly the flows spread over equal-cost paths, as an
//! analysis. Its section is computed from each flow's [`FlowLoad`], which the report's flow
//! pass keeps with the flow's row (only changed flows are redone): the three views (`balance`)
//! and the source ports that would spread colliding elephants (crate::engine::ecmp_advice).
//! The only state it keeps is the last section, given again while no flow's load changed.

pub mod balance;

pub use balance::{EcmpHash, FiveTuple, FlowLoad, compute, imbalance, jain};

use super::{
    analysis::{Analysis, View},
    ecmp_advice,
};
use crate::report::{EcmpSnapshot, Snapshot};

/// The ECMP analysis: the measured, modelled and entropy views with the model's advice.
#[derive(Default)]
pub struct Ecmp {
    /// The last section, while it stands for the loads (a function of them and the
    /// configuration only): computing it walks every flow's load, 100,000 hash inserts.
    last: Option<EcmpSnapshot>,
}

impl Analysis for Ecmp {
    fn section(&mut self, view: &View<'_>, _now: u64, report: &mut Snapshot) {
        if view.loads_changed {
            self.last = None;
        }
        let cfg = view.cfg;
        report.ecmp = self
            .last
            .get_or_insert_with(|| {
                let mut ecmp = compute(view.loads, cfg.ecmp_hash, cfg.ecmp_paths, cfg.ecmp_seed);
                if let Some(m) = ecmp.modelled.as_mut() {
                    m.advice = ecmp_advice::advise(m, cfg.roce_port);
                    m.qp_advice = ecmp_advice::qp_counts(m, cfg.roce_port);
                }
                ecmp
            })
            .clone();
    }
}
