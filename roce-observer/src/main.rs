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
    /// Analyze a pcap/pcapng capture (file, or `-` for a stream on stdin).
    Analyze(roce_observer::analyze::AnalyzeArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run(args) => roce_observer::run::run(args),
        Command::Analyze(args) => roce_observer::analyze::run(args),
    }
}
