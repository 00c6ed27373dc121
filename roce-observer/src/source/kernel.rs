//! The live source: loads the XDP and TC programs ([`KernelSource::load`]), attaches them to
//! interfaces ([`attach`]), reads their maps and ring buffer ([`maps`]), and runs them on single
//! frames for tests and benchmarks ([`test_run`]).
//!
//! Library code prints nothing: what the user should know (a fallback taken, something that
//! could not be cleaned up) is returned as warnings for the binary to print.

pub mod attach;
mod batch;
mod changes;
pub mod cost;
pub mod error;
pub mod kernel_log;
pub mod maps;
pub mod probe;
pub mod test_run;

use std::os::fd::{AsRawFd, RawFd};

use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, MapError, RingBuf},
    programs::{ProgramError, SchedClassifier, Xdp, XdpMode},
};

use roce_observer_common::{Counter, Direction, observe::Stage};

pub use attach::{Attachment, ifindex};
pub use changes::FlowRead;
pub use error::KernelError;
pub use probe::Features;
pub use test_run::{BaselineLink, BenchProgram};

use error::{load_error, program_load_error};
use probe::kernel_release;

use crate::{
    engine::Engine,
    report::KernelCost,
    source::{LiveSource, SourceState},
};

/// The compiled kernel programs (built by build.rs).
#[cfg(not(ebpf_skipped))]
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/roce-observer"));
#[cfg(ebpf_skipped)]
static EBPF_OBJECT: &[u8] = &[];

/// The XDP program for kernels with XDP frags (5.18+), and the one for older kernels.
const XDP_PROGRAM: &str = "roce_observer_xdp";
const XDP_PAGE_PROGRAM: &str = "roce_observer_xdp_page";
const TC_PROGRAM: &str = "roce_observer_tc";
/// Their scoreboard programs (roce-observer-ebpf main.rs): loaded with them, reached by tail
/// calls through `SCOREBOARD_PROGRAMS`, never attached.
const XDP_SEQ_PROGRAM: &str = "roce_observer_xdp_seq";
const XDP_PAGE_SEQ_PROGRAM: &str = "roce_observer_xdp_page_seq";
const TC_SEQ_PROGRAM: &str = "roce_observer_tc_seq";
/// Copies the flows a report tick reads (roce-observer-ebpf gather.rs): run with
/// BPF_PROG_TEST_RUN, never attached.
const GATHER_PROGRAM: &str = "roce_observer_gather";
const BASELINE_PROGRAM: &str = "roce_observer_baseline";
const FLOOR_HASH_PROGRAM: &str = "roce_observer_floor_hash";
const FLOOR_ARRAY_PROGRAM: &str = "roce_observer_floor_array";
const TC_BASELINE_PROGRAM: &str = "roce_observer_baseline_tc";
const TC_FLOOR_HASH_PROGRAM: &str = "roce_observer_floor_hash_tc";

