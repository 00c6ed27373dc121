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
//! (`observer_checks`, `wire_flows`; tests/softroce/README.md, "Observer checks"); every flow
//! record must name perftest's process and QP as its owner (`owners`).
//!
//! Results: `target/softroce/results/<scenario>/{cap.pcap, summary.json, vm-client/, vm-server/}`
//! and `target/softroce/results/summary.json`.
//!
//! Modules, in the order a run uses them: `scenarios`, `host` (Debian packages), `image`
//! (kernel + initramfs), `vm` (running one scenario), `outputs` (what the VMs leave in their
//! shares), `wire` and `wire_flows` (tshark's decoding, per direction and per flow), `checks`,
//! `observer` (the observer's records against `analyze` and the wire), `report` (tables).

mod check;
mod checks;
pub(crate) mod host;
pub(crate) mod image;
mod observer;
mod outputs;
mod owners;
mod paths;
mod psn_truth;
mod reorder;
mod report;
mod scenarios;
mod steps;
#[cfg(test)]
mod tests;
mod vm;
mod wire;
mod wire_flows;

use std::fs;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::json;

use crate::util::workspace_root;
use checks::{Summary, reanalyze};
use host::ensure_host;
use image::build_image;
use report::{flow_table, table};
use scenarios::{Scenario, scenarios};
use vm::run_scenario;

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

impl SoftRoceOpts {
    /// `--observer PATH`: fill in the --extra-* options it stands for (explicit ones win).
    fn expand_observer(&mut self) -> Result<()> {
        let Some(obs) = self.observer.clone() else {
            return Ok(());
        };
        let name = obs
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("bad --observer path"))?;
        if self.extra_bin.is_none() {
            self.extra_bin =
                Some(fs::canonicalize(&obs).with_context(|| obs.display().to_string())?);
        }
        if self.extra_cmd.is_none() {
            self.extra_cmd = Some(format!(
                "/share/extra/{name} run -i eth0 --no-tui --json --pmtu {{pmtu}} --xdp-mode {{xdp_mode}}"
            ));
        }
        if self.extra_ready.is_none() {
            self.extra_ready = Some("attached".into());
            self.extra_wait = self.extra_wait.max(60);
        }
        Ok(())
    }

    /// The scenarios to run: `--scenario` filters (an exact name selects that scenario,
    /// anything else is a substring), else the fast subset, or all with `--full`.
    fn select(&self, all: &[Scenario]) -> Vec<Scenario> {
        let names: Vec<&str> = all.iter().map(|s| s.name).collect();
        all.iter()
            .filter(|s| {
                if self.scenarios.is_empty() {
                    self.full || s.fast
                } else {
                    self.scenarios.iter().any(|f| {
                        s.name == f.as_str()
                            || (!names.contains(&f.as_str()) && s.name.contains(f.as_str()))
                    })
                }
            })
            .cloned()
            .collect()
    }
}

/// What one scenario gave: its checks passed and failed, or why it could not run.
#[derive(Debug, Clone)]
pub struct ScenarioOutcome {
    pub name: String,
    pub passed: usize,
    pub failed: usize,
    /// The failed checks: name, expected and actual value.
    pub failures: Vec<String>,
    /// Set when the scenario could not run or be checked (then passed == failed == 0).
    pub error: Option<String>,
}

/// `cargo xtask softroce`: run the selected scenarios, fail when any check failed or any
/// scenario could not run.
pub fn run(opts: SoftRoceOpts) -> Result<()> {
    let outcomes = run_counted(opts)?;
    let bad: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            let why = o.error.iter().map(|e| format!("could not run: {e}"));
            why.chain(o.failures.iter().cloned())
                .map(|f| format!("{}: {f}", o.name))
                .collect::<Vec<_>>()
        })
        .collect();
    if !bad.is_empty() {
        bail!("Soft-RoCE checks failed:\n  {}", bad.join("\n  "));
    }
    Ok(())
}

/// Run the selected scenarios and return each one's outcome (failed checks are printed, not
/// an error); Err only when nothing could start (no scenario matches, host setup, image).
pub fn run_counted(mut opts: SoftRoceOpts) -> Result<Vec<ScenarioOutcome>> {
    opts.expand_observer()?;
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
                    .unwrap_or_default()
                    + &s.reorder
                        .map(|r| format!(
                            " netem {} on the {}",
                            r.netem,
                            if r.on_server { "server" } else { "client" }
                        ))
                        .unwrap_or_default(),
                if s.fast { "  [fast]" } else { "" }
            );
        }
        return Ok(Vec::new());
    }
    let selected = opts.select(&all);
    if selected.is_empty() {
        bail!("no scenario matches {:?} (see --list)", opts.scenarios);
    }

    let root = workspace_root();
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
    let mut summaries: Vec<Summary> = Vec::new();
    let mut outcomes = Vec::new();
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
                outcomes.push(ScenarioOutcome {
                    name: sc.name.to_string(),
                    passed: summary.checks.len() - failed.len(),
                    failed: failed.len(),
                    failures: failed,
                    error: None,
                });
                summaries.push(summary);
            }
            Err(e) => {
                println!("softroce: {} could not run: {e:#}", sc.name);
                failures.push(format!("{}: could not run: {e:#}", sc.name));
                outcomes.push(ScenarioOutcome {
                    name: sc.name.to_string(),
                    passed: 0,
                    failed: 0,
                    failures: Vec::new(),
                    error: Some(format!("{e:#}")),
                });
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
        outcomes.len(),
        t0.elapsed().as_secs_f64(),
        results_dir.display()
    );
    let passed: usize = outcomes.iter().map(|o| o.passed).sum();
    let failed: usize = outcomes.iter().map(|o| o.failed).sum();
    let broken = outcomes.iter().filter(|o| o.error.is_some()).count();
    println!("softroce: {passed} checks passed, {failed} failed, {broken} scenarios could not run");
    Ok(outcomes)
}
