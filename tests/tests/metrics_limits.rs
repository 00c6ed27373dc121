//! `run --metrics` when a local user holds more idle connections than the observer has file
//! descriptors: scrapes are still answered and the accept loop backs off instead of spinning
//! on EMFILE. The observer runs `run --capture -` (no privileges) under a small
//! RLIMIT_NOFILE, on loopback.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpStream,
    os::unix::process::CommandExt as _,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use integration_tests::{fixtures_dir, observer_bin};

/// Descriptors the observer gets: a few dozen above what it opens itself, far below the
/// connections held.
const NOFILE: libc::rlim_t = 48;
const HELD: usize = 150;

fn scrape(addr: &str) -> std::io::Result<String> {
    let mut conn = TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(conn, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    conn.read_to_string(&mut out)?;
    Ok(out)
}

/// User plus system CPU time of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which is in parentheses): utime is the 14th field.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

#[test]
fn idle_connections_beyond_the_descriptor_limit_neither_block_scrapes_nor_spin() {
    let mut cmd = Command::new(observer_bin());
    cmd.args(["run", "--capture", "-", "--no-tui", "--json"])
        .args(["--metrics", "127.0.0.1:0", "--interval", "0.2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: NOFILE,
                rlim_max: NOFILE,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("roce-observer starts");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(&std::fs::read(fixtures_dir().join("psn_gap.pcap")).expect("fixture"))
        .expect("capture written");
    stdin.flush().expect("flush");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).expect("stderr") > 0,
            "no metrics address"
        );
        if let Some(rest) = line
            .trim()
            .strip_prefix("roce-observer: metrics at http://")
        {
            break rest.trim_end_matches("/metrics").to_string();
        }
    };
    // A snapshot to serve.
    std::thread::sleep(Duration::from_millis(500));
    let held: Vec<TcpStream> = (0..HELD)
        .map(|_| TcpStream::connect(&addr).expect("connect (the backlog takes them)"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(child.id());
    let t = Instant::now();
    for _ in 0..5 {
        let got = scrape(&addr).expect("scrape answered");
        assert!(got.starts_with("HTTP/1.0 200"), "{got}");
    }
    std::thread::sleep(Duration::from_secs(2).saturating_sub(t.elapsed()));
    let spent = cpu_ticks(child.id()) - before;
    let elapsed = t.elapsed();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let share = spent as f64 / hz / elapsed.as_secs_f64();
    assert!(
        share < 0.3,
        "the observer used {:.0}% of a core while connections were held",
        share * 100.0
    );
    drop(held);
    drop(stdin);
    let status = child.wait().expect("roce-observer ends");
    assert!(status.success(), "{status:?}");
    eprintln!(
        "{HELD} idle connections under {NOFILE} descriptors: 5 scrapes answered, {:.1}% of a core",
        share * 100.0
    );
}
