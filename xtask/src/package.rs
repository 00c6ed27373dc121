//! `cargo xtask package`: a Debian package of roce-observer, built on this machine (there is no
//! hosted repository). The tree is staged by hand and packed with `dpkg-deb`, which every
//! Debian system has: no packaging tool to install first (cargo-deb would cost minutes of
//! compiling on a fresh 2-core machine).
//!
//! Man pages and completions come from the binary itself (`roce-observer generate DIR`, a
//! hidden subcommand over the same clap definitions), so they cannot drift from `--help`;
//! xtask cannot link the roce-observer crate, whose build script needs the eBPF toolchain
//! that xtask installs. The unit, environment file and maintainer scripts live in packaging/.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::util::{cargo, output, sh, workspace_root};

#[derive(Args)]
pub struct PackageOpts {
    /// Package the debug build (quicker to build; what the test command installs) instead of
    /// the release build.
    #[arg(long)]
    pub debug: bool,
}

pub const NAME: &str = "roce-observer";

pub fn run(opts: &PackageOpts) -> anyhow::Result<()> {
    crate::setup::setup()?;
    let mut build = cargo();
    build
        .current_dir(workspace_root())
        .args(["build", "-p", NAME, "--bin", NAME]);
    if !opts.debug {
        build.arg("--release");
    }
    sh(&mut build)?;
    let deb = build_deb(opts.debug)?;
    println!("{}", deb.display());
    eprintln!(
        "package: install with `apt install {}` (or dpkg -i), then see README.md, section Install",
        deb.display()
    );
    Ok(())
}

