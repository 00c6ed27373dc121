//! `cargo xtask fleet`: the fleet store on ClickHouse's own engine. Installs chDB (PyPI `chdb`,
//! ClickHouse in process, about 900 MB: too long for the test command's time budget on a fresh
//! machine, hence a command of its own, run by .ci/run after the test command), builds the
//! observer and runs tests/tests/fleet_store.rs (root).

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::{
    setup,
    util::{cargo, is_root, output, sh, workspace_root},
};

const CHDB: &str = "chdb==4.4.0";

/// Install chDB with pip when python3 cannot import it (idempotent).
pub fn ensure_chdb() -> anyhow::Result<()> {
    if output(Command::new("python3").args(["-c", "import chdb"])).is_none() {
        sh(Command::new("python3").args(["-m", "pip", "install", "-q", CHDB]))
            .with_context(|| format!("chDB is missing and `pip install {CHDB}` failed"))?;
    }
    Ok(())
}

pub fn run() -> anyhow::Result<()> {
    if !is_root() {
        bail!("cargo xtask fleet runs observers in network namespaces: run it as root");
    }
    setup::setup()?;
    ensure_chdb()?;
    let root = workspace_root();
    sh(cargo()
        .current_dir(&root)
        .args(["build", "-p", "roce-observer", "--bins"]))?;
    sh(cargo()
        .current_dir(&root)
        .args(["test", "-p", "integration-tests", "--test", "fleet_store"])
        .env("ROCE_OBSERVER_BIN", root.join("target/debug/roce-observer"))
        .args(["--", "--include-ignored", "--nocapture"]))
}
