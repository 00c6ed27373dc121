//! `cargo xtask test`: the project's test command (CI runs it through .ci/run).
//! Setup, formatting, clippy with warnings denied, the build, the fixtures check, every unit and
//! integration test, then the kernel matrix (Debian 5.10, 6.1, 6.12 in VMs, one fixture set
//! each). The Soft-RoCE VMs are `cargo xtask softroce` (CI runs it after this), or `--softroce`.
//!
//! Every stage runs even when an earlier one failed, and the run ends with one line
//! `N passed, N failed, N skipped`: tests as counted by libtest's "test result:" lines, plus
//! one per stage that is not itself a test run (fmt, clippy, build, fixtures, VMs). Nothing that
//! did not run counts as passed. Kernel tests are `#[ignore]`d by default and run here with
//! `--include-ignored`; they need root, as do the VMs. A stage or kernel test that cannot run
//! here is a failure, unless `--allow-skip` is given: then it is skipped, listed and counted.

use std::{
    io::{BufRead as _, BufReader},
    process::Stdio,
};

use clap::{Args, Parser};

use crate::{
    fixtures, kernels, package, setup, softroce,
    util::{cargo, is_root, sh, workspace_root},
};

#[derive(Args)]
pub struct TestOpts {
    /// Skip the virtual-machine tests: Soft-RoCE and the kernel matrix (counted as skipped).
    #[arg(long)]
    pub no_vm: bool,
    /// Run every Soft-RoCE scenario instead of the fast subset (with --softroce), and every
    /// fixture on each kernel of the kernel matrix.
    #[arg(long)]
    pub full_vm: bool,
    /// Also run the Soft-RoCE VMs (the fast subset), otherwise left to `cargo xtask softroce`.
    #[arg(long)]
    pub softroce: bool,
    /// Let what cannot run here (kernel tests and VMs without root, the fixtures check without
    /// scapy) be skipped instead of failing the run; skips are listed and counted.
    #[arg(long)]
    pub allow_skip: bool,
}

/// The Soft-RoCE options with their defaults, as the `softroce` task would parse them.
#[derive(Parser)]
struct SoftRoceCli {
    #[command(flatten)]
    opts: softroce::SoftRoceOpts,
}

/// Host-built packages: the eBPF crate only builds for the BPF target (build.rs builds it).
const HOST_PACKAGES: [&str; 3] = ["--workspace", "--exclude", "roce-observer-ebpf"];

/// What the run found: counts and the names behind the failures and skips.
#[derive(Default)]
struct Tally {
    passed: u64,
    failed: u64,
    skipped: u64,
    failures: Vec<String>,
    skips: Vec<String>,
    allow_skip: bool,
    /// How long each stage took, printed at the end so the test command's budget can be watched.
    timings: Vec<(String, std::time::Duration)>,
}

impl Tally {
    /// Note that the stage `name` has ended: it took the time since the previous mark.
    fn mark(&mut self, name: &str, since: &mut std::time::Instant) {
        let now = std::time::Instant::now();
        self.timings.push((name.to_string(), now - *since));
        *since = now;
    }

    fn stage(&mut self, name: &str, result: anyhow::Result<()>) {
        match result {
            Ok(()) => self.passed += 1,
            Err(err) => {
                self.failed += 1;
                self.failures.push(format!("{name}: {err:#}"));
            }
        }
    }

    /// A stage that was asked for and cannot run here: failed unless skips are allowed.
    fn cannot_run(&mut self, name: &str, why: &str) {
        if self.allow_skip {
            self.skip(name, why);
        } else {
            self.failed += 1;
            self.failures.push(format!(
                "{name}: cannot run: {why} (pass --allow-skip to accept that)"
            ));
        }
    }

    fn skip(&mut self, name: &str, why: &str) {
        self.skipped += 1;
        self.skips.push(format!("{name}: {why}"));
    }

