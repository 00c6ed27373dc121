//! `cargo xtask kernels`: the kernel matrix. Boots Debian's 5.10 (bullseye), 6.1 (bookworm) and
//! 6.12 (trixie) kernels under qemu (TCG), fetched from Debian's archive by package name
//! (`fetch`), each with a small initramfs (`image`, tests/kernels/guest-init.sh). Inside each VM
//! the observer runs on a veth pair while tcpreplay replays fixtures into it; the host then
//! compares the observer's JSON for each fixture with the fixture's expected JSON at both
//! attach points (XDP ingress on the receiving end, TC egress on the sending end), with the
//! integration tests' comparator, and checks that the observer loaded the variant the kernel
//! calls for (its startup line).
//!
//! Starting the observer takes tens of seconds under TCG, so it starts once per kernel (and
//! path MTU), with each fixture replayed into its own veth pair: flow and PFC records are then
//! exact per fixture and attach point, the summary counters exact over the run. The fast path
//! (the test command's stage) replays FAST_FIXTURES; `--full` replays every kernel fixture,
//! and on kernels that lack a
//! feature also starts the observer with that feature forced on, checking that the load fails
//! with the message a user needs (`Kernel::forced`). One VM boot per kernel; the kernels boot
//! in parallel.

mod fetch;
mod image;

/// The integration tests' comparator, compiled in here too (xtask cannot depend on the
/// integration-tests crate: that builds the eBPF programs, and xtask must build before setup).
/// Its differential half (`diff_flows`) is not used here.
#[allow(dead_code)]
#[path = "../../tests/src/compare.rs"]
mod compare;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

use crate::softroce::image::ldd;
use crate::util::workspace_root;
use compare::{View, compare};
use fetch::{KERNELS, Kernel, fetch};
use image::build_image;

/// One per kernel in the fast path: many flows and opcodes, frames above one page
/// (go-back-N with 4 KiB payloads), PFC, and switch mirrors (ERSPAN II/III, GRE, VXLAN, two
/// mirror sources of one flow, sequence gaps: the MIRRORS map and the scratch map).
const FAST_FIXTURES: &[&str] = &["mixed_demo", "nak_go_back_n", "pfc", "mirror_loss"];

/// Options of `cargo xtask kernels`.
#[derive(Debug, Clone, clap::Args)]
pub struct KernelsOpts {
    /// Replay every kernel fixture (not only the fast set) on each kernel.
    #[arg(long)]
    pub full: bool,
    /// Only these kernels ("5.10", "6.1", "6.12"; repeatable).
    #[arg(long = "kernel", value_name = "SERIES")]
    pub kernels: Vec<String>,
    /// The roce-observer binary to test (default: target/debug/roce-observer).
    #[arg(long, value_name = "PATH")]
    pub observer: Option<PathBuf>,
    /// Hard limit for one VM, in seconds.
    #[arg(long, default_value_t = 600)]
    pub vm_timeout: u64,
}

