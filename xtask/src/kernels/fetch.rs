//! Debian kernels by package name, through a scratch apt configuration (its own sources.list
//! and lists directory under target/): the machine's own apt sources are never touched.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow};

use crate::util::{output_checked, sh};

/// One kernel of the matrix: a Debian suite and the kernel series it ships.
#[derive(Clone, Copy, Debug)]
pub(super) struct Kernel {
    /// Short name used for directories and reports: "5.10", "6.1", "6.12".
    pub(super) name: &'static str,
    pub(super) suite: &'static str,
    /// Prefix of the `linux-image-amd64` version to take (bullseye also carries a 6.1 LTS).
    pub(super) series: &'static str,
    /// What the observer must report loading there (a substring of its startup line).
    pub(super) expect_variant: &'static [&'static str],
    /// Features this kernel lacks, each forced on once (`+name`), with what the error must say.
    pub(super) forced: &'static [(&'static str, &'static [&'static str])],
}

pub(super) const KERNELS: &[Kernel] = &[
    Kernel {
        name: "5.10",
        suite: "bullseye",
        series: "5.10.",
        expect_variant: &["single-buffer XDP", "precise clock", "clsact egress"],
        forced: &[
            // BPF_F_XDP_HAS_FRAGS is refused before verification: nothing in the log.
            ("+frags", &["roce_observer_xdp ", "before verifying"]),
            (
                "+coarse_clock",
                &[
                    "lacks BPF helper bpf_ktime_get_coarse_ns",
                    "Last lines of the verifier log",
                ],
            ),
        ],
    },
    Kernel {
        name: "6.1",
        suite: "bookworm",
        series: "6.1.",
        expect_variant: &["XDP multi-buffer (frags)", "coarse clock", "clsact egress"],
        forced: &[],
    },
    Kernel {
        name: "6.12",
        suite: "trixie",
        series: "6.12.",
        expect_variant: &["XDP multi-buffer (frags)", "coarse clock", "TCX egress"],
        forced: &[],
    },
];

/// A kernel unpacked on disk.
pub(super) struct Fetched {
    /// `uname -r` of the kernel, e.g. 5.10.0-32-amd64.
    pub(super) release: String,
    /// The Debian package version, e.g. 5.10.223-1.
    pub(super) version: String,
    pub(super) vmlinuz: PathBuf,
    /// The unpacked package (its modules under lib/modules or usr/lib/modules).
    pub(super) root: PathBuf,
}

impl Fetched {
    pub(super) fn modules_dir(&self) -> PathBuf {
        ["lib/modules", "usr/lib/modules"]
            .iter()
            .map(|d| self.root.join(d).join(&self.release))
            .find(|p| p.exists())
            .unwrap_or_else(|| self.root.join("lib/modules").join(&self.release))
    }
}

