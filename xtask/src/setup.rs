//! `cargo xtask setup`: make this machine able to build and test roce-observer. Idempotent and
//! fast when already done. Follows the verified recipe in docs/toolchain.md:
//! - a Rust toolchain with `rust-src` for the eBPF crate: a rustup `nightly` that has it, else
//!   Debian's rustc-web + rust-web-src linked as the rustup toolchain `roce-debian`;
//! - bpf-linker 0.13.0 built against Debian's LLVM 22;
//! - test tools: tcpreplay (layer-2 replay), iproute2 (namespaces, veth), systemd
//!   (systemd-analyze, to verify the packaged unit), prometheus (a real Prometheus server and
//!   promtool for the metrics scrape test), wireshark-common (dumpcap: two capture points in one
//!   pcapng for the path-loss test).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::util::{dpkg_version, is_root, output, sh};

pub const DEBIAN_TOOLCHAIN: &str = "roce-debian";
const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

fn has_rust_src(toolchain: &str) -> bool {
    output(Command::new("rustup").args(["run", toolchain, "rustc", "--print", "sysroot"]))
        .map(|s| PathBuf::from(s.trim()).join("lib/rustlib/src/rust/library/core"))
        .is_some_and(|p| p.is_dir())
}

fn dpkg_installed(pkg: &str) -> bool {
    dpkg_version(pkg).is_some()
}

fn bpf_linker_ok() -> bool {
    output(Command::new("bpf-linker").arg("--version"))
        .is_some_and(|s| s.contains(BPF_LINKER_VERSION))
}

fn toolchain_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".local/share/roce-observer/debian-rust")
}

fn apt_install(pkgs: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = pkgs
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "setup needs these Debian packages: {}; run `cargo xtask setup` as root (it uses \
             apt-get), or install them yourself",
            missing.join(" ")
        );
    }
    if output(Command::new("apt-get").arg("--version")).is_none() {
        bail!(
            "apt-get not found: this setup targets Debian 12; install by hand: {}",
            missing.join(" ")
        );
    }
    apt_update_once()?;
    sh(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing))
    .with_context(|| format!("apt-get install {} failed", missing.join(" ")))
}

/// `apt-get update`, once per run: one package-list refresh is enough.
pub fn apt_update_once() -> anyhow::Result<()> {
    static UPDATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !UPDATED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        sh(Command::new("apt-get").args(["update", "-q"]))
            .context("apt-get update failed: are the Debian package mirrors reachable?")?;
    }
    Ok(())
}

fn link_debian_toolchain() -> anyhow::Result<()> {
    let dir = toolchain_dir();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
    for (link, target) in [
        (bin.join("rustc"), Path::new("/usr/bin/rustc")),
        (bin.join("cargo"), Path::new("/usr/bin/cargo")),
        (dir.join("lib"), Path::new("/usr/lib")),
    ] {
        if std::fs::read_link(&link).ok().as_deref() != Some(target) {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(target, &link)
                .with_context(|| format!("linking {} -> {}", link.display(), target.display()))?;
        }
    }
    let listed = output(Command::new("rustup").args(["toolchain", "list"])).unwrap_or_default();
    if !listed.lines().any(|l| l.starts_with(DEBIAN_TOOLCHAIN)) {
        sh(Command::new("rustup")
            .args(["toolchain", "link", DEBIAN_TOOLCHAIN])
            .arg(&dir))?;
    }
    Ok(())
}

/// Everything the build and the tests need. Returns the eBPF toolchain name.
pub fn setup() -> anyhow::Result<String> {
    // systemd for `systemd-analyze verify` of the packaged unit (tests/tests/package.rs),
    // prometheus for the metrics scrape test (tests/tests/metrics_prometheus.rs), dumpcap for
    // the path-loss test (tests/tests/path_loss_veth.rs; on a fresh machine the Soft-RoCE
    // stage installed it only after that test had run and failed), tcpdump for the steps test
    // (tests/tests/steps_veth.rs; the same story: a fresh clone failed it).
    apt_install(&[
        "iproute2",
        "tcpreplay",
        "tcpdump",
        "systemd",
        "prometheus",
        "wireshark-common",
    ])?;
    let toolchain = if has_rust_src("nightly") {
        "nightly".to_string()
    } else {
        if !has_rust_src(DEBIAN_TOOLCHAIN) {
            apt_install(&["rustc-web", "cargo-web", "rust-web-src"])?;
            link_debian_toolchain()?;
            if !has_rust_src(DEBIAN_TOOLCHAIN) {
                bail!(
                    "the `{DEBIAN_TOOLCHAIN}` toolchain still has no rust-src after setup; \
                     check /usr/lib/rustlib/src/rust/library (package rust-web-src)"
                );
            }
        }
        DEBIAN_TOOLCHAIN.to_string()
    };
    if !bpf_linker_ok() {
        apt_install(&["llvm-22-dev"])?;
        eprintln!("setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (~3 min)");
        sh(Command::new("cargo")
            .env("LLVM_PREFIX", LLVM_PREFIX)
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--locked",
            ])
            .args(["--no-default-features", "--features", "llvm-22"]))
        .context("installing bpf-linker failed (needs crates.io and llvm-22-dev)")?;
    }
    eprintln!("setup: ready (eBPF toolchain `{toolchain}`, bpf-linker {BPF_LINKER_VERSION})");
    Ok(toolchain)
}
