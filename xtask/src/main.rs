//! Project tasks: `cargo xtask setup | test | demo | fixtures | bench | softroce`.

mod demo;
mod fixtures;
mod setup;
mod softroce;
mod test;
mod util;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "roce-observer project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing need (idempotent; root for apt-get).
    Setup,
    /// Set up, then run lints, formatting and every test (kernel tests need root).
    Test(test::TestOpts),
    /// Set up, build, replay a bundled capture on a throwaway veth pair and watch it live.
    Demo(demo::DemoOpts),
    /// Regenerate tests/fixtures/*.pcap and their expected JSON with scapy.
    Fixtures,
    /// Real RoCE traffic: Soft-RoCE in two qemu VMs (kernel 6.1) running perftest, checked
    /// against rxe's counters and the observer (root).
    Softroce(softroce::SoftRoceOpts),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::setup().map(|_| ()),
        Task::Test(opts) => test::run(&opts),
        Task::Demo(opts) => demo::run(&opts),
        Task::Fixtures => fixtures::run(),
        Task::Softroce(opts) => softroce::run(opts),
    }
}
