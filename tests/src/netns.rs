//! Network namespaces and veth pairs for replay tests. Names are unique per process and test
//! (`rot<pid>x<n>`); the namespace is deleted on drop, which also removes its veth pair.
//! Only documentation addresses are ever used inside, and nothing touches the host's own
//! interfaces.

use std::{
    io::{BufRead, BufReader, Read},
    path::Path,
    process::{Child, ChildStdout, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use roce_observer_tools::sh;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A tcpdump started by [`VethNs::tcpdump`].
pub struct Tcpdump {
    child: Child,
    said: std::sync::mpsc::Receiver<String>,
    /// What it said on stderr until it was capturing.
    pub lines: Vec<String>,
}

impl Tcpdump {
    /// Stop it cleanly (SIGINT to the process the test started, by its pid: it flushes what it
    /// captured) and wait for it; then what it said, its counts at exit included.
    pub fn stop(mut self) -> anyhow::Result<Vec<String>> {
        // SAFETY: signalling the tcpdump we started, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait()?;
        anyhow::ensure!(status.success(), "tcpdump: {status}");
        while let Ok(line) = self.said.recv_timeout(Duration::from_secs(5)) {
            self.lines.push(line);
        }
        Ok(self.lines)
    }
}

/// The interfaces [`VethNs::forward_dropping`] adds.
pub struct Forwarding {
    pub a2: String,
    pub b2: String,
    pub s1: String,
    pub s2: String,
}

/// Three hosts in a row, each its own network namespace, made by [`VethNs::chain`]: host 1
/// sends out of `hosts[0].a`, whose peer `hosts[0].b` is in host 2's namespace; host 2 forwards
/// from there out of `hosts[1].a`, whose peer `hosts[1].b` is in host 3's namespace. (Host 3's
/// own pair is unused.) Each namespace, and the links with it, goes when the chain is dropped.
pub struct Chain {
    pub hosts: [VethNs; 3],
    /// Where each host's observer watches the path: host 1's sending end (TC egress), host 2's
    /// and host 3's receiving ends (XDP ingress), each in its host's namespace.
    pub points: [String; 3],
}

/// A network namespace holding one veth pair `a` <-> `b`, both up, MTU 9500, IPv6 off (so no
/// autoconfiguration frames cross the pair: only what a test sends).
pub struct VethNs {
    pub name: String,
    pub a: String,
    pub b: String,
}

impl VethNs {
    pub fn new() -> anyhow::Result<VethNs> {
        VethNs::with_queues(1)
    }

    /// A pair whose ends have `queues` TX and RX queues each. A veth hands TX queue i of one
    /// end to RX queue i of the other, so with [`VethNs::pin_tx_queues`] frames sent from CPU i
    /// are received (XDP included) on CPU i too.
    pub fn with_queues(queues: u32) -> anyhow::Result<VethNs> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("rot{}x{n}", std::process::id());
        sh(Command::new("ip").args(["netns", "add", &name]))?;
        // From here on, Drop removes the namespace whatever fails next.
        let ns = VethNs {
            a: format!("{name}a"),
            b: format!("{name}b"),
            name,
        };
        let q = queues.max(1).to_string();
        let end = |dev: &str| -> Vec<String> {
            [dev, "mtu", "9500", "numtxqueues", &q, "numrxqueues", &q]
                .map(String::from)
                .to_vec()
        };
        let mut args = vec!["link".to_string(), "add".into()];
        args.extend(end(&ns.a));
        args.extend(["type", "veth", "peer", "name"].map(String::from));
        args.extend(end(&ns.b));
        sh(ns.exec("ip").args(&args))?;
        for dev in [&ns.a, &ns.b] {
            sh(ns
                .exec("sysctl")
                .args(["-qw", &format!("net.ipv6.conf.{dev}.disable_ipv6=1")]))?;
            sh(ns.exec("ip").args(["link", "set", dev, "up"]))?;
        }
        Ok(ns)
    }

    /// XPS on `a`: frames sent from CPU i leave by TX queue i (one queue per CPU, for the
    /// first `queues` CPUs). Written inside the namespace, whose /sys shows its own devices.
    pub fn pin_tx_queues(&self, queues: u32) -> anyhow::Result<()> {
        for q in 0..queues {
            let path = format!("/sys/class/net/{}/queues/tx-{q}/xps_cpus", self.a);
            sh(self
                .exec("sh")
                .args(["-c", &format!("echo {:x} > {path}", 1u64 << q)]))?;
        }
        Ok(())
    }

    /// Another veth pair `x` <-> `y` in the namespace, both up, IPv6 off; it goes with the
    /// namespace.
    pub fn add_pair(&self, x: &str, y: &str) -> anyhow::Result<()> {
        sh(self
            .exec("ip")
            .args(["link", "add", x, "type", "veth", "peer", "name", y]))
        .context("veth pair")?;
        for dev in [x, y] {
            sh(self
                .exec("sysctl")
                .args(["-qw", &format!("net.ipv6.conf.{dev}.disable_ipv6=1")]))
            .context("no IPv6 chatter")?;
            sh(self.exec("ip").args(["link", "set", dev, "up"])).context("link up")?;
        }
        Ok(())
    }

    /// Two more pairs (`a`-like ends first): three pairs in all, three observation points
    /// for a test that needs them (a pause loop). Names after the namespace's, as
    /// [`VethNs::forward_dropping`]'s.
    pub fn three_pairs(&self) -> anyhow::Result<[(String, String); 3]> {
        let pair = |x: char, y: char| (format!("{}{x}", self.name), format!("{}{y}", self.name));
        let [two, three] = [pair('g', 'h'), pair('i', 'j')];
        self.add_pair(&two.0, &two.1)?;
        self.add_pair(&three.0, &three.1)?;
        Ok([(self.a.clone(), self.b.clone()), two, three])
    }

    /// Send each frame out of its device (`(at, device, bytes)`, `at` in ns from now) at its
    /// time, from one AF_PACKET socket in the namespace, in order: each waits for its own
    /// deadline (absolute, so a late frame does not delay the rest: tcpreplay's relative
    /// delays drifted by 60% on a busy machine). Returns how many went out more than 1 ms late.
    pub fn send_timed(&self, frames: &[(u64, &str, &[u8])]) -> anyhow::Result<usize> {
        self.send_timed_aligned(frames, None, Duration::from_millis(1))
    }

    /// [`VethNs::send_timed`], with time 0 at a wall-clock (CLOCK_REALTIME) time that is
    /// `phase` ns past a multiple of `period` ns (`align`), e.g. where a capture's first frame
    /// sat in its 10 ms load interval; returns how many went out more than `late_after` late
    /// or in a later period than their due time's.
    pub fn send_timed_aligned(
        &self,
        frames: &[(u64, &str, &[u8])],
        align: Option<(u64, u64)>,
        late_after: Duration,
    ) -> anyhow::Result<usize> {
        self.send_timed_on(frames, align, late_after, &[None])
    }

    /// [`VethNs::send_timed_aligned`] from one thread per entry of `cpus`, each pinned to its
    /// CPU (`None`: not pinned) and sending every frame, all from the same time 0; the late
    /// frames of all of them.
    pub fn send_timed_on(
        &self,
        frames: &[(u64, &str, &[u8])],
        align: Option<(u64, u64)>,
        late_after: Duration,
        cpus: &[Option<usize>],
    ) -> anyhow::Result<usize> {
        use std::os::fd::AsRawFd as _;
        let netns = std::fs::File::open(format!("/run/netns/{}", self.name))?;
        let start = start_time(align)?;
        std::thread::scope(|scope| {
            let senders: Vec<_> = cpus
                .iter()
                .map(|&cpu| {
                    let netns = &netns;
                    scope.spawn(move || -> anyhow::Result<usize> {
                        // SAFETY: setns on a namespace file we opened; it changes only this
                        // thread's network namespace (a scoped thread that ends here).
                        if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                            bail!("setns: {}", std::io::Error::last_os_error());
                        }
                        if let Some(cpu) = cpu {
                            // SAFETY: an all-zero cpu_set_t is a valid, empty set.
                            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                            // SAFETY: adds a CPU to the valid set above.
                            unsafe { libc::CPU_SET(cpu, &mut set) };
                            // SAFETY: pins the calling thread; `set` is valid.
                            let pinned = unsafe {
                                libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
                            };
                            if pinned != 0 {
                                bail!("sched_setaffinity: {}", std::io::Error::last_os_error());
                            }
                        }
                        // Real-time priority for this thread only, so that other work on a
                        // busy machine does not delay the frames (each waits for its deadline
                        // by sleeping, then spinning the last 100 us). Best effort.
                        let param = libc::sched_param { sched_priority: 50 };
                        // SAFETY: sets the calling thread's policy; `param` is valid.
                        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
                        send_from_here(frames, start, align, late_after)
                    })
                })
                .collect();
            let mut late = 0;
            for s in senders {
                late += s
                    .join()
                    .map_err(|_| anyhow::anyhow!("sender thread panicked"))??;
            }
            Ok(late)
        })
    }

    /// A forwarding path inside the namespace, for loss between two observation points:
    /// everything arriving on `b` is redirected by a tc ingress action out of a second pair's
    /// `a2` (to `b2`), except the RoCE requests with a PSN in `dropped` (tc u32 on the BTH PSN
    /// of an untagged IPv4 frame), which go to a sink pair (`s1` -> `s2`) nothing captures.
    /// The new interfaces are in the namespace and go with it.
    pub fn forward_dropping(&self, dropped: &[u32]) -> anyhow::Result<Forwarding> {
        let f = Forwarding {
            a2: format!("{}c", self.name),
            b2: format!("{}d", self.name),
            s1: format!("{}e", self.name),
            s2: format!("{}f", self.name),
        };
        self.add_pair(&f.a2, &f.b2)?;
        self.add_pair(&f.s1, &f.s2)?;
        self.forward_dropping_on(&self.b, dropped, &f.s1, &f.a2)?;
        Ok(f)
    }

    /// Three hosts along one forwarding path, each in its own network namespace (see
    /// [`Chain`]): host 2 forwards what host 1 sends to host 3, as a switch would, and drops
    /// the RoCE requests with a PSN in `dropped` on the way (tc u32 on the BTH PSN of an
    /// untagged IPv4 frame, redirected into a sink pair nothing watches: kernels without the
    /// gact module refuse `action drop`).
    pub fn chain(dropped: &[u32]) -> anyhow::Result<Chain> {
        let hosts = [VethNs::new()?, VethNs::new()?, VethNs::new()?];
        // Host i's pair leads to host i+1: its `b` end moves into the next namespace.
        for i in 0..2 {
            let (here, next) = (&hosts[i], &hosts[i + 1]);
            sh(here
                .exec("ip")
                .args(["link", "set", &here.b, "netns", &next.name]))
            .context("veth end into the next host")?;
            // A moved device takes the new namespace's defaults again.
            sh(next
                .exec("sysctl")
                .args(["-qw", &format!("net.ipv6.conf.{}.disable_ipv6=1", here.b)]))
            .context("no IPv6 chatter")?;
            sh(next.exec("ip").args(["link", "set", &here.b, "up"])).context("link up")?;
        }
        let (host2, inp, out) = (&hosts[1], &hosts[0].b, &hosts[1].a);
        let (sink, sink_peer) = (format!("{}e", host2.name), format!("{}f", host2.name));
        sh(host2.exec("ip").args([
            "link", "add", &sink, "type", "veth", "peer", "name", &sink_peer,
        ]))
        .context("sink pair")?;
        sh(host2.exec("ip").args(["link", "set", &sink, "up"])).context("sink up")?;
        host2.forward_dropping_on(inp, dropped, &sink, out)?;
        let points = [hosts[0].a.clone(), hosts[0].b.clone(), hosts[1].b.clone()];
        Ok(Chain { hosts, points })
    }

    /// tc on `inp`'s ingress: every frame is redirected out of `out`, except the RoCE requests
    /// with a PSN in `dropped`, which go out of `sink` (a device nothing watches).
    fn forward_dropping_on(
        &self,
        inp: &str,
        dropped: &[u32],
        sink: &str,
        out: &str,
    ) -> anyhow::Result<()> {
        sh(self
            .exec("tc")
            .args(["qdisc", "add", "dev", inp, "ingress"]))
        .context("ingress qdisc")?;
        let redirect =
            |prio: &str, protocol: &str, value: &str, mask: &str, at: &str, dev: &str| {
                sh(self.exec("tc").args([
                    "filter", "add", "dev", inp, "parent", "ffff:", "prio", prio, "protocol",
                    protocol, "u32", "match", "u32", value, mask, "at", at, "action", "mirred",
                    "egress", "redirect", "dev", dev,
                ]))
            };
        for psn in dropped {
            // The u32 at byte 36 of the IP packet (20-byte IPv4 header, 8-byte UDP header,
            // then the BTH's third word: the AckReq bit and reserved bits, then the 24-bit
            // PSN, masked).
            redirect("1", "ip", &format!("0x{psn:08x}"), "0x00ffffff", "36", sink)
                .context("drop filter")?;
        }
        redirect("2", "all", "0", "0", "0", out).context("forward filter")?;
        Ok(())
    }

    /// A pcap file of one RC WRITE stream (192.0.2.1 -> 192.0.2.2, QP 0x12, 256-byte payloads)
    /// with the PSNs `psns`, for [`VethNs::forward_dropping`]'s path: a temporary directory
    /// named after `test` and this process, and the file in it.
    pub fn psn_stream(
        &self,
        test: &str,
        psns: impl IntoIterator<Item = u32>,
    ) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf)> {
        let dir = std::env::temp_dir().join(format!("roce-observer-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let sent = dir.join("sent.pcap");
        roce_observer_tools::write_pcap(
            &sent,
            psns.into_iter().map(|psn| {
                roce_observer_common::frames::RoceFrame {
                    tos: (26 << 2) | 2,
                    payload: 256,
                    ..roce_observer_common::frames::RoceFrame::new(0x0a, 0x12, psn)
                }
                .build()
            }),
        )?;
        Ok((dir, sent))
    }

    /// The kernel's interface index of `dev` in the namespace.
    pub fn ifindex(&self, dev: &str) -> anyhow::Result<u32> {
        let out = self
            .exec("cat")
            .arg(format!("/sys/class/net/{dev}/ifindex"))
            .output()?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .with_context(|| format!("no ifindex for {dev}"))
    }

    /// `tcpdump ARGS -w out` in the namespace, once it says it is capturing ("listening on",
    /// within 20 s); what it said on stderr is kept (the reader thread ends when tcpdump does).
    pub fn tcpdump(&self, args: &[&str], out: &Path) -> anyhow::Result<Tcpdump> {
        let mut child = self
            .exec("tcpdump")
            .args(args)
            .arg("-w")
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("tcpdump starts (install tcpdump)")?;
        let stderr = child.stderr.take().context("tcpdump's stderr")?;
        let (tx, said) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut t = Tcpdump {
            child,
            said,
            lines: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(line) = t.said.recv_timeout(Duration::from_millis(100)) {
                let listening = line.contains("listening on");
                t.lines.push(line);
                if listening {
                    return Ok(t);
                }
            }
            if Instant::now() > deadline {
                let _ = t.child.kill();
                let _ = t.child.wait();
                bail!("tcpdump did not start capturing: {:?}", t.lines);
            }
        }
    }

    /// A command run inside the namespace.
    pub fn exec(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Send every frame of `pcap` out of `a` (tcpreplay, as fast as possible).
    pub fn replay(&self, pcap: &Path) -> anyhow::Result<()> {
        sh(self
            .exec("tcpreplay")
            .args(["-q", "--topspeed", "-i", &self.a])
            .arg(pcap))
    }
}

/// [`VethNs::send_timed`]'s sending, in the calling thread's namespace.
/// Time 0 of a timed send: 20 ms from now, then on to the wall-clock phase of `align`.
fn start_time(align: Option<(u64, u64)>) -> anyhow::Result<Instant> {
    let mut start = Instant::now() + Duration::from_millis(20);
    if let Some((period, phase)) = align {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64
            + 20_000_000;
        start += Duration::from_nanos((phase % period + period - wall % period) % period);
    }
    Ok(start)
}

fn send_from_here(
    frames: &[(u64, &str, &[u8])],
    start: Instant,
    align: Option<(u64, u64)>,
    late_after: Duration,
) -> anyhow::Result<usize> {
    // SAFETY: plain syscalls with valid arguments; the socket is closed below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    anyhow::ensure!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    let mut addrs: std::collections::HashMap<&str, libc::sockaddr_ll> = Default::default();
    let mut late = 0;
    let mut result = Ok(());
    for &(at, dev, frame) in frames {
        let addr = match addrs.entry(dev) {
            std::collections::hash_map::Entry::Occupied(e) => *e.get(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let name = std::ffi::CString::new(dev)?;
                // SAFETY: a NUL-terminated name.
                let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
                // SAFETY: an all-zero sockaddr_ll is valid; the fields we need are set.
                let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                addr.sll_family = libc::AF_PACKET as u16;
                addr.sll_ifindex = ifindex as i32;
                addr.sll_halen = 6;
                *e.insert(addr)
            }
        };
        let due = start + Duration::from_nanos(at);
        // Sleep to just before the deadline, then spin.
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            if wait > Duration::from_micros(200) {
                std::thread::sleep(wait - Duration::from_micros(100));
            }
            while Instant::now() < due {
                std::hint::spin_loop();
            }
        } else {
            let now = Instant::now();
            // Aligned: also late when it left the period its due time is in.
            let crossed = align.is_some_and(|(period, phase)| {
                let sent = (now - start).as_nanos() as u64;
                (phase % period + at) / period != (phase % period + sent) / period
            });
            if now - due > late_after || crossed {
                late += 1;
            }
        }
        // SAFETY: `frame` and `addr` are valid for the lengths given.
        let sent = unsafe {
            libc::sendto(
                fd,
                frame.as_ptr().cast(),
                frame.len(),
                0,
                std::ptr::from_ref(&addr).cast(),
                size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if sent < 0 {
            result = Err(anyhow::anyhow!(
                "sendto: {}",
                std::io::Error::last_os_error()
            ));
            break;
        }
    }
    // SAFETY: closing the socket opened above.
    unsafe { libc::close(fd) };
    result.map(|()| late)
}

impl Drop for VethNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A running `roce-observer run` inside a namespace. Killed on drop if not stopped.
pub struct Observer {
    child: Child,
    stdout: Option<ChildStdout>,
    stderr_log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Observer {
    /// Start the observer and wait until it says it is attached.
    pub fn start(ns: &VethNs, args: &[&str]) -> anyhow::Result<Observer> {
        Observer::start_as(ns, &[], &crate::observer_bin(), args)
    }

    /// Start the observer on both ends of the pair, reporting every 0.2 s and printing the
    /// JSON document at the end, with `extra` arguments; wait until it is attached.
    pub fn on_both_ends(ns: &VethNs, extra: &[&str]) -> anyhow::Result<Observer> {
        let ifaces = format!("{},{}", ns.a, ns.b);
        let mut args = vec!["-i", ifaces.as_str(), "--json", "--interval", "0.2"];
        args.extend_from_slice(extra);
        Observer::start(ns, &args)
    }

    /// Start `bin run ARGS` behind `wrapper` (a command that runs the rest of its arguments,
    /// e.g. setpriv dropping to a service user), and wait until it says it is attached.
    pub fn start_as(
        ns: &VethNs,
        wrapper: &[&str],
        bin: &Path,
        args: &[&str],
    ) -> anyhow::Result<Observer> {
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut cmd = ns.exec(program);
                cmd.args(rest).arg(bin);
                cmd
            }
            None => ns.exec(bin),
        };
        let mut child = cmd
            .arg("run")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting roce-observer")?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take().context("stderr")?;
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("attached") {
                    let _ = tx.send(());
                }
                if let Ok(mut l) = log2.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let mut obs = Observer {
            child,
            stdout,
            stderr_log: log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if rx.recv_timeout(Duration::from_millis(100)).is_ok() {
                return Ok(obs);
            }
            if let Some(status) = obs.child.try_wait()? {
                bail!(
                    "roce-observer exited ({status}) before attaching:\n{}",
                    obs.log()
                );
            }
            if Instant::now() > deadline {
                bail!("roce-observer did not attach within 30 s:\n{}", obs.log());
            }
        }
    }

    /// Process id (for signalling it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for the process to end (after a signal sent by the test).
    pub fn wait(mut self) -> anyhow::Result<std::process::ExitStatus> {
        Ok(self.child.wait()?)
    }

    /// Wait up to `limit` for the observer to end by itself (e.g. a tripped `--fail-on`): its
    /// exit status, stdout and stderr. Stdout is drained meanwhile, so a large report cannot
    /// block it.
    pub fn wait_output(
        mut self,
        limit: Duration,
    ) -> anyhow::Result<(std::process::ExitStatus, String, String)> {
        let mut stdout = self.stdout.take().context("stdout")?;
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            stdout.read_to_string(&mut out).map(|_| out)
        });
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                // Drop kills it (the reader then sees the pipe close).
                bail!(
                    "roce-observer did not end by itself within {limit:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = reader
            .join()
            .map_err(|_| anyhow::anyhow!("stdout reader panicked"))??;
        // The stderr reader ends with the pipe; give it a moment to store the last lines.
        std::thread::sleep(Duration::from_millis(100));
        Ok((status, out, self.log()))
    }

    pub fn log(&self) -> String {
        self.stderr_log
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    /// Stop with SIGINT (a clean exit that prints the final document) and return stdout.
    pub fn stop(self) -> anyhow::Result<String> {
        self.stop_with(libc::SIGINT)
    }

    /// Stop with `signal` (SIGINT or SIGTERM: both end the run cleanly) and return stdout.
    pub fn stop_with(mut self, signal: libc::c_int) -> anyhow::Result<String> {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let mut out = String::new();
        if let Some(mut s) = self.stdout.take() {
            s.read_to_string(&mut out)?;
        }
        let status = self.child.wait()?;
        if !status.success() {
            bail!("roce-observer exited with {status}:\n{}", self.log());
        }
        Ok(out)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