/// Settings fixed at load time.
#[derive(Clone, Debug)]
pub struct KernelOptions {
    pub roce_port: u16,
    /// UDP destination port of VXLAN mirrors to unwrap.
    pub vxlan_port: u16,
    pub pmtu: u32,
    /// Reorder window in PSNs (sequence.rs).
    pub reorder_window: u32,
    pub max_flows: u32,
    pub xdp_mode: XdpMode,
    /// Burst rule of the retransmission and NAK alerts (the engine's `burst_count`,
    /// `burst_window_ns`).
    pub burst_count: u32,
    pub burst_window_ns: u64,
    /// Latency samples above this count toward the `high_latency` alert (the engine's
    /// `rtt_alert_ns`; None: no alert).
    pub rtt_alert_ns: Option<u64>,
    /// Benchmarks only (`kernel-bench`): how much of a RoCE packet's work the programs do
    /// (`Stage::All` for the product). A frozen global: the verifier drops the early exits.
    pub stage: Stage,
    /// Kernel-side diagnostics through aya-log (`run --kernel-log`; kernel_log.rs). Off, the
    /// verifier removes their code.
    pub kernel_log: bool,
    /// Activity runs for training steps (`run --no-steps` turns them off: no run events, and
    /// data packets read the coarse clock instead of the precise one, ~15 ns less each).
    pub runs: bool,
    /// Benchmarks only: entries of the floor programs' maps (a power of two; 0 = one entry,
    /// the product never runs them). See roce-observer-ebpf/src/floor.rs.
    pub floor_entries: u32,
    /// Benchmarks only: the observer's parts the XDP hash floor adds
    /// (roce_observer_common::floor; 0 = the floor itself).
    pub floor_parts: u8,
    /// Turn the kernel's BPF run-time statistics on while the programs are loaded (`run
    /// --bpf-stats`; off: they are reported only if the sysctl has them on).
    pub bpf_stats: bool,
    /// Lossless class (roce-observer-common/src/lossless.rs): keep its state at all (the
    /// product always does; benchmarks may measure without), the engine's `lossless_dscp`,
    /// `lossless_pcp`, `link_gbps` (the time an XOFF pauses) and `link_known` (load intervals
    /// are kept only then).
    pub lossless: bool,
    pub lossless_dscp: u8,
    pub lossless_pcp: u8,
    pub link_gbps: f64,
    pub link_known: bool,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            roce_port: roce_observer_common::ROCE_V2_PORT,
            vxlan_port: roce_observer_common::headers::VXLAN_PORT,
            pmtu: roce_observer_common::DEFAULT_PMTU,
            reorder_window: roce_observer_common::sequence::DEFAULT_REORDER_WINDOW,
            max_flows: 16384,
            xdp_mode: XdpMode::Default,
            burst_count: roce_observer_common::BURST_COUNT,
            burst_window_ns: roce_observer_common::BURST_WINDOW_NS,
            rtt_alert_ns: None,
            stage: Stage::All,
            kernel_log: false,
            runs: true,
            floor_entries: 0,
            floor_parts: 0,
            bpf_stats: false,
            lossless: true,
            lossless_dscp: 26,
            lossless_pcp: 3,
            link_gbps: crate::engine::DEFAULT_LINK_GBPS,
            link_known: false,
        }
    }
}

pub struct KernelSource {
    ebpf: Ebpf,
    /// What the kernel offered at load, and so which variant runs.
    features: Features,
    /// The XDP program loaded: [`XDP_PROGRAM`] or [`XDP_PAGE_PROGRAM`].
    xdp_program: &'static str,
    events: RingBuf<MapData>,
    /// The program arrays of the scoreboard programs (XDP's, TC's): held for as long as the
    /// programs run (the kernel empties a program array when user space closes it).
    _scoreboard: [aya::maps::ProgramArray<MapData>; 2],
    attachments: Vec<Attachment>,
    /// Added to kernel monotonic timestamps to get ns since the Unix epoch.
    epoch_offset_ns: u64,
    /// Not yet taken by [`KernelSource::take_warnings`].
    warnings: Vec<String>,
    /// The reader of the programs' aya-log records (empty unless `kernel_log`).
    kernel_log: kernel_log::Reader,
    /// Chunk buffers of the flow table read, and fingerprints of the last read.
    flow_buffers: FlowBuffers,
    /// The kernel's lists of changed flows (None: not mapped; every tick reads every flow).
    changes: Option<changes::ChangeLists>,
    /// The ring buffer's fill (None if its pages could not be mapped).
    ring_fill: Option<cost::RingFill>,
    /// Keeps BPF run-time statistics on while it lives (`KernelOptions::bpf_stats`).
    _stats: Option<std::os::fd::OwnedFd>,
}

/// The chunk buffers of the flow table read (maps.rs), and a fingerprint of each entry as read
/// last. The kernel walks its hash table in bucket order, so an entry usually sits at the same
/// index in two reads: an entry whose fingerprint equals the one at its index the time before
/// was handed to the same engine then, and is not again (most of a large table, most ticks; a
/// sequential compare instead of a hash lookup per flow). Eight bytes per flow where a copy of
/// the last read cost 570.
#[derive(Default)]
struct FlowBuffers {
    keys4: Vec<roce_observer_common::flow::FlowKey4>,
    keys6: Vec<roce_observer_common::flow::FlowKey6>,
    values: Vec<roce_observer_common::FlowStats>,
    latency: Vec<roce_observer_common::latency::LatencyHist>,
    batch_keys: Vec<roce_observer_common::FlowKey>,
    batches: Vec<roce_observer_common::run::RunBatch>,
    /// Fingerprints of the last read, by index, and of the read under way.
    prints: Vec<u64>,
    next_prints: Vec<u64>,
    /// The reader `read_flow_changes` handed every entry of `prints` to (None after any other
    /// read).
    engine: Option<u64>,
}

