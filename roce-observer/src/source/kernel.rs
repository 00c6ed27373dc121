//! The live source: loads the XDP and TC programs, attaches them to interfaces through links the
//! kernel removes when this process dies, and reads their maps and ring buffer.
//!
//! Never replaces or detaches anything it did not attach: XDP attaches with bpf_link (or, on
//! kernels without XDP links, netlink with "update if no existing program"), TC through TCX
//! links (kernel >= 6.6) or a new netlink filter next to existing ones.

use std::{
    collections::BTreeMap,
    os::fd::{AsRawFd, RawFd},
    path::Path,
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    programs::{
        ProgramError, SchedClassifier, TcAttachType, Xdp, XdpMode,
        tc::{self, SchedClassifierLinkId},
        xdp::XdpLinkId,
    },
    util::KernelVersion,
};
use roce_observer_common::{
    Counter, Event, FlowKey, FlowStats, PfcKey, PfcStats, counters::COUNTER_SLOTS,
};
use thiserror::Error;

/// The compiled kernel programs (built by build.rs).
#[cfg(not(ebpf_skipped))]
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/roce-observer"));
#[cfg(ebpf_skipped)]
static EBPF_OBJECT: &[u8] = &[];

const XDP_PROGRAM: &str = "roce_observer_xdp";
const TC_PROGRAM: &str = "roce_observer_tc";
const BASELINE_PROGRAM: &str = "roce_observer_baseline";

/// Programs `KernelSource::bench` can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchProgram {
    Xdp,
    Tc,
    /// An XDP program that only returns XDP_PASS.
    Baseline,
}

#[derive(Debug, Error)]
pub enum KernelError {
    #[error(
        "this binary was built without the kernel programs (AYA_BUILD_SKIP); rebuild with \
         `cargo xtask setup && cargo build --release`, or use `roce-observer analyze` on a capture"
    )]
    NotBuilt,
    #[error(
        "loading BPF programs needs root, or CAP_BPF + CAP_NET_ADMIN (+ CAP_PERFMON): run with \
         sudo; on a host where that is impossible, capture instead \
         (`tcpdump -i IFACE -w - udp port 4791 | roce-observer analyze -`)"
    )]
    NotPrivileged,
    #[error(
        "this kernel ({release}) lacks {what}; roce-observer needs Linux >= 5.8 with BPF ring \
         buffers and BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF=y); use \
         `roce-observer analyze` on a capture instead"
    )]
    KernelTooOld { release: String, what: &'static str },
    #[error("no interface named `{0}` (list them with `ip link`)")]
    NoSuchInterface(String),
    #[error(
        "another XDP program is already attached to `{iface}` (see `ip link show dev {iface}`); \
         roce-observer never replaces it: detach it yourself, watch another interface, or \
         use a capture (`tcpdump -i {iface} -w - | roce-observer analyze -`)"
    )]
    XdpBusy { iface: String },
    #[error("attaching {what} to `{iface}` failed: {source}")]
    Attach {
        what: &'static str,
        iface: String,
        #[source]
        source: ProgramError,
    },
    #[error("loading the BPF programs failed: {0}")]
    Load(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("reading BPF map {map} failed: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
}

/// Settings fixed at load time.
#[derive(Clone, Debug)]
pub struct KernelOptions {
    pub roce_port: u16,
    pub pmtu: u32,
    pub max_flows: u32,
    pub xdp_mode: XdpMode,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            roce_port: roce_observer_common::ROCE_V2_PORT,
            pmtu: roce_observer_common::DEFAULT_PMTU,
            max_flows: 16384,
            xdp_mode: XdpMode::Default,
        }
    }
}

/// One interface we attached to.
#[derive(Debug)]
pub struct Attachment {
    pub iface: String,
    pub ifindex: u32,
    xdp: Option<XdpLinkId>,
    tc: Option<SchedClassifierLinkId>,
    /// We added the clsact qdisc (netlink TC path): delete it when detaching.
    created_clsact: bool,
}

pub struct KernelSource {
    ebpf: Ebpf,
    events: RingBuf<MapData>,
    attachments: Vec<Attachment>,
    /// Added to kernel monotonic timestamps to get ns since the Unix epoch.
    epoch_offset_ns: u64,
}

