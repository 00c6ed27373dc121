//! The Debian package `cargo xtask package` builds, checked the way an operator would use it:
//! unpacked into a throwaway root (dpkg -x), its file list and control data checked, its systemd
//! unit verified with `systemd-analyze verify`, and the installed binary run as the unit runs it
//! (an unprivileged user holding exactly the unit's capabilities, set with setpriv, since
//! systemd is not PID 1 on test machines) on a veth pair in a throwaway namespace: it must count
//! a replayed capture exactly, stop cleanly on SIGTERM, and fail with one clear line on bad
//! input. `cargo xtask test` builds the package of the debug build and names it in
//! ROCE_OBSERVER_DEB.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

use integration_tests::{
    compare::{View, compare},
    fixtures,
    netns::{Observer, VethNs},
    observer_bin, require_root, workspace_root,
};

/// Every file the package installs (directories aside).
const FILES: [&str; 21] = [
    "etc/default/roce-observer",
    "lib/systemd/system/roce-observer.service",
    "usr/bin/roce-observer",
    "usr/lib/sysusers.d/roce-observer.conf",
    "usr/share/bash-completion/completions/roce-observer",
    "usr/share/doc/roce-observer/README.md",
    "usr/share/doc/roce-observer/copyright",
    "usr/share/doc/roce-observer/examples/mixed_demo.pcap",
    "usr/share/doc/roce-observer/kernels.md",
    "usr/share/doc/roce-observer/log-schema.md",
    "usr/share/doc/roce-observer/metrics.md",
    "usr/share/doc/roce-observer/observation-points.md",
    "usr/share/doc/roce-observer/operations.md",
    "usr/share/doc/roce-observer/roce-observer.rules.yml",
    "usr/share/doc/roce-observer/usage.md",
    "usr/share/fish/vendor_completions.d/roce-observer.fish",
    "usr/share/man/man1/roce-observer-analyze.1.gz",
    "usr/share/man/man1/roce-observer-counters.1.gz",
    "usr/share/man/man1/roce-observer-run.1.gz",
    "usr/share/man/man1/roce-observer.1.gz",
    "usr/share/zsh/vendor-completions/_roce-observer",
];

/// Capability numbers (linux/capability.h) of those the unit may grant.
const CAPS: [(&str, u32); 3] = [("CAP_NET_ADMIN", 12), ("CAP_PERFMON", 38), ("CAP_BPF", 39)];

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("roce-observer-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temporary directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The value of `Key=` in a unit or environment file (the last one wins, as in systemd).
fn setting<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .next_back()
        .unwrap_or_else(|| panic!("{key}= not set"))
}

/// A uid (and the gid of the same number) that no user or group on this machine has: the
/// service user as the test runs it, without adding a user to the host.
fn unused_id() -> u32 {
    (800..1000)
        .find(|id| {
            let id = id.to_string();
            ["passwd", "group"].iter().all(|db| {
                !Command::new("getent")
                    .args([*db, id.as_str()])
                    .status()
                    .is_ok_and(|s| s.success())
            })
        })
        .expect("a free system uid in 800..1000")
}