/// A 64-bit hash of a flow entry (key and value). Two different entries at one index with
/// equal fingerprints (one chance in 2^64 per changed entry) would leave the engine one read
/// behind on that flow until it changes again.
fn fingerprint(
    key: &roce_observer_common::FlowKey,
    stats: &roce_observer_common::FlowStats,
) -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = crate::engine::flows::FastHash::default().build_hasher();
    h.write(pod_bytes(key));
    h.write(pod_bytes(stats));
    h.finish()
}

/// The bytes of a map key or value.
fn pod_bytes<T: aya::Pod>(v: &T) -> &[u8] {
    // SAFETY: Pod types of the shared ABI crate are plain data without implicit padding (their
    // sizes are asserted there), so every byte is initialised; the slice borrows `v`.
    unsafe { std::slice::from_raw_parts(std::ptr::from_ref(v).cast::<u8>(), size_of::<T>()) }
}

/// Possible CPUs: the kernel's per-CPU ranges of `SESSIONS` and of the change lists are sized
/// by them (roce-observer-ebpf/src/maps.rs).
fn possible_cpus() -> u32 {
    // Unknown (no /sys): a generous count; only the memory of unused slots is at stake.
    aya::util::nr_cpus().unwrap_or(256) as u32
}

/// Slots of the kernel's `SESSIONS` map: each possible CPU makes new mirror sessions in its
/// own range of MAX_MIRROR_SESSIONS slots.
fn session_slots() -> u32 {
    possible_cpus().saturating_mul(roce_observer_common::mirror::MAX_MIRROR_SESSIONS)
}

