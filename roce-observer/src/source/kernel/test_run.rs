//! Running the loaded programs on single frames (BPF_PROG_TEST_RUN): exact checks in tests and
//! kernel cost per packet in benchmarks. Maps update as for real packets.

use aya::programs::{
    Program, SchedClassifier, TcAttachType, TestRun, TestRunOptions, Xdp, XdpMode,
    tc::{self, SchedClassifierLinkId},
    xdp::XdpLinkId,
};

use super::{
    BASELINE_PROGRAM, FLOOR_ARRAY_PROGRAM, FLOOR_HASH_PROGRAM, KernelSource, TC_BASELINE_PROGRAM,
    TC_FLOOR_HASH_PROGRAM, TC_PROGRAM, error::KernelError, program_mut,
};

/// Programs `KernelSource::bench` can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchProgram {
    Xdp,
    Tc,
    /// An XDP program that only returns XDP_PASS.
    Baseline,
    /// Floors (roce-observer-ebpf/src/floor.rs): an exact per-flow packet count in a hash map,
    /// and in an array slot by a hash of the key; the least any per-flow design does.
    FloorHash,
    FloorArray,
    /// The same on TC egress: a classifier that only returns TC_ACT_PIPE, and the hash floor.
    TcBaseline,
    TcFloorHash,
}

impl BenchProgram {
    /// Loaded only when a benchmark asks for it.
    fn on_demand(self) -> bool {
        !matches!(self, BenchProgram::Xdp | BenchProgram::Tc)
    }

    /// A TC classifier (attached to egress), not an XDP program.
    fn is_tc(self) -> bool {
        matches!(
            self,
            BenchProgram::Tc | BenchProgram::TcBaseline | BenchProgram::TcFloorHash
        )
    }
}

/// A benchmark program attached by [`KernelSource::attach_baseline`].
#[derive(Debug)]
pub enum BaselineLink {
    Xdp(XdpLinkId),
    Tc(SchedClassifierLinkId),
}

/// Outcome of one test run.
pub(super) struct RunResult {
    return_value: u32,
    duration: std::time::Duration,
}

pub(super) fn run(
    src: &KernelSource,
    name: &'static str,
    frame: &[u8],
    repeat: u32,
) -> Result<RunResult, KernelError> {
    let prog = src
        .ebpf
        .program(name)
        .ok_or_else(|| KernelError::Load(format!("no program {name}").into()))?;
    let opts = TestRunOptions {
        data_in: Some(frame),
        repeat,
        ..TestRunOptions::new()
    };
    let result = match prog {
        Program::Xdp(p) => p.test_run(opts),
        Program::SchedClassifier(p) => p.test_run(opts),
        _ => return Err(KernelError::Load(format!("{name}: unexpected type").into())),
    };
    result
        .map(|r| RunResult {
            return_value: r.return_value,
            duration: r.duration,
        })
        .map_err(|e| KernelError::Load(Box::new(e)))
}

impl KernelSource {
    /// Run the XDP program once on `frame`. Returns the XDP verdict.
    pub fn test_run_xdp(&self, frame: &[u8]) -> Result<u32, KernelError> {
        run(self, self.xdp_program, frame, 1).map(|r| r.return_value)
    }

    /// Run the TC program once on `frame`. Returns the TC verdict.
    pub fn test_run_tc(&self, frame: &[u8]) -> Result<u32, KernelError> {
        run(self, TC_PROGRAM, frame, 1).map(|r| r.return_value)
    }

    /// The loaded program behind `program` (the XDP variant this kernel got).
    fn program_name(&self, program: BenchProgram) -> &'static str {
        match program {
            BenchProgram::Xdp => self.xdp_program,
            BenchProgram::Tc => TC_PROGRAM,
            BenchProgram::Baseline => BASELINE_PROGRAM,
            BenchProgram::FloorHash => FLOOR_HASH_PROGRAM,
            BenchProgram::FloorArray => FLOOR_ARRAY_PROGRAM,
            BenchProgram::TcBaseline => TC_BASELINE_PROGRAM,
            BenchProgram::TcFloorHash => TC_FLOOR_HASH_PROGRAM,
        }
    }

    /// Average kernel time per run of `program` on `frame`, over `repeat` runs
    /// (BPF_PROG_TEST_RUN's own timing).
    pub fn bench(
        &mut self,
        program: BenchProgram,
        frame: &[u8],
        repeat: u32,
    ) -> Result<std::time::Duration, KernelError> {
        let name = self.program_name(program);
        if program.on_demand() {
            self.load_on_demand(program)?;
        }
        run(self, name, frame, repeat).map(|r| r.duration)
    }
}