/// Pack the already built binary (target/debug or target/release) into
/// target/debian/roce-observer_VERSION_ARCH.deb and return its path.
pub fn build_deb(debug: bool) -> anyhow::Result<PathBuf> {
    let root = workspace_root();
    let bin = root
        .join("target")
        .join(if debug { "debug" } else { "release" })
        .join(NAME);
    if !bin.is_file() {
        bail!(
            "{} is not built yet: run `cargo xtask package`",
            bin.display()
        );
    }
    let out = root.join("target/debian");
    let stage = out.join("stage");
    let generated = out.join("generated");
    for dir in [&stage, &generated] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
    }
    sh(Command::new(&bin).arg("generate").arg(&generated))?;

    let packaging = root.join("packaging");
    let docs = "usr/share/doc/roce-observer";
    let copies: [(PathBuf, &str); 16] = [
        (bin.clone(), "usr/bin/roce-observer"),
        (
            packaging.join("roce-observer.service"),
            "lib/systemd/system/roce-observer.service",
        ),
        (
            packaging.join("roce-observer.sysusers"),
            "usr/lib/sysusers.d/roce-observer.conf",
        ),
        (
            packaging.join("roce-observer.default"),
            "etc/default/roce-observer",
        ),
        (
            root.join("README.md"),
            "usr/share/doc/roce-observer/README.md",
        ),
        (
            root.join("docs/metrics.md"),
            "usr/share/doc/roce-observer/metrics.md",
        ),
        (
            root.join("docs/log-schema.md"),
            "usr/share/doc/roce-observer/log-schema.md",
        ),
        (
            root.join("docs/operations.md"),
            "usr/share/doc/roce-observer/operations.md",
        ),
        (
            root.join("docs/usage.md"),
            "usr/share/doc/roce-observer/usage.md",
        ),
        (
            root.join("docs/observation-points.md"),
            "usr/share/doc/roce-observer/observation-points.md",
        ),
        (
            root.join("docs/kernels.md"),
            "usr/share/doc/roce-observer/kernels.md",
        ),
        (
            root.join("docs/prometheus/roce-observer.rules.yml"),
            "usr/share/doc/roce-observer/roce-observer.rules.yml",
        ),
        // The README's first try: `roce-observer run --capture` on it, no privileges needed.
        (
            root.join("tests/fixtures/mixed_demo.pcap"),
            "usr/share/doc/roce-observer/examples/mixed_demo.pcap",
        ),
        (
            generated.join("completions/roce-observer"),
            "usr/share/bash-completion/completions/roce-observer",
        ),
        (
            generated.join("completions/_roce-observer"),
            "usr/share/zsh/vendor-completions/_roce-observer",
        ),
        (
            generated.join("completions/roce-observer.fish"),
            "usr/share/fish/vendor_completions.d/roce-observer.fish",
        ),
    ];
    for (from, to) in &copies {
        copy(from, &stage.join(to))?;
    }
    let man = stage.join("usr/share/man/man1");
    std::fs::create_dir_all(&man)?;
    for page in std::fs::read_dir(generated.join("man1"))? {
        let page = page?.path();
        let target = man.join(page.file_name().context("man page name")?);
        std::fs::copy(&page, &target)?;
        // Debian ships man pages compressed; -n keeps the package reproducible.
        sh(Command::new("gzip").args(["-9n"]).arg(&target))?;
    }
    let version = package_version(&root)?;
    std::fs::write(
        stage.join(docs).join("copyright"),
        format!(
            "roce-observer {version}\nLicense: MIT OR Apache-2.0 (see the project's \
             Cargo.toml)\n"
        ),
    )?;

    let control = stage.join("DEBIAN");
    std::fs::create_dir_all(&control)?;
    for script in ["postinst", "prerm", "postrm"] {
        copy(
            &packaging.join("debian").join(script),
            &control.join(script),
        )?;
    }
    std::fs::write(control.join("conffiles"), "/etc/default/roce-observer\n")?;
    let arch = output(Command::new("dpkg").arg("--print-architecture"))
        .context("dpkg --print-architecture failed: building the package needs Debian's dpkg")?;
    std::fs::write(
        control.join("control"),
        format!(
            "Package: {NAME}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: roce-observer \
             developers <roce-observer@example.invalid>\nInstalled-Size: {size}\nDepends: \
             libc6, libgcc-s1, systemd | adduser\nSuggests: tcpdump\nSection: net\nPriority: \
             optional\nDescription: per-QP RoCEv2 observer (eBPF, XDP/TC) and pcap analyzer\n \
             Live, exact per-queue-pair visibility into RoCEv2 traffic from XDP and TC programs:\n \
             PSN gaps, retransmissions, NAKs, ECN CE marks and CNPs, PFC pause frames, latency.\n \
             Includes a least-privilege systemd service (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON).\n",
            arch = arch.trim(),
            size = dir_size_kib(&stage)?,
        ),
    )?;
    let deb = out.join(format!("{NAME}_{version}_{}.deb", arch.trim()));
    let mut pack = Command::new("dpkg-deb");
    pack.arg("--root-owner-group");
    // The debug binary is large and only feeds the tests: fast compression there.
    if debug {
        pack.args(["-Zgzip", "-z1"]);
    }
    sh(pack.arg("--build").arg(&stage).arg(&deb))?;
    Ok(deb)
}

/// Copy one file, creating its directory, with the mode a package wants (scripts and the
/// binary executable, the rest read-only for others).
fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    let executable = std::fs::metadata(from)?.permissions().mode() & 0o111 != 0;
    let mode = if executable { 0o755 } else { 0o644 };
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// The binary crate's version, from its Cargo.toml (`version = "..."` of [package]).
fn package_version(root: &Path) -> anyhow::Result<String> {
    let manifest = root.join("roce-observer/Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .map(str::to_string)
        .with_context(|| format!("no version line in {}", manifest.display()))
}

fn dir_size_kib(dir: &Path) -> anyhow::Result<u64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        bytes += if meta.is_dir() {
            dir_size_kib(&entry.path())? * 1024
        } else {
            meta.len()
        };
    }
    Ok(bytes.div_ceil(1024))
}
