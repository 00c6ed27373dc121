//! roce-observer command line: parses arguments ([`roce_observer::cli`]) and hands each
//! subcommand to its module.

use clap::Parser as _;
use roce_observer::cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    roce_observer::color::init(cli.color);
    // Errors are for people (and the journal, under systemd): the whole cause chain on one
    // line, no backtrace, and a non-zero exit so a service manager sees the failure.
    match dispatch(cli.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("roce-observer: {err:#}");
            // A tripped `--fail-on` gate (analyze, run) is a verdict, not an error: its own status.
            if err.is::<roce_observer::fail_on::GateFailed>() {
                std::process::ExitCode::from(roce_observer::fail_on::EXIT_GATE)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => roce_observer::run::run(args),
        Command::Counters(args) => roce_observer::counters::run(args),
        Command::Analyze(args) => roce_observer::analyze::run(args),
        Command::Generate(args) => roce_observer::cli::generate(&args.dir),
    }
}