fn is_eperm(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(io.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
        {
            return true;
        }
        let text = e.to_string();
        if text.contains("Operation not permitted") || text.contains("Permission denied") {
            return true;
        }
        cur = e.source();
    }
    false
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl KernelSource {
    /// Load (but do not attach) the programs.
    pub fn load(opts: &KernelOptions) -> Result<KernelSource, KernelError> {
        if EBPF_OBJECT.is_empty() {
            return Err(KernelError::NotBuilt);
        }
        if !Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err(KernelError::KernelTooOld {
                release: kernel_release(),
                what: "BTF",
            });
        }
        // Memory-locked limits only matter on kernels before 5.11 (memcg accounting since).
        let rlim = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: plain syscall with a valid pointer; failure is harmless on modern kernels.
        let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };

        let mut ebpf = EbpfLoader::new()
            .override_global("ROCE_PORT", &opts.roce_port, true)
            .override_global("PMTU", &opts.pmtu, true)
            .map_max_entries("FLOWS", opts.max_flows)
            .load(EBPF_OBJECT)
            .map_err(|e| {
                if is_eperm(&e) {
                    KernelError::NotPrivileged
                } else {
                    KernelError::Load(Box::new(e))
                }
            })?;
        for name in [XDP_PROGRAM, TC_PROGRAM] {
            let result = match name {
                XDP_PROGRAM => program_mut::<Xdp>(&mut ebpf, name)?.load(),
                _ => program_mut::<SchedClassifier>(&mut ebpf, name)?.load(),
            };
            result.map_err(|e| {
                if is_eperm(&e) {
                    KernelError::NotPrivileged
                } else {
                    KernelError::Load(Box::new(e))
                }
            })?;
        }
        let events = ebpf
            .take_map("EVENTS")
            .ok_or_else(|| KernelError::Load("the object has no EVENTS ring buffer".into()))?;
        let events = RingBuf::try_from(events).map_err(|source| {
            if source.to_string().contains("type") {
                KernelError::KernelTooOld {
                    release: kernel_release(),
                    what: "BPF ring buffers",
                }
            } else {
                KernelError::Map {
                    map: "EVENTS",
                    source,
                }
            }
        })?;
        let epoch_offset_ns =
            clock_ns(libc::CLOCK_REALTIME).saturating_sub(clock_ns(libc::CLOCK_MONOTONIC));
        Ok(KernelSource {
            ebpf,
            events,
            attachments: Vec::new(),
            epoch_offset_ns,
        })
    }

    /// Attach XDP (ingress) and TC egress to `iface`.
    pub fn attach(&mut self, iface: &str, xdp_mode: XdpMode) -> Result<&Attachment, KernelError> {
        let ifindex = ifindex(iface).ok_or_else(|| KernelError::NoSuchInterface(iface.into()))?;
        let mut attachment = Attachment {
            iface: iface.to_string(),
            ifindex,
            xdp: None,
            tc: None,
            created_clsact: false,
        };
        let xdp = program_mut::<Xdp>(&mut self.ebpf, XDP_PROGRAM)?;
        let mut result = xdp.attach(iface, xdp_mode);
        // `auto`: a driver may refuse native XDP for its configuration (virtio_net with a
        // jumbo MTU, say); generic XDP sees the same frames, only slower.
        if matches!(xdp_mode, XdpMode::Default)
            && let Err(err) = &result
            && !is_busy(err)
        {
            eprintln!(
                "roce-observer: native XDP on `{iface}` refused ({err}); using generic (skb) XDP"
            );
            result = xdp.attach(iface, XdpMode::Skb);
        }
        attachment.xdp = Some(result.map_err(|source| {
            if is_busy(&source) {
                KernelError::XdpBusy {
                    iface: iface.into(),
                }
            } else {
                KernelError::Attach {
                    what: "XDP",
                    iface: iface.into(),
                    source,
                }
            }
        })?);
        // Kernels with TCX (>= 6.6) attach TC programs as links: nothing else to create. Older
        // ones need a clsact qdisc for the netlink filter; one we create is removed on detach.
        let tcx = KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0));
        if !tcx && tc::qdisc_add_clsact(iface).is_ok() {
            attachment.created_clsact = true;
        }
        let tc_prog = program_mut::<SchedClassifier>(&mut self.ebpf, TC_PROGRAM)?;
        match tc_prog.attach(iface, TcAttachType::Egress) {
            Ok(id) => attachment.tc = Some(id),
            Err(source) => {
                // Undo the XDP half so nothing of ours stays behind.
                if let Some(id) = attachment.xdp.take()
                    && let Ok(xdp) = program_mut::<Xdp>(&mut self.ebpf, XDP_PROGRAM)
                {
                    let _ = xdp.detach(id);
                }
                if attachment.created_clsact {
                    remove_clsact(iface);
                }
                return Err(KernelError::Attach {
                    what: "TC egress",
                    iface: iface.into(),
                    source,
                });
            }
        }
        self.attachments.push(attachment);
        Ok(self.attachments.last().expect("just pushed"))
    }

    pub fn attachments(&self) -> &[Attachment] {
        &self.attachments
    }

    /// Detach everything we attached (also done on drop).
    pub fn detach_all(&mut self) {
        for mut a in self.attachments.drain(..) {
            if let Some(id) = a.xdp.take()
                && let Ok(xdp) = program_mut::<Xdp>(&mut self.ebpf, XDP_PROGRAM)
            {
                let _ = xdp.detach(id);
            }
            if let Some(id) = a.tc.take()
                && let Ok(tc_prog) = program_mut::<SchedClassifier>(&mut self.ebpf, TC_PROGRAM)
            {
                let _ = tc_prog.detach(id);
            }
            if a.created_clsact {
                remove_clsact(&a.iface);
            }
        }
    }

    /// Kernel monotonic ns -> ns since the Unix epoch.
    pub fn to_epoch_ns(&self, monotonic_ns: u64) -> u64 {
        monotonic_ns.saturating_add(self.epoch_offset_ns)
    }

    pub fn read_flows(&self) -> Result<Vec<(FlowKey, FlowStats)>, KernelError> {
        let map = self.ebpf.map("FLOWS").ok_or(KernelError::Map {
            map: "FLOWS",
            source: aya::maps::MapError::InvalidName {
                name: "FLOWS".into(),
            },
        })?;
        let flows =
            HashMap::<_, FlowKey, FlowStats>::try_from(map).map_err(|source| KernelError::Map {
                map: "FLOWS",
                source,
            })?;
        let mut out = Vec::new();
        // An entry deleted between key iteration and lookup is skipped (flatten).
        for (k, mut v) in flows.iter().flatten() {
            v.first_ns = self.to_epoch_ns(v.first_ns);
            v.last_ns = self.to_epoch_ns(v.last_ns);
            out.push((k, v));
        }
        Ok(out)
    }

    pub fn read_pfc(&self) -> Result<Vec<(PfcKey, PfcStats)>, KernelError> {
        let map = self.ebpf.map("PFC").ok_or(KernelError::Map {
            map: "PFC",
            source: aya::maps::MapError::InvalidName { name: "PFC".into() },
        })?;
        let pfc = HashMap::<_, PfcKey, PfcStats>::try_from(map)
            .map_err(|source| KernelError::Map { map: "PFC", source })?;
        let mut out = Vec::new();
        for (k, mut v) in pfc.iter().flatten() {
            v.first_ns = self.to_epoch_ns(v.first_ns);
            v.last_ns = self.to_epoch_ns(v.last_ns);
            out.push((k, v));
        }
        Ok(out)
    }

    /// Counters summed over CPUs: `[direction][counter]`.
    pub fn read_counters(&self) -> Result<[[u64; Counter::COUNT as usize]; 2], KernelError> {
        let map = self.ebpf.map("COUNTERS").ok_or(KernelError::Map {
            map: "COUNTERS",
            source: aya::maps::MapError::InvalidName {
                name: "COUNTERS".into(),
            },
        })?;
        let arr = PerCpuArray::<_, u64>::try_from(map).map_err(|source| KernelError::Map {
            map: "COUNTERS",
            source,
        })?;
        let mut out = [[0u64; Counter::COUNT as usize]; 2];
        for slot in 0..COUNTER_SLOTS {
            let values = arr.get(&slot, 0).map_err(|source| KernelError::Map {
                map: "COUNTERS",
                source,
            })?;
            let sum: u64 = values.iter().sum();
            out[(slot / Counter::COUNT) as usize][(slot % Counter::COUNT) as usize] = sum;
        }
        Ok(out)
    }

    /// Hand every queued event to `f` (timestamps converted to epoch ns); returns how many.
    pub fn drain_events(&mut self, mut f: impl FnMut(&Event)) -> usize {
        let mut n = 0;
        while let Some(item) = self.events.next() {
            if let Some(mut ev) = Event::from_bytes(&item) {
                ev.ts_ns = ev.ts_ns.saturating_add(self.epoch_offset_ns);
                f(&ev);
                n += 1;
            }
        }
        n
    }

    /// File descriptor of the ring buffer, for readiness polling.
    pub fn events_fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }

    /// Run the XDP program once on `frame` (BPF_PROG_TEST_RUN): the maps update as for a real
    /// packet. Returns the XDP verdict.
    pub fn test_run_xdp(&self, frame: &[u8]) -> Result<u32, KernelError> {
        self.test_run(XDP_PROGRAM, frame)
    }

    /// Run the TC program once on `frame`. Returns the TC verdict.
    pub fn test_run_tc(&self, frame: &[u8]) -> Result<u32, KernelError> {
        self.test_run(TC_PROGRAM, frame)
    }

    /// Average kernel time per run of `program` on `frame`, over `repeat` runs
    /// (BPF_PROG_TEST_RUN's own timing). Maps update as for real packets.
    pub fn bench(
        &mut self,
        program: BenchProgram,
        frame: &[u8],
        repeat: u32,
    ) -> Result<std::time::Duration, KernelError> {
        use aya::programs::{TestRun, TestRunOptions};
        let name = match program {
            BenchProgram::Xdp => XDP_PROGRAM,
            BenchProgram::Tc => TC_PROGRAM,
            BenchProgram::Baseline => BASELINE_PROGRAM,
        };
        if program == BenchProgram::Baseline {
            let prog = program_mut::<Xdp>(&mut self.ebpf, BASELINE_PROGRAM)?;
            if prog.fd().is_err() {
                prog.load().map_err(|e| KernelError::Load(Box::new(e)))?;
            }
        }
        let opts = TestRunOptions {
            data_in: Some(frame),
            repeat,
            ..TestRunOptions::new()
        };
        let prog = self
            .ebpf
            .program(name)
            .ok_or_else(|| KernelError::Load(format!("no program {name}").into()))?;
        let result = match prog {
            aya::programs::Program::Xdp(p) => p.test_run(opts),
            aya::programs::Program::SchedClassifier(p) => p.test_run(opts),
            _ => return Err(KernelError::Load(format!("{name}: unexpected type").into())),
        };
        result
            .map(|r| r.duration)
            .map_err(|e| KernelError::Load(Box::new(e)))
    }

    fn test_run(&self, name: &'static str, frame: &[u8]) -> Result<u32, KernelError> {
        use aya::programs::{TestRun, TestRunOptions};
        let prog = self
            .ebpf
            .program(name)
            .ok_or_else(|| KernelError::Load(format!("no program {name}").into()))?;
        let opts = TestRunOptions {
            data_in: Some(frame),
            ..TestRunOptions::new()
        };
        let result = match prog {
            aya::programs::Program::Xdp(p) => p.test_run(opts),
            aya::programs::Program::SchedClassifier(p) => p.test_run(opts),
            _ => return Err(KernelError::Load(format!("{name}: unexpected type").into())),
        };
        result
            .map(|r| r.return_value)
            .map_err(|e| KernelError::Load(Box::new(e)))
    }

    /// Interface index -> name of what we attached to.
    pub fn iface_names(&self) -> BTreeMap<u32, String> {
        self.attachments
            .iter()
            .map(|a| (a.ifindex, a.iface.clone()))
            .collect()
    }
}

impl Drop for KernelSource {
    fn drop(&mut self) {
        self.detach_all();
    }
}

fn program_mut<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T, KernelError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    let prog = ebpf
        .program_mut(name)
        .ok_or_else(|| KernelError::Load(format!("the object has no program {name}").into()))?;
    prog.try_into()
        .map_err(|e: ProgramError| KernelError::Load(Box::new(e)))
}

fn is_busy(err: &ProgramError) -> bool {
    let text = format!("{err:?}");
    text.contains("EBUSY")
        || text.contains("EEXIST")
        || text.contains("Device or resource busy")
        || text.contains("File exists")
}

/// Delete the clsact qdisc we added (aya has no call for it; iproute2's `tc` does it).
fn remove_clsact(iface: &str) {
    let removed = std::process::Command::new("tc")
        .args(["qdisc", "del", "dev", iface, "clsact"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !removed {
        eprintln!(
            "roce-observer: could not remove the clsact qdisc it added on `{iface}`; \
             remove it with `tc qdisc del dev {iface} clsact`"
        );
    }
}

pub fn ifindex(iface: &str) -> Option<u32> {
    let name = std::ffi::CString::new(iface).ok()?;
    // SAFETY: `name` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (idx != 0).then_some(idx)
}
