//! Side by side in one process (`ROCE_BENCH_OBSERVER`): the same frames through our XDP and TC
//! programs and through those of another roce-observer build (found among the loaded programs,
//! run by file descriptor with BPF_PROG_TEST_RUN), interleaved round by round, so that both
//! see the same machine load. On this shared machine single runs move by 30-50%; the minimum
//! and the median over the rounds move far less.

use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};

use anyhow::Context as _;
use roce_observer::source::kernel::{BenchProgram, KernelSource};

/// `enum bpf_cmd` value of BPF_PROG_TEST_RUN (uapi/linux/bpf.h).
const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// The `test` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct TestAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// Average ns per run of the program `fd` on `frame` over `repeat` runs (the kernel's timing).
fn test_run(fd: BorrowedFd<'_>, frame: &[u8], repeat: u32) -> anyhow::Result<f64> {
    let mut out = vec![0u8; frame.len() + 4096];
    let mut attr = TestAttr {
        prog_fd: fd.as_raw_fd() as u32,
        data_size_in: u32::try_from(frame.len())?,
        data_size_out: u32::try_from(out.len())?,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat,
        ..TestAttr::default()
    };
    // SAFETY: `attr` is a valid `test` attribute: the input and output buffers live for the
    // call and their sizes are given; the kernel writes only into `out` and `attr`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            std::ptr::from_mut(&mut attr),
            std::mem::size_of::<TestAttr>(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error()).context("BPF_PROG_TEST_RUN");
    }
    Ok(f64::from(attr.duration))
}

/// The other build's programs, by id (`crate::veth::External`).
pub struct Theirs {
    pub xdp: u32,
    pub tc: u32,
}

fn program_fd(id: u32) -> anyhow::Result<aya::programs::ProgramFd> {
    aya::programs::loaded_programs()
        .flatten()
        .find(|p| p.id() == id)
        .context("the other build's program is gone")?
        .fd()
        .context("a file descriptor of the other build's program")
}

/// Print min and median ns per run of ours and theirs on each frame of `cases`, on XDP and TC,
/// over `rounds` interleaved rounds, and the difference of each case to the first one.
pub fn table(
    ours: &mut KernelSource,
    theirs: &Theirs,
    cases: &[(&str, Vec<u8>)],
    repeat: u32,
    rounds: usize,
) -> anyhow::Result<()> {
    let (xdp_fd, tc_fd) = (program_fd(theirs.xdp)?, program_fd(theirs.tc)?);
    // [case][xdp ours, xdp theirs, tc ours, tc theirs] -> samples
    let mut samples = vec![[(); 4].map(|()| Vec::new()); cases.len()];
    for round in 0..rounds {
        for (i, (_, f)) in cases.iter().enumerate() {
            // Alternate who goes first, so neither always runs on a warmer cache.
            let order: [usize; 4] = if round % 2 == 0 {
                [0, 1, 2, 3]
            } else {
                [1, 0, 3, 2]
            };
            for which in order {
                let ns = match which {
                    0 => ours.bench(BenchProgram::Xdp, f, repeat)?.as_nanos() as f64,
                    1 => test_run(xdp_fd.as_fd(), f, repeat)?,
                    2 => ours.bench(BenchProgram::Tc, f, repeat)?.as_nanos() as f64,
                    _ => test_run(tc_fd.as_fd(), f, repeat)?,
                };
                samples[i][which].push(ns);
            }
        }
    }
    let stat = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        (v[0], v[v.len() / 2])
    };
    println!(
        "\ntest-run side by side with ROCE_BENCH_OBSERVER, {rounds} interleaved rounds of \
         {repeat} runs: ns per run, min / median over the rounds; +med = median minus the \
         first case's median"
    );
    println!(
        "{:<30} {:>13} {:>6} {:>13} {:>6}   {:>13} {:>6} {:>13} {:>6}",
        "case", "XDP ours", "+med", "XDP other", "+med", "TC ours", "+med", "TC other", "+med"
    );
    let first: Vec<(f64, f64)> = samples[0].iter().map(stat).collect();
    for ((name, _), s) in cases.iter().zip(&samples) {
        let cell = |w: usize| {
            let (min, med) = stat(&s[w]);
            (format!("{min:.0} / {med:.0}"), med - first[w].1)
        };
        let c: Vec<(String, f64)> = (0..4).map(cell).collect();
        println!(
            "{:<30} {:>13} {:>+6.0} {:>13} {:>+6.0}   {:>13} {:>+6.0} {:>13} {:>+6.0}",
            name, c[0].0, c[0].1, c[1].0, c[1].1, c[2].0, c[2].1, c[3].0, c[3].1
        );
    }
    Ok(())
}

/// The frames of the side-by-side table: the mirror table's (a 64-byte UD SEND plain, then in
/// each encapsulation), then a 1 KiB data packet (the skb test-run refuses 4 KiB) and an ACK.
pub fn cases() -> Vec<(&'static str, Vec<u8>)> {
    use roce_observer_common::frames::{Mirror, RoceFrame, mirrored};
    let frame = |opcode: u8, payload: usize| RoceFrame {
        tos: 0x6a,
        udp_sport: 0xc001,
        payload,
        ..RoceFrame::new(opcode, 0x11, 0x1000)
    };
    let plain = frame(0x64, 64).build();
    vec![
        ("UD SEND 64 B plain", plain.clone()),
        (
            "  in ERSPAN II",
            mirrored(&plain, Mirror::Erspan2 { session: 7, seq: 1 }),
        ),
        (
            "  in ERSPAN III",
            mirrored(&plain, Mirror::Erspan3 { session: 7 }),
        ),
        ("  in VXLAN", mirrored(&plain, Mirror::Vxlan { vni: 5001 })),
        ("UD SEND 1024 B", frame(0x64, 1024).build()),
        (
            "RC ACKNOWLEDGE",
            RoceFrame {
                syndrome: 0x1f,
                ..frame(0x11, 0)
            }
            .build(),
        ),
    ]
}
