//! roce-observer command line: parses arguments ([`roce_observer::cli`]) and hands each
//! subcommand to its module.

use clap::Parser as _;
use roce_observer::cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    // clap exits by itself on what it refuses: status 2, or 0 for --help and --version.
    let cli = Cli::parse();
    // Errors are for people (and the journal, under systemd): the whole cause chain on one
    // line, no backtrace, and a status that says which kind of failure it was (cli::exit).
    match dispatch(cli.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("roce-observer: {err:#}");
            std::process::ExitCode::from(roce_observer::cli::exit::status(&err))
        }
    }
}

fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => roce_observer::run::run(args),
        Command::Counters(args) => roce_observer::counters::run(args),
        Command::Analyze(args) => roce_observer::analyze::run(args),
        Command::Generate(args) => roce_observer::cli::generate(&args.dir),
        Command::Help(args) => {
            print!("{}", roce_observer::cli::help_text(&args.command)?);
            Ok(())
        }
    }
}
