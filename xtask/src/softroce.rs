//! Real RoCEv2 traffic end to end: two Soft-RoCE (rdma_rxe) virtual machines under qemu.
//!
//! `run()` installs what it needs from Debian (idempotently), builds a kernel + initramfs
//! image out of this machine's own packages (Debian's 6.1 `linux-image-amd64`, busybox-static,
//! perftest, rdma-core, iproute2, tcpdump) into `target/softroce/image/` (rebuilt only when the
//! package versions or `tests/softroce/guest-init.sh` change), then for every scenario boots two
//! VMs (qemu TCG, one vCPU each) joined by `-netdev socket` on 127.0.0.1, runs perftest between
//! them, captures the traffic with tcpdump in the client VM and collects perftest's output and
//! rxe's hw_counters from both VMs through virtio 9p shares.
//!
//! The capture is decoded by tshark (an independent dissector) and checked against figures we
//! did not compute ourselves: what perftest's parameters and the path MTU imply, and rxe's
//! counters (sent_pkts, rcvd_pkts, out_of_seq_request, duplicate_request).
//!
//! With `--observer PATH`, roce-observer runs in the client VM (XDP ingress + TC egress on
//! eth0) during perftest; its flow records are checked against `PATH analyze` on the capture of
//! the same run, and analyze's against the per-flow wire records computed here from tshark
//! (`observer_checks`, `wire_flows`; tests/softroce/README.md, "Observer checks").
//!
//! Results: `target/softroce/results/<scenario>/{cap.pcap, summary.json, vm-client/, vm-server/}`
//! and `target/softroce/results/summary.json`.
//!
//! Wiring (in xtask/src/main.rs): `mod softroce;` and a subcommand
//! `Softroce(softroce::SoftRoceOpts)` calling `softroce::run(opts)`.

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of `cargo xtask softroce`.
#[derive(Debug, Clone, clap::Args)]
pub struct SoftRoceOpts {
    /// Run every scenario (WRITE/READ/SEND bandwidth at MTU 1500 and 9000, latency ping-pong,
    /// lossy runs). Without it only the fast subset runs.
    #[arg(long)]
    pub full: bool,
    /// Run only the scenarios whose names contain one of these strings (repeatable).
    #[arg(long = "scenario", value_name = "NAME")]
    pub scenarios: Vec<String>,
    /// List the scenarios and exit.
    #[arg(long)]
    pub list: bool,
    /// Do not call apt-get (fail if something is missing instead).
    #[arg(long)]
    pub no_install: bool,
    /// Rebuild the VM image even if its inputs did not change.
    #[arg(long)]
    pub rebuild_image: bool,
    /// Output directory (default: <workspace>/target/softroce).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Hard limit for one VM, in seconds (qemu is killed after it).
    #[arg(long, default_value_t = 300)]
    pub vm_timeout: u64,
    /// Memory of each VM in MiB.
    #[arg(long, default_value_t = 768)]
    pub vm_memory: u32,
    /// Run this roce-observer binary in the client VM while perftest runs: short for
    /// --extra-bin PATH --extra-cmd '/share/extra/NAME run -i eth0 --no-tui --json --pmtu
    /// {pmtu} --xdp-mode {xdp_mode}' --extra-ready attached --extra-wait 60 (explicit --extra-*
    /// options win). Its JSON output is kept in summary.json as "extra_json".
    #[arg(long, value_name = "PATH")]
    pub observer: Option<PathBuf>,
    /// A binary to copy into the client VM's share as /share/extra/<name> (its shared
    /// libraries go to /share/extra/lib, on LD_LIBRARY_PATH for the extra command).
    #[arg(long, value_name = "PATH")]
    pub extra_bin: Option<PathBuf>,
    /// A command run in the client VM in the background while perftest runs (e.g.
    /// "/share/extra/roce-observer run -i eth0 --no-tui --json"); stopped with SIGINT after
    /// perftest; its stdout/stderr land in vm-client/extra.out and extra.err. Placeholders:
    /// {pmtu} (RoCE path MTU), {mtu} (link MTU), {xdp_mode} (skb above MTU 3000, where
    /// virtio_net refuses native XDP, else auto), {scenario}.
    #[arg(long, value_name = "CMD")]
    pub extra_cmd: Option<String>,
    /// Seconds the extra command gets to start before perftest (an upper bound when
    /// --extra-ready is given).
    #[arg(long, default_value_t = 3)]
    pub extra_wait: u32,
    /// Start perftest as soon as the extra command's output matches this (grep) pattern,
    /// e.g. "attached".
    #[arg(long, value_name = "PATTERN")]
    pub extra_ready: Option<String>,
    /// Do not boot anything: check the results already in the output directory again.
    #[arg(long)]
    pub reanalyze: bool,
}

impl Default for SoftRoceOpts {
    fn default() -> Self {
        SoftRoceOpts {
            full: false,
            scenarios: Vec::new(),
            list: false,
            no_install: false,
            rebuild_image: false,
            out_dir: None,
            vm_timeout: 300,
            vm_memory: 768,
            observer: None,
            extra_bin: None,
            extra_cmd: None,
            extra_wait: 3,
            extra_ready: None,
            reanalyze: false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios

const SERVER_IP: &str = "192.0.2.1";
const CLIENT_IP: &str = "192.0.2.2";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Write,
    Read,
    Send,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    perftest: &'static str,
    op: Op,
    latency: bool,
    size: u64,
    iters: u64,
    mtu: u32,
    loss: Option<&'static str>,
    fast: bool,
}

fn scenarios() -> Vec<Scenario> {
    let bw = |name, perftest, op, mtu, fast| Scenario {
        name,
        perftest,
        op,
        latency: false,
        size: 8192,
        iters: 100,
        mtu,
        loss: None,
        fast,
    };
    vec![
        bw("write_bw_mtu1500", "ib_write_bw", Op::Write, 1500, true),
        Scenario {
            name: "write_bw_mtu1500_loss2",
            loss: Some("2%"),
            ..bw("", "ib_write_bw", Op::Write, 1500, true)
        },
        Scenario {
            name: "write_lat_mtu1500",
            perftest: "ib_write_lat",
            op: Op::Write,
            latency: true,
            size: 2,
            iters: 100,
            mtu: 1500,
            loss: None,
            fast: true,
        },
        bw("read_bw_mtu1500", "ib_read_bw", Op::Read, 1500, false),
        bw("send_bw_mtu1500", "ib_send_bw", Op::Send, 1500, false),
        bw("write_bw_mtu9000", "ib_write_bw", Op::Write, 9000, false),
        bw("read_bw_mtu9000", "ib_read_bw", Op::Read, 9000, false),
        bw("send_bw_mtu9000", "ib_send_bw", Op::Send, 9000, false),
        Scenario {
            name: "read_bw_mtu1500_loss2",
            loss: Some("2%"),
            ..bw("", "ib_read_bw", Op::Read, 1500, false)
        },
    ]
}

impl Scenario {
    /// RoCE path MTU rxe uses for this link MTU (1024 at 1500 bytes, 4096 at 9000).
    fn expected_pmtu(&self) -> u64 {
        if self.mtu >= 4096 + 100 { 4096 } else { 1024 }
    }
    fn perftest_args(&self) -> String {
        format!("-s {} -n {}", self.size, self.iters)
    }
}

// ---------------------------------------------------------------------------------------------
// Entry point

pub fn run(mut opts: SoftRoceOpts) -> Result<()> {
    if let Some(obs) = opts.observer.clone() {
        let name = obs
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("bad --observer path"))?;
        if opts.extra_bin.is_none() {
            opts.extra_bin =
                Some(fs::canonicalize(&obs).with_context(|| obs.display().to_string())?);
        }
        if opts.extra_cmd.is_none() {
            opts.extra_cmd = Some(format!(
                "/share/extra/{name} run -i eth0 --no-tui --json --pmtu {{pmtu}} --xdp-mode {{xdp_mode}}"
            ));
        }
        if opts.extra_ready.is_none() {
            opts.extra_ready = Some("attached".into());
            opts.extra_wait = opts.extra_wait.max(60);
        }
    }
    let all = scenarios();
    if opts.list {
        for s in &all {
            println!(
                "{:<26} {} {} mtu {}{}{}",
                s.name,
                s.perftest,
                s.perftest_args(),
                s.mtu,
                s.loss
                    .map(|l| format!(" netem loss {l}"))
                    .unwrap_or_default(),
                if s.fast { "  [fast]" } else { "" }
            );
        }
        return Ok(());
    }
    let names: Vec<&str> = all.iter().map(|s| s.name).collect();
    let selected: Vec<Scenario> = all
        .clone()
        .into_iter()
        .filter(|s| {
            if opts.scenarios.is_empty() {
                opts.full || s.fast
            } else {
                // an exact name selects that scenario, anything else is a substring
                opts.scenarios.iter().any(|f| {
                    s.name == f.as_str()
                        || (!names.contains(&f.as_str()) && s.name.contains(f.as_str()))
                })
            }
        })
        .collect();
    if selected.is_empty() {
        bail!("no scenario matches {:?} (see --list)", opts.scenarios);
    }

    let root = workspace_root()?;
    let out = opts
        .out_dir
        .clone()
        .unwrap_or_else(|| root.join("target/softroce"));
    fs::create_dir_all(&out)?;
    let t0 = Instant::now();

    let mut setup = None;
    if !opts.reanalyze {
        let host = ensure_host(!opts.no_install)?;
        println!(
            "softroce: kernel {} ({}), qemu {}",
            host.kernel_release, host.kernel_pkg_version, host.qemu_version
        );
        let image = build_image(&root, &out, &host, opts.rebuild_image)?;
        println!("softroce: setup took {:.1}s", t0.elapsed().as_secs_f64());
        setup = Some((host, image));
    }

    let results_dir = out.join("results");
    fs::create_dir_all(&results_dir)?;
    let mut summaries = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for sc in &selected {
        let t = Instant::now();
        let dir = results_dir.join(sc.name);
        let result = match &setup {
            Some((_, image)) => {
                println!("softroce: running {} ...", sc.name);
                run_scenario(sc, image, &dir, &opts)
            }
            None => reanalyze(sc, &dir, &opts),
        };
        match result {
            Ok(summary) => {
                let failed: Vec<String> = summary
                    .checks
                    .iter()
                    .filter(|c| !c.ok)
                    .map(|c| c.describe())
                    .collect();
                println!(
                    "softroce: {} finished in {:.1}s: {} checks, {} failed",
                    sc.name,
                    t.elapsed().as_secs_f64(),
                    summary.checks.len(),
                    failed.len()
                );
                for f in &failed {
                    println!("  FAILED {f}");
                    failures.push(format!("{}: {f}", sc.name));
                }
                summaries.push(summary);
            }
            Err(e) => {
                println!("softroce: {} could not run: {e:#}", sc.name);
                failures.push(format!("{}: could not run: {e:#}", sc.name));
            }
        }
    }

    println!();
    print!("{}", table(&summaries));
    let ft = flow_table(&summaries);
    if !ft.is_empty() {
        println!("\nper flow, wire (tshark) / analyze / observer (eth0 XDP ingress, TC egress):");
        print!("{ft}");
    }
    let host = setup.as_ref().map(|(h, _)| h);
    let all_json = json!({
        "kernel": host.map(|h| &h.kernel_release),
        "kernel_package": host.map(|h| &h.kernel_pkg_version),
        "qemu": host.map(|h| &h.qemu_version),
        "total_seconds": t0.elapsed().as_secs_f64(),
        "scenarios": summaries.iter().map(|s| s.json.clone()).collect::<Vec<_>>(),
        "failures": failures,
    });
    fs::write(
        results_dir.join("summary.json"),
        serde_json::to_string_pretty(&all_json)?,
    )?;
    println!(
        "softroce: {} scenarios in {:.1}s, results in {}",
        summaries.len(),
        t0.elapsed().as_secs_f64(),
        results_dir.display()
    );
    if !failures.is_empty() {
        bail!("Soft-RoCE checks failed:\n  {}", failures.join("\n  "));
    }
    let n: usize = summaries.iter().map(|s| s.checks.len()).sum();
    println!("softroce: {n} passed, 0 failed");
    Ok(())
}

fn workspace_root() -> Result<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().map(Path::to_path_buf).unwrap_or(manifest);
    if root.join("tests/softroce/guest-init.sh").exists() {
        return Ok(root);
    }
    let cwd = std::env::current_dir()?;
    for d in cwd.ancestors() {
        if d.join("tests/softroce/guest-init.sh").exists() {
            return Ok(d.to_path_buf());
        }
    }
    bail!("cannot find the workspace root (tests/softroce/guest-init.sh)")
}

