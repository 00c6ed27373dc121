//! The command line, defined once: `main` parses it, and the hidden `generate` subcommand
//! turns the same definition into man pages and shell completions for the Debian package
//! (`cargo xtask package`), so neither can drift from `--help`. `generate` is hidden because
//! it is a packaging step, not something a user runs; docs/development.md describes it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use clap_complete::Shell;

pub mod args;
pub mod capture_time;
pub mod exit;
pub mod manual;
pub mod values;
pub use args::{EngineArgs, EngineArgsError, LogDirArgs, MetricsArgs, OutputArgs, RdmaSysfsArgs};

/// The end of `roce-observer --help`.
const TOP_AFTER_HELP: &str = "\
Start with `roce-observer run --capture tests/fixtures/mixed_demo.pcap` (no privileges needed);
`roce-observer help COMMAND` (or `COMMAND --help`) lists a command's options and examples.

Exit status: 0 done, 1 runtime error, 2 command-line error, 3 a --fail-on condition held.";

#[derive(Parser)]
#[command(
    name = "roce-observer",
    version,
    about = "Per-QP RoCEv2 observer",
    disable_help_subcommand = true,
    after_help = TOP_AFTER_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Watch interfaces live: XDP on ingress and TC on egress (needs root or CAP_BPF +
    /// CAP_NET_ADMIN + CAP_PERFMON).
    Run(crate::run::RunArgs),
    /// The RDMA NIC's own RoCE and PFC counters (sysfs hw_counters, ethtool -S): for hosts
    /// whose NIC handles RoCE where XDP cannot see it.
    Counters(crate::counters::CountersArgs),
    /// Analyze a pcap/pcapng capture (file, or `-` for a stream on stdin).
    Analyze(crate::analyze::AnalyzeArgs),
    /// Write man pages and shell completions generated from this command line (used to build
    /// the Debian package; hidden from --help).
    #[command(hide = true)]
    Generate(GenerateArgs),
    /// Print this message or the help of the given command (`help run`).
    Help(HelpArgs),
}

#[derive(Args)]
pub struct HelpArgs {
    /// The command whose help to print (none: the list of commands).
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The long help of `roce-observer COMMAND...`, or a usage error naming the unknown command.
pub fn help_text(path: &[String]) -> anyhow::Result<String> {
    let mut cmd = Cli::command();
    cmd.build();
    let mut at = &mut cmd;
    for name in path {
        let known: Vec<String> = at
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_string())
            .collect();
        at = match at.find_subcommand_mut(name) {
            Some(sub) => sub,
            None => {
                return Err(exit::UsageError(format!(
                    "no command named `{name}`: give one of {}",
                    known.join(", ")
                ))
                .into());
            }
        };
    }
    Ok(at.render_long_help().to_string())
}

#[derive(Args)]
pub struct GenerateArgs {
    /// Output directory: man pages go to DIR/man1, completions to DIR/completions.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// The shells whose completions the package ships, with the file name each one's loader
/// expects (bash-completion by command name, zsh `_name`, fish `name.fish`).
pub const COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "roce-observer"),
    (Shell::Zsh, "_roce-observer"),
    (Shell::Fish, "roce-observer.fish"),
];

/// Man pages (one per visible subcommand, roff) and completions for every shell in
/// [`COMPLETIONS`], written under `dir`.
pub fn generate(dir: &Path) -> anyhow::Result<()> {
    let man = dir.join("man1");
    let completions = dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let cmd = Cli::command();
    manual::write_pages(&cmd, &man)?;
    // clap_complete offers hidden subcommands too: complete the command line as --help shows it.
    let shown = clap::Command::new("roce-observer")
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true)
        .args(cmd.get_arguments().cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    for (shell, file) in COMPLETIONS {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut shown.clone(), "roce-observer", &mut text);
        let path = completions.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_help_names_every_capability_it_needs() {
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("run")
            .expect("run subcommand")
            .render_long_help()
            .to_string();
        for cap in ["CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"] {
            assert!(help.contains(cap), "run --help lacks {cap}:\n{help}");
        }
    }

    #[test]
    fn generated_pages_and_completions_cover_every_visible_subcommand() {
        let dir = std::env::temp_dir().join(format!("roce-observer-gen-{}", std::process::id()));
        generate(&dir).expect("generate");
        let page = std::fs::read_to_string(dir.join("man1/roce-observer-run.1")).expect("run page");
        // The page is the clap definition: every `run` option appears in it.
        for arg in Cli::command()
            .find_subcommand("run")
            .expect("run subcommand")
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
        {
            // roff escapes `-` as `\-`.
            assert!(
                page.contains(&format!("\\-\\-{}", arg.replace('-', "\\-"))),
                "--{arg}"
            );
        }
        assert!(
            !dir.join("man1/roce-observer-generate.1").exists(),
            "generate is hidden"
        );
        for (_, file) in COMPLETIONS {
            let text = std::fs::read_to_string(dir.join("completions").join(file)).expect(file);
            for word in [
                "run",
                "analyze",
                "counters",
                "color",
                "log-dir",
                "metrics",
                "prom-file",
            ] {
                assert!(text.contains(word), "{file} lacks {word}");
            }
            assert!(
                !text.contains("generate"),
                "{file} offers the hidden subcommand"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