/// The kernel programs' `STAGE` global (roce-observer-ebpf/src/observe.rs).
fn stage_global(stage: Stage) -> u8 {
    match stage {
        Stage::Lookup => 1,
        Stage::Account => 2,
        Stage::All => 0,
    }
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
        let features = Features::probe();
        if !features.privileged {
            return Err(error::not_privileged());
        }
        if let Some(what) = features.missing() {
            return Err(KernelError::KernelTooOld {
                release: features.release,
                what,
            });
        }
        // Memory-locked limits only matter on kernels before 5.11 (memcg accounting since).
        let rlim = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: plain syscall with a valid pointer; failure is harmless on modern kernels.
        let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };

        let epoch_offset_ns =
            clock_ns(libc::CLOCK_REALTIME).saturating_sub(clock_ns(libc::CLOCK_MONOTONIC));
        let load_phase_ns = epoch_offset_ns % roce_observer_common::lossless::LOAD_INTERVAL_NS;
        let link_kbps = (opts.link_gbps * 1e6).round() as u64;
        let cpus = possible_cpus();
        let change_cap = roce_observer_common::changes::capacity(opts.max_flows);
        // The record-sized floor table only when a benchmark times it (64k entries of 848 bytes).
        let floor_record_entries = if opts.floor_parts & roce_observer_common::floor::RECORD != 0 {
            opts.floor_entries.max(1)
        } else {
            1
        };
        let change_lists = cpus.saturating_mul(roce_observer_common::changes::CHANGE_SLOTS);
        let mut ebpf = EbpfLoader::new()
            .override_global("ROCE_PORT", &opts.roce_port, true)
            .override_global("VXLAN_PORT", &opts.vxlan_port, true)
            .override_global("PMTU", &opts.pmtu, true)
            .override_global("REORDER_WINDOW", &opts.reorder_window, true)
            .override_global("BURST_COUNT", &opts.burst_count, true)
            .override_global("BURST_WINDOW_NS", &opts.burst_window_ns, true)
            .override_global("RTT_ALERT_NS", &opts.rtt_alert_ns.unwrap_or(u64::MAX), true)
            .override_global("COARSE_CLOCK", &u8::from(features.coarse_clock), true)
            .override_global("STAGE", &stage_global(opts.stage), true)
            .override_global("KERNEL_LOG", &u8::from(opts.kernel_log), true)
            .override_global("RUNS", &u8::from(opts.runs), true)
            .override_global("LOSSLESS_ON", &u8::from(opts.lossless), true)
            .override_global("LOSSLESS_DSCP", &opts.lossless_dscp, true)
            .override_global("LOSSLESS_PCP", &opts.lossless_pcp, true)
            .override_global("LOSSLESS_LOAD", &u8::from(opts.link_known), true)
            .override_global("LINK_KBPS", &link_kbps, true)
            .override_global("LOAD_PHASE_NS", &load_phase_ns, true)
            .override_global(aya_log::LEVEL, &kernel_log::level(opts.kernel_log), true)
            .map_max_entries("FLOWS4", opts.max_flows)
            .map_max_entries("FLOWS6", opts.max_flows)
            .map_max_entries("LATENCY4", opts.max_flows)
            .map_max_entries("LATENCY6", opts.max_flows)
            .map_max_entries("RUN_BATCHES", opts.max_flows)
            .map_max_entries("SESSIONS", session_slots())
            .override_global("CHANGE_CAP", &change_cap, true)
            .map_max_entries("CHANGE_HEADS", change_lists)
            .map_max_entries("CHANGE_KEYS", change_lists.saturating_mul(change_cap))
            .override_global("FLOOR_SLOTS", &opts.floor_entries.max(1), true)
            .map_max_entries("FLOOR_HASH", opts.floor_entries.max(1))
            .map_max_entries("FLOOR_ARRAY", opts.floor_entries.max(1))
            .override_global("FLOOR_PARTS", &opts.floor_parts, true)
            .map_max_entries("FLOOR_RECORD", floor_record_entries)
            .load(EBPF_OBJECT)
            .map_err(load_error)?;
        // Only the variant that fits is loaded: the other one may use what this kernel lacks.
        let xdp_program = if features.xdp_frags {
            XDP_PROGRAM
        } else {
            XDP_PAGE_PROGRAM
        };
        program_mut::<Xdp>(&mut ebpf, xdp_program)?
            .load()
            .map_err(|e| program_load_error(xdp_program, &features, e))?;
        program_mut::<SchedClassifier>(&mut ebpf, TC_PROGRAM)?
            .load()
            .map_err(|e| program_load_error(TC_PROGRAM, &features, e))?;
        let scoreboard = load_scoreboard(&mut ebpf, &features)?;
        let events = ebpf
            .take_map("EVENTS")
            .ok_or_else(|| KernelError::Load("the object has no EVENTS ring buffer".into()))?;
        // Data bytes of the ring buffer (its max_entries), for its fill.
        let events_bytes = match &events {
            aya::maps::Map::RingBuf(data) => data.info().ok().map(|i| u64::from(i.max_entries())),
            _ => None,
        };
        // A map type this kernel does not know is a kernel without ring buffers.
        let events = RingBuf::try_from(events).map_err(|source| match source {
            MapError::InvalidMapType { .. } => KernelError::KernelTooOld {
                release: kernel_release(),
                what: "BPF ring buffers (Linux 5.8+)",
            },
            source => KernelError::Map {
                map: "EVENTS",
                source,
            },
        })?;
        let ring_fill = events_bytes
            .and_then(|size| cost::RingFill::map(std::os::fd::AsFd::as_fd(&events), size));
        let stats = if opts.bpf_stats {
            Some(cost::enable_stats().map_err(|e| KernelError::Load(Box::new(e)))?)
        } else {
            None
        };
        // Read even when off (it then stays empty): the tests check exactly that.
        let kernel_log = kernel_log::Reader::start(&mut ebpf)?;
        program_mut::<Xdp>(&mut ebpf, GATHER_PROGRAM)?
            .load()
            .map_err(|e| program_load_error(GATHER_PROGRAM, &features, e))?;
        // Before anything is attached: the first epoch (new entries are then listed).
        let changes = changes::ChangeLists::map(&ebpf, cpus, change_cap);
        Ok(KernelSource {
            ebpf,
            features,
            xdp_program,
            events,
            _scoreboard: scoreboard,
            attachments: Vec::new(),
            epoch_offset_ns,
            warnings: Vec::new(),
            kernel_log,
            flow_buffers: FlowBuffers::default(),
            changes,
            ring_fill,
            _stats: stats,
        })
    }

    /// Attach XDP (ingress) and TC egress to `iface`.
    pub fn attach(&mut self, iface: &str, xdp_mode: XdpMode) -> Result<&Attachment, KernelError> {
        let attachment = Attachment::attach(
            &mut self.ebpf,
            self.xdp_program,
            iface,
            xdp_mode,
            &mut self.warnings,
        )?;
        self.attachments.push(attachment);
        Ok(&self.attachments[self.attachments.len() - 1])
    }

    /// What the kernel offered at load (and so which program variant runs).
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// Warnings gathered since the last call (e.g. a fallback to generic XDP), to show the user.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Detach everything we attached (also done on drop). Returns what could not be undone.
    pub fn detach_all(&mut self) -> Vec<String> {
        let mut warnings = self.take_warnings();
        for a in self.attachments.drain(..) {
            warnings.extend(a.detach());
        }
        warnings
    }

    /// Kernel log lines (`kernel_log`) read since the last call, oldest first.
    pub fn take_kernel_log(&mut self) -> Vec<String> {
        self.kernel_log.take()
    }

    /// Size of the loaded XDP program after the verifier (bytes of BPF instructions): what
    /// `kernel_log` off removes shows here.
    pub fn xdp_translated_bytes(&self) -> Option<u32> {
        self.ebpf
            .program(self.xdp_program)?
            .info()
            .ok()?
            .size_translated()
    }

    /// Instructions the verifier processed to accept the XDP and the TC program and their
    /// scoreboard programs (kernels from 5.16 report it; `None` before): how close each is to
    /// the verifier's limit of 1,000,000.
    pub fn verified_instructions(&self) -> [Option<u32>; 4] {
        let xdp_seq = if self.xdp_program == XDP_PROGRAM {
            XDP_SEQ_PROGRAM
        } else {
            XDP_PAGE_SEQ_PROGRAM
        };
        [self.xdp_program, TC_PROGRAM, xdp_seq, TC_SEQ_PROGRAM].map(|name| {
            self.ebpf
                .program(name)?
                .info()
                .ok()?
                .verified_instruction_count()
        })
    }

    /// What the attached programs cost and how full their ring buffer got since the last
    /// call.
    pub fn kernel_cost(&mut self) -> KernelCost {
        let (ringbuf_bytes, ringbuf_fill) = self
            .ring_fill
            .as_mut()
            .map_or((0, 0.0), |r| (r.size(), r.take_peak()));
        let programs = [(self.xdp_program, "xdp"), (TC_PROGRAM, "tc")]
            .into_iter()
            .filter_map(|(name, hook)| {
                let info = self.ebpf.program(name)?.info().ok()?;
                Some(cost::program_cost(&info, name, hook))
            })
            .collect();
        KernelCost {
            ringbuf_bytes,
            ringbuf_fill,
            bpf_stats: self._stats.is_some() || cost::stats_sysctl_on(),
            programs,
        }
    }

    /// File descriptor of the ring buffer, for readiness polling.
    pub fn events_fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }
}