// ---------------------------------------------------------------------------------------------
// Host setup: Debian packages

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

struct Host {
    kernel_release: String,
    kernel_pkg_version: String,
    qemu_version: String,
    vmlinuz: PathBuf,
    modules: PathBuf,
    /// "pkg=version" lines of everything that goes into the image.
    versions: String,
}

fn sh_out(cmd: &mut Command) -> Result<String> {
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

fn installed_version(pkg: &str) -> Option<String> {
    let o = Command::new("dpkg-query")
        .args(["-W", "-f", "${db:Status-Status} ${Version}", pkg])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&o.stdout).into_owned();
    let v = s.strip_prefix("installed ")?;
    Some(v.trim().to_string())
}

/// The version `apt-get install` would pick ("Candidate:" of apt-cache policy).
fn apt_candidate(pkg: &str) -> Option<String> {
    let out = sh_out(Command::new("apt-cache").args(["policy", pkg])).ok()?;
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Candidate: "))
        .filter(|c| *c != "(none)")
        .map(str::to_string)
}

fn ensure_host(install: bool) -> Result<Host> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|p| installed_version(p).is_none())
        .collect();
    if !missing.is_empty() {
        if !install {
            bail!(
                "missing Debian packages (run without --no-install): {}",
                missing.join(" ")
            );
        }
        println!("softroce: installing {}", missing.join(" "));
        let st = Command::new("apt-get").args(["update", "-q"]).status()?;
        if !st.success() {
            bail!("apt-get update failed");
        }
        if let Some(c) = apt_candidate("linux-image-amd64").filter(|c| !c.starts_with("6.1.")) {
            println!("softroce: warning: linux-image-amd64 candidate is {c}, not a 6.1 kernel");
        }
        let install = |extra: &[String], flags: &[&str]| -> Result<bool> {
            Ok(Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(flags)
                .args(&missing)
                .args(extra)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()?
                .success())
        };
        // Never let apt remove packages silently. Debian 12's qemu-system-x86 (7.2) conflicts
        // with a newer qemu-utils (a backport some machines carry): then install the qemu-utils
        // that matches, so qemu-img stays available.
        if !install(&[], &["--no-remove"])? {
            let qemu = apt_candidate("qemu-system-x86");
            let mut ok = false;
            if let (Some(q), Some(have)) = (qemu, installed_version("qemu-utils")) {
                println!(
                    "softroce: qemu-system-x86 {q} needs the matching qemu-utils; replacing qemu-utils {have} by {q}"
                );
                ok = install(
                    &[format!("qemu-utils={q}")],
                    &["--no-remove", "--allow-downgrades"],
                )?;
            }
            if !ok {
                println!(
                    "softroce: WARNING: installing {} needs apt to remove packages; letting it",
                    missing.join(" ")
                );
                if !install(&[], &[])? {
                    bail!("apt-get install {} failed", missing.join(" "));
                }
            }
        }
    }
    let kernel_pkg_version = installed_version("linux-image-amd64")
        .ok_or_else(|| anyhow!("linux-image-amd64 not installed"))?;
    if !kernel_pkg_version.starts_with("6.1.") {
        bail!(
            "linux-image-amd64 is {kernel_pkg_version}; the harness expects Debian 12's 6.1 kernel"
        );
    }
    // linux-image-amd64 depends on linux-image-<release> (= version)
    let deps =
        sh_out(Command::new("dpkg-query").args(["-W", "-f", "${Depends}", "linux-image-amd64"]))?;
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
        writeln!(versions, "{p}={}", installed_version(p).unwrap_or_default())?;
    }
    let qemu_version = installed_version("qemu-system-x86").unwrap_or_default();
    Ok(Host {
        kernel_release,
        kernel_pkg_version,
        qemu_version,
        vmlinuz,
        modules,
        versions,
    })
}

// ---------------------------------------------------------------------------------------------
// VM image: kernel + initramfs from this machine's files

struct Image {
    kernel: PathBuf,
    initrd: PathBuf,
}

/// Binaries copied into the guest (with the shared libraries ldd finds for them).
const GUEST_BINS: &[&str] = &[
    "/bin/busybox",
    "/usr/bin/ib_write_bw",
    "/usr/bin/ib_read_bw",
    "/usr/bin/ib_send_bw",
    "/usr/bin/ib_write_lat",
    "/usr/bin/ib_read_lat",
    "/usr/bin/ib_send_lat",
    "/usr/bin/rdma",
    "/usr/sbin/ip",
    "/usr/sbin/tc",
    "/usr/bin/tcpdump",
];
/// Shared objects loaded with dlopen (ldd cannot see them), plus libraries a Rust binary
/// copied in later (the observer) usually links.
const GUEST_LIBS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so",
    "/lib/x86_64-linux-gnu/libgcc_s.so.1",
    "/lib/x86_64-linux-gnu/libm.so.6",
];
/// Kernel modules (with their dependencies) put into the image. sch_ingress + cls_bpf are for
/// the observer's TC egress program (clsact qdisc through netlink: 6.1 has no TCX).
const GUEST_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "9pnet_virtio",
    "9p",
    "crc32_generic",
    "ib_uverbs",
    "rdma_rxe",
    "sch_netem",
    "sch_ingress",
    "cls_bpf",
];
const IMAGE_FORMAT: &str = "softroce-image-v2";

/// FNV-1a, 64 bit: a stable fingerprint for the cache key.
fn fnv64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in data {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

fn build_image(root: &Path, out: &Path, host: &Host, force: bool) -> Result<Image> {
    let init = fs::read(root.join("tests/softroce/guest-init.sh"))
        .context("reading tests/softroce/guest-init.sh")?;
    let key = format!(
        "{IMAGE_FORMAT}\nkernel={}\n{}init={:016x}\nbins={}\nlibs={}\nmodules={}\n",
        host.kernel_release,
        host.versions,
        fnv64(&init),
        GUEST_BINS.join(","),
        GUEST_LIBS.join(","),
        GUEST_MODULES.join(",")
    );
    let dir = out.join("image");
    let initrd = dir.join("initrd.cpio");
    let key_file = dir.join("inputs.txt");
    let vmlinux = dir.join("vmlinux");
    // the uncompressed ELF kernel when we have it (PVH boot), else the bzImage
    let pick = |vmlinux: &Path| Image {
        kernel: if vmlinux.exists() {
            vmlinux.to_path_buf()
        } else {
            host.vmlinuz.clone()
        },
        initrd: initrd.clone(),
    };
    if !force
        && initrd.exists()
        && fs::read_to_string(&key_file).ok().as_deref() == Some(key.as_str())
    {
        println!("softroce: image up to date ({})", initrd.display());
        return Ok(pick(&vmlinux));
    }
    let t = Instant::now();
    fs::create_dir_all(&dir)?;
    let _ = fs::remove_file(&vmlinux);
    match extract_vmlinux(&host.vmlinuz, &vmlinux) {
        Ok(()) => {}
        Err(e) => {
            let _ = fs::remove_file(&vmlinux);
            println!("softroce: booting the bzImage (no PVH vmlinux: {e:#})");
        }
    }
    let staging = dir.join("root");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    fs::create_dir_all(&staging)?;
    // merged-/usr layout like the host
    for d in [
        "usr/bin",
        "usr/sbin",
        "usr/lib",
        "usr/lib64",
        "etc",
        "proc",
        "sys",
        "dev",
        "tmp",
        "run",
        "share",
        "root",
    ] {
        fs::create_dir_all(staging.join(d))?;
    }
    for d in ["bin", "sbin", "lib", "lib64"] {
        std::os::unix::fs::symlink(format!("usr/{d}"), staging.join(d))?;
    }
    let mut files: Vec<PathBuf> = Vec::new();
    let mut seen = HashSet::new();
    for f in GUEST_BINS.iter().chain(GUEST_LIBS) {
        let p = PathBuf::from(f);
        if !p.exists() {
            bail!("{f} is missing on this machine");
        }
        for dep in std::iter::once(p.clone()).chain(ldd(&p)?) {
            if seen.insert(dep.clone()) {
                files.push(dep);
            }
        }
    }
    for f in &files {
        copy_canonical(f, &staging)?;
    }
    std::os::unix::fs::symlink("busybox", staging.join("usr/bin/sh"))?;
    fs::create_dir_all(staging.join("etc/libibverbs.d"))?;
    fs::copy(
        "/etc/libibverbs.d/rxe.driver",
        staging.join("etc/libibverbs.d/rxe.driver"),
    )?;
    fs::write(
        staging.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\n",
    )?;
    fs::write(staging.join("etc/group"), "root:x:0:\n")?;
    // kernel modules, resolved with modprobe --show-depends, then depmod for the guest
    let mut kos = Vec::new();
    for m in GUEST_MODULES {
        let s = sh_out(Command::new("modprobe").args([
            "-S",
            &host.kernel_release,
            "--show-depends",
            m,
        ]))?;
        for l in s.lines() {
            if let Some(p) = l.strip_prefix("insmod ") {
                let p = p.split_whitespace().next().unwrap_or("").to_string();
                if !kos.contains(&p) {
                    kos.push(p);
                }
            }
        }
    }
    for ko in &kos {
        copy_canonical(Path::new(ko), &staging)?;
    }
    for f in [
        "modules.order",
        "modules.builtin",
        "modules.builtin.modinfo",
    ] {
        let src = host.modules.join(f);
        if src.exists() {
            copy_canonical(&src, &staging)?;
        }
    }
    sh_out(
        Command::new("depmod")
            .arg("-b")
            .arg(&staging)
            .arg(&host.kernel_release),
    )?;
    let init_path = staging.join("init");
    fs::write(&init_path, &init)?;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755))?;

    let tmp = dir.join("initrd.cpio.tmp");
    write_cpio(&staging, &tmp)?;
    fs::rename(&tmp, &initrd)?;
    fs::write(&key_file, &key)?;
    println!(
        "softroce: built image {} ({} files, {} modules, {:.1} MiB) in {:.1}s",
        initrd.display(),
        files.len(),
        kos.len(),
        fs::metadata(&initrd)?.len() as f64 / 1048576.0,
        t.elapsed().as_secs_f64()
    );
    Ok(pick(&vmlinux))
}

