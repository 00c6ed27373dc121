//! What the running kernel offers, probed before loading (tiny programs and maps the kernel
//! accepts or refuses), so that the loader picks the program variant that fits and a kernel
//! below the floor gets one message naming what it lacks.
//!
//! Floor: BPF ring buffers (5.8) and BTF. Everything newer has a fallback:
//! - XDP frags + `bpf_xdp_get_buff_len` (5.18): else the single-buffer XDP program, which takes
//!   the frame length from the packet pointers; jumbo MTUs then need generic XDP.
//! - `bpf_ktime_get_coarse_ns` (5.11): else `bpf_ktime_get_ns` (a few ns more per packet).
//! - TCX links (6.6): else a clsact qdisc and a netlink TC filter (aya decides by version).

use std::path::Path;

use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{BpfHelper, is_helper_supported, is_map_supported},
    util::KernelVersion,
};

/// Test knob, not a user setting: a comma-separated list of `-name` (treat as missing: how the
/// tests run the old-kernel variants on a new kernel) and `+name` (treat as present: how the
/// kernel matrix shows the error a kernel gives when a feature is wrongly assumed), for `frags`
/// and `coarse_clock`.
pub const FEATURES_ENV: &str = "ROCE_OBSERVER_FEATURES";

/// `Some(true/false)` when [`FEATURES_ENV`] forces `name` on or off.
fn forced(name: &str) -> Option<bool> {
    let list = std::env::var(FEATURES_ENV).unwrap_or_default();
    list.split(',')
        .map(str::trim)
        .find_map(|f| match f.split_at_checked(1) {
            Some(("+", n)) if n == name => Some(true),
            Some(("-", n)) if n == name => Some(false),
            _ => None,
        })
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Features {
    /// `uname -r`.
    pub release: String,
    /// XDP programs loaded with BPF_F_XDP_HAS_FRAGS, and `bpf_xdp_get_buff_len` (5.18+).
    pub xdp_frags: bool,
    /// `bpf_ktime_get_coarse_ns` (5.11+).
    pub coarse_clock: bool,
    /// TC programs attached as TCX links (6.6+).
    pub tcx: bool,
    /// BPF_MAP_TYPE_RINGBUF (5.8+).
    pub ringbuf: bool,
    /// We may create BPF maps at all (an array map, which every BPF kernel has): without the
    /// privilege every probe fails, which says nothing about the kernel.
    pub privileged: bool,
    /// /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF).
    pub btf: bool,
}

impl Features {
    /// Probe the running kernel. A probe that cannot decide (an unexpected error) counts as
    /// "missing": the fallback then runs, which works everywhere the floor holds.
    pub fn probe() -> Features {
        let helper = |id: BpfHelper| is_helper_supported(ProgramType::Xdp, id).unwrap_or(false);
        Features {
            release: kernel_release(),
            xdp_frags: forced("frags").unwrap_or_else(|| {
                xdp_frags_supported() && helper(BpfHelper::BPF_FUNC_xdp_get_buff_len)
            }),
            coarse_clock: forced("coarse_clock")
                .unwrap_or_else(|| helper(BpfHelper::BPF_FUNC_ktime_get_coarse_ns)),
            tcx: KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0)),
            ringbuf: is_map_supported(MapType::RingBuf).unwrap_or(false),
            privileged: is_map_supported(MapType::Array).unwrap_or(false),
            btf: Path::new("/sys/kernel/btf/vmlinux").exists(),
        }
    }

    /// The first floor feature this kernel lacks, if any.
    pub fn missing(&self) -> Option<&'static str> {
        if !self.ringbuf {
            Some("BPF ring buffers (Linux 5.8+)")
        } else if !self.btf {
            Some("BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF=y)")
        } else {
            None
        }
    }

    /// One line for the startup message: the variant loaded and the fallbacks taken.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("kernel {}", self.release)];
        parts.push(if self.xdp_frags {
            "XDP multi-buffer (frags)".into()
        } else {
            "single-buffer XDP (no XDP frags before 5.18: on an MTU above ~3500 bytes native \
             XDP is refused and --xdp-mode auto attaches generic XDP, which sees jumbo frames \
             whole)"
                .into()
        });
        parts.push(if self.coarse_clock {
            "coarse clock".into()
        } else {
            "precise clock (no bpf_ktime_get_coarse_ns before 5.11)".into()
        });
        parts.push(if self.tcx {
            "TCX egress".into()
        } else {
            "clsact egress (no TCX before 6.6)".into()
        });
        parts.join(", ")
    }

    /// Whether the fast paths all apply (nothing worth telling the user).
    pub fn all_present(&self) -> bool {
        self.xdp_frags && self.coarse_clock && self.tcx
    }
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Load `r0 = XDP_PASS; exit` as an XDP program with BPF_F_XDP_HAS_FRAGS. Kernels before 5.18
/// refuse the unknown flag with EINVAL before verifying anything (which is why loading the
/// frags program there used to fail with an empty verifier log). aya has no probe for this.
fn xdp_frags_supported() -> bool {
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_XDP: u32 = 6;
    const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
    // mov64 r0, 2 (XDP_PASS); exit
    let insns: [u64; 2] = [0x0000_0002_0000_00b7, 0x0000_0000_0000_0095];
    let license = c"GPL";
    /// The leading fields of the kernel's `union bpf_attr` for BPF_PROG_LOAD; the kernel
    /// zero-fills the rest.
    #[repr(C)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
    }
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: BPF_F_XDP_HAS_FRAGS,
    };
    // SAFETY: BPF_PROG_LOAD with a valid attribute block of the given size; the pointers in it
    // outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const ProgLoad,
            std::mem::size_of::<ProgLoad>(),
        )
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: closing the program fd the syscall just returned to us.
    unsafe { libc::close(fd as i32) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Features {
        Features {
            release: "6.12.0".into(),
            xdp_frags: true,
            coarse_clock: true,
            tcx: true,
            ringbuf: true,
            privileged: true,
            btf: true,
        }
    }

    #[test]
    fn the_floor_names_what_is_missing() {
        assert_eq!(all().missing(), None);
        let no_ringbuf = Features {
            ringbuf: false,
            ..all()
        };
        assert!(
            no_ringbuf
                .missing()
                .is_some_and(|m| m.contains("ring buffer"))
        );
        let no_btf = Features {
            btf: false,
            ..all()
        };
        assert!(no_btf.missing().is_some_and(|m| m.contains("BTF")));
    }

    #[test]
    fn fallbacks_are_described() {
        let old = Features {
            release: "5.10.0".into(),
            xdp_frags: false,
            coarse_clock: false,
            tcx: false,
            ..all()
        };
        let text = old.describe();
        assert!(text.starts_with("kernel 5.10.0"));
        assert!(text.contains("single-buffer XDP") && text.contains("generic XDP"));
        assert!(text.contains("precise clock") && text.contains("clsact"));
        assert!(!old.all_present());
        assert!(all().all_present());
    }
}
