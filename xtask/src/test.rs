//! `cargo xtask test`: the project's test command (CI runs it through .ci/run).
//! Setup, formatting, clippy with warnings denied, then every test. Kernel tests (BPF test-run
//! and veth replay) run when we are root; without root they are reported as not run.

use std::process::Command;

use clap::Args;

use crate::{
    setup,
    util::{cargo, is_root, sh, workspace_root},
};

#[derive(Args)]
pub struct TestOpts {
    /// Skip the Soft-RoCE virtual-machine tests.
    #[arg(long)]
    pub no_vm: bool,
}

pub fn run(_opts: &TestOpts) -> anyhow::Result<()> {
    setup::setup()?;
    let root = workspace_root();
    sh(cargo().current_dir(&root).args(["fmt", "--all", "--check"]))?;
    sh(cargo()
        .current_dir(&root)
        .args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    sh(cargo().current_dir(&root).args(["build", "--workspace", "--bins"]))?;
    let mut test = cargo();
    test.current_dir(&root).args(["test", "--workspace"]);
    test.env(
        "ROCE_OBSERVER_BIN",
        root.join("target/debug/roce-observer"),
    );
    if is_root() {
        test.env("ROCE_OBSERVER_KERNEL_TESTS", "1");
    } else {
        eprintln!("xtask test: not root: kernel tests (BPF test-run, veth replay) will not run");
    }
    sh(&mut test)?;
    let _ = Command::new("true");
    Ok(())
}