/// Decompress the kernel out of Debian's bzImage (XZ payload) into an ELF vmlinux. qemu boots
/// an ELF kernel with a PVH note directly, which skips the real-mode setup and the in-guest XZ
/// decompression: about 5 s less per boot under TCG.
fn extract_vmlinux(vmlinuz: &Path, dest: &Path) -> Result<()> {
    let data = fs::read(vmlinuz)?;
    let magic = b"\xfd7zXZ\x00";
    let off = data
        .windows(magic.len())
        .position(|w| w == magic)
        .ok_or_else(|| anyhow!("no XZ payload in {}", vmlinuz.display()))?;
    let mut child = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(fs::File::create(dest)?)
        .stderr(Stdio::null())
        .spawn()
        .context("running xz")?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("xz stdin"))?;
    let payload = data[off..].to_vec();
    let writer = std::thread::spawn(move || {
        // xz stops reading after the first stream: a broken pipe here is expected
        let _ = stdin.write_all(&payload);
    });
    let st = child.wait()?;
    let _ = writer.join();
    if !st.success() {
        bail!("xz failed ({st})");
    }
    let mut head = [0u8; 4];
    std::io::Read::read_exact(&mut fs::File::open(dest)?, &mut head)?;
    if &head != b"\x7fELF" {
        bail!("decompressed kernel is not an ELF file");
    }
    Ok(())
}

fn ldd(bin: &Path) -> Result<Vec<PathBuf>> {
    let o = Command::new("ldd").arg(bin).output()?;
    // static binaries: "not a dynamic executable", exit code 1
    let s = String::from_utf8_lossy(&o.stdout);
    Ok(s.split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .collect())
}

/// Copy `src` (following symlinks) into `root` at its canonical directory + its own name,
/// so /lib/x86_64-linux-gnu/libc.so.6 lands in usr/lib/x86_64-linux-gnu/libc.so.6.
fn copy_canonical(src: &Path, root: &Path) -> Result<()> {
    let dir = src
        .parent()
        .ok_or_else(|| anyhow!("bad path {}", src.display()))?;
    let dir = fs::canonicalize(dir)?;
    let dest_dir = root.join(dir.strip_prefix("/")?);
    fs::create_dir_all(&dest_dir)?;
    let name = src
        .file_name()
        .ok_or_else(|| anyhow!("bad path {}", src.display()))?;
    let dest = dest_dir.join(name);
    fs::copy(src, &dest).with_context(|| format!("copying {}", src.display()))?;
    Ok(())
}