/// Load the scoreboard programs of the main programs loaded (the XDP one of the same variant,
/// and TC's) and put them in their slots of `SCOREBOARD_XDP` and `SCOREBOARD_TC`.
fn load_scoreboard(
    ebpf: &mut Ebpf,
    features: &Features,
) -> Result<[aya::maps::ProgramArray<MapData>; 2], KernelError> {
    let (xdp_seq, xdp_slot) = if features.xdp_frags {
        (XDP_SEQ_PROGRAM, roce_observer_common::SEQ_SLOT_XDP)
    } else {
        (
            XDP_PAGE_SEQ_PROGRAM,
            roce_observer_common::SEQ_SLOT_XDP_PAGE,
        )
    };
    program_mut::<Xdp>(ebpf, xdp_seq)?
        .load()
        .map_err(|e| program_load_error(xdp_seq, features, e))?;
    program_mut::<SchedClassifier>(ebpf, TC_SEQ_PROGRAM)?
        .load()
        .map_err(|e| program_load_error(TC_SEQ_PROGRAM, features, e))?;
    let mut fill = |map_name: &'static str, name: &'static str, slot: u32| {
        let map = ebpf
            .take_map(map_name)
            .ok_or_else(|| KernelError::Load(format!("the object has no {map_name} map").into()))?;
        let mut array =
            aya::maps::ProgramArray::try_from(map).map_err(|source| KernelError::Map {
                map: map_name,
                source,
            })?;
        let fd = ebpf
            .program(name)
            .ok_or_else(|| KernelError::Load(format!("the object has no program {name}").into()))?
            .fd()
            .map_err(|e| program_load_error(name, features, e))?;
        array.set(slot, fd, 0).map_err(|source| KernelError::Map {
            map: map_name,
            source,
        })?;
        Ok::<_, KernelError>(array)
    };
    let xdp = fill("SCOREBOARD_XDP", xdp_seq, xdp_slot)?;
    let tc = fill("SCOREBOARD_TC", TC_SEQ_PROGRAM, 0)?;
    Ok([xdp, tc])
}