/// Download and unpack `k` into `dir` (skipped when already there).
pub(super) fn fetch(k: &Kernel, dir: &Path) -> Result<Fetched> {
    let done = dir.join("fetched.txt");
    if let Ok(text) = fs::read_to_string(&done)
        && let Some((release, version)) = text.trim().split_once(' ')
    {
        return Ok(Fetched {
            vmlinuz: dir.join("vmlinuz"),
            root: dir.join("kroot"),
            release: release.into(),
            version: version.into(),
        });
    }
    fs::create_dir_all(dir.join("lists/partial"))?;
    let sources = dir.join("sources.list");
    fs::write(
        &sources,
        format!("deb http://deb.debian.org/debian {} main\n", k.suite),
    )?;
    // An empty dpkg status too: the versions this machine has installed are not in the suite.
    let status = dir.join("status");
    fs::write(&status, "")?;
    let apt_opts = [
        format!("-o Dir::State::status={}", status.display()),
        format!("-o Dir::Etc::sourcelist={}", sources.display()),
        "-o Dir::Etc::sourceparts=-".into(),
        format!("-o Dir::State::Lists={}", dir.join("lists").display()),
    ];
    let apt_args: Vec<&str> = apt_opts.iter().flat_map(|o| o.splitn(2, ' ')).collect();
    sh(Command::new("apt-get")
        .args(&apt_args)
        .args(["update", "-qq"]))
    .with_context(|| format!("apt-get update for {}", k.suite))?;
    let show = output_checked(
        Command::new("apt-cache")
            .args(&apt_args)
            .args(["show", "linux-image-amd64"]),
    )?;
    let (version, pkg) = image_package(&show, k.series)
        .ok_or_else(|| anyhow!("{} has no linux-image-amd64 {}x", k.suite, k.series))?;
    // apt's sandbox user cannot write into target/: download as root, quietly.
    sh(Command::new("apt-get")
        .current_dir(dir)
        .args(&apt_args)
        .args(["-o", "APT::Sandbox::User=root", "download", "-qq", &pkg]))
    .with_context(|| format!("downloading {pkg}"))?;
    let deb = fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .ok_or_else(|| anyhow!("apt-get download left no .deb in {}", dir.display()))?;
    let root = dir.join("kroot");
    let _ = fs::remove_dir_all(&root);
    sh(Command::new("dpkg").arg("-x").arg(&deb).arg(&root))?;
    fs::remove_file(&deb)?;
    // Debian 13 ships its modules under usr/lib/modules; this machine's kmod looks in lib/.
    if !root.join("lib").exists() && root.join("usr/lib/modules").exists() {
        std::os::unix::fs::symlink("usr/lib", root.join("lib"))?;
    }
    let release = pkg
        .trim_start_matches("linux-image-")
        .trim_end_matches("-unsigned")
        .to_string();
    let boot = root.join(format!("boot/vmlinuz-{release}"));
    let vmlinuz = dir.join("vmlinuz");
    fs::copy(&boot, &vmlinuz).with_context(|| format!("{pkg} has no {}", boot.display()))?;
    fs::write(&done, format!("{release} {version}\n"))?;
    Ok(Fetched {
        release,
        version,
        vmlinuz,
        root,
    })
}

/// Fetch again (the unpacked tree was pruned and the image needs rebuilding).
pub(super) fn refetch(k: &Kernel, dir: &Path) -> Result<Fetched> {
    let _ = fs::remove_file(dir.join("fetched.txt"));
    fetch(k, dir)
}

/// Remove the unpacked package and apt's lists once the image is built (hundreds of MB per
/// kernel); the kernel itself stays in `dir/vmlinuz`.
pub(super) fn prune(dir: &Path) {
    for d in ["kroot", "lists"] {
        let _ = fs::remove_dir_all(dir.join(d));
    }
}

/// From `apt-cache show linux-image-amd64`: the version starting with `series` and the
/// versioned image package it depends on.
fn image_package(show: &str, series: &str) -> Option<(String, String)> {
    show.split("\n\n").find_map(|stanza| {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let version = field("Version:")?;
        if !version.starts_with(series) {
            return None;
        }
        let pkg = field("Depends:")?
            .split([',', '|'])
            .map(|d| d.split_whitespace().next().unwrap_or(""))
            .find(|d| d.starts_with("linux-image-"))?;
        Some((version.to_string(), pkg.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_series_picks_the_package() {
        let show = "Package: linux-image-amd64\nVersion: 6.1.192-3\nDepends: linux-image-6.1.0-57-amd64 (= 6.1.192-3)\n\nPackage: linux-image-amd64\nVersion: 5.10.223-1\nDepends: linux-image-5.10.0-32-amd64 (= 5.10.223-1)\n";
        assert_eq!(
            image_package(show, "5.10."),
            Some(("5.10.223-1".into(), "linux-image-5.10.0-32-amd64".into()))
        );
        assert_eq!(
            image_package(show, "6.1.").map(|p| p.1),
            Some("linux-image-6.1.0-57-amd64".into())
        );
        assert_eq!(image_package(show, "6.12."), None);
    }
}
