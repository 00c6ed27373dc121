//! How much of the verifier's budget (1,000,000 processed instructions) each program variant
//! takes: a program close to the limit fails on another kernel, or after a small change.

use std::time::Instant;

use roce_observer::source::kernel::{KernelOptions, KernelSource};

#[test]
#[ignore = "kernel test: needs root (BPF)"]
fn every_variant_stays_well_within_the_verifier_budget() {
    for kernel_log in [false, true] {
        let t = Instant::now();
        let src = KernelSource::load(&KernelOptions {
            kernel_log,
            ..KernelOptions::default()
        })
        .expect("BPF programs load (run as root)");
        let [xdp, tc] = src.verified_instructions();
        eprintln!(
            "kernel_log {kernel_log}: load {:.1} s, verified insns XDP {xdp:?} TC {tc:?}",
            t.elapsed().as_secs_f64()
        );
        for n in [xdp, tc].into_iter().flatten() {
            assert!(
                n < 500_000,
                "{n} instructions: half the verifier's budget or more"
            );
        }
    }
}
