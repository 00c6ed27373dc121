//! Running the loaded programs on single frames (BPF_PROG_TEST_RUN): exact checks in tests and
//! kernel cost per packet in benchmarks. Maps update as for real packets.

use aya::programs::{Program, TestRun, TestRunOptions, Xdp, XdpMode, xdp::XdpLinkId};

use super::{
    BASELINE_PROGRAM, FLOOR_ARRAY_PROGRAM, FLOOR_HASH_PROGRAM, KernelSource, TC_PROGRAM,
    error::KernelError, program_mut,
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
}

impl BenchProgram {
    /// Loaded only when a benchmark asks for it.
    fn on_demand(self) -> bool {
        matches!(
            self,
            BenchProgram::Baseline | BenchProgram::FloorHash | BenchProgram::FloorArray
        )
    }
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
    fn load_on_demand(&mut self, program: BenchProgram) -> Result<&mut Xdp, KernelError> {
        let name = self.program_name(program);
        let prog = program_mut::<Xdp>(&mut self.ebpf, name)?;
        if prog.fd().is_err() {
            prog.load().map_err(|e| KernelError::Load(Box::new(e)))?;
        }
        Ok(prog)
    }

    /// Attach a benchmark program (the do-nothing baseline or a floor) to `iface`
    /// (benchmarks only: the veth replay in `cargo xtask bench` compares our cost with them
    /// on the same interface). Detach with [`KernelSource::detach_baseline`]; dropping the
    /// source detaches it too.
    pub fn attach_baseline(
        &mut self,
        program: BenchProgram,
        iface: &str,
    ) -> Result<XdpLinkId, KernelError> {
        assert!(program.on_demand(), "{program:?} is attached with attach()");
        self.load_on_demand(program)?
            .attach(iface, XdpMode::Default)
            .map_err(|e| KernelError::Load(Box::new(e)))
    }

    pub fn detach_baseline(
        &mut self,
        program: BenchProgram,
        id: XdpLinkId,
    ) -> Result<(), KernelError> {
        let name = self.program_name(program);
        program_mut::<Xdp>(&mut self.ebpf, name)?
            .detach(id)
            .map_err(|e| KernelError::Load(Box::new(e)))
    }

    /// Packets the floor programs counted (the sum over their maps' values), to check that a
    /// floor saw every packet it was timed on.
    pub fn floor_counts(&self) -> Result<(u64, u64), KernelError> {
        let map = |name: &'static str| {
            self.ebpf
                .map(name)
                .ok_or_else(|| KernelError::Load(format!("no map {name}").into()))
        };
        let hash: aya::maps::HashMap<_, [u32; 4], [u64; 2]> =
            aya::maps::HashMap::try_from(map("FLOOR_HASH")?).map_err(|source| {
                KernelError::Map {
                    map: "FLOOR_HASH",
                    source,
                }
            })?;
        let array: aya::maps::Array<_, u64> = aya::maps::Array::try_from(map("FLOOR_ARRAY")?)
            .map_err(|source| KernelError::Map {
                map: "FLOOR_ARRAY",
                source,
            })?;
        let hashed = hash.iter().filter_map(Result::ok).map(|(_, v)| v[0]).sum();
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
