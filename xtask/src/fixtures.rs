//! `cargo xtask fixtures`: regenerate the fixture captures and their expected output with
//! scapy (an encoder we did not write; its RoCE layer computes the ICRC). `check()` (a stage
//! of `cargo xtask test`) regenerates them elsewhere and compares with the committed files.

use std::{path::Path, process::Command};

use anyhow::{Context as _, bail};

use crate::util::{output, sh, workspace_root};

const SCAPY: &str = "scapy==2.8.0";

/// Install scapy with pip when python3 cannot import it.
pub fn ensure_scapy() -> anyhow::Result<()> {
    let have_scapy = output(Command::new("python3").args(["-c", "import scapy"])).is_some();
    if !have_scapy {
        sh(Command::new("python3").args(["-m", "pip", "install", "-q", SCAPY]))
            .with_context(|| format!("scapy is missing and `pip install {SCAPY}` failed"))?;
    }
    Ok(())
}

fn generate(into: &Path) -> anyhow::Result<()> {
    let script = workspace_root().join("tests/fixtures/gen_fixtures.py");
    sh(Command::new("python3").arg(script).arg(into))
}

pub fn run() -> anyhow::Result<()> {
    ensure_scapy()?;
    generate(&workspace_root().join("tests/fixtures"))
}

/// The committed fixtures (every `.pcap`, `.pcapng` and `.expected.json`) must be exactly what the
/// generator writes: a fixture edited by hand, or a generator change that was not re-run,
/// fails here.
pub fn check() -> anyhow::Result<()> {
    let committed = workspace_root().join("tests/fixtures");
    let fresh = workspace_root().join("target/fixtures-check");
    let _ = std::fs::remove_dir_all(&fresh);
    generate(&fresh)?;
    let names = |dir: &Path| -> anyhow::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).with_context(|| dir.display().to_string())? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if [".pcap", ".pcapng", ".expected.json"]
                .iter()
                .any(|ext| name.ends_with(ext))
            {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    };
    let (ours, theirs) = (names(&committed)?, names(&fresh)?);
    let mut problems = Vec::new();
    for name in ours.iter().filter(|n| !theirs.contains(n)) {
        problems.push(format!("{name}: committed but not generated"));
    }
    for name in &theirs {
        let new = std::fs::read(fresh.join(name))?;
        match std::fs::read(committed.join(name)) {
            Ok(old) if old == new => {}
            Ok(_) => problems.push(format!("{name}: differs from the generator's output")),
            Err(_) => problems.push(format!("{name}: generated but not committed")),
        }
    }
    if !problems.is_empty() {
        bail!(
            "tests/fixtures is not what gen_fixtures.py writes (regenerate with `cargo xtask \
             fixtures`; the fresh copy is in {}):\n  {}",
            fresh.display(),
            problems.join("\n  ")
        );
    }
    eprintln!(
        "fixtures: {} files equal the generator's output",
        theirs.len()
    );
    Ok(())
}
