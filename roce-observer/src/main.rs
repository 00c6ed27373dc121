//! roce-observer command line: parses arguments and hands each subcommand to its module.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "roce-observer", version, about = "Per-QP RoCEv2 observer")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Watch interfaces live: XDP on ingress and TC on egress (needs root or CAP_BPF +
    /// CAP_NET_ADMIN).
    Run(roce_observer::run::RunArgs),
    /// The RDMA NIC's own RoCE and PFC counters (sysfs hw_counters, ethtool -S): for hosts
    /// whose NIC handles RoCE where XDP cannot see it.
    Counters(roce_observer::counters::CountersArgs),
    /// Analyze a pcap/pcapng capture (file, or `-` for a stream on stdin).
    Analyze(roce_observer::analyze::AnalyzeArgs),
}

fn main() -> std::process::ExitCode {
    // Errors are for people: the whole cause chain on one line each, no backtrace.
    match dispatch(Cli::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("roce-observer: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => roce_observer::run::run(args),
        Command::Counters(args) => roce_observer::counters::run(args),
        Command::Analyze(args) => roce_observer::analyze::run(args),
    }
}
