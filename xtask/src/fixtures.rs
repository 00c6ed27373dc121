//! `cargo xtask fixtures`: regenerate the fixture captures and their expected output with
//! scapy (an encoder we did not write; its RoCE layer computes the ICRC).

use std::process::Command;

use anyhow::Context as _;

use crate::util::{output, sh, workspace_root};

pub fn run() -> anyhow::Result<()> {
    let have_scapy = output(Command::new("python3").args(["-c", "import scapy"])).is_some();
    if !have_scapy {
        sh(Command::new("python3").args(["-m", "pip", "install", "-q", "scapy==2.8.0"]))
            .context("installing scapy with pip failed")?;
    }
    let dir = workspace_root().join("tests/fixtures");
    sh(Command::new("python3")
        .arg(dir.join("gen_fixtures.py"))
        .arg(&dir))
}