/// `cargo xtask kernels`: fail when any check failed or a kernel could not be tested.
pub fn run(opts: &KernelsOpts) -> Result<()> {
    let root = workspace_root();
    let observer = opts
        .observer
        .clone()
        .unwrap_or_else(|| root.join("target/debug/roce-observer"));
    let observer = fs::canonicalize(&observer)
        .with_context(|| format!("{} (build it first)", observer.display()))?;
    let selected: Vec<&Kernel> = KERNELS
        .iter()
        .filter(|k| opts.kernels.is_empty() || opts.kernels.iter().any(|n| n == k.name))
        .collect();
    if selected.is_empty() {
        bail!("no kernel matches {:?}", opts.kernels);
    }
    // (tool, Debian package) the harness runs on the host.
    let tools = [
        ("/usr/bin/qemu-system-x86_64", "qemu-system-x86"),
        ("/usr/bin/tcpreplay", "tcpreplay"),
        ("/bin/busybox", "busybox-static"),
        ("/usr/sbin/ip", "iproute2"),
        ("/usr/bin/xz", "xz-utils"),
        ("/usr/sbin/depmod", "kmod"),
    ];
    let missing: Vec<&str> = tools
        .iter()
        .filter(|(tool, _)| !Path::new(tool).exists())
        .map(|(_, pkg)| *pkg)
        .collect();
    if !missing.is_empty() {
        // A fresh machine has none of them: installed as the Soft-RoCE harness installs its
        // own (the same qemu), never letting apt remove packages silently.
        if !crate::util::is_root() {
            bail!(
                "missing on this machine: {}; run as root to have them installed, or apt-get \
                 install them yourself",
                missing.join(" ")
            );
        }
        println!("kernels: installing {}", missing.join(" "));
        crate::softroce::host::install_packages(&missing, "kernels")
            .context("the kernel matrix's host tools (qemu, busybox, kmod)")?;
    }
    let runs = runs(fixtures(&root, opts.full)?);
    let t0 = Instant::now();
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = selected
            .iter()
            .map(|k| scope.spawn(|| run_kernel(&root, k, &observer, &runs, opts)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("the thread running it panicked")))
            })
            .collect()
    });
    let mut failures = Vec::new();
    let mut checked = 0;
    for (k, result) in selected.iter().zip(results) {
        match result {
            Ok((n, fails)) => {
                checked += n;
                failures.extend(fails.into_iter().map(|f| format!("{}: {f}", k.name)));
            }
            Err(e) => failures.push(format!("{}: could not run: {e:#}", k.name)),
        }
    }
    println!(
        "kernels: {checked} fixture/attach-point checks, {} failed, in {:.1}s",
        failures.len(),
        t0.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        bail!("kernel matrix failed:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

/// One fixture to replay: its name, capture and expected JSON.
type Fixture = (String, PathBuf, Value);

/// The observer runs: all fixtures of one path MTU together.
fn runs(fixtures: Vec<Fixture>) -> Vec<Vec<Fixture>> {
    let mut runs: Vec<Vec<Fixture>> = Vec::new();
    for f in fixtures {
        let pmtu = pmtu(&f.2);
        match runs.iter_mut().find(|r| pmtu_of(r) == pmtu) {
            Some(run) => run.push(f),
            None => runs.push(vec![f]),
        }
    }
    runs
}

fn pmtu(expected: &Value) -> u64 {
    expected["pmtu"].as_u64().unwrap_or(4096)
}

fn pmtu_of(run: &[Fixture]) -> u64 {
    run.first().map_or(0, |f| pmtu(&f.2))
}

/// (name, pcap, expected JSON) of the fixtures to replay: the kernel fixtures (not those
/// marked `"kernel": false`), only the fast set unless `full`.
fn fixtures(root: &Path, full: bool) -> Result<Vec<Fixture>> {
    let dir = root.join("tests/fixtures");
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir)?.flatten() {
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".expected.json"))
        else {
            continue;
        };
        let expected: Value = serde_json::from_str(&fs::read_to_string(&path)?)
            .with_context(|| path.display().to_string())?;
        if expected["kernel"] == Value::Bool(false) || !(full || FAST_FIXTURES.contains(&name)) {
            continue;
        }
        out.push((name.to_string(), dir.join(format!("{name}.pcap")), expected));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    if out.is_empty() {
        bail!("no fixtures found in {}", dir.display());
    }
    Ok(out)
}

/// Boot kernel `k` once, replay every fixture in it, check the results. Returns the number of
/// checks made and the failed ones; Err when the VM could not run at all.
fn run_kernel(
    root: &Path,
    k: &Kernel,
    observer: &Path,
    runs: &[Vec<Fixture>],
    opts: &KernelsOpts,
) -> Result<(usize, Vec<String>)> {
    let dir = root.join("target/kernels").join(k.name);
    let t = Instant::now();
    let mut fetched = fetch(k, &dir)?;
    if !image::up_to_date(root, &dir, &fetched)? && !fetched.root.exists() {
        fetched = fetch::refetch(k, &dir)?;
    }
    let image = build_image(root, &dir, &fetched)?;
    fetch::prune(&dir);
    let setup = t.elapsed().as_secs_f64();

    let share = dir.join("share");
    let _ = fs::remove_dir_all(&share);
    for d in ["bin", "lib", "fixtures", "out"] {
        fs::create_dir_all(share.join(d))?;
    }
    // A hard link where possible: a debug build is large, and disk is shared.
    let bin = share.join("bin/roce-observer");
    if fs::hard_link(observer, &bin).is_err() {
        fs::copy(observer, &bin)?;
    }
    for lib in ldd(observer)? {
        if let Some(name) = lib.file_name() {
            fs::copy(&lib, share.join("lib").join(name))?;
        }
    }
    // Each forced start costs as much as a run (tens of seconds under TCG): --full only.
    let forced = if opts.full { k.forced } else { &[] };
    // `run --kernel-log` (aya-log in the programs) must load on every kernel too, and the
    // default without it: the oldest and newest kernels run with it, 6.1 without.
    let kernel_log = k.name != "6.1";
    let mut list = Vec::new();
    for run in runs {
        let names: Vec<&str> = run.iter().map(|f| f.0.as_str()).collect();
        for (name, pcap, _) in run {
            fs::copy(pcap, share.join("fixtures").join(format!("{name}.pcap")))?;
        }
        list.push(format!("{}:{}", pmtu_of(run), names.join(",")));
    }
    fs::write(
        share.join("config.env"),
        format!(
            "RUNS=\"{}\"\nOBSERVER=/share/bin/roce-observer\nFORCED=\"{}\"\nRUN_ARGS=\"{}\"\n",
            list.join(" "),
            forced.iter().map(|f| f.0).collect::<Vec<_>>().join(" "),
            if kernel_log { "--kernel-log" } else { "" }
        ),
    )?;

    let t = Instant::now();
    let status = crate::qemu::Guest {
        kernel: &image.kernel,
        initrd: &image.initrd,
        timeout_secs: opts.vm_timeout,
        memory_mb: 512,
        kernel_args: "",
        share: &share,
        log_dir: &dir,
    }
    .command()?
    .status()
    .context("starting qemu-system-x86_64")?;
    let vm = t.elapsed().as_secs_f64();
    let out = share.join("out");
    if !out.join("done").exists() {
        bail!(
            "the VM did not finish (qemu: {status}); see {}",
            dir.join("console.log").display()
        );
    }
    let uname = fs::read_to_string(out.join("uname")).unwrap_or_default();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (n, run) in runs.iter().enumerate() {
        checked += 2 * run.len();
        let base = out.join(format!("run{n}"));
        failures.extend(check_run(k, &base, run));
        if kernel_log {
            checked += 1;
            let err = fs::read_to_string(base.with_extension("err")).unwrap_or_default();
            if !err.contains("roce-observer: kernel: first frame of its kind") {
                failures.push(format!(
                    "run{n} with --kernel-log: no kernel log line on stderr: {err}"
                ));
            }
        }
    }
    for (n, (feature, says)) in forced.iter().enumerate() {
        checked += 1;
        let base = out.join(format!("forced{n}"));
        let err = fs::read_to_string(base.with_extension("err")).unwrap_or_default();
        let rc = fs::read_to_string(base.with_extension("rc")).unwrap_or_default();
        if rc.trim() == "0" || err.contains("attached") {
            failures.push(format!("{feature} forced: the observer loaded anyway"));
        }
        for s in says.iter().filter(|s| !err.contains(*s)) {
            failures.push(format!("{feature} forced: the error lacks {s:?}: {err}"));
        }
        println!("kernels: {} with {feature} forced: {}", k.name, err.trim());
    }
    println!(
        "kernels: {} ({}, Debian {}): {} fixtures in {} observer runs, {} failed checks; \
         setup {setup:.1}s, VM {vm:.1}s",
        k.name,
        uname.trim(),
        fetched.version,
        runs.iter().map(Vec::len).sum::<usize>(),
        runs.len(),
        failures.len()
    );
    for f in &failures {
        println!("  FAILED {f}");
    }
    Ok((checked, failures))
}

