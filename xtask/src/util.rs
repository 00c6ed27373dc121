//! Small helpers to run commands with readable failures.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Run `cmd`, inheriting stdio; fail with the command line when it fails.
pub fn sh(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    eprintln!("+ {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

/// Run `cmd` and return its stdout, or None when it cannot start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run `cmd` and return its stdout; fail with its stderr when it cannot start or fails.
pub fn output_checked(cmd: &mut Command) -> anyhow::Result<String> {
    let o = cmd
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !o.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The installed version of a Debian package, None when it is not installed.
pub fn dpkg_version(pkg: &str) -> Option<String> {
    let s = output(
        Command::new("dpkg-query")
            .args(["-W", "-f", "${db:Status-Status} ${Version}", pkg])
            .stderr(Stdio::null()),
    )?;
    let v = s.strip_prefix("installed ")?;
    Some(v.trim().to_string())
}

pub fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|s| s.trim() == "0")
}

/// `cargo` as invoked for xtask (rustup's proxy honours the workspace toolchain).
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}
