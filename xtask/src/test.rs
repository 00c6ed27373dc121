//! `cargo xtask test`: the project's test command (CI runs it through .ci/run).
//! Setup, formatting, clippy with warnings denied, every unit and integration test, then the
//! Soft-RoCE virtual-machine tests (fast subset). Kernel tests (BPF test-run, veth replay, VMs)
//! need root; without it they are reported as not run.

use clap::{Args, Parser};

use crate::{
    package, setup, softroce,
    util::{cargo, is_root, sh, workspace_root},
};

#[derive(Args)]
pub struct TestOpts {
    /// Skip the Soft-RoCE virtual-machine tests.
    #[arg(long)]
    pub no_vm: bool,
    /// Run every Soft-RoCE scenario instead of the fast subset.
    #[arg(long)]
    pub full_vm: bool,
}

/// The Soft-RoCE options with their defaults, as the `softroce` task would parse them.
#[derive(Parser)]
struct SoftRoceCli {
    #[command(flatten)]
    opts: softroce::SoftRoceOpts,
}

/// Host-built packages: the eBPF crate only builds for the BPF target (build.rs builds it).
const HOST_PACKAGES: [&str; 3] = ["--workspace", "--exclude", "roce-observer-ebpf"];

pub fn run(opts: &TestOpts) -> anyhow::Result<()> {
    setup::setup()?;
    let root = workspace_root();
    sh(cargo().current_dir(&root).args(["fmt", "--all", "--check"]))?;
    sh(cargo()
        .current_dir(&root)
        .arg("clippy")
        .args(HOST_PACKAGES)
        .args(["--all-targets", "--", "-D", "warnings"]))?;
    sh(cargo()
        .current_dir(&root)
        .arg("build")
        .args(HOST_PACKAGES)
        .arg("--bins"))?;
    let mut test = cargo();
    test.current_dir(&root).arg("test").args(HOST_PACKAGES);
    // tests/tests/package.rs installs this package of the debug build into a throwaway root.
    test.env("ROCE_OBSERVER_DEB", package::build_deb(true)?);
    test.env("ROCE_OBSERVER_BIN", root.join("target/debug/roce-observer"));
    let root_user = is_root();
    if root_user {
        test.env("ROCE_OBSERVER_KERNEL_TESTS", "1");
    } else {
        eprintln!("xtask test: not root: kernel tests (BPF test-run, veth replay) will not run");
    }
    sh(&mut test)?;
    if opts.no_vm {
        eprintln!("xtask test: Soft-RoCE VM tests skipped (--no-vm)");
    } else if !root_user {
        eprintln!("xtask test: Soft-RoCE VM tests NOT RUN: they need root");
    } else {
        // The observer built above runs inside the client VM (kernel 6.1) during each scenario.
        let observer = root.join("target/debug/roce-observer");
        let mut argv = vec!["softroce".to_string(), "--observer".to_string()];
        argv.push(observer.to_string_lossy().into_owned());
        if opts.full_vm {
            argv.push("--full".into());
        }
        softroce::run(SoftRoceCli::parse_from(argv).opts)?;
    }
    Ok(())
}