impl Drop for KernelSource {
    fn drop(&mut self) {
        // Reached without `detach_all` only when the run ends in an error: there is no caller
        // left to hand the warnings to, and the user must still learn what stayed behind.
        for warning in self.detach_all() {
            eprintln!("roce-observer: {warning}");
        }
    }
}

/// Copy the kernel's events and maps into the engine (map values are absolute).
pub fn refresh(src: &mut KernelSource, engine: &mut Engine) -> anyhow::Result<()> {
    src.drain_records(|ev, runs| engine.ingest_record(ev, runs));
    src.read_flow_changes(engine.id(), |key, stats| engine.update_flow(key, stats))?;
    // After the flows: a histogram's flow is then in the engine's table, and a run finished
    // between the two reads is in its batch rather than missing.
    src.read_latency(|key, hist| engine.update_latency(key, hist))?;
    src.read_run_batches(|key, batch| engine.update_runs(key, batch))?;
    for (key, stats) in src.read_pfc()? {
        engine.update_pfc(&key, &stats);
    }
    for (key, st) in src.read_lossless()? {
        engine.update_lossless(&key, &st);
    }
    for (key, stats) in src.read_mirrors()? {
        engine.update_mirror(&key, &stats);
    }
    let counters = src.read_counters()?;
    for (dir, block) in [Direction::Ingress, Direction::Egress]
        .into_iter()
        .zip(counters)
    {
        for counter in Counter::ALL {
            engine.update_counter(dir, counter, block[counter as usize]);
        }
    }
    Ok(())
}

impl LiveSource for KernelSource {
    fn ready_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.events_fd())
    }

    fn pump(&mut self, engine: &mut Engine) -> anyhow::Result<SourceState> {
        self.drain_records(|ev, runs| engine.ingest_record(ev, runs));
        Ok(SourceState::Open)
    }

    fn refresh(&mut self, engine: &mut Engine) -> anyhow::Result<SourceState> {
        refresh(self, engine)?;
        Ok(SourceState::Open)
    }

    fn stop(&mut self) -> Vec<String> {
        self.detach_all()
    }

    fn kernel_cost(&mut self) -> Option<KernelCost> {
        Some(KernelSource::kernel_cost(self))
    }

    fn take_log(&mut self) -> Vec<String> {
        self.take_kernel_log()
    }

    fn interfaces(&self) -> Vec<(String, bool)> {
        // A deleted interface takes our programs with it; one created again under the same
        // name has another index and none of them.
        self.attachments
            .iter()
            .map(|a| (a.iface.clone(), ifindex(&a.iface) == Some(a.ifindex)))
            .collect()
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
