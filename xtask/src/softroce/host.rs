//! Host setup: the Debian packages the harness needs, installed idempotently.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, anyhow, bail};

use crate::setup::apt_update_once;
use crate::util::{dpkg_version, output_checked};

/// Debian packages the harness needs on the host. The guest userland is copied from them.
const PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "linux-image-amd64",
    "busybox-static",
    "perftest",
    "rdma-core",
    "ibverbs-providers",
    "libibverbs1",
    "iproute2",
    "tcpdump",
    "tshark",
    "kmod",
    "xz-utils",
];

pub(super) struct Host {
    pub(super) kernel_release: String,
    pub(super) kernel_pkg_version: String,
    pub(super) qemu_version: String,
    pub(super) vmlinuz: PathBuf,
    pub(super) modules: PathBuf,
    /// "pkg=version" lines of everything that goes into the image.
    pub(super) versions: String,
}

/// The version `apt-get install` would pick ("Candidate:" of apt-cache policy).
fn apt_candidate(pkg: &str) -> Option<String> {
    let out = output_checked(Command::new("apt-cache").args(["policy", pkg])).ok()?;
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Candidate: "))
        .filter(|c| *c != "(none)")
        .map(str::to_string)
}

pub(super) fn ensure_host(install: bool) -> Result<Host> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|p| dpkg_version(p).is_none())
        .collect();
    if !missing.is_empty() {
        if !install {
            bail!(
                "missing Debian packages (run without --no-install): {}",
                missing.join(" ")
            );
        }
        println!("softroce: installing {}", missing.join(" "));
        apt_update_once()?;
        if let Some(c) = apt_candidate("linux-image-amd64").filter(|c| !c.starts_with("6.1.")) {
            println!("softroce: warning: linux-image-amd64 candidate is {c}, not a 6.1 kernel");
        }
        install_packages(&missing, "softroce")?;
    }
    let kernel_pkg_version = dpkg_version("linux-image-amd64")
        .ok_or_else(|| anyhow!("linux-image-amd64 not installed"))?;
    if !kernel_pkg_version.starts_with("6.1.") {
        bail!(
            "linux-image-amd64 is {kernel_pkg_version}; the harness expects Debian 12's 6.1 kernel"
        );
    }
    // linux-image-amd64 depends on linux-image-<release> (= version)
    let deps = output_checked(Command::new("dpkg-query").args([
        "-W",
        "-f",
        "${Depends}",
        "linux-image-amd64",
    ]))?;
    let kpkg = deps
        .split([',', '|'])
        .map(|d| d.split_whitespace().next().unwrap_or(""))
        .find(|d| d.starts_with("linux-image-"))
        .ok_or_else(|| {
            anyhow!("cannot find the kernel package in linux-image-amd64's Depends: {deps}")
        })?
        .to_string();
    let kernel_release = kpkg
        .trim_start_matches("linux-image-")
        .trim_end_matches("-unsigned")
        .to_string();
    let vmlinuz = PathBuf::from(format!("/boot/vmlinuz-{kernel_release}"));
    let modules = PathBuf::from(format!("/lib/modules/{kernel_release}"));
    if !vmlinuz.exists()
        || !modules
            .join("kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko")
            .exists()
    {
        bail!(
            "{} or rdma_rxe.ko under {} is missing",
            vmlinuz.display(),
            modules.display()
        );
    }
    let mut versions = String::new();
    for p in PACKAGES.iter().copied().chain([kpkg.as_str(), "libc6"]) {
        writeln!(versions, "{p}={}", dpkg_version(p).unwrap_or_default())?;
    }
    let qemu_version = dpkg_version("qemu-system-x86").unwrap_or_default();
    Ok(Host {
        kernel_release,
        kernel_pkg_version,
        qemu_version,
        vmlinuz,
        modules,
        versions,
    })
}

/// Install the Debian packages `missing` (`who` names the caller in messages), never letting
/// apt remove packages silently. Debian 12's qemu-system-x86 (7.2) conflicts with a newer
/// qemu-utils (a backport some machines carry): then install the qemu-utils that matches, so
/// qemu-img stays available.
pub(crate) fn install_packages(missing: &[&str], who: &str) -> Result<()> {
    apt_update_once()?;
    let install = |extra: &[String], flags: &[&str]| -> Result<bool> {
        Ok(Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(flags)
            .args(missing)
            .args(extra)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?
            .success())
    };
    if !install(&[], &["--no-remove"])? {
        let qemu = apt_candidate("qemu-system-x86");
        let mut ok = false;
        if let (Some(q), Some(have)) = (qemu, dpkg_version("qemu-utils")) {
            println!(
                "{who}: qemu-system-x86 {q} needs the matching qemu-utils; replacing qemu-utils {have} by {q}"
            );
            ok = install(
                &[format!("qemu-utils={q}")],
                &["--no-remove", "--allow-downgrades"],
            )?;
        }
        if !ok {
            println!(
                "{who}: WARNING: installing {} needs apt to remove packages; letting it",
                missing.join(" ")
            );
            if !install(&[], &[])? {
                bail!("apt-get install {} failed", missing.join(" "));
            }
        }
    }
    Ok(())
}
