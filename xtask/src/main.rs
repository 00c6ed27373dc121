//! Project tasks: `cargo xtask setup | test | demo | fixtures | fleet | bench | softroce | kernels | package`.

mod bench;
mod demo;
mod fixtures;
mod fleet;
mod kernels;
mod package;
mod qemu;
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
    /// The fleet store: install chDB, then three observers' logs loaded with
    /// docs/clickhouse/schema.sql and ingest.sql and every shipped query checked (root).
    Fleet,
    /// Benchmarks (figures and ratios against baselines run side by side, not pass/fail):
    /// analyze vs tshark and tcpdump, and the kernel programs vs a do-nothing XDP program.
    Bench(BenchArgs),
    /// Real RoCE traffic: Soft-RoCE in two qemu VMs (kernel 6.1) running perftest, checked
    /// against rxe's counters and the observer (root).
    Softroce(softroce::SoftRoceOpts),
    /// The kernel matrix: Debian's 5.10, 6.1 and 6.12 kernels in qemu, the observer on a veth
    /// pair against replayed fixtures, exact at both attach points (root).
    Kernels(kernels::KernelsOpts),
    /// Build a Debian package (binary, man pages, completions, systemd unit) into
    /// target/debian/, on this machine: there is no hosted repository.
    Package(package::PackageOpts),
}

#[derive(clap::Args)]
struct BenchArgs {
    #[command(flatten)]
    analyze: bench::BenchOpts,
    /// Skip the kernel per-packet benchmark (it needs root).
    #[arg(long)]
    no_kernel: bool,
    /// Runs per frame in the kernel benchmark.
    #[arg(long, default_value_t = 200_000)]
    kernel_repeat: u32,
    /// Queue pairs in the kernel veth replay (steady traffic and a retransmission storm,
    /// timed by kernel BPF statistics); 0 skips it.
    #[arg(long, default_value_t = 1_000)]
    kernel_qps: u32,
}

fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    bench::run(&args.analyze)?;
    if args.no_kernel {
        return Ok(());
    }
    if !util::is_root() {
        eprintln!("bench: kernel benchmark skipped: it loads BPF programs, run as root");
        return Ok(());
    }
    setup::setup()?;
    util::sh(
        util::cargo()
            .current_dir(util::workspace_root())
            .args(["run", "--quiet", "--release", "-p", "roce-observer-tools"])
            .args(["--bin", "kernel-bench", "--"])
            .arg(args.kernel_repeat.to_string())
            .arg(args.kernel_qps.to_string()),
    )
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::setup().map(|_| ()),
        Task::Test(opts) => test::run(&opts),
        Task::Demo(opts) => demo::run(&opts),
        Task::Fixtures => fixtures::run(),
        Task::Fleet => fleet::run(),
        Task::Bench(args) => bench(&args),
        Task::Softroce(opts) => softroce::run(opts),
        Task::Kernels(opts) => kernels::run(&opts),
        Task::Package(opts) => package::run(&opts),
    }
}