/// Write the tree under `root` as an uncompressed newc cpio archive (plus /dev/console).
fn write_cpio(root: &Path, dest: &Path) -> Result<()> {
    let mut w = std::io::BufWriter::new(fs::File::create(dest)?);
    let mut ino = 1u32;
    let mut entry = |w: &mut std::io::BufWriter<fs::File>,
                     name: &str,
                     mode: u32,
                     data: &[u8],
                     rdev: (u32, u32)|
     -> Result<()> {
        let namez = name.len() + 1;
        write!(
            w,
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            rdev.0,
            rdev.1,
            namez,
            0
        )?;
        ino += 1;
        w.write_all(name.as_bytes())?;
        w.write_all(&[0])?;
        w.write_all(&vec![0u8; (4 - (110 + namez) % 4) % 4])?;
        w.write_all(data)?;
        w.write_all(&vec![0u8; (4 - data.len() % 4) % 4])?;
        Ok(())
    };
    let mut stack = vec![root.to_path_buf()];
    let mut paths = Vec::new();
    while let Some(d) = stack.pop() {
        let mut ents: Vec<_> = fs::read_dir(&d)?.collect::<std::io::Result<Vec<_>>>()?;
        ents.sort_by_key(|e| e.file_name());
        for e in ents {
            let p = e.path();
            let md = fs::symlink_metadata(&p)?;
            paths.push(p.clone());
            if md.is_dir() {
                stack.push(p);
            }
        }
    }
    paths.sort();
    for p in paths {
        let name = p.strip_prefix(root)?.to_string_lossy().into_owned();
        let md = fs::symlink_metadata(&p)?;
        if md.file_type().is_symlink() {
            let t = fs::read_link(&p)?;
            entry(
                &mut w,
                &name,
                0o120777,
                t.as_os_str().as_encoded_bytes(),
                (0, 0),
            )?;
        } else if md.is_dir() {
            entry(&mut w, &name, 0o040755, &[], (0, 0))?;
        } else {
            let data = fs::read(&p)?;
            entry(
                &mut w,
                &name,
                0o100000 | (md.mode() & 0o7777),
                &data,
                (0, 0),
            )?;
        }
    }
    entry(&mut w, "dev/console", 0o020600, &[], (5, 1))?;
    entry(&mut w, "TRAILER!!!", 0, &[], (0, 0))?;
    w.flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Running one scenario

/// A qemu process started by us; dropped = stopped (by its PID only).
struct Vm {
    name: String,
    child: Option<Child>,
}

impl Vm {
    fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }
    /// Wait for the VM to power off; Err after `limit`.
    fn wait(&mut self, limit: Duration) -> Result<std::process::ExitStatus> {
        let start = Instant::now();
        let child = self
            .child
            .as_mut()
            .ok_or_else(|| anyhow!("vm already reaped"))?;
        loop {
            if let Some(st) = child.try_wait()? {
                self.child = None;
                return Ok(st);
            }
            if start.elapsed() > limit {
                self.stop();
                bail!(
                    "VM {} did not power off within {}s",
                    self.name,
                    limit.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // `timeout` forwards SIGTERM to qemu; then make sure.
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            for _ in 0..50 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Is something listening on 127.0.0.1:port (from /proc/net/tcp, without connecting)?
fn listening(port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    fs::read_to_string("/proc/net/tcp")
        .map(|s| {
            s.lines().skip(1).any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1] == want && f[3] == "0A"
            })
        })
        .unwrap_or(false)
}

fn start_vm(
    name: &str,
    image: &Image,
    share: &Path,
    netdev: &str,
    mac: &str,
    opts: &SoftRoceOpts,
) -> Result<Vm> {
    let mut cmd = Command::new("timeout");
    cmd.arg("--kill-after=10")
        .arg(opts.vm_timeout.to_string())
        .arg("qemu-system-x86_64")
        .args(["-machine", "pc,accel=tcg", "-cpu", "max", "-smp", "1"])
        .args(["-m", &opts.vm_memory.to_string()])
        .args([
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
            "-monitor",
            "none",
        ])
        .arg("-kernel")
        .arg(&image.kernel)
        .arg("-initrd")
        .arg(&image.initrd)
        .args([
            "-append",
            &format!("console=ttyS0 panic=1 quiet loglevel=4 softroce.vm={name}"),
        ])
        .arg("-serial")
        .arg(format!("file:{}", share.join("console.log").display()))
        .args(["-netdev", netdev])
        .args(["-device", &format!("virtio-net-pci,netdev=n0,mac={mac}")])
        .arg("-virtfs")
        .arg(format!(
            "local,path={},mount_tag=share,security_model=none,id=fs0",
            share.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(share.join("qemu.err"))?);
    let child = cmd.spawn().context("starting qemu-system-x86_64")?;
    Ok(Vm {
        name: name.to_string(),
        child: Some(child),
    })
}

fn write_config(share: &Path, sc: &Scenario, role: &str, opts: &SoftRoceOpts) -> Result<()> {
    let timeout = opts.vm_timeout;
    let (me, peer) = if role == "server" {
        (SERVER_IP, CLIENT_IP)
    } else {
        (CLIENT_IP, SERVER_IP)
    };
    let mut c = String::new();
    writeln!(c, "ROLE={role}\nMY_IP={me}\nPEER_IP={peer}\nMTU={}", sc.mtu)?;
    writeln!(
        c,
        "PERFTEST={}\nPERFTEST_ARGS=\"{}\"",
        sc.perftest,
        sc.perftest_args()
    )?;
    writeln!(c, "PERFTEST_TIMEOUT={}", timeout.saturating_sub(60).max(30))?;
    let client = role == "client";
    writeln!(
        c,
        "LOSS=\"{}\"",
        if client { sc.loss.unwrap_or("") } else { "" }
    )?;
    writeln!(c, "CAPTURE={}", if client { 1 } else { 0 })?;
    if let (true, Some(cmd)) = (client, opts.extra_cmd.as_deref()) {
        let cmd = cmd
            .replace("{pmtu}", &sc.expected_pmtu().to_string())
            .replace("{mtu}", &sc.mtu.to_string())
            // virtio_net refuses native XDP above about 3.5 KB of MTU: generic XDP then
            .replace("{xdp_mode}", if sc.mtu > 3000 { "skb" } else { "auto" })
            .replace("{scenario}", sc.name);
        writeln!(c, "EXTRA_CMD={}", sh_quote(&cmd))?;
        writeln!(c, "EXTRA_WAIT={}", opts.extra_wait)?;
        if let Some(r) = &opts.extra_ready {
            writeln!(c, "EXTRA_READY={}", sh_quote(r))?;
        }
    }
    fs::write(share.join("config.env"), c)?;
    Ok(())
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn stage_extra_bin(bin: &Path, share: &Path) -> Result<()> {
    let dir = share.join("extra");
    fs::create_dir_all(dir.join("lib"))?;
    let name = bin.file_name().ok_or_else(|| anyhow!("bad --extra-bin"))?;
    fs::copy(bin, dir.join(name)).with_context(|| format!("copying {}", bin.display()))?;
    for lib in ldd(bin)? {
        if let Some(n) = lib.file_name() {
            fs::copy(&lib, dir.join("lib").join(n))?;
        }
    }
    Ok(())
}

fn run_scenario(sc: &Scenario, image: &Image, dir: &Path, opts: &SoftRoceOpts) -> Result<Summary> {
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    let (sdir, cdir) = (dir.join("vm-server"), dir.join("vm-client"));
    fs::create_dir_all(&sdir)?;
    fs::create_dir_all(&cdir)?;
    write_config(&sdir, sc, "server", opts)?;
    write_config(&cdir, sc, "client", opts)?;
    if let Some(bin) = &opts.extra_bin {
        stage_extra_bin(bin, &cdir)?;
    }

    let t0 = Instant::now();
    let port = free_port()?;
    let mut server = start_vm(
        "server",
        image,
        &sdir,
        &format!("socket,id=n0,listen=127.0.0.1:{port}"),
        "52:54:00:00:02:01",
        opts,
    )?;
    let wait_listen = Instant::now();
    while !listening(port) {
        if wait_listen.elapsed() > Duration::from_secs(30) {
            bail!(
                "server qemu (pid {}) never listened on 127.0.0.1:{port}; see {}",
                server.pid(),
                sdir.join("qemu.err").display()
            );
        }
        let exited = match server.child.as_mut() {
            Some(c) => c.try_wait()?,
            None => None,
        };
        if let Some(st) = exited {
            server.child = None;
            bail!(
                "server qemu exited early ({st}); see {}",
                sdir.join("qemu.err").display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut client = start_vm(
        "client",
        image,
        &cdir,
        &format!("socket,id=n0,connect=127.0.0.1:{port}"),
        "52:54:00:00:02:02",
        opts,
    )?;
    let limit = Duration::from_secs(opts.vm_timeout + 20);
    let cst = client.wait(limit)?;
    let client_secs = t0.elapsed().as_secs_f64();
    let sst = server.wait(
        limit
            .saturating_sub(t0.elapsed())
            .max(Duration::from_secs(30)),
    )?;
    let wall = t0.elapsed().as_secs_f64();
    if !cst.success() || !sst.success() {
        bail!("qemu exit status: client {cst}, server {sst} (124 = hard timeout)");
    }
    // the capture is the scenario's main artefact
    let cap = dir.join("cap.pcap");
    if cdir.join("cap.pcap").exists() {
        fs::rename(cdir.join("cap.pcap"), &cap)?;
    }
    let observer = observer_bin(opts, &cdir)?;
    analyze(
        sc,
        dir,
        &sdir,
        &cdir,
        &cap,
        (wall, client_secs),
        observer.as_deref(),
    )
}

// ---------------------------------------------------------------------------------------------
// Reading the VMs' outputs

fn read_kv(path: &Path) -> BTreeMap<String, String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// hw_counters after - before.
fn counter_deltas(vm: &Path) -> BTreeMap<String, i64> {
    let before = read_kv(&vm.join("counters_before.txt"));
    let after = read_kv(&vm.join("counters_after.txt"));
    after
        .iter()
        .filter_map(|(k, v)| {
            let a: i64 = v.parse().ok()?;
            let b: i64 = before.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
            Some((k.clone(), a - b))
        })
        .collect()
}

#[derive(Debug, Default, Clone)]
struct Perftest {
    rc: Option<i32>,
    mtu: Option<u64>,
    bytes: Option<u64>,
    iterations: Option<u64>,
    bw_avg_mb: Option<f64>,
    msg_rate_mpps: Option<f64>,
    lat_typical_us: Option<f64>,
    lat_avg_us: Option<f64>,
    /// Initial PSN of this side's QP ("local address: ... PSN 0x...").
    local_psn: Option<u32>,
}

fn parse_perftest(vm: &Path, latency: bool) -> Perftest {
    let text = fs::read_to_string(vm.join("perftest.out")).unwrap_or_default();
    let status = read_kv(&vm.join("status.env"));
    let mut p = Perftest {
        rc: status.get("PERFTEST_RC").and_then(|v| v.parse().ok()),
        ..Default::default()
    };
    p.local_psn = text
        .lines()
        .find(|l| l.trim_start().starts_with("local address:"))
        .and_then(|l| l.split("PSN").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(num)
        .map(|v| v as u32);
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if let Some(rest) = l.trim().strip_prefix("Mtu") {
            p.mtu = rest
                .trim_start_matches([' ', ':'])
                .trim()
                .trim_end_matches("[B]")
                .parse()
                .ok();
        }
        if l.trim_start().starts_with("#bytes") {
            // header: #bytes #iterations ... ; the next line holds the figures
            if let Some(v) = lines.next() {
                let f: Vec<f64> = v
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if f.len() >= 2 {
                    p.bytes = Some(f[0] as u64);
                    p.iterations = Some(f[1] as u64);
                }
                if latency {
                    // #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
                    p.lat_typical_us = f.get(4).copied();
                    p.lat_avg_us = f.get(5).copied();
                } else {
                    // #bytes #iterations BW peak BW average MsgRate
                    p.bw_avg_mb = f.get(3).copied();
                    p.msg_rate_mpps = f.get(4).copied();
                }
            }
        }
    }
    p
}

// ---------------------------------------------------------------------------------------------
// Wire analysis of the capture (decoded by tshark)

#[derive(Debug, Clone)]
struct Pkt {
    src: String,
    dst: String,
    dest_qp: u32,
    opcode: u8,
    psn: u32,
    syndrome: Option<u8>,
    dma_len: Option<u32>,
    /// Frame length on the wire (Ethernet header to the end of the ICRC, no FCS).
    len: u32,
    /// IP ECN bits.
    ecn: u8,
    udp_sport: u16,
}

fn num(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

fn tshark_packets(cap: &Path) -> Result<Vec<Pkt>> {
    let fields = [
        "ip.src",
        "ip.dst",
        "infiniband.bth.destqp",
        "infiniband.bth.opcode",
        "infiniband.bth.psn",
        "infiniband.aeth.syndrome",
        "infiniband.reth.dmalen",
        "frame.len",
        "ip.dsfield.ecn",
        "udp.srcport",
    ];
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(cap).args([
        "-Y",
        "infiniband",
        "-T",
        "fields",
        "-E",
        "separator=,",
        "-E",
        "occurrence=f",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = sh_out(&mut cmd)?;
    let mut v = Vec::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split(',').collect();
        if f.len() < fields.len() {
            continue;
        }
        let (Some(qp), Some(op), Some(psn)) = (num(f[2]), num(f[3]), num(f[4])) else {
            continue;
        };
        v.push(Pkt {
            src: f[0].to_string(),
            dst: f[1].to_string(),
            dest_qp: qp as u32,
            opcode: op as u8,
            psn: psn as u32,
            syndrome: num(f[5]).map(|x| x as u8),
            dma_len: num(f[6]).map(|x| x as u32),
            len: num(f[7]).unwrap_or(0) as u32,
            ecn: num(f[8]).unwrap_or(0) as u8,
            udp_sport: num(f[9]).unwrap_or(0) as u16,
        });
    }
    Ok(v)
}

const PSN_MOD: u32 = 1 << 24;
/// (a - b) mod 2^24 as a signed distance in -2^23..2^23.
fn psn_diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & (PSN_MOD - 1);
    if d >= PSN_MOD / 2 {
        d as i32 - PSN_MOD as i32
    } else {
        d as i32
    }
}
fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & (PSN_MOD - 1)
}

fn is_request(op: u8) -> bool {
    // RC requests: SEND*, RDMA_WRITE*, RDMA_READ_REQUEST, atomics, SEND_*_WITH_INVALIDATE
    matches!(op, 0x00..=0x0C | 0x13 | 0x14 | 0x16 | 0x17)
}
fn is_read_response(op: u8) -> bool {
    matches!(op, 0x0D..=0x10)
}

/// Figures for one direction of traffic (all packets sent by one VM) in the capture.
#[derive(Debug, Default, Clone)]
struct Dir {
    packets: u64,
    requests: u64,
    distinct_request_psns: u64,
    read_requests: u64,
    read_responses: u64,
    distinct_read_response_psns: u64,
    acks: u64,
    naks_seq: u64,
    naks_other: u64,
    rnr_naks: u64,
    // request stream, as the primer defines it (our gap detector, right path MTU)
    req_retransmissions: u64,
    req_gaps: u64,
    req_missing_psns: u64,
    // same detector with a wrong path MTU of 4096 (what a naive analyzer would report)
    req_gaps_pmtu4096: u64,
    // response stream
    resp_gaps: u64,
    resent_read_responses: u64,
    // the peer's responder, simulated like rxe's check_psn()
    sim_duplicates: u64,
    sim_out_of_seq: u64,
}

impl Dir {
    fn json(&self) -> Value {
        json!({
            "packets": self.packets, "requests": self.requests,
            "distinct_request_psns": self.distinct_request_psns,
            "read_requests": self.read_requests, "read_responses": self.read_responses,
            "distinct_read_response_psns": self.distinct_read_response_psns,
            "acks": self.acks, "naks_psn_seq_err": self.naks_seq, "naks_other": self.naks_other,
            "rnr_naks": self.rnr_naks,
            "request_retransmissions": self.req_retransmissions, "request_gaps": self.req_gaps,
            "request_missing_psns": self.req_missing_psns,
            "request_gaps_if_pmtu_4096": self.req_gaps_pmtu4096,
            "response_gaps": self.resp_gaps, "resent_read_responses": self.resent_read_responses,
            "responder_model_duplicates": self.sim_duplicates,
            "responder_model_out_of_seq": self.sim_out_of_seq,
        })
    }
}

fn span(p: &Pkt, pmtu: u64) -> u32 {
    if p.opcode == 0x0C {
        let len = p.dma_len.unwrap_or(0) as u64;
        len.div_ceil(pmtu).max(1) as u32
    } else {
        1
    }
}

/// Gap / retransmission detector of the request stream (docs: "Sequence rules").
fn request_stream(reqs: &[&Pkt], pmtu: u64, first_psn: Option<u32>) -> (u64, u64, u64) {
    let (mut retrans, mut gaps, mut missing) = (0u64, 0u64, 0u64);
    let mut highest: Option<u32> = None;
    let mut expected: Option<u32> = first_psn;
    for p in reqs {
        // a request not newer than the highest is a retransmission and changes nothing
        // (docs/metrics.md): after a partial resend, the next new PSN is no gap
        if highest.is_some_and(|h| psn_diff(p.psn, h) <= 0) {
            retrans += 1;
            continue;
        }
        if let Some(e) = expected {
            let d = psn_diff(p.psn, e);
            if d > 0 {
                gaps += 1;
                missing += d as u64;
            }
        }
        expected = Some(psn_add(p.psn, span(p, pmtu)));
        highest = Some(p.psn);
    }
    (retrans, gaps, missing)
}

/// `first_psn`: the initial PSN of the sending QP (from perftest), so that a loss of the very
/// first request is seen as one; None = trust the first packet seen.
fn direction(pkts: &[Pkt], src: &str, pmtu: u64, first_psn: Option<u32>) -> Dir {
    let mine: Vec<&Pkt> = pkts.iter().filter(|p| p.src == src).collect();
    let mut d = Dir {
        packets: mine.len() as u64,
        ..Default::default()
    };
    // flows: (dst, dest QP); the requests of each flow form one PSN space
    let mut flows: BTreeMap<(String, u32), Vec<&Pkt>> = BTreeMap::new();
    for p in &mine {
        flows.entry((p.dst.clone(), p.dest_qp)).or_default().push(p);
    }
    for pk in flows.values() {
        let reqs: Vec<&Pkt> = pk
            .iter()
            .copied()
            .filter(|p| is_request(p.opcode))
            .collect();
        d.requests += reqs.len() as u64;
        d.distinct_request_psns += reqs.iter().map(|p| p.psn).collect::<HashSet<_>>().len() as u64;
        d.read_requests += reqs
            .iter()
            .filter(|p| p.opcode == 0x0C)
            .map(|p| p.psn)
            .collect::<HashSet<_>>()
            .len() as u64;
        let (r, g, m) = request_stream(&reqs, pmtu, first_psn);
        d.req_retransmissions += r;
        d.req_gaps += g;
        d.req_missing_psns += m;
        d.req_gaps_pmtu4096 += request_stream(&reqs, 4096, first_psn).1;

        // responder model (rxe check_psn): diff > 0: out of sequence, NAK once until an
        // in-order packet arrives; diff < 0: duplicate; == 0: accept, ePSN += span.
        let mut epsn: Option<u32> = first_psn;
        let mut nak_sent = false;
        for p in &reqs {
            let e = *epsn.get_or_insert(p.psn);
            let diff = psn_diff(p.psn, e);
            if diff > 0 {
                if !nak_sent {
                    nak_sent = true;
                    d.sim_out_of_seq += 1;
                }
            } else if diff < 0 {
                d.sim_duplicates += 1;
            } else {
                nak_sent = false;
                epsn = Some(psn_add(p.psn, span(p, pmtu)));
            }
        }

        // responses this VM sent for the peer's requests
        let mut highest: Option<u32> = None;
        let mut last: Option<u32> = None; // previous (not resent) READ response PSN
        let mut resp_psns = HashSet::new();
        for p in pk.iter().filter(|p| !is_request(p.opcode)) {
            match p.opcode {
                0x11 => {
                    let s = p.syndrome.unwrap_or(0);
                    match s & 0x60 {
                        0x00 => d.acks += 1,
                        0x20 => d.rnr_naks += 1,
                        0x60 if s & 0x1F == 0 => d.naks_seq += 1,
                        _ => d.naks_other += 1,
                    }
                }
                op if is_read_response(op) => {
                    // only READ responses form the response PSN space (an ACK or NAK in
                    // the same flow, e.g. a NAK for a lost READ request, does not); a resent
                    // response changes nothing; MIDDLE and LAST follow the previous by one
                    d.read_responses += 1;
                    resp_psns.insert(p.psn);
                    if highest.is_some_and(|h| psn_diff(p.psn, h) <= 0) {
                        d.resent_read_responses += 1;
                        continue;
                    }
                    if matches!(op, 0x0E | 0x0F) && last.is_some_and(|l| p.psn != psn_add(l, 1)) {
                        d.resp_gaps += 1;
                    }
                    highest = Some(p.psn);
                    last = Some(p.psn);
                }
                _ => {}
            }
        }
        d.distinct_read_response_psns += resp_psns.len() as u64;
    }
    d
}

// ---------------------------------------------------------------------------------------------
// Per-flow figures of the capture, by the rules of docs/metrics.md (for `analyze` and the
// observer). Computed here from tshark's decoding, independently of roce-observer's code.

/// A flow: (source IP, destination IP, BTH destination QP).
type FlowKey = (String, String, u32);

fn flow_label(k: &FlowKey) -> String {
    format!("{}>{} qp {:#x}", k.0, k.1, k.2)
}

/// One flow of the capture, counted as docs/metrics.md defines the flow record.
#[derive(Debug, Default, Clone)]
struct WireFlow {
    packets: u64,
    bytes: u64,
    opcodes: BTreeMap<String, u64>,
    acks: u64,
    naks_psn_seq_err: u64,
    /// every other NAK class (rnr, invalid_request, remote_access, remote_op, other)
    naks_other: u64,
    req_retransmits: u64,
    resp_retransmits: u64,
    psn_gaps: u64,
    psn_missing: u64,
    ecn_ce: u64,
    ecn_ect: u64,
    udp_src_ports: u64,
    /// distinct request PSNs
    distinct_request_psns: u64,
    /// frame lengths seen per opcode name
    op_lens: BTreeMap<String, BTreeSet<u32>>,
}

/// The opcode's name as the flow records spell it (`RC_RDMA_WRITE_FIRST`, `CNP`): the names
/// come from the shared table (only names; the wire figures themselves are computed here).
fn opcode_name(op: u8) -> String {
    use roce_observer_common::opcode::{OP_CNP, operation_name, transport, transport_name};
    if op == OP_CNP {
        return "CNP".into();
    }
    format!("{}_{}", transport_name(transport(op)), operation_name(op))
}

/// Every flow of the capture (RC traffic: the harness has no other). Request PSN rules start
/// at the first request seen (like `analyze`, which does not know the QP's initial PSN).
fn wire_flows(pkts: &[Pkt], pmtu: u64) -> BTreeMap<FlowKey, WireFlow> {
    let mut by_flow: BTreeMap<FlowKey, Vec<&Pkt>> = BTreeMap::new();
    for p in pkts {
        by_flow
            .entry((p.src.clone(), p.dst.clone(), p.dest_qp))
            .or_default()
            .push(p);
    }
    let mut out = BTreeMap::new();
    for (key, pk) in by_flow {
        let mut f = WireFlow::default();
        let mut ports = HashSet::new();
        let mut req_psns = HashSet::new();
        // request PSN space
        let (mut req_expected, mut req_highest): (Option<u32>, Option<u32>) = (None, None);
        // response PSN space (READ responses)
        let (mut resp_highest, mut resp_last): (Option<u32>, Option<u32>) = (None, None);
        for p in pk {
            f.packets += 1;
            f.bytes += p.len as u64;
            match p.ecn {
                3 => f.ecn_ce += 1,
                1 | 2 => f.ecn_ect += 1,
                _ => {}
            }
            if p.udp_sport != 0 {
                ports.insert(p.udp_sport);
            }
            *f.opcodes.entry(opcode_name(p.opcode)).or_default() += 1;
            f.op_lens
                .entry(opcode_name(p.opcode))
                .or_default()
                .insert(p.len);
            if is_request(p.opcode) {
                req_psns.insert(p.psn);
                if req_highest.is_some_and(|h| psn_diff(p.psn, h) <= 0) {
                    f.req_retransmits += 1;
                    continue;
                }
                if let Some(e) = req_expected {
                    let d = psn_diff(p.psn, e);
                    if d > 0 {
                        f.psn_gaps += 1;
                        f.psn_missing += d as u64;
                    }
                }
                req_expected = Some(psn_add(p.psn, span(p, pmtu)));
                req_highest = Some(p.psn);
            } else if is_read_response(p.opcode) {
                if resp_highest.is_some_and(|h| psn_diff(p.psn, h) <= 0) {
                    f.resp_retransmits += 1;
                    continue;
                }
                // MIDDLE / LAST must follow the previous response packet by exactly one
                if let (0x0E | 0x0F, Some(last)) = (p.opcode, resp_last) {
                    let e = psn_add(last, 1);
                    if p.psn != e {
                        f.psn_gaps += 1;
                        f.psn_missing += (p.psn.wrapping_sub(e) & (PSN_MOD - 1)) as u64;
                    }
                }
                resp_highest = Some(p.psn);
                resp_last = Some(p.psn);
            } else if matches!(p.opcode, 0x11 | 0x12) {
                let s = p.syndrome.unwrap_or(0);
                match (s >> 5) & 3 {
                    0 => f.acks += 1,
                    3 if s & 0x1F == 0 => f.naks_psn_seq_err += 1,
                    _ => f.naks_other += 1,
                }
            }
        }
        f.udp_src_ports = ports.len().min(4) as u64;
        f.distinct_request_psns = req_psns.len() as u64;
        out.insert(key, f);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Checks

#[derive(Debug, Clone)]
struct Check {
    name: String,
    expected: String,
    actual: String,
    ok: bool,
}

impl Check {
    fn describe(&self) -> String {
        format!(
            "{}: expected {}, got {}",
            self.name, self.expected, self.actual
        )
    }
}

struct Checks(Vec<Check>);
impl Checks {
    fn eq<T: PartialEq + std::fmt::Display>(&mut self, name: &str, expected: T, actual: T) {
        self.0.push(Check {
            name: name.into(),
            expected: expected.to_string(),
            actual: actual.to_string(),
            ok: expected == actual,
        });
    }
    fn range(&mut self, name: &str, lo: i64, hi: i64, actual: i64) {
        self.0.push(Check {
            name: name.into(),
            expected: format!("{lo}..={hi}"),
            actual: actual.to_string(),
            ok: lo <= actual && actual <= hi,
        });
    }
    fn truth(&mut self, name: &str, expected: &str, actual: String, ok: bool) {
        self.0.push(Check {
            name: name.into(),
            expected: expected.into(),
            actual,
            ok,
        });
    }
}

pub struct Summary {
    checks: Vec<Check>,
    row: Vec<String>,
    /// wire / analyze / observer per flow (with an observer)
    flow_rows: Vec<Vec<String>>,
    json: Value,
}

fn netem_dropped(vm: &Path) -> Option<i64> {
    let s = fs::read_to_string(vm.join("qdisc.txt")).ok()?;
    let i = s.find("(dropped ")?;
    s[i + 9..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn tcpdump_kernel_drops(vm: &Path) -> Option<u64> {
    let s = fs::read_to_string(vm.join("tcpdump.err")).ok()?;
    s.lines()
        .find(|l| l.contains("dropped by kernel"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Check a scenario's results again (after a change of the checks), without booting.
fn reanalyze(sc: &Scenario, dir: &Path, opts: &SoftRoceOpts) -> Result<Summary> {
    let old: Value = fs::read_to_string(dir.join("summary.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let wall = old["wall_seconds"].as_f64().unwrap_or(0.0);
    let client_secs = old["client_vm_seconds"].as_f64().unwrap_or(0.0);
    let (sdir, cdir) = (dir.join("vm-server"), dir.join("vm-client"));
    if !sdir.join("config.env").exists() {
        bail!("no results in {} to check", dir.display());
    }
    let observer = observer_bin(opts, &cdir)?;
    analyze(
        sc,
        dir,
        &sdir,
        &cdir,
        &dir.join("cap.pcap"),
        (wall, client_secs),
        observer.as_deref(),
    )
}

fn analyze(
    sc: &Scenario,
    dir: &Path,
    sdir: &Path,
    cdir: &Path,
    cap: &Path,
    (wall, client_secs): (f64, f64),
    observer: Option<&Path>,
) -> Result<Summary> {
    let pc = parse_perftest(cdir, sc.latency);
    let ps = parse_perftest(sdir, sc.latency);
    let cc = counter_deltas(cdir);
    let scn = counter_deltas(sdir);
    let cstat = read_kv(&cdir.join("status.env"));
    let sstat = read_kv(&sdir.join("status.env"));
    if let Some(e) = cstat.get("ERROR").or(sstat.get("ERROR")) {
        bail!(
            "guest error {e}; see {}/*/init.log and console.log",
            dir.display()
        );
    }
    if !cap.exists() {
        bail!("no capture at {}", cap.display());
    }
    let expect_pmtu = sc.expected_pmtu();
    let pmtu = pc.mtu.unwrap_or(expect_pmtu);
    let pkts = tshark_packets(cap)?;
    let c2s = direction(&pkts, CLIENT_IP, pmtu, pc.local_psn);
    let s2c = direction(&pkts, SERVER_IP, pmtu, ps.local_psn);
    let g = |m: &BTreeMap<String, i64>, k: &str| m.get(k).copied().unwrap_or(-1);

    let mut ck = Checks(Vec::new());
    ck.eq("client perftest exit code", 0, pc.rc.unwrap_or(-1));
    ck.eq("server perftest exit code", 0, ps.rc.unwrap_or(-1));
    ck.eq(
        "client perftest iterations",
        sc.iters,
        pc.iterations.unwrap_or(0),
    );
    ck.eq("path MTU reported by perftest", expect_pmtu, pmtu);
    ck.truth(
        "closing rendezvous (server counters read before the capture stopped)",
        "no timeout",
        format!(
            "client {}, server {}",
            cstat.get("DONE_RENDEZVOUS").map_or("ok", |s| s.as_str()),
            sstat.get("DONE_RENDEZVOUS").map_or("ok", |s| s.as_str())
        ),
        !cstat.contains_key("DONE_RENDEZVOUS") && !sstat.contains_key("DONE_RENDEZVOUS"),
    );
    ck.eq(
        "tcpdump packets dropped by kernel",
        0,
        tcpdump_kernel_drops(cdir).unwrap_or(u64::MAX),
    );

    // packets per flow implied by perftest's parameters and the path MTU
    let per_msg = sc.size.div_ceil(pmtu).max(1);
    match (sc.op, sc.latency) {
        (Op::Read, _) => {
            ck.eq(
                "client->server distinct READ requests == -n",
                sc.iters,
                c2s.read_requests,
            );
            ck.eq(
                "server->client distinct READ response PSNs == n*ceil(s/pmtu)",
                sc.iters * per_msg,
                s2c.distinct_read_response_psns,
            );
            ck.eq("server->client requests", 0, s2c.requests);
        }
        (_, true) => {
            ck.eq(
                "client->server distinct request PSNs == n*ceil(s/pmtu)",
                sc.iters * per_msg,
                c2s.distinct_request_psns,
            );
            ck.eq(
                "server->client distinct request PSNs == n*ceil(s/pmtu)",
                sc.iters * per_msg,
                s2c.distinct_request_psns,
            );
        }
        (_, false) => {
            ck.eq(
                "client->server distinct request PSNs == n*ceil(s/pmtu)",
                sc.iters * per_msg,
                c2s.distinct_request_psns,
            );
            ck.eq("server->client requests", 0, s2c.requests);
        }
    }

    // rxe's own packet counters against the wire
    if sc.loss.is_some() {
        // netem drops after rxe counted the packet as sent, before the capture point
        let dropped = netem_dropped(cdir).unwrap_or(0);
        ck.range(
            "client sent_pkts - wire client->server (<= netem drops)",
            0,
            dropped,
            g(&cc, "sent_pkts") - c2s.packets as i64,
        );
    } else {
        ck.eq(
            "client sent_pkts == wire client->server",
            c2s.packets as i64,
            g(&cc, "sent_pkts"),
        );
    }
    ck.eq(
        "server rcvd_pkts == wire client->server",
        c2s.packets as i64,
        g(&scn, "rcvd_pkts"),
    );
    ck.eq(
        "server sent_pkts == wire server->client",
        s2c.packets as i64,
        g(&scn, "sent_pkts"),
    );
    ck.eq(
        "client rcvd_pkts == wire server->client",
        s2c.packets as i64,
        g(&cc, "rcvd_pkts"),
    );

    // NAKs and duplicates against the responders' counters (each VM is the responder of
    // the other's requests)
    ck.eq(
        "wire NAKs server->client == server out_of_seq_request",
        g(&scn, "out_of_seq_request"),
        s2c.naks_seq as i64,
    );
    ck.eq(
        "wire NAKs client->server == client out_of_seq_request",
        g(&cc, "out_of_seq_request"),
        c2s.naks_seq as i64,
    );
    ck.eq(
        "responder model out-of-seq client->server == server out_of_seq_request",
        g(&scn, "out_of_seq_request"),
        c2s.sim_out_of_seq as i64,
    );
    ck.eq(
        "responder model duplicates client->server == server duplicate_request",
        g(&scn, "duplicate_request"),
        c2s.sim_duplicates as i64,
    );
    ck.eq(
        "responder model duplicates server->client == client duplicate_request",
        g(&cc, "duplicate_request"),
        s2c.sim_duplicates as i64,
    );
    if sc.loss.is_none() {
        // without loss every resent request reaches the responder as a duplicate, and
        // there is no gap anywhere: the detector must not invent one (READ, ping-pong)
        ck.eq(
            "wire request retransmissions client->server == server duplicate_request",
            g(&scn, "duplicate_request"),
            c2s.req_retransmissions as i64,
        );
        ck.eq(
            "wire request retransmissions server->client == client duplicate_request",
            g(&cc, "duplicate_request"),
            s2c.req_retransmissions as i64,
        );
        ck.eq("request gaps client->server (none lost)", 0, c2s.req_gaps);
        ck.eq("request gaps server->client (none lost)", 0, s2c.req_gaps);
        ck.eq("READ response gaps server->client", 0, s2c.resp_gaps);
        ck.eq(
            "NAKs on the wire (none lost)",
            0,
            c2s.naks_seq + s2c.naks_seq,
        );
    } else {
        // requests netem dropped (rxe counted them as sent, the wire never saw them): each
        // must have been sent again, since every PSN shows up on the wire (checked above)
        let lost = g(&cc, "sent_pkts") - c2s.packets as i64;
        ck.truth(
            "requests lost to netem were retransmitted",
            &format!("retransmissions > 0 when lost ({lost}) > 0"),
            c2s.req_retransmissions.to_string(),
            lost <= 0 || c2s.req_retransmissions > 0,
        );
        // with hundreds of request packets, 2% loss gives gaps and NAKs in practice (no loss
        // at all in 800 packets: 0.98^800 = 1e-7); with few packets it may not
        if sc.iters * per_msg >= 500 {
            ck.truth(
                "lossy run produced NAKs",
                "> 0",
                s2c.naks_seq.to_string(),
                s2c.naks_seq > 0,
            );
        }
        ck.truth(
            "request retransmissions >= duplicate_request",
            &format!(">= {}", g(&scn, "duplicate_request")),
            c2s.req_retransmissions.to_string(),
            c2s.req_retransmissions as i64 >= g(&scn, "duplicate_request"),
        );
    }

    // the per-flow wire figures (docs/metrics.md record) add up to the per-direction ones
    let wire = wire_flows(&pkts, pmtu);
    for (src, d, label) in [
        (CLIENT_IP, &c2s, "client->server"),
        (SERVER_IP, &s2c, "server->client"),
    ] {
        let sum = |f: &dyn Fn(&WireFlow) -> u64| -> u64 {
            wire.iter()
                .filter(|(k, _)| k.0 == src)
                .map(|(_, w)| f(w))
                .sum()
        };
        ck.eq(
            &format!("wire per-flow sums == per-direction figures {label} (packets, ACKs, NAKs, request/response retransmissions)"),
            format!(
                "{} {} {} {} {}",
                d.packets, d.acks, d.naks_seq, d.req_retransmissions, d.resent_read_responses
            ),
            format!(
                "{} {} {} {} {}",
                sum(&|w| w.packets),
                sum(&|w| w.acks),
                sum(&|w| w.naks_psn_seq_err),
                sum(&|w| w.req_retransmits),
                sum(&|w| w.resp_retransmits)
            ),
        );
    }

    // the observer (kernel path) against analyze on the same capture, analyze against the wire
    let (flow_rows, observer_json) = match observer {
        Some(bin) => observer_checks(
            &mut ck,
            &ObserverInputs {
                sc,
                bin,
                cap,
                cdir,
                wire: &wire,
                c2s: &c2s,
                s2c: &s2c,
                client_sent_pkts: g(&cc, "sent_pkts"),
                netem_dropped: netem_dropped(cdir),
            },
        ),
        None => (Vec::new(), Value::Null),
    };

    let name = sc.name.to_string();
    let perf = if sc.latency {
        format!("{:.0}us typ", pc.lat_typical_us.unwrap_or(f64::NAN))
    } else {
        format!("{:.2}MB/s", pc.bw_avg_mb.unwrap_or(f64::NAN))
    };
    let row = vec![
        name.clone(),
        format!("{:.0}s", wall),
        perf,
        pmtu.to_string(),
        format!("{}/{}", c2s.packets, s2c.packets),
        format!("{}/{}", g(&cc, "sent_pkts"), g(&scn, "rcvd_pkts")),
        format!("{}/{}", g(&scn, "sent_pkts"), g(&cc, "rcvd_pkts")),
        format!(
            "{}/{}",
            s2c.naks_seq + c2s.naks_seq,
            g(&scn, "out_of_seq_request") + g(&cc, "out_of_seq_request")
        ),
        format!(
            "{}/{}/{}",
            c2s.req_retransmissions + s2c.req_retransmissions,
            c2s.sim_duplicates + s2c.sim_duplicates,
            g(&scn, "duplicate_request") + g(&cc, "duplicate_request")
        ),
        format!(
            "{}/{}",
            c2s.req_gaps + s2c.req_gaps + s2c.resp_gaps,
            c2s.req_gaps_pmtu4096 + s2c.req_gaps_pmtu4096
        ),
        netem_dropped(cdir)
            .map(|d| d.to_string())
            .unwrap_or_else(|| "-".into()),
    ];
    let pj = |p: &Perftest| {
        json!({"rc": p.rc, "mtu": p.mtu, "bytes": p.bytes, "iterations": p.iterations,
               "initial_psn": p.local_psn,
               "bw_average_mb_s": p.bw_avg_mb, "msg_rate_mpps": p.msg_rate_mpps,
               "lat_typical_us": p.lat_typical_us, "lat_avg_us": p.lat_avg_us})
    };
    let json = json!({
        "scenario": name,
        "perftest": sc.perftest,
        "perftest_args": sc.perftest_args(),
        "link_mtu": sc.mtu,
        "path_mtu": pmtu,
        "netem_loss": sc.loss,
        "netem_dropped": netem_dropped(cdir),
        "capture": cap.file_name().map(|f| f.to_string_lossy().into_owned()),
        "capture_point": "client VM eth0 (after its egress qdisc)",
        "client_ip": CLIENT_IP,
        "server_ip": SERVER_IP,
        "wall_seconds": wall,
        "client_vm_seconds": client_secs,
        "client_status": cstat,
        "server_status": sstat,
        "perftest_client": pj(&pc),
        "perftest_server": pj(&ps),
        "rxe_counters_client": cc,
        "rxe_counters_server": scn,
        "wire_client_to_server": c2s.json(),
        "wire_server_to_client": s2c.json(),
        "extra_json": fs::read_to_string(cdir.join("extra.out"))
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok()),
        "observer_vs_analyze_vs_wire": observer_json,
        "checks": ck.0.iter().map(|c| json!({"name": c.name, "expected": c.expected, "actual": c.actual, "ok": c.ok})).collect::<Vec<_>>(),
    });
    fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(Summary {
        checks: ck.0,
        row,
        flow_rows,
        json,
    })
}

// ---------------------------------------------------------------------------------------------
// The observer run in the client VM, against `analyze` on the same capture and the wire

/// The roce-observer binary that ran in the client VM: `--observer PATH` when given, else the
/// copy staged in the client's share when config.env's EXTRA_CMD is `/share/extra/NAME run
/// ...` (so `--reanalyze` checks an observer run again without being told).
fn observer_bin(opts: &SoftRoceOpts, cdir: &Path) -> Result<Option<PathBuf>> {
    if let Some(obs) = &opts.observer {
        return Ok(Some(
            fs::canonicalize(obs).with_context(|| obs.display().to_string())?,
        ));
    }
    let cfg = read_kv(&cdir.join("config.env"));
    let Some(cmd) = cfg.get("EXTRA_CMD") else {
        return Ok(None);
    };
    let cmd = cmd.trim_matches('\'');
    let mut words = cmd.split_whitespace();
    let (Some(bin), Some("run")) = (words.next(), words.next()) else {
        return Ok(None);
    };
    let staged = bin
        .strip_prefix("/share/extra/")
        .map(|name| cdir.join("extra").join(name));
    Ok(staged.filter(|p| p.exists()))
}

fn flows_by_key(doc: &Value) -> BTreeMap<FlowKey, Vec<&Value>> {
    let mut m: BTreeMap<FlowKey, Vec<&Value>> = BTreeMap::new();
    for f in doc["flows"].as_array().into_iter().flatten() {
        let key = (
            f["src_ip"].as_str().unwrap_or("?").to_string(),
            f["dst_ip"].as_str().unwrap_or("?").to_string(),
            f["dst_qp"].as_u64().unwrap_or(u64::MAX) as u32,
        );
        m.entry(key).or_default().push(f);
    }
    m
}

/// NAKs of a flow record, all classes.
fn naks_total(f: &Value) -> u64 {
    f["naks"]
        .as_object()
        .map(|m| m.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0)
}

/// Fields of a flow record that `analyze` and the kernel path must agree on (docs/metrics.md;
/// time-derived fields, iface and direction aside).
const OBSERVER_FIELDS: &[&str] = &[
    "packets",
    "bytes",
    "opcodes",
    "psn_gaps",
    "psn_missing",
    "retransmits",
    "req_retransmits",
    "resp_retransmits",
    "acks",
    "naks",
    "cnp",
    "ecn_ce",
    "ecn_ect",
    "peer_qp",
    "udp_src_ports",
    "udp_src_port_overflow",
    "transport",
    "other_transport",
    "dscp",
    "pcp",
];

/// What the observer checks need from the rest of the analysis.
struct ObserverInputs<'a> {
    sc: &'a Scenario,
    bin: &'a Path,
    cap: &'a Path,
    cdir: &'a Path,
    wire: &'a BTreeMap<FlowKey, WireFlow>,
    c2s: &'a Dir,
    s2c: &'a Dir,
    client_sent_pkts: i64,
    netem_dropped: Option<i64>,
}

/// Checks of the observer's JSON document (kernel path, XDP ingress + TC egress on the client's
/// eth0) against `analyze` on the capture of the same run, and of `analyze` against the wire
/// figures (tshark). Returns the per-flow table rows and the figures for summary.json.
fn observer_checks(ck: &mut Checks, inp: &ObserverInputs) -> (Vec<Vec<String>>, Value) {
    let sc = inp.sc;
    let status = read_kv(&inp.cdir.join("status.env"));
    // the observer installs a SIGINT handler and exits 0 on it (guest-init.sh sends SIGINT,
    // then SIGTERM after 10 s, then SIGKILL; EXTRA_SIGNAL is the last one sent)
    ck.eq(
        "observer stopped by SIGINT, exit code",
        "INT, 0".to_string(),
        format!(
            "{}, {}",
            status.get("EXTRA_SIGNAL").map_or("none", |s| s.as_str()),
            status.get("EXTRA_RC").map_or("none", |s| s.as_str())
        ),
    );
    let doc: Option<Value> = fs::read_to_string(inp.cdir.join("extra.out"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .filter(|d: &Value| d["flows"].is_array() && d["summary"].is_object());
    ck.truth(
        "observer printed its JSON document (vm-client/extra.out)",
        "a document with flows and summary",
        if doc.is_some() {
            "yes"
        } else {
            "no (see vm-client/extra.err)"
        }
        .into(),
        doc.is_some(),
    );
    let pmtu = sc.expected_pmtu();
    let ana: Result<Value> = sh_out(
        Command::new(inp.bin)
            .args(["analyze", "--json", "--pmtu", &pmtu.to_string()])
            .arg(inp.cap),
    )
    .and_then(|s| serde_json::from_str(&s).context("analyze --json output"));
    ck.truth(
        "roce-observer analyze --json on cap.pcap",
        "runs",
        match &ana {
            Ok(_) => "ran".into(),
            Err(e) => format!("{e:#}"),
        },
        ana.is_ok(),
    );
    let (Some(doc), Ok(ana)) = (doc, ana) else {
        return (Vec::new(), Value::Null);
    };
    let lossy = sc.loss.is_some();

    // summary of the kernel path
    let s = &doc["summary"];
    for k in ["malformed", "events_lost", "map_full"] {
        ck.eq(&format!("observer summary {k}"), json!(0), s[k].clone());
    }
    let bd = &s["by_direction"];
    ck.eq(
        "observer ingress RoCE packets == wire server->client",
        json!(inp.s2c.packets),
        bd["ingress"]["roce_packets"].clone(),
    );
    if lossy {
        ck.eq(
            "observer egress RoCE packets == client sent_pkts (TC egress is before netem)",
            json!(inp.client_sent_pkts),
            bd["egress"]["roce_packets"].clone(),
        );
    } else {
        ck.eq(
            "observer egress RoCE packets == wire client->server",
            json!(inp.c2s.packets),
            bd["egress"]["roce_packets"].clone(),
        );
    }
    ck.eq(
        "analyze summary malformed",
        json!(0),
        ana["summary"]["malformed"].clone(),
    );

    let obs = flows_by_key(&doc);
    let anf = flows_by_key(&ana);
    let keys = |m: &BTreeMap<FlowKey, Vec<&Value>>| -> String {
        m.keys().map(flow_label).collect::<Vec<_>>().join(", ")
    };
    let wire_keys = inp
        .wire
        .keys()
        .map(flow_label)
        .collect::<Vec<_>>()
        .join(", ");
    ck.eq("analyze flows == wire flows", wire_keys, keys(&anf));
    ck.eq("observer flows == analyze flows", keys(&anf), keys(&obs));

    let mut rows = Vec::new();
    let mut figures = Vec::new();
    for (key, wf) in inp.wire {
        let label = flow_label(key);
        let Some(a) = anf.get(key).and_then(|v| v.first().copied()) else {
            continue;
        };
        // 2. analyze against the wire (tshark + docs/metrics.md rules, computed here)
        let wire_fields: [(&str, Value, Value); 13] = [
            ("packets", json!(wf.packets), a["packets"].clone()),
            ("bytes", json!(wf.bytes), a["bytes"].clone()),
            ("opcodes", json!(wf.opcodes), a["opcodes"].clone()),
            ("acks", json!(wf.acks), a["acks"].clone()),
            (
                "naks.psn_seq_err",
                json!(wf.naks_psn_seq_err),
                a["naks"]["psn_seq_err"].clone(),
            ),
            (
                "other NAKs",
                json!(wf.naks_other),
                json!(naks_total(a) - a["naks"]["psn_seq_err"].as_u64().unwrap_or(0)),
            ),
            (
                "req_retransmits",
                json!(wf.req_retransmits),
                a["req_retransmits"].clone(),
            ),
            (
                "resp_retransmits",
                json!(wf.resp_retransmits),
                a["resp_retransmits"].clone(),
            ),
            ("psn_gaps", json!(wf.psn_gaps), a["psn_gaps"].clone()),
            (
                "psn_missing",
                json!(wf.psn_missing),
                a["psn_missing"].clone(),
            ),
            ("ecn_ce", json!(wf.ecn_ce), a["ecn_ce"].clone()),
            ("ecn_ect", json!(wf.ecn_ect), a["ecn_ect"].clone()),
            (
                "udp_src_ports",
                json!(wf.udp_src_ports),
                a["udp_src_ports"].clone(),
            ),
        ];
        for (field, w, av) in wire_fields {
            ck.eq(&format!("analyze == wire, {label}: {field}"), w, av);
        }

        // 1. the kernel path against analyze
        let egress = key.0 == CLIENT_IP;
        let point = if egress { "egress" } else { "ingress" };
        let o_all = obs.get(key).cloned().unwrap_or_default();
        ck.eq(
            &format!("observer records of {label}"),
            format!("1, eth0/{point}"),
            format!(
                "{}, {}",
                o_all.len(),
                o_all
                    .iter()
                    .map(|f| format!(
                        "{}/{}",
                        f["iface"].as_str().unwrap_or("?"),
                        f["direction"].as_str().unwrap_or("?")
                    ))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
        let Some(o) = o_all.first().copied() else {
            continue;
        };
        if egress && lossy {
            lossy_egress_checks(ck, inp, &label, wf, a, o);
        } else {
            for field in OBSERVER_FIELDS {
                ck.eq(
                    &format!("observer == analyze, {label} ({point}): {field}"),
                    a[*field].clone(),
                    o[*field].clone(),
                );
            }
            // the latency samples' values differ (clocks), their number must not: the same
            // requests are timestamped and answered at both points
            ck.eq(
                &format!("observer == analyze, {label} ({point}): rtt_ns.count"),
                a["rtt_ns"]["count"].clone(),
                o["rtt_ns"]["count"].clone(),
            );
        }

        let n = |v: &Value| v.as_u64().map_or("?".into(), |x| x.to_string());
        rows.push(vec![
            sc.name.to_string(),
            label.clone(),
            point.to_string(),
            format!("{}/{}/{}", wf.packets, n(&a["packets"]), n(&o["packets"])),
            format!(
                "{}/{}/{}",
                wf.req_retransmits + wf.resp_retransmits,
                n(&a["retransmits"]),
                n(&o["retransmits"])
            ),
            format!(
                "{}/{}/{}",
                wf.naks_psn_seq_err + wf.naks_other,
                naks_total(a),
                naks_total(o)
            ),
            format!(
                "{}/{}/{}",
                wf.psn_gaps,
                n(&a["psn_gaps"]),
                n(&o["psn_gaps"])
            ),
        ]);
        let pick = |f: &Value| -> Value {
            let mut m = serde_json::Map::new();
            for k in OBSERVER_FIELDS {
                m.insert((*k).into(), f[*k].clone());
            }
            m.insert("rtt_samples".into(), f["rtt_ns"]["count"].clone());
            Value::Object(m)
        };
        figures.push(json!({
            "flow": label,
            "observer_point": format!("eth0/{point}"),
            "wire": {
                "packets": wf.packets, "bytes": wf.bytes, "opcodes": wf.opcodes,
                "acks": wf.acks, "naks_psn_seq_err": wf.naks_psn_seq_err,
                "naks_other": wf.naks_other, "req_retransmits": wf.req_retransmits,
                "resp_retransmits": wf.resp_retransmits, "psn_gaps": wf.psn_gaps,
                "psn_missing": wf.psn_missing, "ecn_ce": wf.ecn_ce, "ecn_ect": wf.ecn_ect,
                "udp_src_ports": wf.udp_src_ports,
            },
            "analyze": pick(a),
            "observer": pick(o),
        }));
    }
    let json = json!({
        "binary": inp.bin.display().to_string(),
        "observer_summary": {
            "malformed": s["malformed"], "events_lost": s["events_lost"],
            "map_full": s["map_full"], "by_direction": bd,
        },
        "flows": figures,
    });
    (rows, json)
}

/// The client's own requests under netem loss. TC egress runs before the root qdisc (netem);
/// tcpdump's tap is after it. So the observer counts every packet rxe sent, the capture only
/// those netem let through, and the exact relations are:
/// - observer packets == rxe's sent_pkts (client), and observer - capture == the RoCE packets
///   netem dropped (sent_pkts - wire), at most netem's own drop count (which also counts the
///   odd TCP packet of perftest's out-of-band exchange);
/// - per opcode, observer >= capture; the byte difference is the dropped packets' frame
///   lengths (each opcode has one frame length in these flows);
/// - no gap: a requester sends every new PSN in order, and TC sees all of them;
/// - so each distinct request PSN on the wire is new exactly once at TC, and every other
///   request packet TC saw is a retransmission: retransmits == packets - ACK/NAKs - distinct
///   request PSNs (the capture has every PSN, checked above);
/// - everything not about the dropped packets (ACKs, NAKs, CNP, ECN, peer QP, ports) is equal.
fn lossy_egress_checks(
    ck: &mut Checks,
    inp: &ObserverInputs,
    label: &str,
    wf: &WireFlow,
    a: &Value,
    o: &Value,
) {
    let name = |what: &str| format!("observer vs analyze, {label} (egress before netem): {what}");
    let u = |v: &Value| v.as_u64().unwrap_or(u64::MAX);
    let (op, ap) = (u(&o["packets"]), u(&a["packets"]));
    ck.eq(
        &name("packets == client sent_pkts"),
        inp.client_sent_pkts,
        op as i64,
    );
    ck.range(
        &name("observer - capture packets (RoCE dropped by netem) <= netem drops"),
        0,
        inp.netem_dropped.unwrap_or(0),
        op as i64 - ap as i64,
    );
    // per opcode and bytes
    let (oo, ao) = (&o["opcodes"], &a["opcodes"]);
    let mut names: Vec<&String> = oo
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    for k in ao
        .as_object()
        .map(|m| m.keys().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        if !names.contains(&k) {
            names.push(k);
        }
    }
    let mut diff_bytes: Option<u64> = Some(0);
    let mut bad = Vec::new();
    for k in names {
        let (x, y) = (oo[k].as_u64().unwrap_or(0), ao[k].as_u64().unwrap_or(0));
        if x < y {
            bad.push(format!("{k} {x} < {y}"));
            continue;
        }
        match wf.op_lens.get(k) {
            Some(l) if l.len() == 1 => {
                diff_bytes =
                    diff_bytes.map(|d| d + (x - y) * l.iter().next().copied().unwrap_or(0) as u64)
            }
            _ if x == y => {}
            _ => diff_bytes = None,
        }
    }
    ck.truth(
        &name("every opcode count >= the capture's"),
        "observer >= capture",
        if bad.is_empty() {
            "yes".into()
        } else {
            bad.join(", ")
        },
        bad.is_empty(),
    );
    if let Some(d) = diff_bytes {
        ck.eq(
            &name("bytes - capture bytes == sum of the dropped packets' frame lengths"),
            d as i64,
            u(&o["bytes"]) as i64 - u(&a["bytes"]) as i64,
        );
    }
    ck.eq(&name("psn_gaps"), json!(0), o["psn_gaps"].clone());
    ck.eq(&name("psn_missing"), json!(0), o["psn_missing"].clone());
    let acks_naks = u(&o["acks"]) + naks_total(o);
    ck.eq(
        &name("req_retransmits == packets - ACK/NAKs - distinct request PSNs on the wire"),
        op.saturating_sub(acks_naks)
            .saturating_sub(wf.distinct_request_psns) as i64,
        u(&o["req_retransmits"]) as i64,
    );
    for field in [
        "resp_retransmits",
        "acks",
        "naks",
        "cnp",
        "ecn_ce",
        "ecn_ect",
        "peer_qp",
        "udp_src_ports",
        "udp_src_port_overflow",
        "transport",
        "other_transport",
        "dscp",
        "pcp",
    ] {
        ck.eq(&name(field), a[field].clone(), o[field].clone());
    }
}

/// Per flow: wire (tshark) / analyze / observer, for the runs with an observer.
fn flow_table(sums: &[Summary]) -> String {
    let rows: Vec<Vec<String>> = sums.iter().flat_map(|s| s.flow_rows.clone()).collect();
    if rows.is_empty() {
        return String::new();
    }
    let head = [
        "scenario",
        "flow",
        "observer",
        "pkts w/a/o",
        "retx w/a/o",
        "NAK w/a/o",
        "gaps w/a/o",
    ];
    format_table(&head, rows)
}

fn table(sums: &[Summary]) -> String {
    let head = [
        "scenario",
        "time",
        "perftest",
        "pmtu",
        "wire c>s/s>c",
        "c.sent/s.rcvd",
        "s.sent/c.rcvd",
        "NAK wire/oos",
        "retx/dup(model)/dup_req",
        "gaps/naive4096",
        "netem drop",
    ];
    format_table(&head, sums.iter().map(|s| s.row.clone()).collect())
}

fn format_table(head: &[&str], body: Vec<Vec<String>>) -> String {
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    rows.extend(body);
    let w: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (n, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:<w$}", c, w = w[i]))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if n == 0 {
            let _ = writeln!(
                out,
                "{}",
                "-".repeat(w.iter().sum::<usize>() + 2 * (w.len() - 1))
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(src: &str, op: u8, psn: u32, syn: Option<u8>, len: Option<u32>) -> Pkt {
        Pkt {
            src: src.into(),
            dst: if src == CLIENT_IP {
                SERVER_IP
            } else {
                CLIENT_IP
            }
            .into(),
            dest_qp: 0x11,
            opcode: op,
            psn,
            syndrome: syn,
            dma_len: len,
            len: 100,
            ecn: 0,
            udp_sport: 49152,
        }
    }

    #[test]
    fn psn_arithmetic_wraps() {
        assert_eq!(psn_diff(0, 0xFF_FFFF), 1);
        assert_eq!(psn_diff(0xFF_FFFF, 0), -1);
        assert_eq!(psn_add(0xFF_FFFF, 2), 1);
    }

    #[test]
    fn read_requests_reserve_psns() {
        // two 8 KiB READs at path MTU 1024: PSN 10 then 18, responses 10..=25
        let mut v = vec![
            pkt(CLIENT_IP, 0x0C, 10, None, Some(8192)),
            pkt(CLIENT_IP, 0x0C, 18, None, Some(8192)),
        ];
        for (i, psn) in (10..26).enumerate() {
            let op = match i % 8 {
                0 => 0x0D,
                7 => 0x0F,
                _ => 0x0E,
            };
            v.push(pkt(SERVER_IP, op, psn, None, None));
        }
        let c = direction(&v, CLIENT_IP, 1024, None);
        assert_eq!(
            (c.req_gaps, c.req_retransmissions, c.read_requests),
            (0, 0, 2)
        );
        assert_eq!(c.req_gaps_pmtu4096, 1);
        assert_eq!((c.sim_duplicates, c.sim_out_of_seq), (0, 0));
        let s = direction(&v, SERVER_IP, 1024, None);
        assert_eq!(
            (
                s.resp_gaps,
                s.resent_read_responses,
                s.distinct_read_response_psns
            ),
            (0, 0, 16)
        );
    }

    #[test]
    fn go_back_n_after_loss() {
        // 1 2 [3 lost] 4 5, NAK(3), 3 4 5 resent, then a timeout resend of 5
        let v: Vec<Pkt> = [1, 2, 4, 5, 3, 4, 5, 5]
            .iter()
            .map(|&p| pkt(CLIENT_IP, 0x0A, p, None, Some(64)))
            .chain([pkt(SERVER_IP, 0x11, 3, Some(0x60), None)])
            .collect();
        let c = direction(&v, CLIENT_IP, 1024, None);
        assert_eq!((c.req_gaps, c.req_missing_psns), (1, 1));
        assert_eq!(c.req_retransmissions, 4); // 3, 4, 5 and 5 again: not newer than 5
        assert_eq!(c.sim_out_of_seq, 1); // one NAK for 4 and 5
        assert_eq!(c.sim_duplicates, 1); // only the last 5 was already accepted
        assert_eq!(c.distinct_request_psns, 5);
        let s = direction(&v, SERVER_IP, 1024, None);
        assert_eq!((s.naks_seq, s.acks), (1, 0));
    }

    #[test]
    fn wire_flow_records_follow_the_metrics_rules() {
        // requests 1 2 [3 lost] 4 5, resend of 3 only, then 6: one gap (3), the resend
        // changes nothing, 6 is no gap (the harness once moved `expected` on a resend)
        let mut v: Vec<Pkt> = [1, 2, 4, 5, 3, 6]
            .iter()
            .map(|&p| pkt(CLIENT_IP, 0x07, p, None, None))
            .collect();
        // READ responses 10..=13 with 12 missing, 11 resent, a NAK and an ACK in the same flow
        for (op, psn, syn) in [
            (0x0D, 10, None),
            (0x0E, 11, None),
            (0x11, 40, Some(0x60)),
            (0x0E, 11, None),
            (0x0F, 13, None),
            (0x11, 13, Some(0x1F)),
        ] {
            v.push(pkt(SERVER_IP, op, psn, syn, None));
        }
        v[0].ecn = 3;
        v[1].ecn = 2;
        v[2].udp_sport = 50000;
        let w = wire_flows(&v, 1024);
        let c = &w[&(CLIENT_IP.to_string(), SERVER_IP.to_string(), 0x11)];
        assert_eq!((c.packets, c.bytes), (6, 600));
        assert_eq!((c.req_retransmits, c.psn_gaps, c.psn_missing), (1, 1, 1));
        assert_eq!((c.ecn_ce, c.ecn_ect, c.udp_src_ports), (1, 1, 2));
        assert_eq!(c.opcodes["RC_RDMA_WRITE_MIDDLE"], 6);
        assert_eq!(c.distinct_request_psns, 6);
        let s = &w[&(SERVER_IP.to_string(), CLIENT_IP.to_string(), 0x11)];
        assert_eq!((s.resp_retransmits, s.psn_gaps, s.psn_missing), (1, 1, 1));
        assert_eq!((s.acks, s.naks_psn_seq_err, s.naks_other), (1, 1, 0));
        assert_eq!(s.opcodes["RC_ACKNOWLEDGE"], 2);
        // the per-direction figures agree
        let d = direction(&v, CLIENT_IP, 1024, None);
        assert_eq!((d.req_retransmissions, d.req_gaps), (1, 1));
        let d = direction(&v, SERVER_IP, 1024, None);
        assert_eq!((d.resent_read_responses, d.resp_gaps), (1, 1));
        assert_eq!(opcode_name(0x81), "CNP");
        assert_eq!(opcode_name(0x64), "UD_SEND_ONLY");
    }

    #[test]
    fn first_request_lost() {
        // the QP starts at PSN 100; 100 is lost, 101 arrives (NAK), then 100 and 101 again
        let v: Vec<Pkt> = [101, 100, 101]
            .iter()
            .map(|&p| pkt(CLIENT_IP, 0x0A, p, None, Some(64)))
            .collect();
        let c = direction(&v, CLIENT_IP, 1024, Some(100));
        assert_eq!((c.sim_out_of_seq, c.sim_duplicates), (1, 0));
        assert_eq!((c.req_gaps, c.req_missing_psns), (1, 1));
        // without the initial PSN the first packet seen is taken as the start
        let c = direction(&v, CLIENT_IP, 1024, None);
        assert_eq!(c.sim_out_of_seq, 0);
    }

    #[test]
    fn perftest_output_parses() {
        let dir = std::env::temp_dir().join(format!("softroce-test-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("tmp dir");
        fs::write(
            dir.join("perftest.out"),
            " Mtu             : 1024[B]\n local address: LID 0000 QPN 0x0011 PSN 0x2ae78a RKey 0x0002a1 VAddr 0x0056542bbde000\n #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 8192       100              11.86              7.28   \t\t   0.000932\n",
        )
        .expect("write");
        fs::write(dir.join("status.env"), "PERFTEST_RC=0\n").expect("write");
        let p = parse_perftest(&dir, false);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(
            (p.rc, p.mtu, p.iterations),
            (Some(0), Some(1024), Some(100))
        );
        assert_eq!(p.bw_avg_mb, Some(7.28));
        assert_eq!(p.local_psn, Some(0x2ae78a));
    }
}
