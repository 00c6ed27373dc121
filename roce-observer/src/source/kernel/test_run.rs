//! Running the loaded programs on single frames (BPF_PROG_TEST_RUN): exact checks in tests and
//! kernel cost per packet in benchmarks. Maps update as for real packets.

use aya::programs::{Program, TestRun, TestRunOptions, Xdp};

use super::{BASELINE_PROGRAM, KernelSource, TC_PROGRAM, error::KernelError, program_mut};

/// Programs `KernelSource::bench` can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchProgram {
    Xdp,
    Tc,
    /// An XDP program that only returns XDP_PASS.
    Baseline,
}

/// Outcome of one test run.
struct RunResult {
    return_value: u32,
    duration: std::time::Duration,
}

fn run(
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

    /// Average kernel time per run of `program` on `frame`, over `repeat` runs
    /// (BPF_PROG_TEST_RUN's own timing).
    pub fn bench(
        &mut self,
        program: BenchProgram,
        frame: &[u8],
        repeat: u32,
    ) -> Result<std::time::Duration, KernelError> {
        let name = match program {
            BenchProgram::Xdp => self.xdp_program,
            BenchProgram::Tc => TC_PROGRAM,
            BenchProgram::Baseline => BASELINE_PROGRAM,
        };
        if program == BenchProgram::Baseline {
            let prog = program_mut::<Xdp>(&mut self.ebpf, BASELINE_PROGRAM)?;
            if prog.fd().is_err() {
                prog.load().map_err(|e| KernelError::Load(Box::new(e)))?;
            }
        }
        run(self, name, frame, repeat).map(|r| r.duration)
    }
}