impl KernelSource {
    fn load_on_demand(&mut self, program: BenchProgram) -> Result<(), KernelError> {
        let name = self.program_name(program);
        let err = |e| KernelError::Load(Box::new(e));
        if program.is_tc() {
            let prog = program_mut::<SchedClassifier>(&mut self.ebpf, name)?;
            if prog.fd().is_err() {
                prog.load().map_err(err)?;
            }
        } else {
            let prog = program_mut::<Xdp>(&mut self.ebpf, name)?;
            if prog.fd().is_err() {
                prog.load().map_err(err)?;
            }
        }
        Ok(())
    }

    /// Attach a benchmark program (a do-nothing baseline or a floor) to `iface`: XDP, or TC
    /// egress (benchmarks only: the veth replay in `cargo xtask bench` compares our cost with
    /// them on the same interface). Detach with [`KernelSource::detach_baseline`]; dropping
    /// the source detaches it too.
    pub fn attach_baseline(
        &mut self,
        program: BenchProgram,
        iface: &str,
    ) -> Result<BaselineLink, KernelError> {
        assert!(program.on_demand(), "{program:?} is attached with attach()");
        self.load_on_demand(program)?;
        let name = self.program_name(program);
        let err = |e| KernelError::Load(Box::new(e));
        if program.is_tc() {
            // Kernels without TCX need the clsact qdisc (already there: fine).
            let _ = tc::qdisc_add_clsact(iface);
            program_mut::<SchedClassifier>(&mut self.ebpf, name)?
                .attach(iface, TcAttachType::Egress)
                .map(BaselineLink::Tc)
                .map_err(err)
        } else {
            program_mut::<Xdp>(&mut self.ebpf, name)?
                .attach(iface, XdpMode::Default)
                .map(BaselineLink::Xdp)
                .map_err(err)
        }
    }

    pub fn detach_baseline(
        &mut self,
        program: BenchProgram,
        link: BaselineLink,
    ) -> Result<(), KernelError> {
        let name = self.program_name(program);
        let err = |e| KernelError::Load(Box::new(e));
        match link {
            BaselineLink::Xdp(id) => program_mut::<Xdp>(&mut self.ebpf, name)?
                .detach(id)
                .map_err(err),
            BaselineLink::Tc(id) => program_mut::<SchedClassifier>(&mut self.ebpf, name)?
                .detach(id)
                .map_err(err),
        }
    }

    /// Packets the floor programs counted (the sum over their maps' values), to check that a
    /// floor saw every packet it was timed on: (hash floor, with or without its parts; array
    /// floor).
    pub fn floor_counts(&self) -> Result<(u64, u64), KernelError> {
        let map = |name: &'static str| {
            self.ebpf
                .map(name)
                .ok_or_else(|| KernelError::Load(format!("no map {name}").into()))
        };
        /// Packets counted in the first word of the values of the hash floor's map `name`.
        fn packets<const N: usize>(
            map: &aya::maps::Map,
            name: &'static str,
        ) -> Result<u64, KernelError> {
            let counts: aya::maps::HashMap<_, [u32; 4], [u64; N]> =
                aya::maps::HashMap::try_from(map)
                    .map_err(|source| KernelError::Map { map: name, source })?;
            Ok(counts
                .iter()
                .filter_map(Result::ok)
                .map(|(_, v)| v[0])
                .sum())
        }
        // The hash floor with the `floor::RECORD` part counts in a record-sized value.
        const RECORD_WORDS: usize = std::mem::size_of::<roce_observer_common::FlowStats>() / 8;
        let hashed = packets::<2>(map("FLOOR_HASH")?, "FLOOR_HASH")?
            + packets::<RECORD_WORDS>(map("FLOOR_RECORD")?, "FLOOR_RECORD")?;
        let array: aya::maps::Array<_, u64> = aya::maps::Array::try_from(map("FLOOR_ARRAY")?)
            .map_err(|source| KernelError::Map {
                map: "FLOOR_ARRAY",
                source,
            })?;
        let slotted = array.iter().filter_map(Result::ok).sum();
        Ok((hashed, slotted))
    }

    /// Kernel BPF statistics of `program` so far: (total run time, runs). They only grow while
    /// statistics are enabled (`kernel.bpf_stats_enabled`, or `aya::sys::enable_stats`).
    pub fn program_stats(
        &self,
        program: BenchProgram,
    ) -> Result<(std::time::Duration, u64), KernelError> {
        let name = self.program_name(program);
        let info = self
            .ebpf
            .program(name)
            .ok_or_else(|| KernelError::Load(format!("no program {name}").into()))?
            .info()
            .map_err(|e| KernelError::Load(Box::new(e)))?;
        Ok((info.run_time(), info.run_count()))
    }
}