    /// One count per Soft-RoCE scenario: passed only when it ran and every check held.
    fn scenarios(&mut self, outcomes: &[softroce::ScenarioOutcome]) {
        for sc in outcomes {
            let name = format!("Soft-RoCE {}", sc.name);
            if let Some(err) = &sc.error {
                self.stage(&name, Err(anyhow::anyhow!("could not run: {err}")));
            } else if sc.failed > 0 || sc.passed == 0 {
                self.stage(
                    &name,
                    Err(anyhow::anyhow!(
                        "{} of {} checks failed: {}",
                        sc.failed,
                        sc.passed + sc.failed,
                        sc.failures.join("; ")
                    )),
                );
            } else {
                self.stage(&name, Ok(()));
            }
        }
        if outcomes.is_empty() {
            self.stage(
                "Soft-RoCE VMs",
                Err(anyhow::anyhow!("no scenario was selected")),
            );
        }
    }

    /// Add the counts of a `cargo test` run.
    fn tests(&mut self, run: &TestRun, status_ok: bool) {
        self.passed += run.passed;
        self.failed += run.failed;
        self.skipped += run.ignored;
        self.failures
            .extend(run.failed_names.iter().map(|n| format!("test {n}")));
        self.skips.extend(run.ignored_names.iter().cloned());
        let died = run.started.saturating_sub(run.finished);
        if died > 0 {
            self.failed += died;
            self.failures.push(format!(
                "{died} test binaries started and printed no result (crashed; see their output \
                 above)"
            ));
        } else if !status_ok && run.failed == 0 {
            // No test failed, yet cargo did: a build error, or a test binary that died before
            // printing its result line. Either way something did not run.
            self.failed += 1;
            self.failures.push(
                "cargo test failed without a failing test (a build error or a crashed test \
                 binary; see its output above)"
                    .into(),
            );
        }
    }

    fn closing_line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

/// Counts and names read from libtest's output (every test binary and doc-test run of one
/// `cargo test`).
#[derive(Default, Debug, PartialEq)]
struct TestRun {
    passed: u64,
    failed: u64,
    ignored: u64,
    failed_names: Vec<String>,
    /// "name (reason)" of each ignored test.
    ignored_names: Vec<String>,
    /// Test binaries that said "running N tests", and those that printed their result line:
    /// the difference died on the way (a crash, an abort).
    started: u64,
    finished: u64,
}

impl TestRun {
    /// Read one line of libtest output.
    fn line(&mut self, line: &str) {
        if line.starts_with("running ") && (line.ends_with(" test") || line.ends_with(" tests")) {
            self.started += 1;
        } else if let Some(result) = line.strip_prefix("test result: ") {
            self.finished += 1;
            // "ok. 3 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.1s"
            let counts = result.split_once(". ").map_or("", |(_, c)| c);
            for part in counts.split("; ") {
                let Some((n, what)) = part.split_once(' ') else {
                    continue;
                };
                let Ok(n) = n.parse::<u64>() else {
                    continue;
                };
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
        } else if let Some(rest) = line.strip_prefix("test ") {
            // "test NAME ... FAILED", "test NAME ... ignored", "test NAME ... ignored, REASON"
            let Some((name, outcome)) = rest.split_once(" ... ") else {
                return;
            };
            if outcome == "FAILED" {
                self.failed_names.push(name.to_string());
            } else if outcome == "ignored" {
                self.ignored_names.push(name.to_string());
            } else if let Some(reason) = outcome.strip_prefix("ignored, ") {
                self.ignored_names.push(format!("{name} ({reason})"));
            }
        }
    }
}

/// `cargo test`, its output shown as it comes and read for the counts. `--no-fail-fast` so one
/// failing binary does not hide the results of the others.
fn cargo_test(
    include_ignored: bool,
    deb: Option<&std::path::Path>,
) -> anyhow::Result<(TestRun, bool)> {
    let root = workspace_root();
    let mut cmd = cargo();
    cmd.current_dir(&root)
        .arg("test")
        .args(HOST_PACKAGES)
        .arg("--no-fail-fast")
        .env("ROCE_OBSERVER_BIN", root.join("target/debug/roce-observer"))
        .stdout(Stdio::piped());
    // tests/tests/package.rs installs this package of the debug build into a throwaway root.
    if let Some(deb) = deb {
        cmd.env("ROCE_OBSERVER_DEB", deb);
    }
    // The fleet store test needs chDB, which `cargo xtask fleet` installs and runs it with.
    cmd.args(["--", "--skip", "fleet_store_"]);
    if include_ignored {
        cmd.arg("--include-ignored");
    }
    eprintln!("+ {cmd:?}");
    let mut child = cmd.spawn()?;
    let mut run = TestRun::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            run.line(&line);
        }
    }
    let status = child.wait()?;
    Ok((run, status.success()))
}