/// setpriv arguments that give a process what the unit's User=/Group=, capability settings
/// and NoNewPrivileges= give it (uid 0 -> `id` keeps the ambient capabilities).
fn setpriv_as_unit(id: u32, caps: &[&str]) -> Vec<String> {
    let mut args = vec![
        "setpriv".to_string(),
        format!("--reuid={id}"),
        format!("--regid={id}"),
        "--clear-groups".into(),
        "--no-new-privs".into(),
    ];
    let list = caps
        .iter()
        .map(|c| format!(",+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect::<String>();
    if !list.is_empty() {
        args.push(format!("--inh-caps=-all{list}"));
        args.push(format!("--ambient-caps={}", &list[1..]));
    }
    args.push(format!("--bounding-set=-all{list}"));
    args
}

/// CapEff and Uid of a running process.
fn process_identity(pid: u32) -> (u64, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
            .to_string()
    };
    let cap_eff = u64::from_str_radix(&field("CapEff:"), 16).expect("CapEff is hex");
    (cap_eff, field("Uid:"))
}

/// The unit's sandboxing as systemd itself scores it (`systemd-analyze security --offline`),
/// setting by setting, and `systemd-analyze verify` clean. Run from the source tree: no
/// package or root needed.
#[test]
#[ignore = "needs systemd-analyze (systemd >= 252)"]
fn the_unit_is_sandboxed_as_systemd_scores_it() {
    let unit = std::fs::read_to_string(workspace_root().join("packaging/roce-observer.service"))
        .expect("unit");
    let dir = TempDir::new("unit-security");
    let copy = dir.0.join("roce-observer.service");
    // verify checks that ExecStart's binary exists and runs `man` for man: pages, which are
    // built only with the package.
    let text: String = unit
        .replace(
            "ExecStart=/usr/bin/roce-observer",
            &format!("ExecStart={}", observer_bin().display()),
        )
        .lines()
        .filter(|l| !l.starts_with("Documentation=man:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&copy, text).expect("unit copy");
    let verify = ok(Command::new("systemd-analyze").arg("verify").arg(&copy));
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(
        !complaints.contains("roce-observer.service"),
        "systemd-analyze verify: {complaints}"
    );
    // Exposure 0.0 (best) to 10.0; the unit scored 3.3 before the system call filter,
    // RemoveIPC and PrivateMounts.
    let json = ok(Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager", "--json=short"])
        .arg(&copy))
    .stdout;
    let checks: Vec<serde_json::Value> = serde_json::from_slice(&json).expect("JSON");
    let passed = |field: &str| {
        checks
            .iter()
            .find(|c| c["name"] == field)
            .unwrap_or_else(|| panic!("systemd-analyze has no check {field}"))["exposure"]
            .as_str()
            .is_none_or(|e| e.parse::<f64>().is_ok_and(|v| v == 0.0))
    };
    for field in [
        "RemoveIPC=",
        "PrivateMounts=",
        "NoNewPrivileges=",
        "ProtectSystem=",
        "ProtectHome=",
        "PrivateTmp=",
        "PrivateDevices=",
        "ProtectKernelModules=",
        "ProtectKernelTunables=",
        "RestrictNamespaces=~user",
        "MemoryDenyWriteExecute=",
        "SystemCallArchitectures=",
        "SystemCallFilter=~@clock",
        "SystemCallFilter=~@debug",
        "SystemCallFilter=~@module",
        "SystemCallFilter=~@mount",
        "SystemCallFilter=~@raw-io",
        "SystemCallFilter=~@reboot",
        "SystemCallFilter=~@swap",
        "SystemCallFilter=~@obsolete",
        "SystemCallFilter=~@cpu-emulation",
    ] {
        assert!(passed(field), "{field} is not set as systemd-analyze wants");
    }
    let total: f64 = checks
        .iter()
        .filter_map(|c| c["exposure"].as_str()?.parse::<f64>().ok())
        .sum();
    let threshold = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager", "--threshold=25"])
        .arg(&copy)
        .output()
        .expect("systemd-analyze runs");
    assert!(
        threshold.status.success(),
        "exposure above 2.5: {}",
        String::from_utf8_lossy(&threshold.stdout)
    );
    // Resource limits are not scored: they are set, and verify accepted their values.
    for key in ["TasksMax", "MemoryMax", "LimitNOFILE"] {
        assert!(!setting(&unit, key).is_empty(), "{key}");
    }
    // Other users' processes stay visible, so QP owners are named.
    assert_eq!(setting(&unit, "ProtectProc"), "default");
    assert!(
        setting(&unit, "SystemCallFilter")
            .split_whitespace()
            .any(|c| c == "bpf"),
        "bpf(2) allowed"
    );
    eprintln!("unit: systemd-analyze exposure within 2.5 (sum of checks {total:.1})");
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn the_package_installs_and_runs_as_its_service_user_counting_exactly() {
    require_root();
    // A package test asked for without a package fails: it must never pass unchecked.
    let deb = std::env::var_os("ROCE_OBSERVER_DEB")
        .map(PathBuf::from)
        .expect("ROCE_OBSERVER_DEB is unset: `cargo xtask test` builds the package and sets it (or `cargo xtask package --debug`, then set it to the .deb)");
    let root = TempDir::new("pkgroot");
    ok(Command::new("dpkg").arg("-x").arg(&deb).arg(&root.0));

    // The file list, exactly.
    let listing =
        String::from_utf8_lossy(&ok(Command::new("dpkg").arg("-c").arg(&deb)).stdout).into_owned();
    let mut files: Vec<&str> = listing
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().last()?.strip_prefix("./"))
        .collect();
    files.sort_unstable();
    assert_eq!(files, FILES, "package file list");
    // Root-owned, the binary executable by everyone (the service user included).
    assert!(
        listing
            .lines()
            .filter(|l| !l.starts_with('d'))
            .all(|l| l.contains(" root/root ")),
        "{listing}"
    );
    assert!(listing.contains("-rwxr-xr-x root/root"), "{listing}");
    let control = TempDir::new("pkgctl");
    ok(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control.0));
    let conffiles = std::fs::read_to_string(control.0.join("conffiles")).expect("conffiles");
    assert_eq!(conffiles.trim(), "/etc/default/roce-observer");
    for script in ["postinst", "prerm", "postrm"] {
        ok(Command::new("sh").arg("-n").arg(control.0.join(script)));
    }

    // Man pages are the clap definitions rendered: the run page lists run's options.
    let run_page = ok(Command::new("gzip")
        .arg("-dc")
        .arg(root.0.join("usr/share/man/man1/roce-observer-run.1.gz")))
    .stdout;
    let run_page = String::from_utf8_lossy(&run_page);
    for option in [
        "\\-\\-iface",
        "\\-\\-capture",
        "\\-\\-realtime",
        "\\-\\-rdma\\-dev",
        "\\-\\-log\\-dir",
        "\\-\\-metrics",
        "\\-\\-prom\\-file",
        "\\-\\-color",
    ] {
        assert!(run_page.contains(option), "man page lacks {option}");
    }

    // The unit: user, capabilities, environment file, and systemd's own verdict.
    let unit_path = root.0.join("lib/systemd/system/roce-observer.service");
    let unit = std::fs::read_to_string(&unit_path).expect("unit");
    let user = setting(&unit, "User");
    let sysusers = std::fs::read_to_string(root.0.join("usr/lib/sysusers.d/roce-observer.conf"))
        .expect("sysusers.d file");
    assert!(
        sysusers
            .lines()
            .any(|l| l.starts_with(&format!("u {user} "))),
        "sysusers.d does not create {user}"
    );
    // What postinst runs, against a scratch /etc: it must create that user as a system user.
    let users = TempDir::new("sysusers");
    std::fs::create_dir(users.0.join("etc")).expect("scratch /etc");
    ok(Command::new("systemd-sysusers")
        .arg(format!("--root={}", users.0.display()))
        .arg(root.0.join("usr/lib/sysusers.d/roce-observer.conf")));
    let passwd = std::fs::read_to_string(users.0.join("etc/passwd")).expect("passwd written");
    let uid: u32 = passwd
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{user}:x:")))
        .and_then(|rest| rest.split(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("systemd-sysusers did not create {user}: {passwd}"));
    assert!(uid < 1000, "{user} is a system user (uid {uid})");
    let caps: Vec<&str> = setting(&unit, "AmbientCapabilities").split(' ').collect();
    assert_eq!(
        setting(&unit, "CapabilityBoundingSet"),
        caps.join(" "),
        "the bounding set is the ambient set"
    );
    let mut wanted_mask = 0u64;
    for cap in &caps {
        let (_, bit) = CAPS
            .iter()
            .find(|(name, _)| name == cap)
            .unwrap_or_else(|| panic!("unexpected capability {cap} in the unit"));
        wanted_mask |= 1 << bit;
    }
    let exec = setting(&unit, "ExecStart");
    assert!(
        exec.starts_with("/usr/bin/roce-observer run --no-tui ")
            && exec.contains("${ROCE_OBSERVER_IFACES}")
            && exec.contains("$ROCE_OBSERVER_ARGS"),
        "ExecStart: {exec}"
    );
    assert_eq!(
        setting(&unit, "EnvironmentFile"),
        "/etc/default/roce-observer"
    );
    let env = std::fs::read_to_string(root.0.join("etc/default/roce-observer")).expect("env file");
    assert_eq!(setting(&env, "ROCE_OBSERVER_IFACES"), "");
    setting(&env, "ROCE_OBSERVER_ARGS");
    // systemd-analyze checks that ExecStart's binary exists: point it at the unpacked one.
    let verify_dir = TempDir::new("unit");
    let installed_bin = root.0.join("usr/bin/roce-observer");
    let verify_unit = verify_dir.0.join("roce-observer.service");
    std::fs::write(
        &verify_unit,
        unit.replace(
            "ExecStart=/usr/bin/roce-observer",
            &format!("ExecStart={}", installed_bin.display()),
        ),
    )
    .expect("unit copy");
    // It also runs `man` for each Documentation=man: page: MANPATH makes it read the
    // unpacked pages.
    let verify = ok(Command::new("systemd-analyze")
        .env("MANPATH", root.0.join("usr/share/man"))
        .arg("verify")
        .arg(&verify_unit));
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(
        !complaints.contains("roce-observer.service"),
        "systemd-analyze verify: {complaints}"
    );

    // Run the installed binary as the unit would, on a veth pair, and replay a capture.
    let id = unused_id();
    let wrapper = setpriv_as_unit(id, &caps);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let (name, pcap, expected) = fixtures()
        .into_iter()
        .find(|f| f.0 == "mixed_demo")
        .expect("mixed_demo fixture");
    let ns = VethNs::new().expect("namespace with a veth pair");
    let ifaces = format!("{},{}", ns.a, ns.b);
    let observer = Observer::start_as(
        &ns,
        &wrapper,
        &installed_bin,
        &["--no-tui", "--color", "never", "--json", "-i", &ifaces],
    )
    .expect("the installed binary attaches as the service user");
    let (cap_eff, uids) = process_identity(observer.pid());
    assert_eq!(cap_eff, wanted_mask, "effective capabilities: {cap_eff:#x}");
    assert!(
        uids.split_whitespace().all(|u| u == id.to_string()),
        "runs as uid {id}: {uids}"
    );
    ns.replay(&pcap).expect("tcpreplay");
    std::thread::sleep(std::time::Duration::from_millis(300));
    // systemd stops a service with SIGTERM.
    let out = observer
        .stop_with(libc::SIGTERM)
        .expect("a clean exit on SIGTERM");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("run --json output parses");
    for (iface, direction) in [(&ns.b, "ingress"), (&ns.a, "egress")] {
        let view = View {
            iface: Some(iface),
            direction,
            exact_rtt: false,
        };
        let diffs = compare(&expected, &doc, &view);
        assert!(diffs.is_empty(), "{name} {direction}: {}", diffs.join("\n"));
    }
    for dev in [&ns.a, &ns.b] {
        let link = ok(ns.exec("ip").args(["-d", "link", "show", "dev", dev])).stdout;
        let link = String::from_utf8_lossy(&link);
        assert!(!link.contains("xdp"), "XDP left on {dev}: {link}");
    }

    // Bad input at service start: one line on stderr (the journal) and a failing exit status.
    let start = |wrapper: &[&str], args: &[&str]| {
        let out = ns
            .exec(wrapper[0])
            .args(&wrapper[1..])
            .arg(&installed_bin)
            .args(["run", "--no-tui", "--duration", "1"])
            .args(args)
            .output()
            .expect("observer runs");
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        (out.status.code(), stderr)
    };
    let (code, stderr) = start(&wrapper, &["-i", "rot-no-such-if"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no interface named `rot-no-such-if`"),
        "{stderr}"
    );
    // As systemd expands an unset ROCE_OBSERVER_IFACES: one empty argument.
    let (code, stderr) = start(&wrapper, &["-i", ""]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("ROCE_OBSERVER_IFACES"), "{stderr}");
    let (code, stderr) = start(&wrapper, &["-i", &ns.a, "--pmtu", "1500"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is not a RoCE path MTU"), "{stderr}");
    // Each of the unit's capabilities is needed: without any one of them the service user
    // cannot load or attach, and says what is missing.
    for missing in &caps {
        let fewer: Vec<&str> = caps.iter().copied().filter(|c| c != missing).collect();
        let wrapper = setpriv_as_unit(id, &fewer);
        let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        let (code, stderr) = start(&wrapper, &["-i", &ns.a]);
        assert_eq!(code, Some(1), "without {missing}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "without {missing}: {stderr}");
        assert!(
            stderr.contains("CAP_BPF + CAP_NET_ADMIN + CAP_PERFMON")
                && stderr.contains(&format!("this process lacks {missing})")),
            "without {missing}: {stderr}"
        );
    }
}