/// One observer run in the VM (files `base`.err/.rc/.json): the observer ran, loaded the
/// variant the kernel calls for, and reported exactly each fixture's records on its veth pair
/// (XDP ingress on bI, TC egress on aI), and the run's summary counters are the sum of the
/// fixtures' expected ones.
fn check_run(k: &Kernel, base: &Path, run: &[Fixture]) -> Vec<String> {
    let read = |ext: &str| fs::read_to_string(base.with_extension(ext));
    let names: Vec<&str> = run.iter().map(|f| f.0.as_str()).collect();
    let what = names.join("+");
    let err = read("err").unwrap_or_default();
    let rc = read("rc").unwrap_or_default();
    if rc.trim() != "0" {
        return vec![format!(
            "{what}: the observer exited with {:?}; its stderr:\n{err}",
            rc.trim()
        )];
    }
    let mut fails: Vec<String> = k
        .expect_variant
        .iter()
        .filter(|v| !err.contains(*v))
        .map(|v| format!("{what}: startup line lacks {v:?}: {err}"))
        .collect();
    let doc: Value = match read("json").map_err(anyhow::Error::from).and_then(|t| {
        serde_json::from_str(&t).map_err(|e| anyhow!("observer JSON does not parse: {e}"))
    }) {
        Ok(doc) => doc,
        Err(e) => {
            fails.push(format!("{what}: {e:#}"));
            return fails;
        }
    };
    let summary = summed_summary(run);
    for (i, (name, _, expected)) in run.iter().enumerate() {
        let mut expected = expected.clone();
        expected["summary"] = summary.clone();
        for (iface, direction) in [(format!("b{i}"), "ingress"), (format!("a{i}"), "egress")] {
            let view = View {
                iface: Some(&iface),
                direction,
                exact_rtt: false,
            };
            for d in compare(&expected, &doc, &view) {
                // The summary is the run's: reported once, under the run's name.
                let line = if d.starts_with("summary.") {
                    format!("{what} {direction}: {d}")
                } else {
                    format!("{name} {direction} on {iface}: {d}")
                };
                if !fails.contains(&line) {
                    fails.push(line);
                }
            }
        }
    }
    fails
}

/// The expected summary of a run: each counter summed over its fixtures.
fn summed_summary(run: &[Fixture]) -> Value {
    let mut sum = serde_json::Map::new();
    for (_, _, expected) in run {
        if let Some(fields) = expected["summary"].as_object() {
            for (key, value) in fields {
                if let Some(n) = value.as_u64() {
                    let total = sum.get(key).and_then(Value::as_u64).unwrap_or(0) + n;
                    sum.insert(key.clone(), Value::from(total));
                }
            }
        }
    }
    Value::Object(sum)
}