pub fn run(opts: &TestOpts) -> anyhow::Result<()> {
    let mut tally = Tally {
        allow_skip: opts.allow_skip,
        ..Tally::default()
    };
    let root = workspace_root();
    let root_user = is_root();
    let mut since = std::time::Instant::now();
    tally.stage("setup", setup::setup().map(|_| ()));
    tally.mark("setup", &mut since);
    tally.stage(
        "fmt",
        sh(cargo().current_dir(&root).args(["fmt", "--all", "--check"])),
    );
    tally.stage(
        "clippy",
        sh(cargo()
            .current_dir(&root)
            .arg("clippy")
            .args(HOST_PACKAGES)
            .args(["--all-targets", "--", "-D", "warnings"])),
    );
    tally.mark("fmt and clippy", &mut since);
    tally.stage(
        "build",
        sh(cargo()
            .current_dir(&root)
            .arg("build")
            .args(HOST_PACKAGES)
            .arg("--bins")),
    );
    tally.mark("build", &mut since);
    // The recording rules' unit tests (promtool is installed by setup).
    tally.stage(
        "prometheus rules",
        sh(std::process::Command::new("promtool")
            .current_dir(root.join("docs/prometheus"))
            .args(["test", "rules", "roce-observer.rules.test.yml"])),
    );
    match fixtures::ensure_scapy() {
        Ok(()) => tally.stage("fixtures", fixtures::check()),
        Err(err) => tally.cannot_run("fixtures", &format!("{err:#}")),
    }
    tally.mark("prometheus rules and fixtures", &mut since);

    // Kernel tests are ignored by default. As root they run; without root they run too unless
    // skips are allowed, and then fail with "needs root" (a skipped test never shows as passed).
    let include_ignored = root_user || !opts.allow_skip;
    let deb = match package::build_deb(true) {
        Ok(deb) => {
            tally.stage("package", Ok(()));
            Some(deb)
        }
        Err(err) => {
            tally.stage("package", Err(err));
            None
        }
    };
    tally.mark("package", &mut since);
    match cargo_test(include_ignored, deb.as_deref()) {
        Ok((run, ok)) => tally.tests(&run, ok),
        Err(err) => tally.stage("cargo test", Err(err)),
    }
    tally.mark("cargo test", &mut since);

    // The Soft-RoCE VMs take over five minutes: they are their own command (`cargo xtask
    // softroce`, which CI runs after this one), and run here only when asked for.
    if opts.no_vm || !opts.softroce {
        let why = if opts.no_vm {
            "--no-vm"
        } else {
            "run by `cargo xtask softroce` (or --softroce)"
        };
        tally.skip("Soft-RoCE VMs", why);
    } else if !root_user {
        tally.cannot_run("Soft-RoCE VMs", "they need root");
    } else {
        // The observer built above runs inside the client VM (kernel 6.1) during each scenario.
        let observer = root.join("target/debug/roce-observer");
        let mut argv = vec!["softroce".to_string(), "--observer".to_string()];
        argv.push(observer.to_string_lossy().into_owned());
        if opts.full_vm {
            argv.push("--full".into());
        }
        match softroce::run_counted(SoftRoceCli::parse_from(argv).opts) {
            Ok(outcomes) => tally.scenarios(&outcomes),
            Err(err) => tally.stage("Soft-RoCE VMs", Err(err)),
        }
    }
    tally.mark("Soft-RoCE VMs", &mut since);

    if opts.no_vm {
        tally.skip("kernel matrix", "--no-vm");
    } else if !root_user {
        tally.cannot_run("kernel matrix", "it needs root");
    } else {
        let matrix = kernels::KernelsOpts {
            full: opts.full_vm,
            kernels: Vec::new(),
            observer: Some(root.join("target/debug/roce-observer")),
            vm_timeout: 600,
        };
        tally.stage("kernel matrix", kernels::run(&matrix));
    }
    tally.mark("kernel matrix", &mut since);

    for (stage, took) in &tally.timings {
        println!("time: {stage}: {:.0} s", took.as_secs_f64());
    }

    for skip in &tally.skips {
        println!("skipped: {skip}");
    }
    for failure in &tally.failures {
        println!("FAILED: {failure}");
    }
    println!("{}", tally.closing_line());
    if tally.failed > 0 {
        // The closing line stays the last thing printed; the reasons are listed above it.
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "\
running 3 tests
test a::passes ... ok
test b::fails ... FAILED
test c::kernel ... ignored, kernel test: needs root (BPF, network namespaces)

failures:
    b::fails

test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

running 2 tests
test d ... ignored
test e ... ok

test result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 2 filtered out; finished in 0.00s
";

    fn parse(text: &str) -> TestRun {
        let mut run = TestRun::default();
        text.lines().for_each(|l| run.line(l));
        run
    }

    #[test]
    fn libtest_output_is_counted() {
        assert_eq!(
            parse(OUTPUT),
            TestRun {
                passed: 2,
                failed: 1,
                ignored: 2,
                failed_names: vec!["b::fails".into()],
                ignored_names: vec![
                    "c::kernel (kernel test: needs root (BPF, network namespaces))".into(),
                    "d".into()
                ],
                started: 2,
                finished: 2,
            }
        );
    }

    #[test]
    fn ignored_tests_are_skips_and_crashes_and_build_errors_are_failures() {
        let mut tally = Tally::default();
        tally.tests(&parse(OUTPUT), false);
        tally.stage("fmt", Ok(()));
        tally.skip("Soft-RoCE VMs", "--no-vm");
        assert_eq!(tally.closing_line(), "3 passed, 1 failed, 3 skipped");

        let mut crashed = Tally::default();
        crashed.tests(&parse(&format!("{OUTPUT}running 1 test\n")), false);
        assert_eq!(crashed.closing_line(), "2 passed, 2 failed, 2 skipped");
        assert!(crashed.failures[1].contains("printed no result"));

        let mut build_error = Tally::default();
        build_error.tests(&parse(""), false);
        assert_eq!(build_error.closing_line(), "0 passed, 1 failed, 0 skipped");
    }

    #[test]
    fn each_vm_scenario_counts_once_and_only_a_clean_one_passes() {
        let outcome = |name: &str, passed, failed, error: Option<&str>| softroce::ScenarioOutcome {
            name: name.into(),
            passed,
            failed,
            failures: (0..failed).map(|i| format!("check {i}")).collect(),
            error: error.map(str::to_string),
        };
        let mut tally = Tally::default();
        tally.scenarios(&[
            outcome("ok", 100, 0, None),
            outcome("bad", 99, 1, None),
            outcome("timeout", 0, 0, Some("hard timeout")),
            outcome("checked_nothing", 0, 0, None),
        ]);
        assert_eq!(tally.closing_line(), "1 passed, 3 failed, 0 skipped");
        assert!(tally.failures[0].contains("1 of 100 checks failed"));
    }

    #[test]
    fn what_cannot_run_fails_unless_skips_are_allowed() {
        let mut strict = Tally::default();
        strict.cannot_run("Soft-RoCE VMs", "they need root");
        assert_eq!(strict.closing_line(), "0 passed, 1 failed, 0 skipped");
        assert!(strict.failures[0].contains("--allow-skip"));

        let mut lenient = Tally {
            allow_skip: true,
            ..Tally::default()
        };
        lenient.cannot_run("Soft-RoCE VMs", "they need root");
        assert_eq!(lenient.closing_line(), "0 passed, 0 failed, 1 skipped");
        assert_eq!(lenient.skips, ["Soft-RoCE VMs: they need root"]);
    }
}
